"""Datasets are content manifests (`manifest`); `kinds.prepare_dataset` builds one from its `params.yaml` spec.

This package's `__init__` imports nothing, so a module that only reads manifests (every probe) does not pull
in the dataset kinds: `harness.datasets.kinds` imports a kind's module on first need, and a DVC prepare stage
imports just its own kind's module.
"""
