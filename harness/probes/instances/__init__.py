"""Instance segmentation on frozen dense features: `embedding` (the head's outputs, target encoding and the
discriminative loss), `clustering` (greedy decoding of masks from the embedding), `mask_ap` (mask IoU, COCO's
greedy matching and mask AP as pycocotools' `segm` evaluation computes it, and its resampled form; NumPy only)
and `probe` (the `instance_segmentation` task and its registration). The AP's resampled statistic is registered
in `harness.probes.statistics.instances`, where the site finds it without importing these modules' torch code.
"""
