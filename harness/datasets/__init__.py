"""Datasets are content manifests; `prepare_dataset` builds one from its `params.yaml` spec."""

from harness.datasets import (  # noqa: F401  (importing registers the kinds of these modules)
    bsds500,
    dense_folders,
    distortion_2afc,
    homography,
    scenes,
    two_afc,
    voc_detection,
)
from harness.datasets.manifest import MANIFEST_NAME, Item, Manifest
from harness.datasets.sources import DATASET_KINDS, prepare_dataset

__all__ = ["DATASET_KINDS", "MANIFEST_NAME", "Item", "Manifest", "prepare_dataset"]
