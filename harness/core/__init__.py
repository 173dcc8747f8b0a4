"""Shared foundations: paths, hashing, atomic writes, params, registries, devices, the environment."""
