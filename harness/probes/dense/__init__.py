"""Dense probes (depth, normals, segmentation, edges, keypoints): one training base split into small
modules: `targets` (reading and encoding), `heads`, `streaming`, `train`, `metrics`, and `probes`
(the task definitions and their registration)."""
