"""Your own data from the CLI: `data=` runs on a folder made here land in user/ (records, corpus, site), never in
the leaderboard corpus; `promote` hands one to the pipeline, which reproduces its numbers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import write_image_folder
from PIL import Image

import harness
from harness.cli.main import main
from harness.core.config import ConfigError, load_params
from harness.runs.own_data import dataset_spec
from harness.runs.records import read_records
from harness.stages import calls as stages


def test_data_runs_land_in_the_user_workspace_and_its_own_site(image_project, tmp_path, capsys):
    folder = write_image_folder(tmp_path / "my_photos", per_split=6, splits=(None,), classes=2)
    code = main(["task=classification,retrieval", "backbone=cifar_resnet20@random", f"data={folder}", "limit=2"])
    assert code == 0
    records = {r.run_id: r for r in read_records(Path("user/corpus.jsonl"))}
    assert set(records) == {"my_photos_limit2-classification@cifar_resnet20.random",
                            "my_photos_limit2-retrieval@cifar_resnet20.random"}
    record = records["my_photos_limit2-classification@cifar_resnet20.random"]
    assert record.dataset.size == 4 and record.dataset.params["limit_per_class"] == 2  # 2 per class, 2 classes
    assert Path("user/results/my_photos_limit2/classification/cifar_resnet20.random.head.safetensors").is_file()
    assert Path("user/docs/index.md").is_file() and Path("user/mkdocs.yml").is_file()
    assert "my_photos_limit2-classification" in Path("user/docs/tasks/classification.md").read_text()
    assert not Path("leaderboard").exists() and not Path("results").exists()  # the pipeline's outputs untouched


@pytest.mark.parametrize(("args", "message"), [
    (["task=classifcation", "data=."], "unknown task 'classifcation'"),
    (["task=classification", "backbone=resnet18@nope", "data=."], "unknown weights variant"),
    (["task=classification", "data=.", "limit=0"], "limit=0: expected a whole number of at least 1"),
    (["task=classification", "data=.", "limit=two"], "limit=two: expected a whole number"),
    (["task=classification", "data=no/such/folder"], "data=no/such/folder: not a folder"),
    (["task=classification", "data="], "data= is empty"),
    (["task=classification", "data=.", "build_site=maybe"], "build_site=maybe: expected true or false"),
    (["task=classification", "limit=3"], "limit= and stems= go with data=PATH"),
    (["task=classification", "data=.", "stems=nowhere"], "stems=nowhere: no such folder"),
])
def test_bad_data_commands_are_one_line_errors(image_project, capsys, args, message):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


@pytest.mark.parametrize("task", ["classification", "depth", "detection"])
def test_a_folder_without_the_task_layout_is_refused_before_anything_runs(image_project, tmp_path, capsys, task):
    (tmp_path / "empty").mkdir()
    assert main([f"task=retrieval,{task}", "backbone=cifar_resnet20@random", f"data={tmp_path / 'empty'}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"visbench-harness: error: data={tmp_path / 'empty'}: no ") and err.count("\n") == 1
    assert not Path("user").exists()  # no failed record, no site: nothing ran


def test_a_failed_data_run_exits_1(image_project, tmp_path):
    folder = write_image_folder(tmp_path / "mine", per_split=2)
    assert main(["task=classification", "backbone=resnet18", f"data={folder}", "build_site=false"]) == 1


def test_promote_hands_a_user_run_to_the_pipeline_which_reproduces_it(image_project, tmp_path, capsys):
    Path("params.yaml").write_text("# my project\n" + Path("params.yaml").read_text())
    Path("params.yaml").chmod(0o644)
    folder = write_image_folder(tmp_path / "mine", per_split=3)
    assert main(["task=classification", "backbone=cifar_resnet20@random", f"data={folder}",
                 "build_site=false"]) == 0
    assert main(["promote", "run=mine-classification@cifar_resnet20.random"]) == 0
    assert "visbench-harness grid=mine" in capsys.readouterr().out
    text = Path("params.yaml").read_text()
    assert text.startswith("# my project\n")  # comments kept
    # renamed over params.yaml from a checked sibling: the file keeps its mode, and no sibling is left behind
    assert Path("params.yaml").stat().st_mode & 0o777 == 0o644 and not Path(".params.yaml.promote").exists()
    params = load_params()
    assert params.grids["mine"].tasks == {"classification": "mine"}
    assert params.datasets["mine"] == {"kind": "image_folder", "root": str(folder)}
    stages.prepare("mine", params)
    stages.extract("mine", "cifar_resnet20.random", "mine", params)
    [promoted] = stages.probe("mine", "classification", "cifar_resnet20.random", params)
    [user] = read_records(Path("user/corpus.jsonl"))
    assert promoted.metrics == user.metrics and promoted.dataset.identity == user.dataset.identity
    assert main(["promote", "run=nope-classification@x"]) == 2


def test_promote_refuses_a_run_whose_parameters_params_yaml_does_not_share(image_project, tmp_path):
    from harness.core.config import ConfigError
    from harness.user.runs import collect_user, promote

    folder = write_image_folder(tmp_path / "mine", per_split=3)
    variant = harness.run("cifar_resnet20@random", "classification", folder, epochs=3)
    assert variant.record.run_id.startswith("mine_p")  # its own id: params.yaml's run is never overwritten
    collect_user()
    with pytest.raises(ConfigError, match=r"differs from the run's parameters in epochs"):
        promote(variant.record.run_id)


def _dense_folder(root: Path, stems: int = 4) -> Path:
    rng = np.random.default_rng(0)
    for folder in ("images", "depth", "semantic"):
        (root / folder).mkdir(parents=True)
    names = [f"frame{i:02d}" for i in range(2 * stems)]
    for name in names:
        Image.fromarray(rng.integers(0, 255, (32, 32, 3)).astype(np.uint8)).save(root / "images" / f"{name}.png")
        Image.fromarray(rng.integers(500, 5000, (32, 32)).astype(np.uint16)).save(root / "depth" / f"{name}.png")
        Image.fromarray(rng.integers(0, 3, (32, 32)).astype(np.uint8)).save(root / "semantic" / f"{name}.png")
    lists = root / "lists"
    lists.mkdir()
    (lists / "train.txt").write_text("\n".join(names[:stems]) + "\n")
    (lists / "val.txt").write_text("# official val list\n" + "\n".join(names[stems:]) + "\n")
    return lists


def test_a_dense_folder_with_official_split_lists_and_a_per_stem_limit(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    lists = _dense_folder(tmp_path / "scans")
    params = {"head": "linear", "train_split": "train", "eval_split": "val", "target_size": 8, "epochs": 2,
              "lr": 0.01, "weight_decay": 0.0, "batch_size": 2}
    result = harness.run("cifar_resnet20@random", "depth", tmp_path / "scans", stems=lists, limit=3, **params)
    record = result.record
    assert record.status == "ok" and record.dataset.size == 3  # 3 stems of the val list
    assert record.dataset.params["limit_per_split"] == 3 and record.dataset.params["split_lists"] == "stems"
    assert result.sample_ids == ["images/frame04.png", "images/frame05.png", "images/frame06.png"]
    semantic = harness.run("cifar_resnet20@random", "semantic_segmentation", tmp_path / "scans", stems=lists,
                           **params)
    assert semantic.record.dataset.size == 4 and "miou" in semantic.metrics


def test_what_a_folder_becomes_for_each_kind_of_task(tmp_path):
    (tmp_path / "nights").mkdir()
    (tmp_path / "nights" / "data.csv").write_text("id,split\n1,test\n")
    assert dataset_spec(tmp_path / "nights", "similarity", None, limit=5) == (
        "nights_limit5", {"kind": "nights", "root": str(tmp_path / "nights"), "splits": ["test"], "limit_per_split": 5})
    with pytest.raises(ConfigError, match=r"no JPEGImages/, Annotations/, split lists .*VOC-style folder"):
        dataset_spec(tmp_path / "nights", "detection", None)
    voc, lists = tmp_path / "voc", tmp_path / "lists"
    for folder in (voc / "JPEGImages", voc / "Annotations", lists):
        folder.mkdir(parents=True)
    (lists / "train.txt").write_text("a\n")
    _, spec = dataset_spec(voc, "detection", None, stems=lists, limit=2)
    assert spec == {"kind": "voc2012_detection", "root": str(voc), "stems": str(lists), "limit_per_split": 2}
    with pytest.raises(ConfigError, match=r"data=.*nights: no images/, split lists .*splits/<split>.txt"):
        dataset_spec(tmp_path / "nights", "depth", None)
    # a labelled folder without one image in the layout is refused before anything runs, not a failed run
    (tmp_path / "empty" / "train" / "cat").mkdir(parents=True)
    (tmp_path / "empty" / "train" / "cat" / "notes.txt").write_text("not an image")
    with pytest.raises(ConfigError, match=r"no images \(.*\) in its <split>/<class>/ folders"):
        dataset_spec(tmp_path / "empty", "classification", None)
    flat = write_image_folder(tmp_path / "pets", per_split=2, splits=(None,))
    assert dataset_spec(flat, "classification", None, limit=1)[1] == {
        "kind": "image_folder", "root": str(flat), "split_fractions": {"train": 0.5, "val": 0.5}, "limit_per_class": 1}
    spec_file = json.dumps(dataset_spec(flat, "retrieval", None)[1])
    assert "split_fractions" in spec_file


def test_a_subset_and_the_whole_folder_are_two_runs_never_one_file(image_project, tmp_path):
    """The same folder run whole (the API) and with limit= (the CLI) had shared one run id: the later replaced
    the earlier. What selects the subset is in the id, so both records stay."""
    folder = write_image_folder(tmp_path / "cifar_sub", per_split=6, splits=(None,), classes=2)
    whole = harness.run("cifar_resnet20@random", "classification", folder)
    assert main(["task=classification", "backbone=cifar_resnet20@random", f"data={folder}", "limit=2",
                 "build_site=false"]) == 0
    records = {r.run_id: r for r in read_records(Path("user/corpus.jsonl"))}
    assert whole.record.run_id == "cifar_sub-classification@cifar_resnet20.random" and whole.record_path.is_file()
    subset = records["cifar_sub_limit2-classification@cifar_resnet20.random"]
    assert subset.dataset.size == 4 and whole.record.dataset.identity != subset.dataset.identity


def test_data_runs_take_the_projects_plugin_backbones(image_project, tmp_path):
    """`list` shows a plugin's backbone and harness.run takes it; `data=` said "unknown backbone" before."""
    import yaml

    work, _ = image_project
    (work / "plugins").mkdir()
    (work / "plugins" / "tiny_net.py").write_text(
        "import torch\nfrom torch import nn\n\nfrom harness.backbones.custom import register_custom_backbone\n\n\n"
        "class TinyNet(nn.Module):\n    def __init__(self) -> None:\n        super().__init__()\n"
        "        self.conv = nn.Conv2d(3, 8, kernel_size=3, stride=2, padding=1)\n\n"
        "    def forward(self, images):\n        return [torch.relu(self.conv(images))]\n\n\n"
        "register_custom_backbone('tiny_plugin_net', TinyNet, input_size=32, num_layers=1)\n")
    params = yaml.safe_load((work / "params.yaml").read_text())
    (work / "params.yaml").write_text(yaml.safe_dump({**params, "plugins": ["plugins/tiny_net.py"]}))
    folder = write_image_folder(tmp_path / "pets", per_split=4, splits=(None,), classes=2)
    assert main(["task=retrieval", "backbone=tiny_plugin_net@random", f"data={folder}", "build_site=false"]) == 0
    [record] = read_records(Path("user/corpus.jsonl"))
    assert record.run_id == "pets-retrieval@tiny_plugin_net.random" and record.backbone.control


def test_two_folders_of_one_name_are_two_datasets_and_neither_overwrites_the_other(image_project, tmp_path):
    """`data=a/pets` then `data=b/pets`: the second takes its name plus a hash of its path, so the first's record,
    head file and spec stay as they were; a re-run of the first keeps its plain name."""
    first = write_image_folder(tmp_path / "a" / "pets", per_split=3, splits=(None,), classes=2)
    second = write_image_folder(tmp_path / "b" / "pets", per_split=4, splits=(None,), classes=3)
    args = ["task=classification", "backbone=cifar_resnet20@random", "build_site=false"]
    assert main([*args, f"data={first}"]) == 0
    kept = {path: path.read_bytes() for path in Path("user/results/pets").rglob("*") if path.is_file()}
    spec = Path("user/data/pets/spec.json").read_text()
    assert kept and str(first) in spec
    assert main([*args, f"data={second}"]) == 0
    assert {path: path.read_bytes() for path in Path("user/results/pets").rglob("*") if path.is_file()} == kept
    assert Path("user/data/pets/spec.json").read_text() == spec
    [other] = [path for path in Path("user/results").iterdir() if path.name != "pets"]
    assert other.name.startswith("pets_") and len(other.name) == len("pets_") + 6
    records = {r.dataset.name: r for r in read_records(Path("user/corpus.jsonl"))}
    assert set(records) == {"pets", other.name}
    assert records["pets"].dataset.size != records[other.name].dataset.size  # 2 classes against 3
    assert main([*args, f"data={first}"]) == 0
    assert sorted(path.name for path in Path("user/results").iterdir()) == sorted(["pets", other.name])
