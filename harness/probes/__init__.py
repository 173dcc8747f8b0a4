"""Probes: the registry (`PROBES`, `get_probe`) and the contract every probe follows (`base`).

Importing this package registers nothing: `get_probe(name)` and `PROBES.names()` import the probe modules of
this package on first need. A DVC probe stage imports just the module of its own task.
"""

from harness.probes.base import PROBES, ProbeInputs, ProbeResult, ProbeSpec, get_probe, validate_probe_params

__all__ = ["PROBES", "ProbeInputs", "ProbeResult", "ProbeSpec", "get_probe", "validate_probe_params"]
