"""One run's work: extraction into the feature cache, a probe's record and its per-sample scores."""
