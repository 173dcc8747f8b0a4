"""Boards headed by a pooled metric (semantic mIoU, a dense task's Pearson r, detection's VOC mAP50) get bootstrap
intervals and tie groups from their runs' auxiliary rows (issue 46): the site resamples the statistic the record
names, and says "no per-sample scores" only where a run has none."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from test_layer_rows import depth  # the synthetic records those tests use

from harness.core.atomic import write_text_atomic
from harness.leaderboard import rendered_pages
from harness.probes import resampled
from harness.probes.statistics import dense, detection
from harness.runs.records import Record
from harness.runs.samples import samples_file

IMAGES = 60


def _semantic(rng: np.random.Generator, skill: float) -> dict[str, np.ndarray]:
    truth = rng.integers(0, 4, size=(IMAGES, 6, 6))
    predicted = np.where(rng.random(truth.shape) < skill, truth, rng.integers(0, 4, size=truth.shape))
    matrices = np.zeros((IMAGES, 4, 4), dtype=np.int64)
    np.add.at(matrices, (np.arange(IMAGES)[:, None, None], truth, predicted), 1)
    return dense.class_count_columns(matrices)


def _pearson(rng: np.random.Generator, skill: float) -> dict[str, np.ndarray]:
    target = rng.random((IMAGES, 6, 6))
    return dense.pearson_columns(skill * target + (1 - skill) * rng.random(target.shape), target)


def _detection(rng: np.random.Generator, skill: float) -> dict[str, np.ndarray]:
    objects = rng.integers(1, 3, size=(IMAGES, 2))
    scores, labels, outcomes = [], [], []
    for _ in range(IMAGES):
        found = int(rng.integers(1, 5))
        scores.append(np.round(rng.random(found), 1))  # ties
        labels.append(rng.integers(0, 2, found))
        outcomes.append((rng.random(found) < skill).astype(int))
    return detection.voc_columns(scores, labels, outcomes, objects)


CASES = {"semantic_segmentation": ("dense-semantic-segmentation/v2", "miou", "semantic_miou", _semantic),
         "edge": ("dense-edge-regression/v2", "pearson", "pooled_pearson", _pearson),
         "detection": ("fcos-single-scale/v1", "voc_map50", "voc_map50", _detection)}


def _run(task: str, name: str, auxiliary: dict[str, np.ndarray], root: Path) -> Record:
    protocol, headline, statistic, _ = CASES[task]
    record = depth(name, 0.0)
    run_id = record.run_id.replace("depth", task)
    relative = Path("results") / f"{run_id}.samples.csv"
    ids = [f"val/{i:04d}.png" for i in range(IMAGES)]
    text, info = samples_file(relative, ids, {}, "image", auxiliary, {headline: statistic})
    write_text_atomic(root / relative, text)
    value = float(resampled.evaluate(statistic, auxiliary)[0])
    return record.model_copy(update={
        "run_id": run_id, "task": task, "protocol": protocol, "headline_metric": headline, "samples": info,
        "metrics": {headline: value}, "higher_is_better": {headline: True}, "tolerances": {headline: 0.0}})


@pytest.mark.parametrize("task", sorted(CASES))
def test_a_pooled_headline_gets_intervals_and_tie_groups(task, tmp_path):
    make = CASES[task][3]
    same = make(np.random.default_rng(1), 0.5)
    records = [_run(task, "alpha", make(np.random.default_rng(0), 0.95), tmp_path),
               _run(task, "beta", same, tmp_path), _run(task, "gamma", same, tmp_path)]  # beta, gamma: one run's rows
    page = rendered_pages(records, tmp_path)[f"tasks/{task}.md"]
    assert "no per-sample scores" not in page
    assert f"**{CASES[task][1]}** [95% CI]" in page
    groups = {}
    for line in page.splitlines():
        cells = line.split(" | ")
        if line.startswith("| ") and len(cells) > 3:
            name = re.sub(r"^\[([^]]+)\]\(.*\)$", r"\1", cells[1])  # the backbone cell, or its link's text
            if name in ("alpha", "beta", "gamma") and re.fullmatch(r"[A-Z]+", cells[3]):
                groups[name] = cells[3]
    assert groups["beta"] == groups["gamma"] != groups["alpha"]  # identical rows tie; a far better run does not
