"""The anomaly probes on in-memory arrays (`AnomalyArrays`): on the features, defect types and masks read from a
generated `procedural_defects` dataset they give exactly the numbers the probe gives on that dataset (with defect
types by name or by int label); without masks the image metrics are the same and the pixel metrics absent; and
malformed arrays are refused in one line before any work."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from harness.core import paths
from harness.datasets.anomaly_folder import MASK
from harness.datasets.defects import prepare_procedural_defects
from harness.probes import get_probe
from harness.probes.anomaly.arrays import AnomalyArrays
from harness.probes.base import ProbeInputs
from harness.probes.dense.targets import load_target

TASKS = ("anomaly_knn", "anomaly_gaussian")
PARAMS = {"train_split": "train", "eval_split": "test", "target_size": 24, "smooth_sigma": 1.0}
PIXEL = ("pixel_auroc", "aupro")
CELL = 8  # 48-px images → 6×6 feature cells


def _features(image: np.ndarray) -> np.ndarray:
    """A fixed fake backbone: each 8-px cell's RGB mean and std, (6, 6, 6) float32."""
    h, w, _ = image.shape
    cells = image.astype(np.float64).reshape(h // CELL, CELL, w // CELL, CELL, 3)
    return np.concatenate([cells.mean(axis=(1, 3)), cells.std(axis=(1, 3))], axis=-1).transpose(2, 0, 1).astype(
        np.float32)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """A tiny generated dataset in a workspace, every item's features, the probe run on it (per task), and what
    the arrays read from it: features, defect types by name and by label, masks (a good image's empty)."""
    root = tmp_path_factory.mktemp("arrays")
    with paths.workspace(root):
        manifest = prepare_procedural_defects("defects", paths.dataset_dir("defects"), "tiles", seed=0, size=48,
                                              train_good=4, test_good=3, test_per_type=2)
        features = {}
        for item in manifest.items:
            with Image.open(Path(manifest.root) / item.path) as opened:
                features[item.path] = _features(np.asarray(opened.convert("RGB")))
        runs = {task: get_probe(task).run(ProbeInputs(manifest, lambda item: features[item.path], dict(PARAMS), 0))
                for task in TASKS}
        test = manifest.split("test")
        masks = np.stack([np.zeros((48, 48), bool) if item.label == 0 else load_target(manifest, item, MASK) > 0
                          for item in test])
    arrays = {split: np.stack([features[item.path] for item in manifest.split(split)]) for split in ("train", "test")}
    labels = np.array([item.label for item in test])
    types = np.array([manifest.classes[label] for label in labels])
    return manifest, runs, arrays, types, labels, masks


@pytest.fixture
def no_params_yaml(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # every parameter is given


def _same_numbers(evaluated, run, pixel=True):
    want = {name: value for name, value in run.metrics.items() if pixel or name not in PIXEL}
    assert evaluated.metrics == want  # exact float equality, every metric
    assert evaluated.unit == run.unit == "image" and evaluated.samples == run.samples == {}
    assert evaluated.auxiliary.keys() == run.auxiliary.keys()
    for name, column in run.auxiliary.items():
        assert np.array_equal(evaluated.auxiliary[name], column), name
    assert evaluated.statistics == run.statistics
    assert evaluated.sample_ids == [f"test/{index:06d}" for index in range(len(run.sample_ids))]


@pytest.mark.parametrize("task", TASKS)
def test_arrays_give_the_numbers_of_the_run_on_the_dataset(dataset, no_params_yaml, task):
    manifest, runs, arrays, types, labels, masks = dataset
    assert {"auroc_blob", "auroc_stain", *PIXEL} <= set(runs[task].metrics)
    probe = get_probe(task)
    by_name = probe.evaluate(arrays, {"train": None, "test": {"defect_type": types, "mask": masks}}, **PARAMS)
    _same_numbers(by_name, runs[task])
    by_label = probe.evaluate(arrays, {"train": np.zeros(4), "test": {"defect_type": labels, "mask": masks}},
                              classes=manifest.classes, **PARAMS)
    _same_numbers(by_label, runs[task])


@pytest.mark.parametrize("task", TASKS)
def test_without_masks_the_image_metrics_are_the_same_and_the_pixel_metrics_absent(dataset, no_params_yaml, task):
    _, runs, arrays, types, _, _ = dataset
    evaluated = get_probe(task).evaluate(arrays, {"train": ["good"] * 4, "test": types}, **PARAMS)
    assert not set(PIXEL) & set(evaluated.metrics)
    _same_numbers(evaluated, runs[task], pixel=False)


def test_int_labels_without_classes_are_named_by_number(dataset, no_params_yaml):
    _, _, arrays, _, labels, _ = dataset
    evaluated = get_probe("anomaly_knn").evaluate(arrays, {"train": None, "test": labels}, **PARAMS)
    assert {"auroc_1", "auroc_2", "auroc_3", "auroc_4"} <= set(evaluated.metrics)


def _refusals(arrays, types, labels, masks):
    test, train = arrays["test"], arrays["train"]
    return [
        ({"train": train, "val": test}, {"train": None, "val": types}, {}, r"splits 'train' .* and 'test' .*: rename "
         r"them, or pass train_split= and eval_split="),
        ({**arrays, "extra": test}, {"train": None, "test": types, "extra": types}, {}, "no other"),
        (arrays, {"train": ["good", "blob", "good", "good"], "test": types}, {},
         r"targets\['train'\] must be None or all 'good' .* \(1 defective row, e.g. row 1\); move them to 'test'"),
        (arrays, {"train": [0, 0, 2, 0], "test": labels}, {}, "defect-free images only"),
        (arrays, {"train": None, "test": {"defect_type": types, "mask": masks[1:]}}, {},
         r"\(N, H, W\) masks, one per image: \(11, H, W\); got shape \(10, 48, 48\)"),
        (arrays, {"train": None, "test": {"defect_type": types, "mask": masks[:, 0]}}, {}, "one per image"),
        (arrays, {"train": None, "test": {"defect_type": types, "mask": np.ones_like(masks)}}, {},
         "row 0 is a good image but its mask marks defect pixels"),
        (arrays, {"train": None, "test": types[1:]}, {}, r"11 feature rows need \(11,\) defect types"),
        (arrays, {"train": None, "test": {"types": types}}, {}, "as a mapping holds 'defect_type'"),
        ({"train": train.mean(axis=(2, 3)), "test": test}, {"train": None, "test": types}, {}, r"\(N, C, h, w\)"),
        ({"train": train[:, :3], "test": test}, {"train": None, "test": types}, {}, "share one channel count C"),
        (arrays, {"train": None, "test": types}, {"classes": ["blob", "good"]}, "classes must start with 'good'"),
        (arrays, {"train": None, "test": types}, {"classes": ["good", "blob"]}, r"'missing', 'scratch', 'stain' "
         "not in classes="),
        (arrays, {"train": None, "test": np.where(types == "blob", "bad-blob", types)}, {}, "letters, digits"),
        (arrays, {"train": [0, 0, 0, 0], "test": [0.5] * 11}, {}, "int labels ≥ 0"),
        (arrays, {"train": [0, 0, 0, 0], "test": [0] * 10 + [7]}, {"classes": ["good", "blob"]},
         "label 7 has no class"),
        (arrays, {"train": [0, 1, 0, 0], "test": types}, {}, "by name .* in every split"),
    ]


def test_malformed_arrays_are_refused_in_one_line_before_any_work(dataset, no_params_yaml, monkeypatch):
    _, _, arrays, types, labels, masks = dataset

    def never(*args):
        raise AssertionError("refused after the work began")

    monkeypatch.setattr(AnomalyArrays, "manifest", never)
    probe = get_probe("anomaly_gaussian")
    for features, targets, kwargs, match in _refusals(arrays, types, labels, masks):
        with pytest.raises(ValueError, match=match) as caught:
            probe.evaluate(features, targets, **PARAMS, **kwargs)
        assert "\n" not in str(caught.value)


def test_other_split_names_are_read_from_the_parameters(dataset, no_params_yaml):
    _, runs, arrays, types, _, _ = dataset
    evaluated = get_probe("anomaly_knn").evaluate({"normal": arrays["train"], "query": arrays["test"]},
                                                  {"normal": None, "query": types},
                                                  **{**PARAMS, "train_split": "normal", "eval_split": "query"})
    assert evaluated.metrics["auroc"] == runs["anomaly_knn"].metrics["auroc"]
    assert evaluated.sample_ids[0] == "query/000000"
