"""`python -m harness.stages.release v1`: freeze the leaderboard's current data as release v1.

Regenerates the site (so docs/downloads/ is the corpus's), copies docs/downloads/ to docs/releases/v1/
(refused if v1 exists: a release never changes), and regenerates the site again, so the downloads page and
the changelog list the new release. Commit docs/releases/v1/ with the regenerated pages.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from harness.core import paths
from harness.core.config import ConfigError
from harness.stages import common, site

log = logging.getLogger("visbench")


def run(version: str) -> Path:
    from harness.leaderboard.releases import RELEASES_DIR, ReleaseError, cut_release, release_number

    # Checked before the site is regenerated: a wrong name or an existing release costs nothing.
    try:
        number = release_number(version)
        if (paths.DOCS / RELEASES_DIR / version).exists():
            raise ReleaseError(f"release {version} exists and is never overwritten; cut the next version instead")
        root = paths.DOCS / RELEASES_DIR
        cut = [release_number(p.name) for p in root.iterdir() if p.is_dir()] if root.is_dir() else []
        # numbered in the order they were cut: the changelog and the downloads page list them by number
        if number != max(cut, default=0) + 1:
            raise ReleaseError(f"release {version} would not be the next one: the next is v{max(cut, default=0) + 1}")
    except ReleaseError as error:
        raise ConfigError(str(error)) from None
    site.run()
    target = cut_release(version, paths.DOCS)
    log.info("release %s: %d files in %s", version, sum(1 for _ in target.iterdir()), target)
    site.run()  # the downloads page and the changelog now list it
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.stages.release", description=__doc__)
    parser.add_argument("version", help="v1, v2, …: the next release")
    return common.stage_main("release", parser, lambda args: run(args.version), argv)


if __name__ == "__main__":
    sys.exit(main())
