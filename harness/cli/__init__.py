"""The `visbench-harness` command line."""
