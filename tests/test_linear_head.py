"""The NumPy linear head (protocol linear-probe-adamw/v3) against the same recipe in torch: softmax
cross-entropy and torch.optim.AdamW, from the same initial weights over the same batches. They agree to float32
rounding, not bit for bit (different matrix kernels and exp), which is why v3 is a new protocol version. And the
classification probe's macro-F1 against sklearn, exactly."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.metrics import f1_score

from harness.probes import resampled
from harness.probes.linear_head import LinearHead, fit, train_linear_head
from harness.probes.statistics.classification import macro_f1_name


def _data(seed: int = 0, n: int = 64, d: int = 17, k: int = 5):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    x = (rng.normal(size=(n, d)) + np.eye(k, d)[y] * 2).astype(np.float32)
    head = LinearHead(rng.uniform(-0.2, 0.2, (k, d)).astype(np.float32), rng.uniform(-0.2, 0.2, k).astype(np.float32))
    batches = [rng.permutation(n)[:16] for _ in range(160)]
    return x, y, head, batches


def _torch_reference(x, y, head: LinearHead, batches, lr: float, weight_decay: float) -> LinearHead:
    linear = torch.nn.Linear(x.shape[1], head.weight.shape[0])
    with torch.no_grad():
        linear.weight.copy_(torch.from_numpy(head.weight))
        linear.bias.copy_(torch.from_numpy(head.bias))
    optimiser = torch.optim.AdamW(linear.parameters(), lr=lr, weight_decay=weight_decay)
    features, labels = torch.from_numpy(x), torch.from_numpy(y)
    for batch in batches:
        index = torch.from_numpy(batch)
        loss = torch.nn.functional.cross_entropy(linear(features[index]), labels[index])
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    return LinearHead(linear.weight.detach().numpy(), linear.bias.detach().numpy())


@pytest.mark.parametrize("weight_decay", [0.0, 1e-4, 0.05])
def test_numpy_adamw_training_is_torchs_recipe_to_float32_rounding(weight_decay):
    x, y, start, batches = _data()
    theirs = _torch_reference(x, y, start, batches, lr=0.01, weight_decay=weight_decay)
    ours = fit(LinearHead(start.weight.copy(), start.bias.copy()), x, y, batches, lr=0.01, weight_decay=weight_decay)
    assert not np.allclose(ours.weight, start.weight, atol=1e-3)  # 160 steps moved it
    np.testing.assert_allclose(ours.weight, theirs.weight, rtol=0, atol=2e-5)
    np.testing.assert_allclose(ours.bias, theirs.bias, rtol=0, atol=2e-5)
    np.testing.assert_array_equal(ours.logits(x).argmax(1), theirs.logits(x).argmax(1))


def test_training_is_a_function_of_the_seed():
    x, y, _, _ = _data()
    train = [train_linear_head(x, y, 5, epochs=3, lr=0.01, weight_decay=1e-4, batch_size=8, seed=seed)
             for seed in (0, 0, 1)]
    assert np.array_equal(train[0].weight, train[1].weight) and np.array_equal(train[0].bias, train[1].bias)
    assert not np.array_equal(train[0].weight, train[2].weight)
    assert train[0].weight.dtype == np.float32


def test_the_initial_head_is_torch_linears_distribution():
    # torch.nn.Linear: weight and bias uniform in ±1/√fan_in; zero epochs return the initial head
    x = np.zeros((4, 400), np.float32)
    head = train_linear_head(x, np.zeros(4, np.int64), 3, epochs=0, lr=0.1, weight_decay=0, batch_size=2, seed=0)
    assert np.abs(head.weight).max() <= 1 / 20 and np.abs(head.weight).max() > 0.9 / 20
    assert np.abs(head.bias).max() <= 1 / 20


@pytest.mark.parametrize("seed", range(6))
def test_macro_f1_equals_sklearn_including_absent_classes(seed):
    rng = np.random.default_rng(seed)
    classes = 7
    labels = rng.integers(0, classes - 2, size=50)  # the last two classes never occur in the labels …
    predictions = np.where(rng.random(50) < 0.5, labels, rng.integers(0, classes - 1, size=50))  # … one predicted
    expected = f1_score(labels, predictions, average="macro", labels=np.arange(classes), zero_division=0)
    columns = {"label": labels.astype(float), "predicted": predictions.astype(float)}
    got = resampled.evaluate(macro_f1_name(classes), columns)[0]
    assert got == pytest.approx(expected, rel=1e-15, abs=0)


def test_a_classification_stage_never_imports_torch_and_fingerprints_as_one_that_does(image_project):
    """The point of v3: the stage's process imports no torch (1.6 s of a 2.2 s cached stage), and its record's
    environment names the same torch, CUDA runtime and device as a process that imported torch."""
    import json
    import subprocess
    import sys

    from harness.core.config import load_params
    from harness.runs.environment import environment_fingerprint
    from harness.stages import calls as stages

    project, _ = image_project
    params = load_params()
    stages.prepare("tiny", params)
    stages.extract("g", "cifar_resnet20.random", "tiny", params)
    code = ("import sys; from harness.stages import probe; rc = probe.main(['g', 'classification', "
            "'cifar_resnet20.random', '--code', 'harness/probes/classification.py', '--dataset', 'tiny', "
            "'--features', 'g']); print('torch imported:', 'torch' in sys.modules); sys.exit(rc)")
    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(repo)}
    out = subprocess.run([sys.executable, "-c", code], cwd=project, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "torch imported: False" in out.stdout
    record = json.loads((project / "results" / "g" / "classification" / "cifar_resnet20.random.json").read_text())
    assert record["protocol"] == "linear-probe-adamw/v3"
    with_torch = environment_fingerprint().model_dump()  # this test process has imported torch
    for field in ("torch", "cuda", "numpy", "python"):
        assert record["environment"][field] == with_torch[field], field
    assert record["environment"]["device"].startswith("cpu:") or torch.cuda.is_available()


def test_a_diverged_head_is_an_error_not_chance_level_metrics():
    x, y, start, batches = _data()
    with np.errstate(all="ignore"), pytest.raises(ValueError, match=r"diverged .* at lr=1e\+30\): lower probes"):
        fit(LinearHead(start.weight.copy(), start.bias.copy()), x, y, batches, lr=1e30, weight_decay=1e-4)
