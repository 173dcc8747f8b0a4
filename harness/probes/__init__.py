"""Probes: importing this package registers every built-in task."""

from harness.probes import (  # noqa: F401  (importing registers each task)
    boundary,
    classification,
    correspondence,
    dense,
    detection,
    retrieval,
    similarity,
)
from harness.probes.base import PROBES, ProbeInputs, ProbeResult, ProbeSpec, get_probe

__all__ = ["PROBES", "ProbeInputs", "ProbeResult", "ProbeSpec", "get_probe"]
