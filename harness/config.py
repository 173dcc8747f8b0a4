"""`params.yaml` as a validated model, and `key=value` overrides with errors that name valid keys.

The file is DVC's parameter file, so it stays plain YAML; OmegaConf parses command-line overrides
(`task=retrieval`, `probes.classification.lr=0.01`) and pydantic validates the result.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from harness.registry import unknown_name_message

PARAMS_FILE = Path("params.yaml")


class ConfigError(ValueError):
    """Invalid configuration or override; the message lists what is valid."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Settings(_Strict):
    precision: Literal["fp32", "bf16"] = "fp32"
    batch_size: int = 32
    seed: int = 0


class Grid(_Strict):
    backbones: list[str]
    datasets: list[str]
    tasks: dict[str, str]  # task → dataset it runs on
    requires: list[str] = []  # paths that must exist for this grid to run (e.g. ../shared data)


class Params(_Strict):
    settings: Settings
    checkpoints: dict[str, str | None] = {}
    datasets: dict[str, dict[str, Any]]
    probes: dict[str, dict[str, Any]]
    grids: dict[str, Grid]


def load_params(path: Path = PARAMS_FILE) -> Params:
    try:
        return Params.model_validate(yaml.safe_load(Path(path).read_text()))
    except ValidationError as error:
        raise ConfigError(f"{path}: {_describe(error)}") from None


def _describe(error: ValidationError) -> str:
    parts = []
    for e in error.errors():
        where = ".".join(str(p) for p in e["loc"])
        if e["type"] == "extra_forbidden":
            parts.append(f"unknown key {where!r}")
        else:
            parts.append(f"{where}: {e['msg']}")
    return "; ".join(parts)


def parse_overrides(args: list[str], valid_keys: list[str]) -> dict[str, Any]:
    """`["task=edge", "backbone=a,b"]` → {"task": "edge", "backbone": "a,b"}; unknown keys are errors."""
    from omegaconf import OmegaConf

    for arg in args:
        if "=" not in arg:
            raise ConfigError(f"expected key=value, got {arg!r}; valid keys: {', '.join(valid_keys)}")
    try:
        parsed = OmegaConf.to_container(OmegaConf.from_dotlist(args), resolve=True)
    except Exception as error:
        raise ConfigError(f"cannot parse overrides {args}: {error}") from None
    for key in parsed:
        if key not in valid_keys:
            raise ConfigError(unknown_name_message("key", key, valid_keys))
    return parsed


def stage_spelling(backbone: str) -> str:
    """DVC reserves '@' in stage names, so controls are spelled `resnet18.random` in params and stages."""
    return backbone.replace("@random", ".random")


def canonical_backbone(name: str) -> str:
    return name[: -len(".random")] + "@random" if name.endswith(".random") else name
