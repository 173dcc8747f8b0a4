"""`params.yaml` as a validated model, and `key=value` overrides with errors that name the fix.

The file is DVC's parameter file, so it stays plain YAML. Its structure is checked here (`load_params`, what
every stage does); `harness.pipeline.checks.check_params` checks what each block means against the registries
(probe schemas, dataset kinds, backbone names) and is what the CLI and the pipeline generator run before
any work starts.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveInt,
    ValidationError,
    field_validator,
)

from harness.core.registry import unknown_name_message
from harness.core.validation import describe_validation

PARAMS_FILE = Path("params.yaml")
SEED_MAX = 2**32 - 1  # numpy's and torch's seeds are 32-bit: a larger one fails deep inside a run
EPOCHS_MAX = 100_000  # epochs (or steps) past this are a typo, not a protocol: they would run for years
COUNT_MAX = 10_000_000  # any other count or size (images per class, batch size, points, pixels)
DEVICE_SPELLING = re.compile(r"^(auto|cpu|cuda|cuda:[0-9]+)$")  # settings.device, device=, harness.core.devices
Name = Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9_.@]+$")]


class ConfigError(ValueError):
    """Invalid configuration or override; the message lists what is valid."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


Seed = Annotated[NonNegativeInt, Field(le=SEED_MAX)]


class Settings(_Strict):
    precision: Literal["fp32", "bf16"]
    batch_size: Annotated[PositiveInt, Field(le=COUNT_MAX)]  # most images per forward pass on the CPU
    seed: Seed
    # Where tensors are computed (harness.core.devices): auto (a CUDA GPU when torch sees one), cpu, cuda, cuda:N.
    # Not a DVC parameter of any stage: it says where, not what; a GPU's features carry it in their identity.
    device: str = "auto"
    # most images per forward pass on a GPU (halved on out-of-memory)
    cuda_batch_size: Annotated[PositiveInt, Field(le=COUNT_MAX)] = 256

    @field_validator("device")
    @classmethod
    def _device(cls, value: str) -> str:
        # the spelling only (harness.core.devices.parse_device says the same): whether the device is here is asked
        # where it is used, and every stage reads params.yaml without importing torch
        if not DEVICE_SPELLING.match(str(value).strip().lower()):
            raise ValueError(f"{value!r} is not a device; valid: auto, cpu, cuda, cuda:N (N a GPU index)")
        return str(value).strip().lower()


class FewShot(_Strict):
    """Train every task of the grid on k items of its training split, for each k and subset seed."""

    k_shots: list[Annotated[PositiveInt, Field(le=COUNT_MAX)]] = Field(min_length=1)
    seeds: list[Seed] = Field(min_length=1)

    @field_validator("k_shots", "seeds")
    @classmethod
    def _distinct(cls, values: list[int]) -> list[int]:
        if len(set(values)) != len(values):
            raise ValueError(f"repeats a value: {values}")
        return values


class Grid(_Strict):
    backbones: list[Name] = Field(min_length=1)
    tasks: dict[Name, Name] = Field(min_length=1)  # task → the dataset it runs on
    fewshot: FewShot | None = None  # the few-shot protocol: one record per task × backbone × k × seed
    # dataset → the grid whose extract stage this grid's probes read (no second extraction of the same
    # images by the same backbone); a dataset not listed is extracted by this grid's own stage
    features_from: dict[Name, Name] = {}
    # task → parameters that differ from its probes.<task> block in this grid only (e.g. `layers: stride16`
    # to read every backbone at its stride-16 layer beside the last-layer grid)
    probes: dict[Name, dict[str, Any]] = {}

    @field_validator("backbones")
    @classmethod
    def _distinct(cls, values: list[str]) -> list[str]:
        if len(set(values)) != len(values):
            raise ValueError(f"repeats a backbone: {values}")
        return values

    @property
    def datasets(self) -> list[str]:
        """The datasets this grid's tasks read, in first-use order."""
        return list(dict.fromkeys(self.tasks.values()))

    def feature_grid(self, own_name: str, dataset: str) -> str:
        return self.features_from.get(dataset, own_name)


class Params(_Strict):
    settings: Settings
    checkpoints: dict[Name, Annotated[str, Field(min_length=1)]] = {}
    # your own modules (project-relative .py files or packages) that register backbones, dataset kinds or
    # probes; each is a DVC dependency of exactly the stages that use what it registers (docs/extend.md)
    plugins: list[Annotated[str, Field(min_length=1)]] = []
    datasets: dict[Name, dict[str, Any]]
    probes: dict[Name, dict[str, Any]]
    grids: dict[Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9_]+$")], Grid]


def out_of_range(where: str, value: Any, counts_from: int = 0) -> str | None:
    """The first number under `where` (a params.yaml key; nested mappings and lists walked) that no run could
    mean, as one line naming its key and the range to give, else None: a seed outside 0..2**32-1, epochs or
    steps outside 1..EPOCHS_MAX, another integer outside counts_from..COUNT_MAX (a count, size or index; negative
    ones where counts_from says so), a real number that is not finite (NaN, inf: a huge but finite rate is how a
    test makes a model diverge on purpose). A model's own bounds (lower ones above all) stay where they are;
    these are the ceilings every parameter shares."""
    if isinstance(value, dict):
        for key, item in value.items():
            problem = out_of_range(f"{where}.{key}", item, counts_from)
            if problem:
                return problem
        return None
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            problem = out_of_range(f"{where}[{index}]", item, counts_from)
            if problem:
                return problem
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    key = where.rsplit(".", 1)[-1].split("[")[0]
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{where}: {value} is not a usable number; give a finite value"
    if "seed" in key:
        low, high = 0, SEED_MAX
    elif key in ("epochs", "steps") or key.endswith(("_epochs", "_steps")):
        low, high = 1, EPOCHS_MAX
    else:
        low, high = counts_from, COUNT_MAX
    if low <= value <= high:
        return None
    return f"{where}: {value} is out of range; give {low}..{high}"


def probe_block(params: Params, grid: str, task: str) -> dict[str, Any]:
    """The parameters `task` runs with in `grid`: its probes.<task> block, with the grid's overrides."""
    if task not in params.probes:
        raise ConfigError(f"params.yaml has no probes.{task} block (grid {grid} runs {task})")
    return {**params.probes[task], **params.grids[grid].probes.get(task, {})}


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML keeps the last of two equal keys in a mapping, DVC's reader refuses the file: refused here too, in
    one line naming the key and its line, before DVC reads it with a traceback."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor`: its keys may be overridden
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node.start_mark.line + 1)
            except TypeError:  # an unhashable key: the constructor below says so
                continue
            if first != key_node.start_mark.line + 1:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first on line {first}): keep one of them",
                    key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


def load_params(path: Path = PARAMS_FILE) -> Params:
    path = Path(path)
    try:
        raw = yaml.load(path.read_text(), Loader=_UniqueKeyLoader)  # a SafeLoader
    except FileNotFoundError:
        raise ConfigError(f"{path} not found: run visbench-harness from the project root") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}{where}: not valid YAML ({getattr(error, 'problem', error)})") from None
    try:
        params = Params.model_validate(raw)
    except ValidationError as error:
        raise ConfigError(f"{path}: {describe_validation(error)}") from None
    for name, grid in params.grids.items():
        for dataset, source in grid.features_from.items():
            if source not in params.grids or dataset not in params.grids[source].datasets:
                valid = sorted(g for g, spec in params.grids.items() if dataset in spec.datasets and g != name)
                raise ConfigError(f"{path}: grids.{name}.features_from.{dataset}: grid {source!r} does not "
                                  f"extract {dataset}; valid: {', '.join(valid) or 'none'}")
    return params


# -- command-line overrides ----------------------------------------------------------------------------


def parse_overrides(args: list[str], valid_keys: list[str], booleans: tuple[str, ...] = ()) -> dict[str, Any]:
    """`["task=edge", "backbone=a,b", "dry_run=true"]` → {"task": "edge", "backbone": "a,b", "dry_run": True}.

    Every value must be non-empty; a key in `booleans` takes exactly true or false; a dotted key under
    `probes.` (when "probes" is a valid key) is a probe-parameter override whose value is YAML
    (`probes.retrieval.recall_at=[1,10]`), validated later against the probe's schema.
    """
    parsed: dict[str, Any] = {}
    for arg in args:
        key, sep, value = arg.partition("=")
        if not sep or not key:
            raise ConfigError(f"expected key=value, got {arg!r}; valid keys: {', '.join(valid_keys)}")
        if key.startswith("probes.") and "probes" in valid_keys:
            parsed.setdefault("probes", {})[key.removeprefix("probes.")] = _probe_value(key, value)
            continue
        if key not in valid_keys:
            raise ConfigError(unknown_name_message("key", key, valid_keys))
        if key in parsed:
            raise ConfigError(f"{key} is given twice; give it once (a comma-separated list for several values)")
        if not value.strip():
            raise ConfigError(f"{key}= is empty: give a value, or leave {key} out for every one")
        if key in booleans:
            if value.lower() not in ("true", "false"):
                raise ConfigError(f"{key}={value}: expected true or false")
            parsed[key] = value.lower() == "true"
        else:
            parsed[key] = value
    return parsed


def _probe_value(key: str, value: str) -> Any:
    if key.count(".") != 2:
        raise ConfigError(f"{key}: a probe override is probes.TASK.PARAM=VALUE, e.g. probes.classification.lr=0.01")
    if not value.strip():
        raise ConfigError(f"{key}= is empty: give a value")
    try:
        return yaml.safe_load(value)
    except yaml.YAMLError:
        raise ConfigError(f"{key}={value}: not a valid value (YAML: 0.01, 30, true, [1, 10], text)") from None

