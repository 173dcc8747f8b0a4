"""The pure helpers of benchmarks/vs_visbench.py (benchmarks/side_by_side.py); the benchmark itself is not a test."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))  # as when a benchmark runs: its imports (the runner) are beside it
_SPEC = importlib.util.spec_from_file_location("side_by_side", BENCHMARKS / "side_by_side.py")
side_by_side = sys.modules.setdefault("side_by_side", importlib.util.module_from_spec(_SPEC))
_SPEC.loader.exec_module(side_by_side)


def _folder(root: Path, counts: dict[str, int]) -> Path:
    for name, count in counts.items():
        (root / name).mkdir(parents=True)
        for index in reversed(range(count)):  # created out of order: the layout must sort by name
            (root / name / f"{index:04d}.jpg").write_bytes(b"x")
        (root / name / "notes.txt").write_text("not an image")
    (root / ".hidden").mkdir()
    return root


def test_layout_takes_the_first_per_class_by_name_for_train_and_the_next_for_val(tmp_path):
    layout = side_by_side.split_layout(_folder(tmp_path / "src", {"cat": 5, "dog": 4}), per_class=2)
    assert [f"{split}/{cls}/{image.name}" for split, cls, image in layout] == [
        "train/cat/0000.jpg", "train/cat/0001.jpg", "val/cat/0002.jpg", "val/cat/0003.jpg",
        "train/dog/0000.jpg", "train/dog/0001.jpg", "val/dog/0002.jpg", "val/dog/0003.jpg",
    ]
    side_by_side.write_layout(layout, tmp_path / "out")
    assert sorted(p.relative_to(tmp_path / "out").as_posix() for p in (tmp_path / "out").rglob("*.jpg"))[:2] == [
        "train/cat/0000.jpg", "train/cat/0001.jpg"]


def test_layout_refuses_a_class_too_small_for_both_splits(tmp_path):
    with pytest.raises(ValueError, match="dog holds 3 images; 2 splits × 2 need 4"):
        side_by_side.split_layout(_folder(tmp_path, {"cat": 4, "dog": 3}), per_class=2)


def test_constraints_keep_our_pins_except_those_visbench_excludes():
    lock = ("# comment\ntorch==2.14.1 \\\n    --hash=sha256:ab\npillow==13.0.0 \\\n    --hash=sha256:cd\n"
            "Scikit_Learn==1.9.1\n    # via visbench-harness\n")
    pins = side_by_side.lock_pins(lock)
    assert pins == {"torch": "2.14.1", "pillow": "13.0.0", "scikit-learn": "1.9.1"}
    text, dropped = side_by_side.constraints_for(pins, ["pillow<12.0,>=9.0", "torch<3.0,>=2.0", "scipy<2"])
    assert text == "scikit-learn==1.9.1\ntorch==2.14.1\n"
    assert dropped == ["pillow==13.0.0 (visbench requires pillow<12.0,>=9.0)"]
