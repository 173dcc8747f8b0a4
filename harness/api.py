"""The Python entry point: one backbone × task on one dataset, without DVC, through the stages' own code.

    import harness
    result = harness.run("resnet18@random", "classification", "path/to/folder", epochs=10)
    result.metrics, result.samples["top1"], result.record

`run` builds a one-run pipeline (the project's settings, checkpoints and plugins; the task's params.yaml block
with your overrides; one dataset; one backbone) and calls the prepare, extract and probe stage functions with
it, exactly as the generated dvc.yaml would, inside a workspace folder (`user/` by default: data, features,
results, failures), so it never writes the pipeline's outputs or the frozen corpus. Same inputs, same
numbers as the DVC stage (tests/test_api.py checks it bit for bit).

A backbone is a registered name, or your own `nn.Module` wrapped with its preprocessing and feature function
(`harness.backbones.custom.CustomBackbone`): it runs as the registered name `custom_<hash>`, derived from its
state dict, preprocessing and code (`register_module_backbone`), so the same module gives the same identity and
feature cache entries and a changed weight another. The stages run in this process, where it is registered.

A dataset is a name from params.yaml, a folder of your own (`harness.runs.own_data`: image folders, dense folders
with split lists), or a spec dict with a `kind`. `train_dataset` trains the probe on another dataset and
evaluates on this one (`harness.datasets.train_eval`). `head_file` evaluates a saved probe head instead of
training one (`head=` is the dense probes' own parameter, linear or dpt).

    probe = harness.load_probe(result.head_path, backbone="resnet18@random")   # refuses other features
    probe.evaluate("path/to/other_folder")

`load_probe` reads a saved head (`harness.heads.file` owns the file) and, given a backbone, refuses it unless the
features it would read are those it was fitted on; `.evaluate(dataset)` scores it through `run`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.core import paths
from harness.core.config import (
    PARAMS_FILE,
    ConfigError,
    Grid,
    Params,
    Settings,
    load_params,
)
from harness.core.run_key import BackboneRef, RunKey
from harness.heads.file import SavedHead, head_probe_block, read_head
from harness.runs.records import Record

if TYPE_CHECKING:
    from torch import nn

    from harness.backbones.custom import CustomBackbone

DEFAULT_WORKSPACE = Path("user")
DEFAULT_SETTINGS = Settings(precision="fp32", batch_size=32, seed=0)


class RunFailed(RuntimeError):
    """The run failed; `record` is its failed record (phase, error type and message)."""

    def __init__(self, message: str, record: Record | None = None) -> None:
        super().__init__(message)
        self.record = record


@dataclass(frozen=True)
class RunResult:
    record: Record
    sample_ids: list[str]
    samples: dict[str, np.ndarray]  # per-sample column → (N,) scores; each column's mean is the metric
    record_path: Path
    head_path: Path | None  # the trained head (None for a task that trains nothing)

    @property
    def metrics(self) -> dict[str, float]:
        return dict(self.record.metrics)


def run(backbone: str | CustomBackbone | nn.Module, task: str, dataset: str | Path | dict[str, Any],
        train_dataset: str | Path | dict | None = None, *, head_file: str | Path | None = None,
        strict: bool = True, limit: int | None = None, stems: str | Path | None = None,
        workspace: str | Path = DEFAULT_WORKSPACE, params_file: str | Path = PARAMS_FILE,
        device: str | None = None, **probe_params: Any) -> RunResult:
    """Run `task` with `backbone` (a registered name or a `CustomBackbone`) on `dataset`; probe parameters
    override the task's params.yaml block. `device` (auto, cpu, cuda, cuda:N) overrides `settings.device`; a GPU
    that is not here is a ConfigError before any work."""
    from harness.core.devices import explicit_device
    from harness.runs.own_data import dataset_spec
    from harness.stages import calls as stage_calls
    from harness.stages.common import StageFailed

    backbone = backbone_name(backbone)
    project = load_params(Path(params_file)) if Path(params_file).is_file() else None
    settings = project.settings if project else DEFAULT_SETTINGS
    if device is not None:
        settings = settings.model_copy(update={"device": checked_device(device)})
    if head_file is not None:  # the head's own protocol, pooling and layers, unless overridden
        probe_params = {**head_probe_block(Path(head_file)), **probe_params}
    block = _probe_block(task, project, probe_params, Path(params_file))
    name, spec = dataset_spec(dataset, task, project, limit=limit, stems=stems)
    if train_dataset is not None:
        train_name, train_spec = dataset_spec(train_dataset, task, project, limit=limit, stems=stems)
        name, spec, block = _paired(name, spec, train_name, train_spec, task, block)
    feature_grid = _grid_name(name)
    grid = _grid_name(name, head_file, None if block == _default_block(task, project) else block)
    key = RunKey(grid, task, BackboneRef.parse(backbone))
    spelling = key.backbone.spelled
    grids = {feature_grid: Grid(backbones=[spelling], tasks={task: name})}
    if grid != feature_grid:  # a variant's run reads the dataset's one feature folder, as features_from does
        grids[grid] = Grid(backbones=[spelling], tasks={task: name}, features_from={name: feature_grid})
    params = Params(
        settings=settings,
        checkpoints=project.checkpoints if project else {},
        plugins=project.plugins if project else [],
        datasets={name: spec}, probes={task: block}, grids=grids,
    )
    _check(params)
    root = Path(workspace)
    # the explicit argument, handed on as the CLI's is, beats settings and any device a caller handed on before
    with paths.workspace(root), explicit_device(device):
        try:
            if head_file is None:
                stage_calls.prepare(name, params)
            else:  # a saved head reads only the evaluation split: the training split need not exist here
                from harness.pipeline import topology
                from harness.stages import prepare as prepare_stage

                prepare_stage.run(name, params, topology.dataset_code(params, name), [])
            # one features folder per dataset and backbone serves every task run on it here: nothing pruned
            stage_calls.extract(feature_grid, spelling, name, params, prune=False)
            if head_file is None:
                records = stage_calls.probe(grid, task, spelling, params)
            else:
                records = _scored_head(key, params, read_head(Path(head_file), strict))
        except StageFailed as error:
            raise RunFailed(str(error), _failed_record(key)) from None
        record = records[0]
        record_path, head_path = key.record_path, key.head_path
    return _result(record, record_path, head_path if head_file is None and head_path.is_file() else None)


def backbone_name(backbone: str | CustomBackbone | nn.Module) -> str:
    """The registered name a run uses: a name as given; a `CustomBackbone` registered under the name its weights,
    preprocessing and code derive (in this process: `run` calls the stage functions here, not in a subprocess).
    A bare module is refused before any work: nothing declares how to preprocess images or read its features."""
    if isinstance(backbone, str):
        from harness.backbones.by_name import is_by_name, registered_name

        return registered_name(backbone) if is_by_name(backbone) else backbone  # a spec: pinned on first use
    from torch import nn

    from harness.backbones.base import Backbone
    from harness.backbones.custom import CustomBackbone, register_module_backbone

    if isinstance(backbone, CustomBackbone):
        return register_module_backbone(backbone)
    kind = type(backbone).__name__
    if isinstance(backbone, Backbone):
        raise ConfigError(f"harness.run takes a built-in backbone by its registered name ({backbone.name!r}), "
                          f"not the {kind} object")
    if isinstance(backbone, nn.Module):
        raise ConfigError(f"harness.run got a bare {kind} module, which declares neither its preprocessing nor its "
                          "features: wrap it, CustomBackbone('my_net', module, Preprocess(crop=..., resize=..., "
                          "mean=..., std=...), forward_maps=...) (from harness.backbones.custom and "
                          "harness.core.preprocessing)")
    raise ConfigError(f"harness.run's backbone is a registered name or a CustomBackbone, not a {kind}")


def checked_device(device: str) -> str:
    """`device` spelled as settings.device spells it, after checking it is here: a GPU torch cannot see (or a
    misspelling) is a ConfigError naming the fix, raised before any work."""
    from harness.core.devices import DeviceError, parse_device, resolve_device

    try:
        resolve_device(parse_device(device))
    except DeviceError as error:
        raise ConfigError(str(error)) from None
    return parse_device(device)


def _probe_block(task: str, project: Params | None, overrides: dict[str, Any],
                 params_file: Path = PARAMS_FILE) -> dict[str, Any]:
    from harness.probes import get_probe, validate_probe_params

    get_probe(task)  # an unknown task is an error naming the valid ones
    block = {**(project.probes.get(task, {}) if project else {}), **overrides}
    try:
        return validate_probe_params(task, block)
    except ValueError as error:
        if project is not None and task in project.probes:
            raise ConfigError(str(error)) from None
        # the parameters were never there to be wrong: say where they come from, not each key they lack
        where = (f"{params_file} is missing here" if project is None
                 else f"{params_file} has no probes.{task} block")
        raise ConfigError(f"{where}, and harness.run reads the task's probe parameters from it: run in a "
                          "visbench-harness checkout (its params.yaml has every task's block; `git clone` the "
                          f"repository), pass params_file=PATH, or give them as keywords ({error})") from None


def _paired(name: str, spec: dict, train_name: str, train_spec: dict, task: str, block: dict
            ) -> tuple[str, dict, dict]:
    """One `train_eval_pair` dataset: train_split of the training data, eval split of this one."""
    from harness.datasets.train_eval import SPLITS

    keys = _split_keys(task, block)
    spec = {"kind": "train_eval_pair", "train": train_spec, "eval": spec,
            "train_split": block[keys["train"]], "eval_split": block[keys["eval"]]}
    block = {**block, keys["train"]: SPLITS["train"], keys["eval"]: SPLITS["eval"]}
    return f"{name}_from_{train_name}", spec, block


def _split_keys(task: str, block: dict) -> dict[str, str]:
    """Which of the task's parameters name its training and its evaluation split."""
    for train_key, eval_key in (("train_split", "eval_split"), ("gallery_split", "query_split")):
        if train_key in block and eval_key in block:
            return {"train": train_key, "eval": eval_key}
    raise ConfigError(f"task {task} has no training split (it reads one split): train_dataset does not apply")


def _default_block(task: str, project: Params | None) -> dict[str, Any] | None:
    if project is None or task not in project.probes:
        return None
    return _probe_block(task, project, {})


def _grid_name(dataset: str, head: str | Path | None = None, block: dict[str, Any] | None = None) -> str:
    """The run's group, spelled as a grid name (letters, digits, _): its dataset; `_p<hash>` when its probe
    parameters are not params.yaml's (so variations never overwrite each other's records); `_head_<sha>` for
    the evaluation of a saved head. All of a dataset's runs share its feature folder (`<dataset>`)."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", dataset)
    if block is not None:
        from harness.core.hashing import hash_json

        name += f"_p{hash_json(block, length=6)}"
    if head is not None:
        from harness.core.hashing import sha256_file

        name += f"_head_{sha256_file(Path(head))[:12]}"
    return name


def _check(params: Params) -> None:
    from harness.pipeline.checks import check_params

    check_params(params)


def _failed_record(key: RunKey) -> Record | None:
    """The run's failed record, for RunFailed; None when its stage left none that reads."""
    from harness.runs.failed_records import failed_records

    try:
        records = failed_records(key.stage)
    except (OSError, ValueError):  # cut short or edited by hand: RunFailed's message still says what failed
        return None
    return records[0] if records else None


def _result(record: Record, record_path: Path, head_path: Path | None) -> RunResult:
    from harness.runs.samples import read_samples

    ids, columns = read_samples(record.samples) if record.samples else ([], {})
    return RunResult(record, ids, columns, record_path, head_path)


def _scored_head(key: RunKey, params: Params, saved: SavedHead) -> list[Record]:
    """The saved head scored by the run's probe stage. A failed run is said in full (phase, error type, message),
    as `harness.run(..., head_file=...)` always has; a failed write, in the stage's own line."""
    from harness.stages import calls as stage_calls
    from harness.stages.common import StageFailed

    try:
        return stage_calls.probe(key.grid, key.task, key.backbone.spelled, params, saved)
    except StageFailed:
        failed = _failed_record(key)  # the stage recorded it before it raised
        if failed is None or failed.failure is None or failed.failure.phase == "write":
            raise
        failure = failed.failure
        raise StageFailed(f"{key.stage}: {failure.phase}: {failure.error_type}: {failure.message}") from None


@dataclass
class LoadedProbe(SavedHead):
    """A saved head (`harness.heads.file.SavedHead`) that can score a dataset through `run`."""

    def evaluate(self, dataset: Any, backbone: str | None = None, **kwargs: Any) -> RunResult:
        """The head on a dataset (name, folder or spec), through `run`: extracts with the head's backbone,
        pooling and layers, and returns its RunResult (record, metrics, per-sample scores)."""
        params = {k: v for k, v in self.identity["protocol_params"].items() if k != "head"}
        if self.identity["feature_mode"] == "pooled":
            params.setdefault("pooling", self.identity["pooling_requested"])
        params.setdefault("layers", self.identity["layers"])
        return run(backbone or self.identity["backbone_name"], self.task, dataset, head_file=self.path,
                   strict=self.strict, **{**params, **kwargs})


def load_probe(path: str | Path, backbone: Any = None, *, pooling: str | None = None,
               layers: list[int] | None = None, strict: bool = True, checkpoint: str | None = None) -> LoadedProbe:
    """Load a head; with `backbone` (a name, a built Backbone, or its `describe()` dict), refuse it unless the
    features it would read (that backbone, `pooling`/`layers` or the head's own) are those it was fitted on."""
    loaded = LoadedProbe(**vars(read_head(Path(path), strict)))
    if backbone is None:
        return loaded
    described, resolve = _described(backbone, checkpoint)
    mode = loaded.identity["feature_mode"]
    asked_pooling = pooling or loaded.identity["pooling_requested"]
    request = {"mode": mode, "pooling_resolved": resolve("pooling", asked_pooling) if mode == "pooled" else None,
               "layers_resolved": resolve("layers", layers if layers is not None else loaded.identity["layers"])}
    loaded.check(described, request, loaded.identity["fit"])
    return loaded


def _described(backbone: Any, checkpoint: str | None) -> tuple[dict[str, Any], Callable[[str, Any], Any]]:
    """(describe() dict, resolver of pooling/layers) for a backbone given by name, object or description."""
    if isinstance(backbone, dict):
        def resolve(kind: str, value: Any) -> Any:
            if kind == "layers":
                count = backbone["num_layers"]
                return sorted({v + count if v < 0 else v for v in value}) if value else [count - 1]
            return backbone["pooling_modes"][0] if value == "default" else value

        return backbone, resolve
    if isinstance(backbone, str):
        from harness.backbones import create_backbone

        backbone = create_backbone(backbone, checkpoint=checkpoint)
    return backbone.describe(), lambda kind, value: (backbone.resolve_pooling(value) if kind == "pooling"
                                                      else backbone.resolve_layers(value))
