"""The leaderboard: the record corpus loaded into DuckDB, ranked per comparability group, given
uncertainty from the runs' per-sample scores (`statistics`, `analysis`), and rendered as the Markdown
pages and SVG figures of the mkdocs site. Everything here is a pure function of the corpus and those
per-sample files."""

from harness.leaderboard.queries.comparability import (
    COMPARABILITY_FIELDS,
    ComparabilityError,
    check_comparable,
    comparability_key,
)
from harness.leaderboard.queries.db import boards, connect_corpus
from harness.leaderboard.queries.summaries import backbone_summary, failed_runs, task_summary
from harness.leaderboard.site.build import GENERATED_HEADER, render_site, rendered_pages

__all__ = [
    "COMPARABILITY_FIELDS",
    "GENERATED_HEADER",
    "ComparabilityError",
    "backbone_summary",
    "boards",
    "check_comparable",
    "comparability_key",
    "connect_corpus",
    "failed_runs",
    "render_site",
    "rendered_pages",
    "task_summary",
]
