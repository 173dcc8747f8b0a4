"""The built site in a real browser: Debian's headless chromium, driven by Selenium through Debian's
chromedriver, loads the pages from a local http.server; tables render and sort, images display, and
nothing is fetched from anywhere but the local server. Screenshots go to build/screenshots/.

Without /usr/bin/chromium or /usr/bin/chromedriver these tests skip, except where CI is set: there a
missing browser fails, so CI cannot pass by skipping (scripts/test installs both with apt).
Only the structure is checked (a board table exists, sorting works), never specific numbers.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
SCREENSHOTS = REPO / "build" / "screenshots"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--disable-quic", "--no-first-run",
    # Containers often give /dev/shm 64 MB, too little for chromium (Debian's launcher only adds this flag
    # when it can read the /dev/shm size).
    "--disable-dev-shm-usage", "--window-size=1280,1000",
]
# The same leading-number rule as docs/javascripts/tablesort.js.
LEADING_NUMBER = re.compile(r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:e[+-]?\d+)?)", re.IGNORECASE)

# Body cell texts of every content table, by table then row: [[[cell, ...], ...], ...]. A table folded away
# in a closed <details> (a board's hashes and parameters) reads as empty: nobody can click it.
READ_TABLES_JS = """
return Array.from(document.querySelectorAll('.md-typeset table')).map(t => t.closest('details:not([open])') ? [] :
  Array.from(t.tBodies[0] ? t.tBodies[0].rows : []).map(r => Array.from(r.cells).map(c => c.textContent.trim())));
"""


def _ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def leading_number(text: str) -> float | None:
    match = LEADING_NUMBER.match(text.strip().replace("\u2212", "-"))
    return float(match.group(1)) if match else None


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        """Drop the per-request access log: it would bury pytest's own output."""


@pytest.fixture(scope="module")
def base_url(built_site: Path) -> Iterator[str]:
    """The built site served on 127.0.0.1 at a free port, from a background thread."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(built_site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def driver() -> Iterator[webdriver.Chrome]:
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.is_file()]
    if missing:
        reason = f"{' and '.join(missing)} missing: apt-get install chromium chromium-driver (scripts/test does)"
        if _ci():
            pytest.fail(f"CI is set, so the browser tests may not skip: {reason}")
        pytest.skip(reason)
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in CHROMIUM_ARGS:
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    profile = tempfile.mkdtemp(prefix="visbench-chromium-profile-")
    options.add_argument(f"--user-data-dir={profile}")
    # The explicit driver path means Selenium Manager is never run; SE_OFFLINE keeps it offline if it were.
    with pytest.MonkeyPatch.context() as env:
        env.setenv("SE_OFFLINE", "true")
        browser = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
        try:
            browser.set_page_load_timeout(120)  # a loaded 2-core CI machine: the home page's tables and figures
            yield browser
        finally:
            browser.quit()
            shutil.rmtree(profile, ignore_errors=True)


def open_page(driver: webdriver.Chrome, url: str) -> None:
    """Load `url` and wait until the page is complete and tablesort.js has run on its tables."""
    driver.get(url)
    WebDriverWait(driver, 20).until(lambda d: d.execute_script("return document.readyState === 'complete'"),
                                    f"{url} did not finish loading")
    WebDriverWait(driver, 10).until(lambda d: d.execute_script(
        "return Array.from(document.querySelectorAll('.md-typeset table')).every(t => t.dataset.sortable === 'true')"),
        f"{url}: tablesort.js did not make the tables sortable (is it in mkdocs.yml extra_javascript?)")


def page_url(built_site: Path, base_url: str, name: str) -> str:
    """The URL of docs/<name>.md, with or without use_directory_urls."""
    if (built_site / name / "index.html").is_file():
        return f"{base_url}{name}/"
    assert (built_site / f"{name}.html").is_file(), f"no built page for {name}"
    return f"{base_url}{name}.html"


def task_names(built_site: Path) -> list[str]:
    tasks = built_site / "tasks"
    names = sorted({p.parent.name if p.name == "index.html" else p.stem for p in tasks.rglob("*.html")})
    assert names, "the built site has no task pages"
    return ["classification", *[n for n in names if n != "classification"]] if "classification" in names else names


def board_tables(driver: webdriver.Chrome) -> list:
    """Content tables whose header starts with Rank (the leaderboard boards) and that have body rows."""
    return [t for t in driver.find_elements(By.CSS_SELECTOR, ".md-typeset table")
            if t.find_elements(By.CSS_SELECTOR, "thead th")
            and t.find_element(By.CSS_SELECTOR, "thead th").text.strip() == "Rank"
            and t.find_elements(By.CSS_SELECTOR, "tbody tr")]


def assert_no_errors_and_only_local_requests(driver: webdriver.Chrome, base_url: str) -> None:
    errors = [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, "browser console errors:\n" + "\n".join(errors)
    resources = driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    foreign = [r for r in resources if not r.startswith(base_url) and not r.startswith(("data:", "blob:"))]
    assert not foreign, f"the page fetched from outside the local server: {foreign}"


def assert_images_displayed(driver: webdriver.Chrome, page: str) -> None:
    """Every content <img> (SVG or not) has decoded, and every inline content <svg> has a size on screen."""
    images = driver.execute_script("""
        return Array.from(document.querySelectorAll('.md-content img')).map(i =>
          [i.getAttribute('src'), i.complete, i.naturalWidth]);""")
    for src, complete, natural_width in images:
        assert complete and natural_width > 0, f"{page}: <img src={src!r}> not displayed (naturalWidth 0)"
    svgs = driver.execute_script("""
        return Array.from(document.querySelectorAll('.md-content svg'))
          .filter(s => !s.closest('[hidden], .md-source-file, .md-content__button, .headerlink'))
          .map(s => { const r = s.getBoundingClientRect(); return [s.outerHTML.slice(0, 80), r.width, r.height]; });""")
    for head, width, height in svgs:
        assert width > 0 and height > 0, f"{page}: inline {head}… has no size on screen"


def screenshot(driver: webdriver.Chrome, name: str) -> None:
    """Save build/screenshots/<name>.png of the whole page (the window grows to its height, at most 4000 px)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    size = driver.get_window_size()
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(size["width"], max(size["height"], min(int(height) + 140, 4000)))
    try:
        assert driver.save_screenshot(str(SCREENSHOTS / f"{name}.png")), f"screenshot {name} not saved"
    finally:
        driver.set_window_size(size["width"], size["height"])


def test_home_page_loads_with_title_and_table(driver, base_url):
    open_page(driver, base_url)
    assert "visbench-harness leaderboard" in driver.title
    assert driver.find_element(By.CSS_SELECTOR, ".md-content h1").text.strip()
    tables = driver.execute_script(READ_TABLES_JS)
    assert any(rows for rows in tables), "the home page shows no table with rows"
    assert_images_displayed(driver, "home")
    assert_no_errors_and_only_local_requests(driver, base_url)
    screenshot(driver, "home")


def test_task_pages_show_board_tables(driver, built_site, base_url):
    for i, name in enumerate(task_names(built_site)):
        open_page(driver, page_url(built_site, base_url, f"tasks/{name}"))
        assert name.lower() in driver.title.lower()
        boards = board_tables(driver)
        assert boards, f"tasks/{name}: no board table (header starting with Rank) with rows"
        assert all(b.is_displayed() for b in boards)
        assert_images_displayed(driver, f"tasks/{name}")
        assert_no_errors_and_only_local_requests(driver, base_url)
        if i == 0:
            screenshot(driver, f"task-{name}")


def _pages_with_content_images(built_site: Path) -> list[str]:
    """Built pages whose content (Material's article, not its icon-laden header) holds an <img> or <svg>."""
    pages = []
    for path in sorted(built_site.rglob("*.html")):
        html = path.read_text(encoding="utf-8")
        start = html.find('class="md-content"')
        content = html[start:html.find("</article>", start)] if start >= 0 else ""
        if "<img" in content or "<svg" in content:
            pages.append(path.relative_to(built_site).as_posix())
    return pages


def test_every_page_displays_its_images(driver, built_site, base_url):
    for page in _pages_with_content_images(built_site):
        open_page(driver, base_url + page)
        assert_images_displayed(driver, page)


def _column(driver: webdriver.Chrome, table_index: int, column: int) -> list[str]:
    return [row[column] for row in driver.execute_script(READ_TABLES_JS)[table_index]]


def _sort_candidates(tables: list[list[list[str]]]) -> tuple[tuple[int, int] | None, tuple[int, int] | None]:
    """(table, column) of the longest all-numeric column with distinct values, and of a numbers-and-words column."""
    numeric, mixed = None, None
    for t, rows in sorted(enumerate(tables), key=lambda item: -len(item[1])):
        if len(rows) < 2 or len({len(r) for r in rows}) != 1:
            continue
        for c in range(len(rows[0])):
            numbers = [leading_number(r[c]) for r in rows]
            if numeric is None and None not in numbers and len(set(numbers)) > 1:
                numeric = (t, c)
            if mixed is None and None in numbers and len({n for n in numbers if n is not None}) > 1:
                mixed = (t, c)
    return numeric, mixed


def _header(driver: webdriver.Chrome, table_index: int, column: int):
    table = driver.find_elements(By.CSS_SELECTOR, ".md-typeset table")[table_index]
    header = table.find_elements(By.CSS_SELECTOR, "thead tr:last-child th")[column]
    # Centre it so Material's sticky header cannot cover the cell that is clicked.
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", header)
    return header


def test_clicking_a_numeric_header_sorts_the_board(driver, built_site, base_url):
    name = task_names(built_site)[0]
    open_page(driver, page_url(built_site, base_url, f"tasks/{name}"))
    tables = driver.execute_script(READ_TABLES_JS)
    numeric, mixed = _sort_candidates(tables)
    assert numeric is not None, f"tasks/{name}: no table with a numeric column of two or more values"
    table, column = numeric
    before = _column(driver, table, column)
    header = _header(driver, table, column)
    assert header.get_attribute("role") == "columnheader" and header.get_attribute("aria-sort") is None

    header.click()
    ascending = _column(driver, table, column)
    assert header.get_attribute("aria-sort") == "ascending"
    assert [leading_number(v) for v in ascending] == sorted(leading_number(v) for v in before)
    assert sorted(map(tuple, driver.execute_script(READ_TABLES_JS)[table])) == sorted(map(tuple, tables[table])), \
        "sorting lost or changed rows"

    header.click()
    descending = _column(driver, table, column)
    assert header.get_attribute("aria-sort") == "descending"
    assert [leading_number(v) for v in descending] == [leading_number(v) for v in reversed(ascending)]
    assert descending != ascending, "two clicks left the rows in the same order"

    # Keyboard: Enter on the focused header sorts too; the other headers lose their aria-sort.
    other = _header(driver, table, 0 if column else 1)
    other.send_keys(Keys.ENTER)
    assert other.get_attribute("aria-sort") == "ascending"
    assert header.get_attribute("aria-sort") is None

    if mixed is not None:  # e.g. Rank, where random-init controls read "control": words go last both ways
        open_page(driver, driver.current_url)  # unsorted again
        table, column = mixed
        header = _header(driver, table, column)
        for direction in ("ascending", "descending"):
            header.click()
            assert header.get_attribute("aria-sort") == direction
            numbers = [leading_number(v) for v in _column(driver, table, column)]
            count = sum(n is not None for n in numbers)
            assert None not in numbers[:count], f"non-numbers not last when {direction}: {numbers}"
            assert numbers[:count] == sorted(numbers[:count], reverse=direction == "descending")


# -- the site's own features: cross-task table, wide boards, compare, downloads, figures, dark mode ------

# Per visible row of the first table inside `container`: its cells' texts (hidden cells as None).
VISIBLE_ROWS_JS = """
const table = document.querySelector(arguments[0] + ' table');
return Array.from(table.tBodies[0].rows).filter(r => r.style.display !== 'none').map(r =>
  Array.from(r.cells).map(c => c.style.display === 'none' ? null : c.textContent.trim()));
"""


# Per visible row, per cell: the normalised rank a cross-task cell carries (data-nr), null where it has none or
# is hidden: what the page's means average.
VISIBLE_RANKS_JS = """
const table = document.querySelector(arguments[0] + ' table');
return Array.from(table.tBodies[0].rows).filter(r => r.style.display !== 'none').map(r =>
  Array.from(r.cells).map(c => {
    const a = c.style.display === 'none' ? null : c.querySelector('a[data-nr]');
    return a ? parseFloat(a.dataset.nr) : null;
  }));
"""


def _choose(driver: webdriver.Chrome, name: str, value: str) -> None:
    driver.execute_script("""const s = document.querySelector('select[name="' + arguments[0] + '"]');
        s.value = arguments[1]; s.dispatchEvent(new Event('change'));""", name, value)


def _options(driver: webdriver.Chrome, name: str) -> list[str]:
    return driver.execute_script(
        "return Array.from(document.querySelector('select[name=\"' + arguments[0] + '\"]').options).map(o => o.value)",
        name)


def _pinned_after_scrolling(driver: webdriver.Chrome, table, column: int) -> dict[str, float]:
    """Scroll the table's box fully right; where its box and the `column`-th cell of the first body row sit, and
    where the cell before that one ends (`previousRight`)."""
    return driver.execute_script("""
        const table = arguments[0], cell = table.tBodies[0].rows[0].cells[arguments[1]];
        const box = table.closest('.md-typeset__table') || table;
        const scroller = [table, box, box.parentElement].find(e => e.scrollWidth > e.clientWidth + 1) || table;
        scroller.scrollLeft = scroller.scrollWidth;
        const b = scroller.getBoundingClientRect(), c = cell.getBoundingClientRect();
        const previous = arguments[1] > 0 ? cell.previousElementSibling.getBoundingClientRect().right : null;
        return {tableWidth: table.scrollWidth, boxWidth: scroller.clientWidth, boxLeft: b.left, boxRight: b.right,
                cellLeft: c.left, cellRight: c.right, scrolled: scroller.scrollLeft, previousRight: previous};""",
        table, column)


def test_cross_task_table_sorts_filters_and_keeps_names_in_view(driver, base_url):
    open_page(driver, base_url)
    table = driver.find_element(By.CSS_SELECTOR, ".vb-crosstask table")
    heads = driver.execute_script("""return Array.from(document.querySelectorAll('.vb-crosstask th a.vb-board'))
        .map(a => [a.dataset.level, a.dataset.dataset]);""")
    rows = driver.execute_script(VISIBLE_ROWS_JS, ".vb-crosstask")
    assert heads and rows and all(len(r) == len(heads) + 4 for r in rows)
    assert_no_errors_and_only_local_requests(driver, base_url)
    screenshot(driver, "home")

    # Sorting by the mean puts numbers first, ascending, and rows without a mean last. (The overall standing's
    # tables come before it on the page.)
    index = driver.execute_script("""return Array.from(document.querySelectorAll('.md-typeset table'))
        .indexOf(document.querySelector('.vb-crosstask table'));""")
    _header(driver, index, 1).click()
    means = [leading_number(r[1]) for r in driver.execute_script(VISIBLE_ROWS_JS, ".vb-crosstask")]
    count = sum(m is not None for m in means)
    assert None not in means[:count] and means[:count] == sorted(means[:count])

    # Filtering by a level keeps its boards only; coverage and the mean are recomputed over them.
    everything = driver.execute_script(VISIBLE_ROWS_JS, ".vb-crosstask")
    for name, values in (("level", [h[0] for h in heads]), ("dataset", [h[1] for h in heads])):
        for value in _options(driver, name)[1:]:
            _choose(driver, name, value)
            shown = values.count(value)
            texts = driver.execute_script(VISIBLE_ROWS_JS, ".vb-crosstask")
            for row, ranks in zip(texts, driver.execute_script(VISIBLE_RANKS_JS, ".vb-crosstask"), strict=True):
                cells = [c for c in row[3:-1] if c is not None]
                present = [r for r in ranks[3:-1] if r is not None]
                assert len(cells) == shown and len(present) == sum(c != "—" for c in cells)
                assert row[2] == f"{len(present)} of {shown}"
                control = row[-1].startswith(("control", "baseline"))
                assert bool(row[-1]) == (control or len(present) < shown)
                if control or not present:
                    assert row[1] == "—"
                else:  # the mean normalised rank of the cells shown, as the page rounds it (two decimals)
                    assert abs(float(row[1]) - sum(present) / len(present)) <= 0.005 + 1e-9
            _choose(driver, name, "")
    assert driver.execute_script(VISIBLE_ROWS_JS, ".vb-crosstask") == everything  # the generated text is back

    # A table wider than its column scrolls sideways with the backbone names pinned at the left.
    where = _pinned_after_scrolling(driver, table, 0)
    print(f"cross-task table: {where['tableWidth']} px in a {where['boxWidth']} px column")
    if where["tableWidth"] > where["boxWidth"]:
        assert where["scrolled"] > 0 and abs(where["cellLeft"] - where["boxLeft"]) <= 2


IN_VIEW_JS = """const c = arguments[0].tBodies[0].rows[0].cells[arguments[1]].getBoundingClientRect();
    const b = document.querySelector('.md-content__inner').getBoundingClientRect();
    return c.right <= b.right + 1;"""


def test_board_tables_fit_or_scroll_with_name_and_tie_group_in_view(driver, built_site, base_url):
    widths = []
    for name in task_names(built_site):
        open_page(driver, page_url(built_site, base_url, f"tasks/{name}"))
        for board in board_tables(driver):
            heads = [th.text.strip() for th in board.find_elements(By.CSS_SELECTOR, "thead th")]
            assert heads[:2] == ["Rank", "Backbone"] and heads[3] == "Tie group", heads
            assert driver.execute_script(IN_VIEW_JS, board, 3), \
                f"tasks/{name}: the tie group column is not in view before scrolling"
            where = _pinned_after_scrolling(driver, board, 1)
            widths.append(where["tableWidth"])
            if where["tableWidth"] > where["boxWidth"]:
                # pinned at the box's left edge; or, where the table overflows by less than the rank column is wide,
                # not there yet at the end of the scroll: then it sits right after the rank column's rest, in view
                offset = where["cellLeft"] - where["boxLeft"]
                assert abs(offset) <= 2 or (offset > 0 and abs(where["cellLeft"] - where["previousRight"]) <= 1), \
                    f"tasks/{name}: backbone column not pinned ({where})"
    print(f"board tables: {min(widths)}–{max(widths)} px wide")


def test_on_a_phone_a_board_shows_each_rows_headline_before_scrolling(driver, built_site, base_url):
    """At 390 px, the width of a phone, the rank, the backbone and the headline value with its interval are in
    view on every board before it is scrolled sideways."""
    size = driver.get_window_size()
    driver.set_window_size(390, 844)
    try:
        for name in task_names(built_site):
            open_page(driver, page_url(built_site, base_url, f"tasks/{name}"))
            for board in board_tables(driver):
                assert driver.execute_script(IN_VIEW_JS, board, 2), \
                    f"tasks/{name}: at 390 px the headline column is not in view before scrolling"
        open_page(driver, page_url(built_site, base_url, "tasks/classification"))
        screenshot(driver, "task-classification-390px")
    finally:
        driver.set_window_size(size["width"], size["height"])


def test_compare_page_shows_the_chosen_pair_either_way_round(driver, base_url):
    open_page(driver, base_url + "compare/")
    first = driver.execute_script(VISIBLE_ROWS_JS, ".vb-compare")
    assert first, "the compare page shows no row for its default pair"
    a, b = (driver.execute_script(f"return document.querySelector('select[name=\"{n}\"]').value") for n in "AB")
    assert all((row[2], row[3]) == (a, b) for row in first)
    summary = driver.find_element(By.CSS_SELECTOR, ".vb-compare output").text
    assert summary.startswith(f"{len(first)} board") and f"{a} better on" in summary
    screenshot(driver, "compare")
    _choose(driver, "A", b)
    _choose(driver, "B", a)
    swapped = driver.execute_script(VISIBLE_ROWS_JS, ".vb-compare")
    assert [(r[2], r[3], r[4], r[5]) for r in swapped] == [(r[3], r[2], r[5], r[4]) for r in first]
    for before, after in zip(first, swapped, strict=True):  # A − B [lo, hi] becomes B − A [−hi, −lo]
        d, *interval = (float(x) for x in re.findall(r"[+-]\d+\.\d+", before[6]))
        assert [float(x) for x in re.findall(r"[+-]\d+\.\d+", after[6])] == [-d, *(-x for x in reversed(interval))]
        assert after[-1] == before[-1]  # the verdict names the better one: the same either way
    assert_no_errors_and_only_local_requests(driver, base_url)


def test_compare_page_at_1400_px_shows_every_column_and_keeps_the_pair_in_the_address(driver, base_url):
    """At a laptop's 1400 px the chosen pair's values, difference with its interval, Holm p and verdict are in view
    without a sideways scroll, on every board both rows are on; the pair is in the address, so a reload keeps it."""
    size = driver.get_window_size()
    driver.set_window_size(1400, 900)
    try:
        open_page(driver, base_url + "compare/")
        labels = _options(driver, "A")
        pretrained = [label for label in labels if not label.endswith("@random")]
        a, b = (pretrained if len(pretrained) >= 2 else labels)[:2]
        _choose(driver, "A", a)
        _choose(driver, "B", b)
        rows = driver.execute_script(VISIBLE_ROWS_JS, ".vb-compare")
        assert rows
        table = driver.find_element(By.CSS_SELECTOR, ".vb-compare table")
        where = _pinned_after_scrolling(driver, table, 8)
        assert where["tableWidth"] <= where["boxWidth"] + 1, f"the compare table scrolls at 1400 px: {where}"
        open_page(driver, driver.current_url)
        assert [driver.execute_script(f"return document.querySelector('select[name=\"{n}\"]').value")
                for n in "AB"] == [a, b]
        assert driver.execute_script(VISIBLE_ROWS_JS, ".vb-compare") == rows
        screenshot(driver, "compare-1400px")
    finally:
        driver.set_window_size(size["width"], size["height"])


def test_download_links_serve_the_files_their_sha256_names(driver, base_url):
    import hashlib
    import urllib.request

    open_page(driver, base_url + "downloads/")
    rows = driver.execute_script("""return Array.from(document.querySelectorAll('.vb-downloads tbody tr')).map(r =>
        [r.cells[0].querySelector('a').href, r.cells[r.cells.length - 1].textContent.trim()]);""")
    assert len(rows) >= 10
    for href, shown in rows:
        with urllib.request.urlopen(href, timeout=30) as response:
            assert hashlib.sha256(response.read()).hexdigest() == shown, href
    screenshot(driver, "downloads")


# Every SVG <img> in the content: its smallest font-size and the scale it is drawn at.
FIGURE_TEXT_JS = """
const imgs = Array.from(document.querySelectorAll('.md-content img')).filter(i => i.src.endsWith('.svg'));
return Promise.all(imgs.map(async i => {
  const sizes = [...(await (await fetch(i.src)).text()).matchAll(/font-size="([\\d.]+)"/g)].map(m => +m[1]);
  return [i.getAttribute('src'), Math.min(...sizes), i.getBoundingClientRect().width / i.naturalWidth];
}));
"""


def test_figures_draw_their_text_at_least_11_px(driver, built_site, base_url):
    measured = []
    for page in _pages_with_content_images(built_site):
        open_page(driver, base_url + page)
        for src, font, scale in driver.execute_script(FIGURE_TEXT_JS):
            measured.append(font * scale)
            assert font * scale >= 11, f"{page}: {src} draws {font} px text at {scale:.2f}× = {font * scale:.1f} px"
    assert measured, "no SVG figure found on any page"
    print(f"figure text: {min(measured):.1f} px at the smallest")
    open_page(driver, page_url(built_site, base_url, "tasks/depth"))
    screenshot(driver, "task-depth")


def test_dark_mode_toggle_switches_the_palette(driver, base_url):
    open_page(driver, base_url)
    scheme = "return document.body.getAttribute('data-md-color-scheme')"
    background = "return getComputedStyle(document.body).backgroundColor"
    assert driver.execute_script(scheme) == "default"
    light = driver.execute_script(background)
    toggle = driver.find_element(By.CSS_SELECTOR, "form[data-md-component=palette] label:not([hidden])")
    toggle.click()
    WebDriverWait(driver, 5).until(lambda d: d.execute_script(scheme) == "slate", "the toggle did not switch")
    assert driver.execute_script(background) != light
    screenshot(driver, "home-dark")
    open_page(driver, base_url + "tasks/classification/")  # the choice holds across pages
    assert driver.execute_script(scheme) == "slate"
    screenshot(driver, "task-classification-dark")
    driver.find_element(By.CSS_SELECTOR, "form[data-md-component=palette] label:not([hidden])").click()
    WebDriverWait(driver, 5).until(lambda d: d.execute_script(scheme) == "default", "the toggle did not switch back")


def test_dvc_plots_render_offline(driver, root_dvc, tmp_path):
    """`dvc plots show` fills .dvc/plots/offline.html (`plots.html_template`), whose Vega libraries are inlined:
    every plot draws from a file:// page with nothing fetched (dvc-render's own page loads them from a CDN)."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "dvc", "plots", "show", "-o", str(tmp_path / "plots")],
                         cwd=root_dvc, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "DVC_NO_ANALYTICS": "1"})
    assert out.returncode == 0, out.stdout + out.stderr
    page = tmp_path / "plots" / "index.html"
    assert "cdn.jsdelivr" not in page.read_text()
    driver.get(page.as_uri())
    WebDriverWait(driver, 30).until(lambda d: d.execute_script(
        "return document.querySelectorAll('div[id] canvas, div[id] svg.marks').length") > 0)
    drawn = driver.execute_script("return [document.querySelectorAll('div[id] canvas, div[id] svg.marks').length, "
                                  "document.querySelectorAll('div[id]').length]")
    assert drawn[0] == drawn[1], f"{drawn[0]} of {drawn[1]} plots drawn"
    assert_no_errors_and_only_local_requests(driver, page.parent.as_uri())


def test_the_agreement_matrix_fits_its_page_on_a_laptop_and_a_phone(driver, base_url, width):
    """At 1400 px and at 390 px the agreement figure is inside the content column, not cut off at its right edge."""
    open_page(driver, base_url + "agreement/")
    where = driver.execute_script("""const img = document.querySelector('img.vb-figure');
        const box = img.parentElement;
        return [img.naturalWidth, img.getBoundingClientRect().width, box.clientWidth, box.scrollWidth];""")
    natural, shown, box, scrolled = where
    assert natural > 0 and abs(shown - natural) <= 1  # drawn at its natural size (its text is 12 px)
    assert scrolled <= box + 1, f"at {width} px the {natural}-px figure overflows its {box}-px column"
    screenshot(driver, f"agreement-{width}px")


# -- the user site (issue 48): the leaderboard's twin, from a tiny user corpus ---------------------------------


def _serve(directory: Path) -> tuple[ThreadingHTTPServer, threading.Thread, str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(directory)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, thread, f"http://127.0.0.1:{server.server_address[1]}/"


@pytest.fixture(scope="module")
def user_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A user site as `data=`/`score` leave it, built with --strict and served: one user run (a copy of a committed
    pretrained classification record, so its per-sample scores are the committed file's) beside the committed
    rows of its board; its URL."""
    import subprocess
    import sys

    from harness.core import paths
    from harness.runs.records import read_records
    from harness.user.runs import render_user_site

    corpus = read_records(REPO / paths.CORPUS)
    mine = [r for r in corpus if r.status == "ok" and r.k_shot is None and r.task == "classification"
            and r.backbone is not None and not r.backbone.control and r.samples is not None][:1]
    if not mine:
        pytest.skip("the committed corpus has no pretrained classification run")
    workspace = tmp_path_factory.mktemp("user")
    render_user_site(mine, workspace=workspace, corpus=corpus, root=REPO)
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-f",
                            str(workspace / "mkdocs.yml")], capture_output=True, text=True, timeout=300,
                           env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert built.returncode == 0 and "WARNING" not in built.stderr, built.stdout + built.stderr
    server, thread, url = _serve(workspace / "site")
    try:
        yield url
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture(params=[1400, 390], ids=["1400px", "390px"])
def width(request, driver) -> Iterator[int]:
    """The window at a laptop's width and at a phone's (390 px), put back afterwards."""
    size = driver.get_window_size()
    driver.set_window_size(request.param, 900)
    try:
        yield request.param
    finally:
        driver.set_window_size(size["width"], size["height"])


CHART_FITS_JS = """return Array.from(document.querySelectorAll('img.vb-figure')).map(img => {
    const box = img.parentElement, r = img.getBoundingClientRect();
    return [img.getAttribute('src'), img.naturalWidth, r.width, box.clientWidth, box.scrollWidth];});"""


def test_user_site_board_shows_your_row_and_its_chart_whole(driver, user_site, width):
    """Your row is on the board as a table (not raw Markdown), and the interval chart is whole at its natural size
    (12-px text): at 390 px too, so no row's dot is cut off to the right."""
    open_page(driver, user_site + "tasks/classification/")
    boards = board_tables(driver)
    assert boards, "the user site's board is not a table"
    rows = [r.text for b in boards for r in b.find_elements(By.CSS_SELECTOR, "tbody tr")]
    assert any("@yours" in r for r in rows), rows
    assert driver.find_elements(By.CSS_SELECTOR, ".md-typeset details"), "the ??? info block is not folded"
    charts = driver.execute_script(CHART_FITS_JS)
    assert charts
    for src, natural, shown, box, scrolled in charts:
        assert natural > 0 and abs(shown - natural) <= 1, f"{src} is scaled ({shown} of {natural} px)"
        assert scrolled <= box + 1, f"at {width} px, {src} ({natural} px) is cut by its {box}-px column"
    assert_no_errors_and_only_local_requests(driver, user_site)
    screenshot(driver, f"user-board-{width}px")


def test_user_site_compare_keeps_the_pair_in_the_address_and_the_verdict_in_view(driver, user_site, width):
    open_page(driver, user_site + "compare/")
    labels = _options(driver, "A")
    yours = next(label for label in labels if label.endswith("@yours"))
    other = next(label for label in labels if label != yours and not label.endswith("@random"))
    _choose(driver, "A", yours)
    _choose(driver, "B", other)
    rows = driver.execute_script(VISIBLE_ROWS_JS, ".vb-compare")
    assert rows and all((r[2], r[3]) == (yours, other) for r in rows)
    chosen = driver.current_url
    assert "a=" in chosen and "b=" in chosen
    open_page(driver, chosen)  # a reload, or the link sent to someone, shows the same pair
    assert [driver.execute_script(f"return document.querySelector('select[name=\"{n}\"]').value") for n in "AB"] \
        == [yours, other]
    assert driver.execute_script(VISIBLE_ROWS_JS, ".vb-compare") == rows
    if width >= 1400:  # the values, the difference, Holm p and the verdict without scrolling sideways
        table = driver.find_element(By.CSS_SELECTOR, ".vb-compare table")
        where = _pinned_after_scrolling(driver, table, 8)
        assert where["tableWidth"] <= where["boxWidth"] + 1, f"the compare table scrolls at 1400 px: {where}"
        assert driver.execute_script(IN_VIEW_JS, table, 8)
    assert_no_errors_and_only_local_requests(driver, user_site)
    screenshot(driver, f"user-compare-{width}px")


def test_user_site_cross_task_table_lists_your_row_with_names_in_view(driver, user_site, width):
    open_page(driver, user_site)
    table = driver.find_element(By.CSS_SELECTOR, ".vb-crosstask table")
    rows = driver.execute_script(VISIBLE_ROWS_JS, ".vb-crosstask")
    assert any("@yours" in r[0] for r in rows), rows
    assert "user/corpus.jsonl" in driver.find_element(By.CSS_SELECTOR, ".md-content").text
    where = _pinned_after_scrolling(driver, table, 0)
    if where["tableWidth"] > where["boxWidth"]:
        assert where["scrolled"] > 0 and abs(where["cellLeft"] - where["boxLeft"]) <= 2
    else:
        assert where["cellRight"] <= where["boxRight"] + 1
    assert_no_errors_and_only_local_requests(driver, user_site)
    screenshot(driver, f"user-home-{width}px")
