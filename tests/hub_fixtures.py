"""Seeded random weights written in the upstream formats, and a Hugging Face hub cache that holds them.

Nothing here is a real release: the tensors are a seeded random init, so their SHA-256 is never a real pin's
(tests patch the pin to the fixture's digest where they mean the "matches the pin" path). What is faithful is
the layout each loader reads: timm's state dict as `model.safetensors` in a hub cache at a commit, OpenAI's
TorchScript archive (a `torch.jit.save` whose state dict has OpenAI's key names and dtypes), open_clip's state
dict, akamaster's CIFAR `.th`.
"""

from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path

import torch
from torch import nn

from harness.core.hashing import sha256_file

# What OpenAI's TorchScript CLIPs hold besides the weights (scalar tensors; open_clip's loader drops them).
OPENAI_EXTRA_STATE = {"input_resolution": 224, "context_length": 77, "vocab_size": 49408}


def write_hub_file(hub: Path, repo_id: str, revision: str, filename: str, source: Path) -> Path:
    """Put `source` in the hub cache `hub` (what HF_HUB_CACHE names) as `repo_id`'s `filename` at commit
    `revision`, laid out as huggingface_hub writes a download: the bytes in `blobs/<etag>` (an LFS file's etag is
    its SHA-256), `snapshots/<revision>/<filename>` a relative symlink to the blob, `refs/main` the commit."""
    repo = hub / f"models--{repo_id.replace('/', '--')}"
    blob = repo / "blobs" / sha256_file(source)
    blob.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, blob)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(revision)  # no newline, as huggingface_hub writes it
    snapshot = repo / "snapshots" / revision / filename
    snapshot.parent.mkdir(parents=True, exist_ok=True)
    snapshot.symlink_to(os.path.relpath(blob, snapshot.parent))
    return snapshot


def write_timm_safetensors(model_name: str, path: Path, seed: int = 0) -> dict[str, torch.Tensor]:
    """timm's `model_name` at its default config (DINOv2: 518 px, a 37×37 position embedding) under `seed`,
    saved as the hub's `model.safetensors` is; returns the saved state dict."""
    import timm
    from safetensors.torch import save_file

    torch.manual_seed(seed)
    state = {k: v.contiguous() for k, v in timm.create_model(model_name, pretrained=False).state_dict().items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(state, str(path))
    return state


def seeded_openai_clip(config: str, seed: int = 0) -> nn.Module:
    """open_clip's `config` under `seed`, with OpenAI's dtypes: convolutions, linears, attention and projections in
    float16, the rest (embeddings, LayerNorms, logit scale) float32, as open_clip's `convert_weights_to_fp16`
    documents OpenAI's state dicts."""
    import open_clip
    from open_clip.model import convert_weights_to_lp

    torch.manual_seed(seed)
    model = open_clip.create_model(config, pretrained=None).eval()
    convert_weights_to_lp(model, torch.float16)
    return model


class _Archive(nn.Module):
    """Root of the TorchScript archive. OpenAI's archives also hold their model's compiled code; open_clip's
    loader reads only the state dict."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


def write_openai_torchscript(state: dict[str, torch.Tensor], path: Path) -> None:
    """`state` as OpenAI's release files are: `torch.jit.save` of a module whose state dict is `state` (OpenAI's key
    names: `visual.conv1.weight`, `visual.transformer.resblocks.N...`, `token_embedding.weight`, `text_projection`,
    `logit_scale`, ...) plus `input_resolution`, `context_length` and `vocab_size`. A scripted holder of the tensors,
    not open_clip's model scripted: that would add open_clip's non-persistent `attn_mask`, which OpenAI's lacks."""
    root = _Archive()
    extra = {k: torch.tensor(v) for k, v in OPENAI_EXTRA_STATE.items()}
    for name, tensor in {**state, **extra}.items():
        *parents, leaf = name.split(".")
        module: nn.Module = root
        for part in parents:
            if part not in module._modules:
                module.add_module(part, nn.Module())
            module = module._modules[part]
        if tensor.is_floating_point():
            module.register_parameter(leaf, nn.Parameter(tensor.detach().clone(), requires_grad=False))
        else:
            module.register_buffer(leaf, tensor)
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():  # torch.jit is deprecated, and still the format OpenAI published
        warnings.simplefilter("ignore")
        torch.jit.save(torch.jit.script(root), str(path))


def write_cifar_th(depth: int, path: Path, seed: int = 0) -> dict[str, torch.Tensor]:
    """A CIFAR ResNet-`depth` under `seed` as akamaster's `.th` files are: torch.save's legacy (pre-1.6) pickle of
    `{"best_prec1": ..., "state_dict": ...}` with nn.DataParallel's `module.` prefix; returns the unprefixed state."""
    from harness.backbones.cifar_resnet import CifarResNet

    torch.manual_seed(seed)
    state = CifarResNet(depth).state_dict()
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"best_prec1": 0.0, "state_dict": {f"module.{k}": v for k, v in state.items()}}, path,
               _use_new_zipfile_serialization=False)
    return state
