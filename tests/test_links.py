"""Every link in the built site resolves offline: relative href/src values name a file of the build, and
#fragments name an id on the page they point to. External links are never fetched; the only ones allowed
are listed in EXTERNAL_ALLOWED, so the site cannot quietly start depending on the network."""

from __future__ import annotations

import json
import posixpath
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

# Material's footer credit ("Made with Material for MkDocs"); a plain link, nothing loads from it.
EXTERNAL_ALLOWED = {"https://squidfunk.github.io/mkdocs-material/"}
# Attributes that hold a URL the browser follows or loads.
URL_ATTRIBUTES = {"href", "src", "action", "poster", "data"}
# Schemes that name no file and no host: nothing to resolve.
NON_FILE_SCHEMES = {"mailto", "tel", "javascript", "data", "blob", "about"}


class _PageParser(HTMLParser):
    """Collects a page's ids and (attribute, URL) pairs, including the URLs in Material's __config JSON."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.urls: list[tuple[str, str]] = []
        self._in_config = False
        self._config = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        for name in ("id", "name") if tag == "a" else ("id",):
            if values.get(name):
                self.ids.add(values[name])
        for name, value in attrs:
            if name in URL_ATTRIBUTES and value is not None:
                self.urls.append((f"<{tag} {name}>", value))
            elif name == "srcset" and value:
                self.urls += [(f"<{tag} srcset>", part.split()[0]) for part in value.split(",") if part.strip()]
        self._in_config = tag == "script" and values.get("id") == "__config"

    def handle_data(self, data: str) -> None:
        if self._in_config:
            self._config += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "script" and self._in_config:
            self._in_config = False
            config = json.loads(self._config)
            # The search worker is loaded from this path (relative to the page), not from an attribute.
            if config.get("search"):
                self.urls.append(("__config search", config["search"]))


def parse_page(path: Path) -> _PageParser:
    parser = _PageParser()
    parser.feed(path.read_text(encoding="utf-8"))
    parser.close()
    return parser


def _target_file(site: Path, page: str, path: str) -> str | None:
    """The build-relative file a URL path on `page` names (directories → index.html), or None outside the build."""
    joined = path.lstrip("/") if path.startswith("/") else posixpath.join(posixpath.dirname(page), path)
    resolved = posixpath.normpath(joined)
    if resolved == ".." or resolved.startswith("../"):
        return None
    if joined.endswith("/") or (site / resolved).is_dir():
        resolved = posixpath.normpath(posixpath.join(resolved, "index.html"))
    return resolved


def check_site(site: Path) -> tuple[list[str], set[str], int]:
    """(broken links as "page: <tag attr> url: why", external URLs, number of local links checked)."""
    pages = {str(p.relative_to(site).as_posix()): parse_page(p) for p in sorted(site.rglob("*.html"))}
    broken: list[str] = []
    external: set[str] = set()
    checked = 0
    for page, parsed in pages.items():
        for where, url in parsed.urls:
            parts = urlsplit(url)
            if parts.scheme in NON_FILE_SCHEMES:
                continue
            if parts.scheme or parts.netloc:
                external.add(url)
                continue
            checked += 1
            target = _target_file(site, page, unquote(parts.path)) if parts.path else page
            if target is None or not (site / target).is_file():
                broken.append(f"{page}: {where} {url}: no {target or 'file (outside the site)'} in the build")
                continue
            fragment = unquote(parts.fragment)
            if fragment and target.endswith(".html") and fragment not in pages[target].ids:
                broken.append(f"{page}: {where} {url}: no id {fragment!r} on {target}")
    return broken, external, checked


@pytest.fixture(scope="module")
def site_check(built_site: Path) -> tuple[list[str], set[str], int]:
    return check_site(built_site)


def test_every_local_link_and_fragment_resolves(built_site, site_check):
    broken, _, checked = site_check
    assert (built_site / "index.html").is_file()
    assert checked > 50, f"only {checked} local links found: is the checker parsing the pages?"
    assert not broken, f"{len(broken)} broken link(s) in the built site:\n" + "\n".join(broken)


def test_no_external_links_beyond_the_allow_list(site_check):
    _, external, _ = site_check
    unexpected = sorted(external - EXTERNAL_ALLOWED)
    assert not unexpected, "external links (the site must work offline; extend EXTERNAL_ALLOWED only for " \
        "plain links that load nothing):\n" + "\n".join(unexpected)


def _write(site: Path, name: str, body: str) -> None:
    path = site / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"<!doctype html><html><body>{body}</body></html>", encoding="utf-8")


def test_the_checker_reports_broken_links_and_fragments(tmp_path):
    _write(tmp_path, "index.html", '<h2 id="top">x</h2><a href="tasks/a/">ok</a><a href="#top">ok</a>'
           '<a href="tasks/a/#board">ok</a><img src="img/missing.svg"><a href="tasks/b/">broken</a>'
           '<a href="tasks/a/#nope">bad fragment</a><a href="../outside.html">outside</a>'
           '<a href="https://example.org/x">external</a><a href="mailto:a@b.c">mail</a>')
    _write(tmp_path, "tasks/a/index.html", '<table id="board"></table><a href="../../index.html#top">ok</a>'
           '<script src="/js/gone.js"></script><a href="?q=1#board">ok</a>')
    broken, external, checked = check_site(tmp_path)
    assert external == {"https://example.org/x"}
    assert checked == 10
    assert sorted(broken) == sorted([
        "index.html: <img src> img/missing.svg: no img/missing.svg in the build",
        "index.html: <a href> tasks/b/: no tasks/b/index.html in the build",
        "index.html: <a href> tasks/a/#nope: no id 'nope' on tasks/a/index.html",
        "index.html: <a href> ../outside.html: no file (outside the site) in the build",
        "tasks/a/index.html: <script src> /js/gone.js: no js/gone.js in the build",
    ])
