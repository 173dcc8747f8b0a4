"""Runs on your own data, outside the committed grids."""
