"""Anomaly detection on frozen dense features: a detector fitted on defect-free training images scores every
feature cell of a test image, and the map and its maximum are scored against the defect masks and labels.

Modules: `metrics` (image AUROC, AUPR, F1-max, FPR at 95% TPR; pixel AUROC and AUPRO; NumPy only), `statistics`
(the image metrics recomputed under bootstrap row weights, registered in `harness.probes.resampled`), `maps`
(anomaly maps and masks at the scoring resolution), `detector` (the run both probes share), `knn` and `gaussian`
(the two probes, `knn-patch-anomaly/v1` and `gaussian-patch-anomaly/v1`).
"""
