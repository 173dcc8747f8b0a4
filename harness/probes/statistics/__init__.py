"""Resampled statistics that live beside a probe family rather than in `harness.probes.resampled`: each module
here registers its statistics in `resampled.STATISTICS` when imported, and the registry imports them all the first
time a record names one it has not seen. NumPy only: the site evaluates these without any probe module."""
