"""Resampled statistics, one module per probe family; `harness.probes.resampled` is the registry of their names.
`classification` and `boundary` are registered by `resampled` itself when it is imported; every other module here
registers its statistics in `resampled.STATISTICS` when imported, and the registry imports them all the first time
a record names one it has not seen. NumPy only: the site evaluates these without any probe module."""
