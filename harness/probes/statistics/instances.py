"""Mask AP as a resampled statistic (`harness.probes.resampled`): AP pools detections over images, so it is no mean
of a per-image score. An `instance_segmentation` run writes each evaluation image's detection scores, their
matches at every IoU threshold and its number of objects as auxiliary columns
(`harness.probes.instances.mask_ap.image_columns`), and the site recomputes the AP from them under bootstrap row
weights for its intervals and paired tests; `check_result` recomputes it over all rows when the run ends and
refuses a run whose metric differs. NumPy only: the site imports this module without any probe module.

`mask_ap` takes an argument: none for AP@[.5:.95], `50` or `75` (any of 50, 55, …, 95) for the AP at that IoU.
"""

from __future__ import annotations

from harness.probes import resampled
from harness.probes.instances.mask_ap import mask_ap

resampled.STATISTICS.register("mask_ap", module=__name__)(mask_ap)
# metric name → statistic base name, what the probe declares (`ProbeSpec.statistics`)
METRIC_STATISTICS = {"mask_ap": "mask_ap", "mask_ap50": "mask_ap", "mask_ap75": "mask_ap"}
# metric name → the statistic in full, what each result names (`ProbeResult.statistics`)
RESULT_STATISTICS = {"mask_ap": "mask_ap", "mask_ap50": "mask_ap:50", "mask_ap75": "mask_ap:75"}
