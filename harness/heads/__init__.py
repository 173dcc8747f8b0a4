"""Trained probe heads as files: their format, loading and publishing."""
