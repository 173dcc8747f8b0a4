"""The stage model (harness.pipeline.stage_model): a stage is built once (`topology.stage_specs`), serialised into
dvc.yaml by the generator, and read back unchanged by the runner; DVC itself reads the same stage from the file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from harness.core.config import load_params
from harness.pipeline.documents import render
from harness.pipeline.stage_model import Out, RowKey, StageSpec, load_stages, read_stages
from harness.pipeline.stage_specs import stage_specs

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def built(repo_root) -> list[StageSpec]:
    return stage_specs(load_params())


def test_a_stage_spec_round_trips_through_dvc_yaml_unchanged(built, repo_root):
    """Serialised to YAML text and parsed back, every spec is the one built, each file's in the order built; the
    committed files read back give the same specs (they are that serialisation, `pipeline check` holds them
    fresh)."""
    texts = render(load_params())
    read = read_stages({path: yaml.safe_load(text) for path, text in texts.items()})
    for path in texts:
        assert [s for s in read.values() if s.file == path] == [s for s in built if s.file == path], path
    assert read == {spec.name: spec for spec in built}
    assert load_stages(repo_root) == {spec.name: spec for spec in built}


def test_dvc_reads_each_stage_as_its_spec_says(built, repo_root):
    """DVC's own parser (the index `dvc repro` builds) finds each committed stage with the spec's command, paths,
    params and output options: what the harness runs, schedules and names is what DVC runs."""
    from dvc.repo import Repo

    specs = {spec.name: spec for spec in built}
    found = {}
    cwd = os.getcwd()
    os.chdir(repo_root)  # DVC prints a stage's address relative to the working directory
    try:
        with Repo(".") as repo:
            for stage in repo.index.stages:
                params = [key for dep in stage.deps if hasattr(dep, "params") for key in dep.params]
                files = [dep.def_path for dep in stage.deps if not hasattr(dep, "params")]
                params_files = {Path(dep.fs_path).relative_to(repo_root).as_posix()
                                for dep in stage.deps if hasattr(dep, "params")}
                outs = tuple(Out(out.def_path, cache=out.use_cache, persist=out.persist) for out in stage.outs)
                found[stage.name] = (stage.addressing, stage.cmd, tuple(files), sorted(params), params_files, outs)
    finally:
        os.chdir(cwd)
    assert set(found) == set(specs)
    for name, spec in specs.items():
        default = "params.yaml"
        expected = (spec.address, spec.cmd, spec.deps, sorted(spec.params),
                    {spec.params_file or default} if spec.params else set(), spec.outs)
        assert found[name] == expected, name


def test_a_row_stage_is_a_foreach_member_of_its_backbone_with_its_run_key():
    key = RowKey("g", "net.random", "d", "t")
    spec = StageSpec(f"{key.group}@{key.backbone}", key.file, "python -m x", deps=("a",), params=("p.q",),
                     params_file="pipelines/g/params.json", outs=(Out("r", cache=False, persist=True), Out("s")),
                     row=key)
    written = spec.to_yaml()
    assert written["foreach"] == ["net.random"] and written["do"]["meta"] == {
        "grid": "g", "backbone": "net.random", "dataset": "d", "task": "t"}
    assert spec.name == "g-t@net.random" and spec.address == "pipelines/g/net.random/dvc.yaml:g-t@net.random"
    assert StageSpec.from_yaml(spec.file, spec.group, written) == spec
    extract = RowKey("g", "net", "d")
    assert extract.group == "extract-g-d" and RowKey.from_meta(extract.to_meta()) == extract
