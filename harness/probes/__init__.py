"""Probes: importing this package registers every built-in task."""

from harness.probes import classification, correspondence, dense, retrieval  # noqa: F401
from harness.probes.base import PROBES, ProbeInputs, ProbeResult, ProbeSpec, get_probe

__all__ = ["PROBES", "ProbeInputs", "ProbeResult", "ProbeSpec", "get_probe"]
