"""Dataset content manifests: what a dataset *is*, independent of where it lives.

The identity of a dataset is the hash of its items' content hashes, labels and splits (plus the
parameters that selected them), never a folder name: moving or renaming the folder keeps it, changing
one pixel changes it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.core.atomic import write_text_atomic
from harness.core.hashing import canonical_json, hash_json

MANIFEST_NAME = "manifest.json"


@dataclass(frozen=True)
class Item:
    path: str  # relative to the manifest's root
    sha256: str  # of the file's bytes
    split: str
    label: int | None = None


@dataclass
class Manifest:
    name: str
    root: str  # where the files are: absolute, or relative to the project root (stages run there)
    items: list[Item]
    classes: list[str] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)  # how the items were selected or made
    extra: dict[str, Any] = field(default_factory=dict)  # task data, e.g. homographies

    @property
    def identity(self) -> str:
        content = sorted((i.sha256, i.split, i.label) for i in self.items)
        return hash_json({"items": content, "classes": self.classes, "params": self.params, "extra": self.extra})

    def split(self, name: str) -> list[Item]:
        items = [i for i in self.items if i.split == name]
        if not items:
            valid = sorted({i.split for i in self.items})
            raise KeyError(f"dataset {self.name} has no split {name!r}; valid: {', '.join(valid)}")
        return items

    def resolve(self, item: Item) -> Path:
        return Path(self.root) / item.path

    def save(self, path: Path) -> None:
        payload = {**asdict(self), "identity": self.identity}
        write_text_atomic(path, json.dumps(json.loads(canonical_json(payload)), indent=1) + "\n")

    @classmethod
    def load(cls, path: Path) -> Manifest:
        payload = json.loads(Path(path).read_text())
        payload.pop("identity", None)
        payload["items"] = [Item(**i) for i in payload["items"]]
        return cls(**payload)
