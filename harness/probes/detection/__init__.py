"""Object detection on frozen dense features: `annotations` (boxes and their convention), `fcos` (the
single-scale head, assignment, loss, decoding), `voc_ap` and `coco_ap` (the two evaluators), and
`probe` (the `detection` task and its registration)."""
