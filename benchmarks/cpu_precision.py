"""How much faster than fp32 could a reduced-precision forward pass be on this CPU? (issue 15's "≥ 2× at reduced
precision"). Not a test: it prints images/s and ratios against fp32 on the same module, the same batch.

    .venv/bin/python benchmarks/cpu_precision.py                       # timm resnet18 (random init), 2 threads
    .venv/bin/python benchmarks/cpu_precision.py --model efficientnet_lite0 --batch 4

The module is timm's, built as the harness builds it (random init: speed does not depend on the weights), in
channels_last at 224², under `torch.inference_mode`, interleaved, medians of --reps. Variants:
- fp32: what `settings.precision: fp32` runs;
- fp32, conv+BN folded (torch.fx's `fuse`): a speed-up the harness does not take, since the features change in
  the last bits and every committed extraction would re-run;
- bf16: what `settings.precision: bf16` runs (weights cast), emulated on a CPU without bf16 instructions;
- int8: post-training static quantization (torch.ao FX, per quantized engine available here, calibrated on the
  same random batch): what an int8 path would be at best; the harness offers none. The cosine similarity of its
  pooled output with fp32's says how far the numbers move.
The CPU's bf16 flags (harness.cli.cpu_bf16) and vs_visbench's matmul rate per dtype are printed with them.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's harness

from vs_visbench import matmul_rate  # the same rate vs_visbench's FLOP-bound limit uses

from harness.cli.cpu_bf16 import native_bf16_cpu

Forward = Callable[[torch.Tensor], torch.Tensor]


def images_per_second(forward: Forward, batch: torch.Tensor, repeats: int = 3) -> float:
    with torch.inference_mode():
        forward(batch)  # warm-up: oneDNN primitives and packed weights are made on the first call
        started = time.perf_counter()
        for _ in range(repeats):
            forward(batch)
    return repeats * batch.shape[0] / (time.perf_counter() - started)


def variants(model: torch.nn.Module, batch: torch.Tensor) -> dict[str, tuple[Forward, torch.Tensor]]:
    from torch.ao.quantization import get_default_qconfig_mapping
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx
    from torch.fx.experimental.optimization import fuse

    found = {"fp32": (model, batch), "fp32, conv+BN folded": (fuse(model), batch)}
    bf16 = copy.deepcopy(model).to(torch.bfloat16)
    found["bf16 (weights cast)"] = (bf16, batch.to(torch.bfloat16))
    for engine in ("x86", "onednn", "fbgemm"):
        if engine not in torch.backends.quantized.supported_engines:
            continue
        torch.backends.quantized.engine = engine
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch.ao's deprecation notice (torchao is its successor)
            prepared = prepare_fx(copy.deepcopy(model), get_default_qconfig_mapping(engine),
                                  (batch[:1],))
            with torch.inference_mode():
                prepared(batch)  # calibration: the observers see one batch
            quantized = convert_fx(prepared)

        def run(x: torch.Tensor, quantized: torch.nn.Module = quantized, engine: str = engine) -> torch.Tensor:
            torch.backends.quantized.engine = engine
            return quantized(x)

        found[f"int8 ({engine})"] = (run, batch)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resnet18", help="a timm model name")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    import timm

    model = timm.create_model(args.model, pretrained=False, num_classes=0).eval()
    model = model.to(memory_format=torch.channels_last)
    batch = torch.randn(args.batch, 3, 224, 224).contiguous(memory_format=torch.channels_last)
    found = variants(model, batch)
    rates: dict[str, list[float]] = {name: [] for name in found}
    for _ in range(args.reps):  # interleaved, so a slow minute of the machine hits every variant alike
        for name, (forward, inputs) in found.items():
            rates[name].append(images_per_second(forward, inputs))
    with torch.inference_mode():
        reference = model(batch).float()
        similarity = {name: torch.nn.functional.cosine_similarity(forward(inputs).float(), reference).min().item()
                      for name, (forward, inputs) in found.items()}

    flags = {True: "has bf16 instructions", False: "no bf16 instructions", None: "bf16 support unknown"}
    print(f"{args.model}, batch {args.batch}, 224², {args.threads} threads, torch {torch.__version__}; this CPU: "
          f"{flags[native_bf16_cpu()]}")
    print(f"matmul GFLOP/s: fp32 (2048²) {matmul_rate('fp32', 2048, 5) / 1e9:.1f}, "
          f"bf16 (512²) {matmul_rate('bf16', 512, 3) / 1e9:.1f}")
    fp32 = statistics.median(rates["fp32"])
    print(f"{'variant':<24} {'img/s':>8} {'vs fp32':>8} {'min cosine vs fp32':>19}")
    for name, measured in rates.items():
        rate = statistics.median(measured)
        print(f"{name:<24} {rate:8.1f} {rate / fp32:7.2f}× {similarity[name]:19.6f}")


if __name__ == "__main__":
    main()
