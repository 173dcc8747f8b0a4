"""Publishing the site as frozen versions with mike (harness.leaderboard.site.versions), on a two-page MkDocs
Material project with a bare git remote beside it: no network."""

from __future__ import annotations

import functools
import http.server
import json
import subprocess
import threading
import urllib.request
from pathlib import Path

import pytest

from harness.leaderboard.site.versions import LATEST, PublishError, publish, published_versions

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.org"}


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True, timeout=60).stdout


@pytest.fixture
def project(tmp_path, monkeypatch):
    for name, value in GIT_ENV.items():
        monkeypatch.setenv(name, value)
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    root = tmp_path / "project"
    (root / "docs").mkdir(parents=True)
    (root / "mkdocs.yml").write_text("site_name: t\ntheme:\n  name: material\n  font: false\n")
    (root / "docs" / "index.md").write_text("# Home\n\nrelease one\n")
    (root / "docs" / "two.md").write_text("# Two\n")
    (root / ".gitignore").write_text("/site/\n")
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "site")
    git(root, "remote", "add", "origin", str(remote))
    return root, remote


def branch_file(repo: Path, path: str) -> str:
    return git(repo, "show", f"gh-pages:{path}")


def test_a_version_is_published_beside_latest_pushed_and_browsable(project):
    root, remote = project
    published = publish("v1", root, remote="origin")
    assert published.built and published.pushed_to == "origin"
    assert published.source == git(root, "rev-parse", "HEAD").strip()
    assert git(remote, "rev-parse", "gh-pages").strip() == published.commit
    assert json.loads(branch_file(remote, "versions.json")) == [
        {"version": "v1", "title": "v1", "aliases": [LATEST]}]
    page = branch_file(remote, "v1/index.html")
    assert "release one" in page and '"provider": "mike"' in page  # Material's version selector reads versions.json
    assert "v1/" in branch_file(remote, f"{LATEST}/index.html")  # latest redirects to the version
    assert f"{LATEST}/" in branch_file(remote, "index.html")  # and the root to latest
    assert published.source[:12] in git(remote, "log", "-1", "--format=%s", "gh-pages")
    assert git(root, "status", "--porcelain") == ""  # the published build's config is gone with it

    # browsable: the branch's files served as a static host would serve them
    served = root.parent / "served"
    git(root.parent, "clone", "-q", "--branch", "gh-pages", str(remote), str(served))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        with urllib.request.urlopen(f"{base}/v1/two/", timeout=10) as response:
            assert "Two" in response.read().decode()
        with urllib.request.urlopen(f"{base}/versions.json", timeout=10) as response:
            assert json.load(response)[0]["aliases"] == [LATEST]
    finally:
        server.shutdown()


def test_the_next_version_takes_latest_and_a_published_one_never_changes(project):
    root, remote = project
    publish("v1", root, remote="origin")
    with pytest.raises(PublishError, match=r"v1 is published .* never changes"):
        publish("v1", root, remote="origin")
    (root / "docs" / "index.md").write_text("# Home\n\nrelease two\n")
    with pytest.raises(PublishError, match="commit them and run the same command again"):
        publish("v2", root, remote="origin")
    assert set(published_versions(root)) == {"v1"}  # refused before anything was built
    git(root, "commit", "-qam", "release two")
    publish("v2", root, remote="origin")
    assert published_versions(remote) == {"v2": [LATEST], "v1": []}
    assert "release one" in branch_file(remote, "v1/index.html")  # v1 is as it was published
    assert "release two" in branch_file(remote, "v2/index.html")


def test_a_publish_whose_push_did_not_happen_heals_by_running_it_again(project):
    root, remote = project
    local = publish("v1", root)  # published on the local branch only, as a push that failed leaves it
    assert local.pushed_to is None
    assert git(remote, "branch", "--list", "gh-pages").strip() == ""
    healed = publish("v1", root, remote="origin")
    assert not healed.built and healed.commit == local.commit and healed.source == local.source
    assert git(remote, "rev-parse", "gh-pages").strip() == local.commit


def test_refusals_name_the_fix_before_any_work(project, tmp_path):
    root, _ = project
    with pytest.raises(PublishError, match="no git remote 'elsewhere'"):
        publish("v1", root, remote="elsewhere")
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(PublishError, match="is not a git repository"):
        publish("v1", plain)
    assert published_versions(root) == {}
