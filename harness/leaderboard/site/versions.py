"""Publishing the leaderboard site as frozen versions on a git branch, with `mike` (the MkDocs Material
ecosystem's versioning tool): each release is a folder (`v1/`, `v2/`, …) on the branch, `latest/` redirects to
the newest, the branch root redirects to `latest/`, and `versions.json` feeds Material's version selector. The
selector is switched on for the published build only (a config that inherits mkdocs.yml and adds
`extra.version.provider: mike`): a plain `mkdocs build` or `serve` has no versions.json to read.

A version is built from committed pages only (the published site names the commit it came from) and is never
rebuilt: publishing one that the branch holds is refused, except to push it where the remote lacks it, so an
interrupted publish heals by running it again.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

BRANCH = "gh-pages"  # mike's default, and what GitHub Pages and most static hosts read
LATEST = "latest"
# Folders and files of the project the built site is made from: publishing refuses while they differ from HEAD
SITE_SOURCES = ("docs", "mkdocs.yml")
_TIMEOUT_S = 900


class PublishError(RuntimeError):
    """A version that cannot be published as asked; the message names the fix."""


@dataclass(frozen=True)
class Published:
    version: str
    branch: str
    commit: str  # the branch's commit that holds the version
    source: str  # the project commit its pages were built from
    pushed_to: str | None  # the remote it was pushed to (None: the branch is local only)
    built: bool  # False: the branch held it already (only a push was missing)


def _git(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=_TIMEOUT_S)
    if check and done.returncode != 0:
        raise PublishError(f"git {' '.join(args)} failed: {(done.stderr or done.stdout).strip().splitlines()[-1:]}")
    return done


def _mike() -> list[str]:
    """mike's console script, beside this Python's (a venv or the image), else on PATH."""
    beside = Path(sys.executable).with_name("mike")
    found = str(beside) if beside.is_file() else shutil.which("mike")
    if not found:
        raise PublishError("mike is not installed in this environment: run scripts/setup (it installs mike)")
    return [found]


def published_versions(root: Path, branch: str = BRANCH) -> dict[str, list[str]]:
    """The versions the branch holds, each with its aliases (empty when the branch does not exist yet)."""
    shown = _git(root, "show", f"{branch}:versions.json", check=False)
    if shown.returncode != 0:
        return {}
    return {entry["version"]: list(entry.get("aliases", [])) for entry in json.loads(shown.stdout)}


def publish(version: str, root: Path, *, config: str = "mkdocs.yml", branch: str = BRANCH,
            remote: str | None = None) -> Published:
    """Build the committed site at `root` as `version` on `branch` (alias `latest`, the default page), then push
    `branch` to `remote` when one is named. Refuses, before building, a tree whose site sources are not
    committed and a version the branch already holds (unless only the push is missing)."""
    if _git(root, "rev-parse", "--is-inside-work-tree", check=False).returncode != 0:
        raise PublishError(f"{root} is not a git repository: publishing writes the site to its {branch} branch")
    if remote is not None and _git(root, "remote", "get-url", remote, check=False).returncode != 0:
        raise PublishError(f"no git remote {remote!r}: add it (git remote add {remote} URL) or leave remote= out "
                           f"to publish to the local {branch} branch only")
    source = _git(root, "rev-parse", "HEAD").stdout.strip()
    if version in published_versions(root, branch):
        return _push_only(version, root, branch, remote)
    changed = _git(root, "status", "--porcelain", "--", *SITE_SOURCES).stdout.strip()
    if changed:
        raise PublishError(f"the site's pages differ from commit {source[:12]} ({len(changed.splitlines())} "
                           f"paths under {', '.join(SITE_SOURCES)}): commit them and run the same command again")
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    message = f"Publish {version} of the site from {source}"
    versioned = root / f".{Path(config).stem}.versioned.yml"  # beside the config: its paths stay relative to root
    versioned.write_text(f"INHERIT: {config}\nextra:\n  version:\n    provider: mike\n    default: {LATEST}\n")
    try:
        for command in (["deploy", "--update-aliases", "--alias-type", "redirect", version, LATEST],
                        ["set-default", "--allow-empty", LATEST]):
            done = subprocess.run([*_mike(), command[0], "--config-file", versioned.name, "--branch", branch,
                                   "--message", message, *command[1:]],
                                  cwd=root, env=env, capture_output=True, text=True, timeout=_TIMEOUT_S)
            if done.returncode != 0:
                tail = (done.stderr or done.stdout).strip().splitlines()[-1:]
                raise PublishError(f"mike {command[0]} failed: {tail}; fix that and run the same command again")
    finally:
        versioned.unlink(missing_ok=True)
    if remote is not None:
        _git(root, "push", "--quiet", remote, f"{branch}:{branch}")
    commit = _git(root, "rev-parse", branch).stdout.strip()
    return Published(version, branch, commit, source, remote, built=True)


def _push_only(version: str, root: Path, branch: str, remote: str | None) -> Published:
    """The branch holds `version`: push it where the remote lacks the branch's commit, else refuse (a version is
    never rebuilt)."""
    commit = _git(root, "rev-parse", branch).stdout.strip()
    if remote is not None:
        listed = _git(root, "ls-remote", remote, f"refs/heads/{branch}").stdout.split()
        if not listed or listed[0] != commit:
            _git(root, "push", "--quiet", remote, f"{branch}:{branch}")
            # the project commit the version was built from, as its publishing commit's message names it
            subject = _git(root, "log", "-1", "--format=%s", branch, "--", f"{version}/").stdout.strip()
            built_from = subject.split(" from ")[-1].split(":")[0] if " from " in subject else ""
            return Published(version, branch, commit, built_from, remote, built=False)
    raise PublishError(f"{version} is published (branch {branch}, commit {commit[:12]}) and a version never "
                       f"changes: release the next one")
