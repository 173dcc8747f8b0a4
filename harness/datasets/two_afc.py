"""Two-alternative forced-choice (2AFC) similarity triplets: the shared triplet record, and NIGHTS.

Triplet convention (every 2AFC kind: `nights` here, `distortion_2afc` in `distortion_2afc.py`):
`manifest.extra` holds

    "triplets":    [{"id": str, "ref": path, "left": path, "right": path, "split": str,
                     "left_vote": float, "right_vote": float, "votes": int, ...kind-specific fields}]
    "reference":   what the judgements are: "nights" (human votes) or "distortion-order" (by construction)
    "human_votes": whether `votes` counts human judgements (the probe's `min_votes` filters only those)

`ref`/`left`/`right` are item paths (relative to `manifest.root`); `left` is NIGHTS' distortion "0" and
`right` its distortion "1". `left_vote`/`right_vote` are the share (or count) of judgements that found that
side more similar to the reference; `votes` is how many judgements there were. The probe scores a triplet by
the majority side, so shares and counts read alike.

NIGHTS layout read (the release of https://github.com/ssundaram21/dreamsim, `dataset/README.md`), `root`
being the `nights/` folder:

    data.csv                   one row per triplet; columns read: id, left_vote, right_vote, votes, ref_path,
                               left_path, right_path, split (train | val | test), is_imagenet (True | False);
                               others (prompt, seeds) are ignored
    ref/<ddd>/<nnn>.png        the reference
    distort/<ddd>/<nnn>_0.png  distortion 0 (left_path)
    distort/<ddd>/<nnn>_1.png  distortion 1 (right_path)

Images stay in `root` (not copied); items are every image the selected triplets name, with its content hash.
Terms: NIGHTS is released under the DreamSim repository's license; cite Fu, Tamir, Sundaram, Chai, Zhang,
Dekel, Isola, "DreamSim: Learning New Dimensions of Human Visual Similarity using Synthetic Data", NeurIPS 2023.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path, PurePosixPath

from harness.core.hashing import sha256_file
from harness.datasets.dense_targets import natural_key
from harness.datasets.kinds import DATASET_KINDS
from harness.datasets.manifest import Item, Manifest

# Which side of a triplet is right, and why: human votes (NIGHTS), the weaker of two strengths of one distortion,
# or the side that keeps the scene's structure against one with lower pixel MSE (`structure_2afc.py`).
NIGHTS, DISTORTION_ORDER, STRUCTURE_OVER_PIXELS = "nights", "distortion-order", "structure-over-pixels"
NIGHTS_SPLITS = ("train", "val", "test")
NIGHTS_COLUMNS = ("id", "left_vote", "right_vote", "votes", "ref_path", "left_path", "right_path", "split",
                  "is_imagenet")
NIGHTS_SOURCE = (
    "NIGHTS (Novel Image Generations with Human-Tested Similarities), github.com/ssundaram21/dreamsim; cite Fu "
    "et al., 'DreamSim: Learning New Dimensions of Human Visual Similarity using Synthetic Data', NeurIPS 2023"
)
_TRUE, _FALSE = {"true", "1"}, {"false", "0"}


class NightsFormatError(ValueError):
    pass


def read_nights_csv(csv_path: Path) -> list[dict]:
    """Every row of NIGHTS' data.csv as a triplet record (paths as written, relative to the csv's folder)."""
    with open(csv_path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in NIGHTS_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise NightsFormatError(f"{csv_path}: missing column(s) {', '.join(missing)}; "
                                    f"NIGHTS' data.csv has {', '.join(NIGHTS_COLUMNS)}")
        triplets, seen = [], {}
        for row in reader:
            where = f"{csv_path}:{reader.line_num}"
            triplet = _parse_row(row, where)
            if triplet["id"] in seen:
                raise NightsFormatError(f"{where}: id {triplet['id']!r} repeats line {seen[triplet['id']]}")
            seen[triplet["id"]] = reader.line_num
            triplets.append(triplet)
    return triplets


def _parse_row(row: dict, where: str) -> dict:
    if None in row or any(row[c] is None for c in NIGHTS_COLUMNS):
        raise NightsFormatError(f"{where}: the row does not have one value per column")
    try:
        left_vote, right_vote, votes = float(row["left_vote"]), float(row["right_vote"]), float(row["votes"])
    except ValueError:
        raise NightsFormatError(f"{where}: left_vote, right_vote and votes must be numbers; got "
                                f"{row['left_vote']!r}, {row['right_vote']!r}, {row['votes']!r}") from None
    if not (all(math.isfinite(v) and v >= 0 for v in (left_vote, right_vote, votes)) and votes.is_integer()):
        raise NightsFormatError(f"{where}: votes must be a count and left_vote/right_vote non-negative; got "
                                f"{row['left_vote']!r}, {row['right_vote']!r}, {row['votes']!r}")
    flag = row["is_imagenet"].strip().lower()
    if flag not in _TRUE | _FALSE:
        raise NightsFormatError(f"{where}: is_imagenet must be True or False; got {row['is_imagenet']!r}")
    triplet_id = row["id"].strip()
    if not triplet_id:
        raise NightsFormatError(f"{where}: empty id")
    paths = {side: _relative_path(row[f"{side}_path"], where) for side in ("ref", "left", "right")}
    return {"id": triplet_id, **paths, "split": row["split"].strip(), "left_vote": left_vote,
            "right_vote": right_vote, "votes": int(votes), "is_imagenet": flag in _TRUE}


def _relative_path(value: str, where: str) -> str:
    path = PurePosixPath(value.strip())
    if not value.strip() or path.is_absolute() or ".." in path.parts:
        raise NightsFormatError(f"{where}: image path {value!r} must be relative to the dataset folder")
    return str(path)


@DATASET_KINDS.register("nights")
def prepare_nights(
    name: str, out_dir: Path, root: str, splits: list[str] | tuple[str, ...] = ("test",),
    limit_per_split: int | None = None,
) -> Manifest:
    """Index the triplets of `splits` in `root/data.csv` and hash every image they name."""
    base = Path(root)
    csv_path = base / "data.csv"
    if not csv_path.is_file():
        raise FileNotFoundError(f"dataset {name}: {csv_path} not found (set datasets.{name}.root to the nights/ "
                                f"folder of the NIGHTS release)")
    unknown = sorted(set(splits) - set(NIGHTS_SPLITS))
    if unknown or not splits:
        raise ValueError(f"nights splits are {', '.join(NIGHTS_SPLITS)}; got {list(splits)}")
    chosen = sorted(set(splits), key=NIGHTS_SPLITS.index)
    rows = read_nights_csv(csv_path)
    triplets = []
    for split in chosen:
        in_split = sorted((t for t in rows if t["split"] == split), key=lambda t: natural_key(t["id"]))
        if not in_split:
            raise NightsFormatError(f"{csv_path}: no triplet of split {split!r}")
        triplets += in_split if limit_per_split is None else in_split[: int(limit_per_split)]
    items: dict[str, Item] = {}
    for triplet in triplets:
        for side in ("ref", "left", "right"):
            rel = triplet[side]
            if rel in items:
                if items[rel].split != triplet["split"]:
                    raise NightsFormatError(f"{csv_path}: {rel} is named by triplets of splits "
                                            f"{items[rel].split} and {triplet['split']}")
                continue
            file = base / rel
            if not file.is_file():
                raise FileNotFoundError(f"{csv_path}: triplet {triplet['id']} names {rel}, which is not under {base}")
            items[rel] = Item(rel, sha256_file(file), triplet["split"])
    params = {"splits": chosen, "limit_per_split": limit_per_split, "selection": "first-n-ids-natural-order",
              "source": NIGHTS_SOURCE}
    extra = {"triplets": triplets, "reference": NIGHTS, "human_votes": True}
    return Manifest(name, root, list(items.values()), [], params, extra)
