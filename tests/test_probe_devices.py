"""The probes that train with torch run on the run's device (`ProbeInputs.device`), and on the CPU nothing moves.

Without a GPU, the device code is driven on torch's `meta` device: meta tensors have shapes and no values, and
a CPU tensor (other than a 0-d scalar) meeting a meta tensor raises, exactly as it would meeting a CUDA one. So
a target, mask, index or constant created on the CPU inside a training step, an epoch or a prediction is caught
here. What converts to Python numbers or NumPy cannot run on meta; the code keeps those read-backs out of the
per-step functions driven below (`train_step`, `train_epoch`, `predict_logits`, `fcos_loss_terms`,
`finetune_step`, `finetune_epochs`).

Boolean-mask indexing (the depth and normals losses, FCOS's positive cells) needs `nonzero`, whose output shape
depends on values; torch's meta kernel for it assumes every element is selected when asked to
(`meta_nonzero_assume_all_nonzero`), which is enough to check devices and shapes.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial

import numpy as np
import pytest
import torch

from harness.datasets.manifest import Item, Manifest
from harness.probes import ProbeInputs, get_probe
from harness.probes.dense import normals
from harness.probes.dense import probes as dense
from harness.probes.dense.heads import build_head
from harness.probes.dense.streaming import Batch, DenseStream, to_device
from harness.probes.dense.train import cpu_threads, predict_logits, train_epoch, train_head, train_step
from harness.probes.detection.fcos import FCOSHead, assign, cell_centres, fcos_loss_terms, split_outputs
from harness.probes.detection.probe import DETECTION_PROBE

META = torch.device("meta")
SIZE = 12  # target size of the dense tasks below
GRID = 6  # the features' grid
CHANNELS = [2, 2]  # two layers of two channels, so the DPT head's per-layer projections run


@pytest.fixture
def meta_nonzero() -> Iterator[None]:
    """Boolean-mask indexing on meta (see the module docstring); skipped where this torch has no such switch."""
    config = pytest.importorskip("torch.fx.experimental._config")
    if not hasattr(config, "meta_nonzero_assume_all_nonzero"):
        pytest.skip("this torch's meta nonzero cannot assume all elements selected")
    with config.patch(meta_nonzero_assume_all_nonzero=True):
        yield


def _items(n: int) -> list[Item]:
    return [Item(f"img_{i:04d}.png", f"{i:064d}", "train", i % 3) for i in range(n)]


def _dense_target(name: str, rng: np.random.Generator) -> np.ndarray:
    """A target in the encoding each dense task's loss reads (as `targets` produces it)."""
    if name == "depth":
        return rng.uniform(0.5, 5.0, size=(SIZE, SIZE)).astype(np.float32)
    if name.startswith("normals"):
        v = rng.normal(size=(3, SIZE, SIZE)).astype(np.float32)
        return v / np.linalg.norm(v, axis=0, keepdims=True)
    if name in ("foreground", "semantic"):
        return rng.integers(0, 3 if name == "semantic" else 2, size=(SIZE, SIZE)).astype(np.int64)
    return rng.uniform(0.0, 1.0, size=(SIZE, SIZE)).astype(np.float32)  # edges, keypoints, occlusion


def _stream(task: str, n: int = 7, batch_size: int = 3) -> DenseStream:
    rng = np.random.default_rng(0)
    table = {item.path: rng.normal(size=(sum(CHANNELS), GRID, GRID)).astype(np.float32) for item in _items(n)}
    targets = {item.path: (_dense_target(task, rng), rng.random((SIZE, SIZE)) > 0.2) for item in _items(n)}
    return DenseStream(_items(n), lambda item: table[item.path], batch_size, lambda item: targets[item.path])


DENSE = {"depth": (dense.DEPTH, 1), "normals": (normals.NORMALS, 3),
         "normals_uncertain": (normals.NORMALS_UNCERTAIN, 4), "foreground": (dense.GENERIC, 1),
         "semantic": (dense.SEMANTIC, 3), "edge": (dense.EDGE, 1), "keypoints": (dense.KEYPOINTS, 1),
         "occlusion": (dense.OCCLUSION, 1)}


def _meta_head(kind: str, out_channels: int) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_head(kind, CHANNELS, out_channels, [0.1] * out_channels).to(META)


def _assert_on_meta(module: torch.nn.Module, optimiser: torch.optim.Optimizer | None = None) -> None:
    assert all(p.device == META for p in module.parameters())
    assert all(b.device == META for b in module.buffers())
    for state in (optimiser.state.values() if optimiser else ()):
        # AdamW's moments live with their parameter (its step counter is a CPU scalar unless capturable)
        assert state["exp_avg"].device == META and state["exp_avg_sq"].device == META


# -- moving batches -------------------------------------------------------------------------------------

def test_batches_move_to_the_device_and_stay_put_on_the_cpu():
    stream = _stream("semantic")
    batch = next(stream.batches())
    assert batch.to(torch.device("cpu")) is batch  # the CPU path is the very same tensors, no copy
    moved = batch.to(META)
    assert (moved.features.device, moved.target.device, moved.valid.device) == (META, META, META)
    assert moved.features.shape == batch.features.shape and moved.target.dtype == torch.int64
    assert moved.valid.dtype == torch.bool and moved.items == batch.items
    plain = Batch(batch.items, batch.features, None, None)  # an evaluation batch: no targets
    assert plain.to(META).target is None and plain.to(META).valid is None
    cpu = torch.zeros(2)
    assert to_device(cpu, torch.device("cpu")) is cpu and to_device(cpu, META).device == META


def test_cpu_threads_is_one_thread_on_the_cpu_only():
    before = torch.get_num_threads()
    with cpu_threads("cpu"):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    torch.set_num_threads(2)
    try:
        with cpu_threads(META):  # a GPU's (here: meta's) kernels do not depend on the host's threads
            assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


# -- dense heads on meta --------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["linear", "dpt"])
@pytest.mark.parametrize("task", sorted(DENSE))
def test_dense_train_step_and_prediction_run_on_meta(meta_nonzero, task, kind):
    """Every dense task's real loss through one training step and a prediction, all on meta."""
    spec, out_channels = DENSE[task]
    head = _meta_head(kind, out_channels)
    optimiser = torch.optim.AdamW(head.parameters(), lr=0.01, weight_decay=0.01)
    batch = next(_stream(task).batches(shuffle=True, seed=0, epoch=0))
    value = train_step(head, optimiser, batch.to(META), spec.loss, size=SIZE, layer_channels=CHANNELS)
    assert value.device == META and value.shape == () and not value.requires_grad
    _assert_on_meta(head, optimiser)
    assert len(optimiser.state) == len(list(head.parameters()))  # every parameter took its step
    logits = predict_logits(head.eval(), batch.features, size=SIZE, layer_channels=CHANNELS)  # CPU features in
    assert logits.device == META and logits.shape == (len(batch.items), out_channels, SIZE, SIZE)


def test_an_epoch_of_dense_training_runs_on_meta():
    """The loop itself (batches moved, loss summed on the device) creates nothing on the CPU."""
    head = _meta_head("dpt", 3)
    optimiser = torch.optim.AdamW(head.parameters(), lr=0.01)
    total, count = train_epoch(head, optimiser, _stream("semantic"), dense.SEMANTIC.loss, size=SIZE, seed=0,
                               epoch=1, layer_channels=CHANNELS)
    assert total.device == META and total.dtype == torch.float64 and total.shape == () and count == 7
    _assert_on_meta(head, optimiser)


# -- detection on meta ----------------------------------------------------------------------------------

def _detection_stream(n: int = 5) -> DenseStream:
    from harness.probes.detection.annotations import GroundTruth

    rng = np.random.default_rng(1)
    table = {item.path: rng.normal(size=(sum(CHANNELS), GRID, GRID)).astype(np.float32) for item in _items(n)}
    truth = {item.path: GroundTruth(60, 48, np.array([[5.0, 4.0, 30.0, 40.0], [20.0, 2.0, 58.0, 20.0]]),
                                    np.array([0, 2]), np.zeros(2, dtype=bool)) for item in _items(n)}
    return DenseStream(_items(n), lambda item: table[item.path], 2,
                       lambda item: assign(truth[item.path], (GRID, GRID), 1.5))


@pytest.mark.parametrize(("tower", "centerness"), [(0, False), (1, True)])
def test_fcos_step_and_prediction_run_on_meta(meta_nonzero, tower, centerness):
    torch.manual_seed(0)
    head = FCOSHead(CHANNELS, 3, tower=tower, width=8, centerness=centerness).to(META)
    optimiser = torch.optim.AdamW(head.parameters(), lr=0.01)
    # the positive count is the one host read of fcos_loss; given here, the rest of the loss runs on meta
    loss = partial(fcos_loss_terms, npos=4, any_positive=True, num_classes=3, centerness=centerness)
    batch = next(_detection_stream().batches(shuffle=True, seed=0, epoch=0))
    value = train_step(head, optimiser, batch.to(META), loss, size=0, layer_channels=CHANNELS)
    assert value.device == META and value.shape == ()
    _assert_on_meta(head, optimiser)
    raw = predict_logits(head.eval(), batch.features, size=0, layer_channels=CHANNELS)
    assert raw.device == META and raw.shape == (2, 3 + 4 + int(centerness), GRID, GRID)
    out = split_outputs(raw, 3, centerness)
    assert out.boxes.device == META and out.boxes.shape == (2, GRID, GRID, 4)
    assert (out.centerness is not None) == centerness
    x, y = cell_centres((GRID, GRID), META)
    assert x.device == y.device == META and x.shape == (GRID, GRID)


def test_fcos_loss_without_positives_runs_on_meta():
    raw = torch.empty(2, 3 + 5, GRID, GRID, device=META)
    target = torch.empty(2, 5, GRID, GRID, device=META)
    positive = torch.empty(2, GRID, GRID, dtype=torch.bool, device=META)
    value = fcos_loss_terms(raw, target, positive, npos=1, any_positive=False, num_classes=3, centerness=True)
    assert value.device == META and value.shape == ()


# -- fine-tuning on meta --------------------------------------------------------------------------------

def _finetune_model(classes: int = 3):
    from harness.backbones import create_backbone
    from harness.probes.finetune import _Model

    suffix = create_backbone("cifar_resnet20@random").finetune_suffix(1)  # layer3: (32, 16, 16) → (64,)
    return _Model(suffix, 64, classes)


FINETUNE = {"finetune_blocks": 1, "layers": [-2], "train_split": "train", "eval_split": "val", "epochs": 2,
            "lr": 0.05, "block_lr": 0.001, "weight_decay": 0.01, "batch_size": 4, "schedule": "cosine"}


def test_finetune_step_epochs_and_prediction_run_on_meta():
    from harness.probes.finetune import _frozen_norms, finetune_epochs, finetune_step

    model = _frozen_norms(_finetune_model().to(META))
    optimiser = torch.optim.AdamW(model.parameters(), lr=0.01)
    x = torch.empty(4, 32, 16, 16, device=META)
    y = torch.empty(4, dtype=torch.int64, device=META)
    value = finetune_step(model, optimiser, x, y)
    assert value.device == META and value.shape == ()
    _assert_on_meta(model, optimiser)
    rng = np.random.default_rng(0)
    # the whole loop: CPU generator's order, batches gathered on the CPU and moved, cosine schedule
    finetune_epochs(model, rng.normal(size=(10, 32, 16, 16)).astype(np.float32), rng.integers(0, 3, 10), FINETUNE, 0)
    _assert_on_meta(model)
    with torch.no_grad():
        logits = model.eval()(to_device(torch.zeros(3, 32, 16, 16), META))
    assert logits.device == META and logits.shape == (3, 3)


# -- the registry ---------------------------------------------------------------------------------------

def test_the_probes_that_train_with_torch_use_the_device():
    torch_probes = {"depth", "surface_normal", "generic_segmentation", "semantic_segmentation", "edge", "keypoints2d",
                    "occlusion_edge", "detection", "edge_bsds", "finetune_classification"}
    for name in torch_probes:
        assert get_probe(name).uses_device, name
    for name in ("classification", "retrieval", "correspondence"):  # NumPy / CPU linear heads
        assert not get_probe(name).uses_device, name


# -- device="cpu" is today's path, bit for bit ----------------------------------------------------------

def _equal_results(a, b) -> None:
    assert a.metrics == b.metrics and a.sample_ids == b.sample_ids
    assert a.samples.keys() == b.samples.keys()
    for name in a.samples:
        assert np.array_equal(a.samples[name], b.samples[name], equal_nan=True), name
    assert (a.head is None) == (b.head is None)
    if a.head is not None:
        assert a.head.config == b.head.config and a.head.tensors.keys() == b.head.tensors.keys()
        for name in a.head.tensors:
            assert np.array_equal(a.head.tensors[name], b.head.tensors[name]), name


def test_train_head_on_the_cpu_explicitly_is_the_default():
    stream = _stream("edge")

    def fit(**device):
        return train_head(lambda: build_head("dpt", CHANNELS, 1, [0.2]), stream, dense.EDGE.loss, size=SIZE,
                          epochs=3, lr=0.05, weight_decay=0.01, seed=3, layer_channels=CHANNELS, **device)

    default, explicit, typed = fit(), fit(device="cpu"), fit(device=torch.device("cpu"))
    assert default.train_loss == explicit.train_loss == typed.train_loss
    for a, b, c in zip(default.head.state_dict().values(), explicit.head.state_dict().values(),
                       typed.head.state_dict().values(), strict=True):
        assert torch.equal(a, b) and torch.equal(a, c)
    features = next(stream.batches()).features
    assert torch.equal(predict_logits(default.head, features, size=SIZE, layer_channels=CHANNELS),
                       predict_logits(explicit.head, features, size=SIZE, layer_channels=CHANNELS))


PARAMS = {"train_split": "train", "eval_split": "val", "epochs": 3, "lr": 0.01, "weight_decay": 0.0,
          "batch_size": 2, "head": "linear", "target_size": 16}
DETECTION = {**PARAMS, "batch_size": 4, "tower": 1, "width": 8, "centerness": True, "radius": 1.5,
             "score_threshold": 0.05, "pre_nms_top_k": 1000, "nms_iou": 0.5, "max_detections": 100}


@pytest.mark.parametrize(("task", "head"), [("depth", "linear"), ("semantic_segmentation", "dpt")])
def test_dense_probe_on_the_cpu_explicitly_is_the_default(scenes, fake_dense_features, task, head):
    spec = get_probe(task)
    params = {**PARAMS, "head": head}
    default = spec.run(ProbeInputs(scenes, fake_dense_features(scenes), params, seed=0))
    explicit = spec.run(ProbeInputs(scenes, fake_dense_features(scenes), params, seed=0, device="cpu"))
    _equal_results(default, explicit)
    rescored = spec.score_head(ProbeInputs(scenes, fake_dense_features(scenes), params, seed=0, device="cpu"),
                               default.head)
    assert rescored.metrics == {k: v for k, v in default.metrics.items() if k != "train_loss"}


def test_detection_on_the_cpu_explicitly_is_the_default(scenes, fake_dense_features):
    default = DETECTION_PROBE.run(ProbeInputs(scenes, fake_dense_features(scenes), DETECTION, seed=0))
    explicit = DETECTION_PROBE.run(ProbeInputs(scenes, fake_dense_features(scenes), DETECTION, seed=0, device="cpu"))
    _equal_results(default, explicit)


def _finetune_inputs(**device) -> ProbeInputs:
    from harness.backbones import create_backbone

    rng = np.random.default_rng(5)
    items = [Item(f"f{i}.png", f"{i:064d}", "train" if i < 12 else "val", i % 3) for i in range(18)]
    table = {i.path: rng.normal(size=(32, 16, 16)).astype(np.float32) for i in items}
    rebuild = {"name": "cifar_resnet20@random", "identity": create_backbone("cifar_resnet20@random").identity,
               "precision": "fp32", "seed": 0, "checkpoint": None}
    return ProbeInputs(Manifest("f", "/nowhere", items, ["a", "b", "c"]), lambda item: table[item.path], FINETUNE,
                       seed=0, backbone=rebuild, **device)


def test_finetune_on_the_cpu_explicitly_is_the_default():
    spec = get_probe("finetune_classification")
    default, explicit = spec.run(_finetune_inputs()), spec.run(_finetune_inputs(device="cpu"))
    _equal_results(default, explicit)
    rescored = spec.score_head(_finetune_inputs(device="cpu"), default.head)
    assert rescored.metrics == {k: v for k, v in default.metrics.items() if k != "train_top1"}


# -- a GPU, where there is one ------------------------------------------------------------------------

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@CUDA
def test_dense_training_on_cuda_starts_from_the_cpu_initialisation_and_comes_back():
    stream = _stream("edge")

    def build() -> torch.nn.Module:
        return build_head("dpt", CHANNELS, 1, [0.2])

    torch.manual_seed(3)
    initial = build().state_dict()
    on_cuda = train_head(build, stream, dense.EDGE.loss, size=SIZE, epochs=1, lr=0.0, weight_decay=0.0, seed=3,
                         layer_channels=CHANNELS, device="cuda")
    assert all(p.device.type == "cuda" for p in on_cuda.head.parameters())
    for name, value in on_cuda.head.state_dict().items():  # lr 0: the CPU-built bits, moved unchanged
        assert torch.equal(value.cpu(), initial[name]), name
    on_cpu = train_head(build, stream, dense.EDGE.loss, size=SIZE, epochs=1, lr=0.0, weight_decay=0.0, seed=3,
                        layer_channels=CHANNELS)
    assert on_cuda.train_loss == pytest.approx(on_cpu.train_loss, rel=1e-5)


@CUDA
def test_probes_run_end_to_end_on_cuda(scenes, fake_dense_features):
    cpu = get_probe("depth").run(ProbeInputs(scenes, fake_dense_features(scenes), PARAMS, seed=0))
    gpu = get_probe("depth").run(ProbeInputs(scenes, fake_dense_features(scenes), PARAMS, seed=0, device="cuda:0"))
    assert gpu.metrics.keys() == cpu.metrics.keys() and all(np.isfinite(v) for v in gpu.metrics.values())
    assert gpu.metrics["train_loss"] == pytest.approx(cpu.metrics["train_loss"], rel=1e-3)
    assert all(isinstance(v, np.ndarray) for v in gpu.head.tensors.values())
    rescored = get_probe("depth").score_head(
        ProbeInputs(scenes, fake_dense_features(scenes), PARAMS, seed=0, device="cuda:0"), gpu.head)
    assert rescored.metrics["delta1"] == pytest.approx(gpu.metrics["delta1"], abs=1e-6)
    found = DETECTION_PROBE.run(ProbeInputs(scenes, fake_dense_features(scenes), DETECTION, seed=0, device="cuda:0"))
    assert np.isfinite(found.metrics["train_loss"]) and 0 <= found.metrics["voc_map50"] <= 1
    tuned = get_probe("finetune_classification").run(_finetune_inputs(device="cuda:0"))
    assert 0 <= tuned.metrics["top1"] <= 1
