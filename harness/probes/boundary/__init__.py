"""BSDS500 boundary detection (`edge_bsds`): a dense head's soft edge map, edge-NMS'd, scored against every
human annotator with the BSDS benchmark's matching and its ODS / OIS / AP.

Modules: `nms` (SE/HED non-maximum suppression), `matching` (per-image counts per threshold), `metrics`
(`collect_eval_bdry.m`'s summaries) and `probe` (training, prediction and registration).
"""
