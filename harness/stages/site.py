"""`python -m harness.stages.site`: regenerate the site's pages under docs/ from the corpus (and the failed
attempts), a pure function of them."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from harness.core import paths
from harness.runs.records import read_records
from harness.stages import common

log = logging.getLogger("visbench")


def run() -> list[Path]:
    from harness.leaderboard import render_site

    failed = read_records(paths.FAILED_CORPUS) if paths.FAILED_CORPUS.is_file() else []
    written = render_site(read_records(paths.CORPUS), paths.DOCS, failures=failed)
    log.info("site: %d generated pages under %s", len(written), paths.DOCS)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.stages.site", description=__doc__)
    return common.stage_main("site", parser, lambda _: run(), argv)


if __name__ == "__main__":
    sys.exit(main())
