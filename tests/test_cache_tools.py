"""`visbench-harness cache stats` and `cache gc`: entries, bytes and the last run's hit rate per backbone ×
dataset; garbage is what no stage references, and nothing a stage reads is ever removed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import yaml

from harness.cli.cache import collect_garbage, feature_sets, stats_table
from harness.cli.main import main
from harness.core import paths
from harness.core.config import load_params
from harness.runs.feature_cache import FeatureCache
from harness.stages import calls as stages


def test_stats_count_entries_and_the_last_runs_hit_rate(image_project, capsys):
    params = load_params()
    stages.prepare("tiny", params)
    stages.extract("g", "cifar_resnet20.random", "tiny", params)
    [feature_set] = feature_sets()
    assert (feature_set.grid, feature_set.backbone, feature_set.dataset) == ("g", "cifar_resnet20.random", "tiny")
    assert len(feature_set.entries()) == 16  # 16 images, one pooled request
    assert "0/16 cached (0% hit rate), 16 computed" in stats_table([feature_set])
    stages.extract("g", "cifar_resnet20.random", "tiny", params)  # everything cached now
    assert main(["cache", "stats"]) == 0
    out = capsys.readouterr().out
    assert "16/16 cached (100% hit rate), 0 computed" in out and "cifar_resnet20.random" in out


def test_gc_removes_what_no_stage_references_and_keeps_the_rest(image_project, capsys):
    params = load_params()
    stages.prepare("tiny", params)
    stages.extract("g", "cifar_resnet20.random", "tiny", params)
    live = sorted(p.read_bytes() for p in feature_sets()[0].entries())
    stale = FeatureCache(Path("features/oldgrid/resnet18.random/tiny/entries"))  # a grid params.yaml dropped
    stale.put("ab" * 20, np.zeros(4))
    stray = FeatureCache(paths.features_dir("g", "cifar_resnet20.random", "tiny") / "entries")
    stray.put("cd" * 20, np.ones(4))  # an entry no item of the dataset keys
    assert main(["cache", "gc", "dry_run=true"]) == 0
    listed = capsys.readouterr().out
    assert "features/oldgrid/resnet18.random/tiny" in listed and "cd" * 20 in listed and "would remove 2" in listed
    unused, size = collect_garbage()
    assert len(unused) == 2 and size > 0
    assert not Path("features/oldgrid/resnet18.random/tiny").exists()
    assert sorted(p.read_bytes() for p in feature_sets()[0].entries()) == live  # every live entry kept
    [record] = stages.probe("g", "classification", "cifar_resnet20.random", params)
    assert record.status == "ok"


def test_gc_keeps_nothing_of_a_dataset_params_yaml_no_longer_names(image_project):
    params = load_params()
    stages.prepare("tiny", params)
    stages.extract("g", "cifar_resnet20.random", "tiny", params)
    data = yaml.safe_load(Path("params.yaml").read_text())
    data["grids"]["g"]["backbones"] = ["cifar_resnet32.random"]
    Path("params.yaml").write_text(yaml.safe_dump(data))
    unused, _ = collect_garbage(dry_run=True)
    assert unused == [Path("features/g/cifar_resnet20.random/tiny")]


def test_bad_cache_commands_exit_2(image_project, capsys):
    assert main(["cache"]) == 2
    assert main(["cache", "purge"]) == 2
    assert main(["cache", "gc", "dry_run=maybe"]) == 2
    assert main(["cache", "stats", "x=1"]) == 2
    assert "expected `cache stats` or `cache gc [dry_run=true]`" in capsys.readouterr().err
