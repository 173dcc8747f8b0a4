"""Anomaly detection on frozen dense features: a detector fitted on defect-free training images scores every
feature cell of a test image, and the map and its maximum are scored against the defect masks and labels.

Modules: `metrics` (image AUROC, AUPR, F1-max, FPR at 95% TPR; pixel AUROC and AUPRO; NumPy only), `maps` (anomaly
maps and masks at the scoring resolution), `detector` (the run both probes share), `knn` and `gaussian` (the two
probes, `knn-patch-anomaly/v1` and `gaussian-patch-anomaly/v1`), `arrays` (their form on in-memory arrays,
`probe.evaluate`). The image metrics' resampled statistics are in `harness.probes.statistics.anomaly`, where the
site finds them without importing these modules.
"""
