"""Uncertainty and verdicts: the bootstrap, per-board analysis, floors, chance rows, proxy validity."""
