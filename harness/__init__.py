"""visbench-harness: reproducible probes of frozen vision backbones."""

__version__ = "0.1.0"
