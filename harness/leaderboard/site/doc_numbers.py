"""Numbers in hand-written docs, taken from the corpus or a benchmark's results file instead of typed by hand.

A hand-written page (README.md, docs/protocols.md, docs/api.md, …) writes a measured number inside a marker that
names its source; the value between the markers is what this module computes from it:

    <!--vb run;bsds500-edge_bsds@sobel;ods_f;.3f-->0.564<!--/vb-->      a metric of a committed record
    <!--vb count;structure_2afc-similarity@efficientnet_lite0-->192<!--/vb-->   its number of evaluation samples
    <!--vb bench;hed_bsds_anchor;ODS F;.3f-->0.727<!--/vb-->           a benchmark measurement's median
    <!--vb ratio;cpu_precision;resnet18: int8 (x86) ÷ fp32;.1f-->15.8<!--/vb-->   a benchmark ratio
    <!--vb detail;hed_bsds_anchor;ODS F;images-->40<!--/vb-->          a detail a measurement records
    <!--vb grids-->| grid | … |<!--/vb-->                              the grids of params.yaml, as a table

(`bench` and `ratio` read `benchmarks/results/<bench>-<machine>.json`, the first machine's file by name.) The
markers are HTML comments, invisible on the site and on GitHub. tests/test_doc_numbers.py fails when a marked
value differs from its source or a source is missing, so a page cannot contradict the corpus; after a re-run
that moves a number, `python -m harness.leaderboard.site.doc_numbers` rewrites the marked values in place.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from harness.core import paths
from harness.core.run_key import BackboneRef
from harness.leaderboard.sources.references import medians, results_files
from harness.runs.records import Record, read_records

MARKER = re.compile(r"<!--vb (?P<source>[^>]*?)-->(?P<value>.*?)<!--/vb-->", re.DOTALL)
# the hand-written pages that quote measurements, relative to the project root
PAGES = ("README.md", "docs/protocols.md", "docs/api.md", "docs/reproduce.md")


class SourceError(ValueError):
    """A marker whose source names nothing that exists."""


def value_of(source: str, corpus: dict[str, Record], root: Path) -> str:
    """The text a marker's source gives."""
    kind, *args = source.split(";")
    if kind in ("run", "count"):
        run_id = args[0]
        if run_id not in corpus:
            raise SourceError(f"no committed record {run_id!r}")
        record = corpus[run_id]
        if kind == "count":
            return f"{record.samples.count if record.samples else record.dataset.size:,}"
        metric, form = args[1], args[2] if len(args) > 2 else ".3f"
        if metric not in record.metrics:
            raise SourceError(f"{run_id} has no metric {metric!r}")
        return format(record.metrics[metric], form)
    if kind in ("bench", "ratio", "detail"):
        bench, name, form = args[0], args[1], args[2] if len(args) > 2 else ".3f"
        files = results_files(root, bench)
        if not files:
            raise SourceError(f"no results file of benchmark {bench!r} in {root / 'benchmarks/results'}")
        if kind in ("bench", "detail"):
            measured = medians(files[0])
            if name not in measured:
                raise SourceError(f"{files[0]['path']} has no measurement {name!r}")
            if kind == "detail":
                if form not in measured[name][1]:
                    raise SourceError(f"{files[0]['path']}: measurement {name!r} records no {form!r}")
                return str(measured[name][1][form])
            return format(measured[name][0], form)
        ratios = {r.get("name"): r.get("value") for r in files[0].get("ratios", []) if isinstance(r, dict)}
        if name not in ratios:
            raise SourceError(f"{files[0]['path']} has no ratio {name!r}")
        return format(ratios[name], form)
    if kind == "grids":
        return "\n" + "\n".join(grid_table(yaml.safe_load((root / "params.yaml").read_text(encoding="utf-8")))) + "\n"
    raise SourceError(f"unknown source kind {kind!r} (run, count, bench, ratio, detail, grids)")


_DATA_KEYS = ("root", "source")  # a dataset spec's keys naming a folder it reads (harness.datasets.kinds)


def _setting(value: Any) -> str:
    return json.dumps(value, separators=(", ", ": ")) if isinstance(value, list | dict) else str(value)


def grid_table(params: dict[str, Any]) -> list[str]:
    """Every grid of `params` (params.yaml as loaded) as a Markdown table: its backbones, its tasks with the dataset
    each reads, the probe settings it overrides, and the data it needs (a folder to point at, or another grid's
    features); generated, so the README never lists a shape the grids do not have."""
    lines = ["| grid | backbones | tasks (dataset) | settings | data it reads |", "|---|---|---|---|---|"]
    for name, grid in params["grids"].items():
        backbones = ", ".join(BackboneRef.parse(b).name for b in grid["backbones"])
        tasks = ", ".join(f"{task} ({dataset})" for task, dataset in grid["tasks"].items())
        settings = dict.fromkeys(f"{key}: {_setting(value)}" for block in (grid.get("probes") or {}).values()
                                 for key, value in block.items())
        for key, value in (grid.get("fewshot") or {}).items():
            settings[f"few-shot {key}: {_setting(value)}"] = None
        data = []
        for dataset in dict.fromkeys(grid["tasks"].values()):
            source = (grid.get("features_from") or {}).get(dataset)
            spec = params["datasets"].get(dataset, {})
            folder = next((spec[key] for key in _DATA_KEYS if spec.get(key)), None)
            data.append(f"{dataset}: the `{source}` grid's features" if source
                        else f"{dataset}: `{folder}`" if folder else f"{dataset}: bundled or generated")
        lines.append(f"| `{name}` | {backbones} | {tasks} | {'; '.join(settings) or '—'} | {'; '.join(data)} |")
    return lines


def fill(text: str, corpus: dict[str, Record], root: Path) -> str:
    """`text` with every marker's value recomputed from its source."""
    def replace(match: re.Match) -> str:
        source = match["source"]
        return f"<!--vb {source}-->{value_of(source, corpus, root)}<!--/vb-->"

    return MARKER.sub(replace, text)


def load_corpus(root: Path) -> dict[str, Record]:
    return {r.run_id: r for r in read_records(root / paths.CORPUS)}


def main(argv: list[str] | None = None) -> int:
    """Rewrite the marked values of the hand-written pages from the corpus and the benchmarks' results."""
    root = Path(".")
    corpus = load_corpus(root)
    for name in PAGES:
        page = root / name
        text = page.read_text(encoding="utf-8")
        filled = fill(text, corpus, root)
        if filled != text:
            page.write_text(filled, encoding="utf-8")
            print(f"{page}: numbers rewritten from their sources")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
