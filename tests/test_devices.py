"""The device a run computes on: chosen, checked before any work, moved to, and named in records.

Without a GPU the same device code runs on the CPU and on torch's `meta` device: a meta tensor meeting a tensor
made on the CPU by mistake raises, so a forward pass that completes on meta creates nothing on the wrong device.
CUDA-only checks skip with a reason where torch sees no GPU.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from harness.backbones import create_backbone
from harness.core import devices
from harness.core.config import ConfigError
from harness.core.devices import DeviceError, describe_device, parse_device, parse_devices, resolve_device
from harness.runs.environment import device_name, environment_fingerprint
from harness.runs.extract import FeatureRequest, extract_dataset

NO_GPU = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without a CUDA GPU")
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("spec", ["gpu", "cuda:x", "cuda:", "mps0", ""])
def test_a_misspelt_device_is_one_line_naming_the_valid_ones(spec):
    with pytest.raises(DeviceError, match="valid: auto, cpu, cuda, cuda:N") as error:
        parse_device(spec)
    assert "\n" not in str(error.value)


def test_device_lists_take_indices_or_names():
    assert parse_devices("0,1") == ["cuda:0", "cuda:1"]
    assert parse_devices("cuda:1, cpu") == ["cuda:1", "cpu"]
    assert parse_device(" CUDA:3 ") == "cuda:3"
    with pytest.raises(DeviceError, match="comma-separated"):
        parse_devices("0,,1")


def test_auto_and_cpu_resolve_to_the_cpu_without_a_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(DeviceError, match=r"torch sees no CUDA GPU here.*device=cpu or device=auto"):
        resolve_device("cuda:0")


def test_a_gpu_index_beyond_the_machine_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("auto") == torch.device("cuda", 0)
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(DeviceError, match=r"has 2 CUDA GPU\(s\) \(cuda:0..cuda:1\)"):
        resolve_device("cuda:2")


def test_the_cpu_is_named_by_its_model_and_kernel_flags(tmp_path, monkeypatch):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: AMD EPYC 7B12\nflags\t\t: fpu sse avx2 fma avx512f amx_bf16\n")
    monkeypatch.setattr(devices, "CPUINFO", cpuinfo)
    devices.cpu_model.cache_clear()
    devices.cpu_kernel_flags.cache_clear()
    try:
        assert describe_device("cpu", threads=2) == "cpu:AMD EPYC 7B12:avx2,avx512f,amx_bf16:2threads"
    finally:
        devices.cpu_model.cache_clear()
        devices.cpu_kernel_flags.cache_clear()


def test_a_record_made_on_the_cpu_never_names_a_gpu_it_could_see(monkeypatch):
    """The bug this replaces: any process on a GPU host named the GPU, whatever computed."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *_: "NVIDIA Fake 9000")
    environment_fingerprint.cache_clear()
    try:
        name = device_name()
        assert name.startswith(f"cpu:{devices.cpu_model()}:") and name.endswith(f":{torch.get_num_threads()}threads")
        assert "NVIDIA" not in environment_fingerprint().device
        assert environment_fingerprint("cpu").features_device is None
    finally:
        environment_fingerprint.cache_clear()


@pytest.mark.parametrize("name", ["efficientnet_lite0@random", "resnet18@random", "cifar_resnet20@random",
                                  "dinov2_vits14@random", "clip_vitb32@random", "sobel"])
def test_every_family_extracts_on_the_meta_device(name):
    """A forward pass with the model and the images on `meta`: anything the family creates on the CPU inside
    its forward (a constant, a mask, an index) would meet meta tensors and raise."""
    backbone = create_backbone(name)
    crop = backbone.preprocess.crop
    strides = backbone.layer_strides()  # on the CPU, for the comparison below
    backbone.to_device("meta")
    assert backbone.layer_strides() == strides  # measured again, on meta
    images = torch.empty(2, 3, crop, crop, device="meta")
    out = backbone.extract_features(images, "default", None)
    assert out["dense"].device.type == "meta" and out["pooled"].device.type == "meta"
    # the default pooling (a CNN's average, a ViT's class token) is as wide as the last layer's dense map
    assert out["dense"].shape[0] == 2 and out["pooled"].shape == (2, out["dense"].shape[1])
    assert tuple(out["dense"].shape[-2:]) == out["grid_hw"]


def test_the_cpu_adds_nothing_to_an_identity_a_gpu_does(monkeypatch):
    backbone = create_backbone("cifar_resnet20@random")
    before = backbone.identity
    backbone.to_device("cpu")
    assert backbone.identity == before and "device" not in backbone.identity_spec()
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *_: "NVIDIA Fake 9000")
    backbone.device = torch.device("cuda", 0)  # as to_device would leave it, without a GPU to move to
    assert backbone.identity_spec()["device"] == "cuda:NVIDIA Fake 9000" and backbone.identity != before


def _manifest(tmp_path, count: int = 7):
    from PIL import Image

    from harness.datasets.manifest import Item, Manifest

    rng = np.random.default_rng(0)
    items = []
    for index in range(count):
        path = tmp_path / "images" / f"{index}.png"
        path.parent.mkdir(exist_ok=True)
        Image.fromarray(rng.integers(0, 255, (40, 36, 3), dtype=np.uint8)).save(path)
        items.append(Item(path=f"images/{index}.png", split="test", sha256=f"{index:064d}", label=0))
    return Manifest(name="tiny", root=str(tmp_path), items=items)


def _cached(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((out / "entries").rglob("*")) if p.is_file()}


def test_decode_workers_give_the_same_bits_as_decoding_in_process(tmp_path):
    """The GPU path's DataLoader workers (processes, a few batches ahead) hand the forward pass the same batches."""
    manifest = _manifest(tmp_path)
    backbone = create_backbone("cifar_resnet20@random")
    requests = [FeatureRequest("pooled"), FeatureRequest("dense")]
    extract_dataset(backbone, manifest, requests, tmp_path / "a", 4)
    described = extract_dataset(backbone, manifest, requests, tmp_path / "b", 4, workers=2)
    assert _cached(tmp_path / "a") == _cached(tmp_path / "b") and len(_cached(tmp_path / "a")) == 14
    assert described["timing"]["images"] == 7 and "device" not in described  # a CPU description is as before


def test_out_of_memory_halves_the_batch_and_retries(tmp_path, monkeypatch):
    """A forward pass that runs out of memory is retried at half the batch; the features are the same bits."""
    from harness.runs import extract

    manifest = _manifest(tmp_path, count=9)
    backbone = create_backbone("cifar_resnet20@random")
    extract_dataset(backbone, manifest, [FeatureRequest("pooled")], tmp_path / "a", 8)
    forward = extract._forward

    def small_memory(backbone, resolved, pixels):
        if len(next(iter(pixels.values()))) > 3:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return forward(backbone, resolved, pixels)

    monkeypatch.setattr(extract, "_forward", small_memory)
    described = extract_dataset(backbone, manifest, [FeatureRequest("pooled")], tmp_path / "b", 8)
    assert described["timing"]["batch_size_used"] == 2 and described["timing"]["images"] == 9
    assert _cached(tmp_path / "a") == _cached(tmp_path / "b")


def test_api_refuses_a_gpu_that_is_not_here_before_any_work(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("checks the error on a machine without a CUDA GPU")
    import harness

    with pytest.raises(ConfigError, match="torch sees no CUDA GPU"):
        harness.run("cifar_resnet20@random", "classification", tmp_path / "absent", device="cuda",
                    workspace=tmp_path / "ws")
    assert not (tmp_path / "ws").exists()


@NO_GPU
@pytest.mark.parametrize("args", [["device=cuda"], ["devices=0,1"], ["device=cuda:0", "task=retrieval"]])
def test_cli_refuses_a_gpu_that_is_not_here_in_one_line(args):
    out = subprocess.run([sys.executable, "-m", "harness.cli.main", *args], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "torch sees no CUDA GPU" in lines[0] and "device=cpu" in lines[0]
    assert "plan:" not in out.stdout  # refused before the plan, so before anything ran


def test_cli_refuses_device_and_devices_together():
    out = subprocess.run([sys.executable, "-m", "harness.cli.main", "device=cpu", "devices=cpu,cpu", "dry_run=true"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "not both" in out.stderr


def test_verify_says_when_a_gpu_re_run_is_compared_with_a_cpu_record():
    from harness.cli.verify import _same, device_notes, format_checks
    from harness.runs.records import read_records

    committed = next(r for r in read_records(ROOT / "leaderboard" / "corpus.jsonl") if r.status == "ok")
    gpu = committed.model_copy(update={"environment": committed.environment.model_copy(update={
        "device": "cuda:NVIDIA H200:sm_90:139.8GiB:driver 580.159.03:cuda 13.0",
        "features_device": "cuda:NVIDIA H200:sm_90:139.8GiB:driver 580.159.03:cuda 13.0"})})
    corpus = {committed.run_id: committed}
    assert device_notes(corpus, [committed], 0.0) == []  # CPU against CPU: nothing to say
    [exact] = device_notes(corpus, [gpu], 0.0)
    assert f"committed by {committed.environment.device}" in exact and "features on cuda:NVIDIA H200" in exact
    assert "declare one, e.g. tolerance=" in exact
    [within] = device_notes(corpus, [gpu], 1e-4)
    assert "within the declared tolerance 0.0001" in within
    table = format_checks([_same("run", "samples_sha256", True), _same("run", "samples_sha256", False)])
    assert "agree" in table.splitlines()[1] and "differ" in table.splitlines()[2] and "1.000000" not in table


def test_verify_holds_every_per_sample_score_to_the_tolerance_and_counts_those_beyond(tmp_path, monkeypatch):
    """A retrieval query whose near-tied neighbours swap moves its own AP far more than the mean: under a
    tolerance that covers the mean, that query is still reported, with how many samples are beyond it."""
    from harness.cli.verify import compare, format_checks
    from harness.runs.records import read_records
    from harness.runs.samples import write_samples

    committed = next(r for r in read_records(ROOT / "leaderboard" / "corpus.jsonl") if r.status == "ok")
    monkeypatch.chdir(tmp_path)  # the committed file is read from the project root, the re-run's from its own
    ids = [f"q{i}" for i in range(4)]
    mine = write_samples(tmp_path / "a.csv", ids, {"ap": np.array([0.5, 0.25, 1.0, 0.75])}, "query")
    theirs = write_samples(tmp_path / "b.csv", ids, {"ap": np.array([0.5, 0.25025, 1.0, 0.75])}, "query")
    a = committed.model_copy(update={"samples": mine.model_copy(update={"path": "a.csv"})})
    b = committed.model_copy(update={"samples": theirs.model_copy(update={"path": "b.csv"})})
    [check] = [c for c in compare(a, b, 1e-6, tmp_path) if c.metric == "samples_max_diff"]
    assert not check.ok and check.note == "1 of 4 samples beyond 1e-06"
    assert "(1 of 4 samples beyond 1e-06)" in format_checks([check])
    [wider] = [c for c in compare(a, b, 1e-3, tmp_path) if c.metric == "samples_max_diff"]
    assert wider.ok and wider.note == ""


@NO_GPU
def test_a_data_run_refuses_a_gpu_that_is_not_here_before_any_task(tmp_path, monkeypatch, capsys):
    from harness.cli.main import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "photos" / "train" / "cat").mkdir(parents=True)
    assert main(["task=classification", "backbone=cifar_resnet20@random", "data=photos", "device=cuda"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "torch sees no CUDA GPU" in err[0] and not (tmp_path / "user").exists()
