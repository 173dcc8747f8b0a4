"""The DVC pipeline: generated from params.yaml, planned, checked and run."""
