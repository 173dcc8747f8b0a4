"""`params.yaml` as a validated model, and `key=value` overrides with errors that name valid keys.

The file is DVC's parameter file, so it stays plain YAML; OmegaConf parses command-line overrides
(`task=retrieval`, `probes.classification.lr=0.01`) and pydantic validates the result.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveInt, ValidationError, field_validator

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


class FewShot(_Strict):
    """Train every task of the grid on k items of its training split, for each k and subset seed."""

    k_shots: list[PositiveInt] = Field(min_length=1)
    seeds: list[NonNegativeInt] = Field(min_length=1)

    @field_validator("k_shots", "seeds")
    @classmethod
    def _distinct(cls, values: list[int]) -> list[int]:
        if len(set(values)) != len(values):
            raise ValueError(f"repeats a value: {values}")
        return values


class Grid(_Strict):
    backbones: list[str]
    datasets: list[str]
    tasks: dict[str, str]  # task → dataset it runs on
    requires: list[str] = []  # paths that must exist for this grid to run (e.g. ../shared data)
    fewshot: FewShot | None = None  # the few-shot protocol: one record per task × backbone × k × seed
    # dataset → the grid whose extract stage this grid's probes read (no second extraction of the same
    # images by the same backbone); a dataset not listed is extracted by this grid's own stage
    features_from: dict[str, str] = {}

    def feature_grid(self, own_name: str, dataset: str) -> str:
        return self.features_from.get(dataset, own_name)


class Params(_Strict):
    settings: Settings
    checkpoints: dict[str, str | None] = {}
    datasets: dict[str, dict[str, Any]]
    probes: dict[str, dict[str, Any]]
    grids: dict[str, Grid]


def load_params(path: Path = PARAMS_FILE) -> Params:
    try:
        params = Params.model_validate(yaml.safe_load(Path(path).read_text()))
    except ValidationError as error:
        raise ConfigError(f"{path}: {_describe(error)}") from None
    for name, grid in params.grids.items():
        for dataset, source in grid.features_from.items():
            if source not in params.grids or dataset not in params.grids[source].datasets:
                valid = sorted(g for g, spec in params.grids.items() if dataset in spec.datasets and g != name)
                raise ConfigError(f"{path}: grids.{name}.features_from.{dataset}: grid {source!r} does not "
                                  f"extract {dataset}; valid: {', '.join(valid) or 'none'}")
    return params


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
