"""`python -m harness.stages.release v1`: freeze the leaderboard's current data as release v1, then publish the
site as version v1.

Cutting: regenerates the site (so docs/downloads/ is the corpus's), copies docs/downloads/ to docs/releases/v1/
(refused if a later release exists: a release never changes), and regenerates the site again, so the downloads
page and the changelog list the new release. Publishing (`harness.leaderboard.site.versions`, with mike): the
committed site becomes version v1 on the gh-pages branch beside `latest`, pushed to `--remote` when one is named.
The cut leaves pages to commit, so a first run cuts and says so; the same command, run again once they are
committed, publishes (and a run interrupted at any step heals the same way).
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


def run(version: str, remote: str | None = None) -> Path:
    from harness.leaderboard.queries.releases import RELEASES_DIR, ReleaseError, cut_release, release_number
    from harness.leaderboard.site.versions import PublishError, publish, published_versions

    # Checked before the site is regenerated: a wrong name or an out-of-order release costs nothing.
    target = paths.DOCS / RELEASES_DIR / version
    try:
        number = release_number(version)
        root = paths.DOCS / RELEASES_DIR
        cut = [release_number(p.name) for p in root.iterdir() if p.is_dir()] if root.is_dir() else []
        if target.exists() and number != max(cut):
            raise ReleaseError(f"release {version} exists and is never overwritten; cut the next version instead")
        # numbered in the order they were cut: the changelog and the downloads page list them by number
        if not target.exists() and number != max(cut, default=0) + 1:
            raise ReleaseError(f"release {version} would not be the next one: the next is v{max(cut, default=0) + 1}")
    except ReleaseError as error:
        raise ConfigError(str(error)) from None
    if not target.exists():
        site.run()
        cut_release(version, paths.DOCS)
        log.info("release %s: %d files in %s", version, sum(1 for _ in target.iterdir()), target)
        site.run()  # the downloads page and the changelog now list it
        log.info("release %s is cut: commit docs/ and run the same command again to publish the site as %s",
                 version, version)
        return target
    if version in published_versions(Path(".")) and remote is None:
        raise ConfigError(f"release {version} is published and never changes; cut the next version instead")
    site.run()  # heals a cut interrupted before the site listed it (no change otherwise)
    try:
        published = publish(version, Path("."), remote=remote)
    except PublishError as error:
        raise ConfigError(f"release {version} is cut but not published: {error}") from None
    where = f", pushed to {published.pushed_to}" if published.pushed_to else " (local only: name remote= to push)"
    log.info("release %s: the site is version %s on branch %s (commit %s, from %s)%s", version, version,
             published.branch, published.commit[:12], published.source[:12], where)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.stages.release", description=__doc__)
    parser.add_argument("version", help="v1, v2, …: the next release")
    parser.add_argument("--remote", help="the git remote the site's branch is pushed to (default: none)")
    return common.stage_main("release", parser, lambda args: run(args.version, args.remote), argv)


if __name__ == "__main__":
    sys.exit(main())
