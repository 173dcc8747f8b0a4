"""A backbone's weights as its identity records them: the pin's fields in the order one reads a pin (backbone pages
and run pages show it)."""

from __future__ import annotations

from typing import Any

WEIGHTS_FIELDS = ("kind", "source", "location", "revision", "file_sha256", "state_sha256", "seed")


def weights_items(weights: dict[str, Any]) -> list[tuple[str, Any]]:
    # The pin fields first, in the order one reads a pin; then whatever else the adapter recorded.
    items = [(k, weights[k]) for k in WEIGHTS_FIELDS if k in weights]
    return items + sorted((k, v) for k, v in weights.items() if k not in WEIGHTS_FIELDS)
