"""Pydantic's validation errors as the one-line messages this harness prints: every config block (params.yaml,
a dataset spec, a probe's parameters) and every record is checked by a pydantic model, and all of them word a
problem the same way, so a message reads alike wherever the mistake was made.
"""

from __future__ import annotations

from pydantic import ValidationError
from pydantic_core import ErrorDetails


def describe_validation(error: ValidationError, unknown_note: str = "") -> str:
    """Every problem of `error` for someone editing a mapping of keys, joined by "; ": an unknown key or a missing
    one by name (`unknown_note` follows each unknown key: the valid keys, where the caller knows them), any other
    problem as `where: pydantic's message`."""
    return "; ".join(_key_problem(e, unknown_note) for e in error.errors())


def _key_problem(e: ErrorDetails, unknown_note: str) -> str:
    where = _location(e)
    if e["type"] == "extra_forbidden":
        return f"unknown key {where!r}{unknown_note}"
    if e["type"] == "missing":
        return f"missing key {where!r}"
    return f"{where}: {e['msg']}"


def describe_field_errors(error: ValidationError) -> str:
    """Every problem of `error` as `where: pydantic's message` ("<root>" for the value as a whole), joined by
    "; ": for a file the harness wrote (a record), where a field's own wording says more than key advice."""
    return "; ".join(f"{_location(e) or '<root>'}: {e['msg']}" for e in error.errors())


def _location(e: ErrorDetails) -> str:
    return ".".join(str(p) for p in e["loc"])
