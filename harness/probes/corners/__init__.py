"""Corners on frozen dense features: `matching` (one-to-one matching within ε pixels, precision/recall, and
repeatability under the true pose; NumPy only) and `probe` (the `corners` task and its registration)."""
