"""How much faster than fp32 could a reduced-precision forward pass be on this CPU? (issue 15's "≥ 2× at reduced
precision"). It measures images/s of each variant and its ratio against fp32 on the same module, the same batch.

    .venv/bin/python benchmarks/cpu_precision.py                         # timm resnet18 (batch 8), lite0 (batch 4)
    .venv/bin/python benchmarks/cpu_precision.py --models efficientnet_lite0:4 --reps 5

Each module is timm's, built as the harness builds it (random init: speed does not depend on the weights), in
channels_last at 224², under `torch.inference_mode`; the variants are interleaved (benchmarks/runner.py), each
sample three forward passes after one warm-up. Variants:
- fp32: what `settings.precision: fp32` runs;
- fp32, conv+BN folded (torch.fx's `fuse`): a speed-up the harness does not take, since the features change in
  the last bits and every committed extraction would re-run;
- bf16: what `settings.precision: bf16` runs (weights cast), emulated on a CPU without bf16 instructions;
- int8: post-training static quantization (torch.ao FX, per quantized engine available here, calibrated on the
  same random batch): what an int8 path would be at best; the harness offers none. The cosine similarity of its
  pooled output with fp32's (`min_cosine_vs_fp32`) says how far the numbers move.
The CPU's bf16 flags (harness.cli.cpu_bf16) and the matmul rate per dtype (the physical limit vs_visbench's
FLOP-bound limit uses) are recorded with them. Writes benchmarks/results/cpu_precision-<machine>.json.
"""

from __future__ import annotations

import argparse
import copy
import warnings
from collections.abc import Callable

import torch
from runner import Bench, add_results_argument, matmul

from harness.cli.cpu_bf16 import native_bf16_cpu

Forward = Callable[[torch.Tensor], torch.Tensor]
PASSES = 3  # forward passes per sample


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


def measure(bench: Bench, model_name: str, batch_size: int, reps: int) -> None:
    import timm

    torch.manual_seed(0)
    model = timm.create_model(model_name, pretrained=False, num_classes=0).eval()
    model = model.to(memory_format=torch.channels_last)
    batch = torch.randn(batch_size, 3, 224, 224).contiguous(memory_format=torch.channels_last)
    found = variants(model, batch)
    label = {variant: f"{model_name} batch {batch_size}: {variant}" for variant in found}

    def passes(forward: Forward, inputs: torch.Tensor) -> None:
        with torch.inference_mode():
            for _ in range(PASSES):
                forward(inputs)

    # warm-up: oneDNN primitives and packed weights are made on the first call
    bench.interleave({label[v]: (lambda f=f, x=x: passes(f, x)) for v, (f, x) in found.items()}, reps, warmup=1,
                     work=PASSES * batch_size, unit="img/s")
    with torch.inference_mode():
        reference = model(batch).float()
        for variant, (forward, inputs) in found.items():
            similarity = torch.nn.functional.cosine_similarity(forward(inputs).float(), reference).min().item()
            bench.describe(label[variant], model=model_name, batch=batch_size, variant=variant,
                           min_cosine_vs_fp32=similarity)
            if variant != "fp32":
                bench.ratio(f"{model_name}: {variant} ÷ fp32", label[variant], label["fp32"])
    print("  ".join(f"{v} {bench.median(label[v]):.1f} img/s" for v in found), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="resnet18:8,efficientnet_lite0:4", help="timm model:batch, ...")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=3)
    add_results_argument(parser)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    bench = Bench("cpu_precision")
    flags = {True: "has bf16 instructions", False: "no bf16 instructions", None: "bf16 support unknown"}
    bench.note(f"this CPU: {flags[native_bf16_cpu()]} (harness.cli.cpu_bf16); {args.threads} threads, 224² inputs")
    fp32 = matmul(bench, "fp32", 2048, 5)
    bf16 = matmul(bench, "bf16", 512, 3)
    bench.ratio("bf16 matmul ÷ fp32 matmul (GFLOP/s)", bf16, fp32)
    for spec in args.models.split(","):
        name, _, batch = spec.partition(":")
        measure(bench, name, int(batch or 8), args.reps)
    bench.write(args.results)


if __name__ == "__main__":
    main()
