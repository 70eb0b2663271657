"""The course's static website (`make site`, scripts/build_site.py), built once for this module.

In headless Chromium, served by a local http.server with every other request aborted (as if
offline): each page loads with no console error and no failed request, its pictures load, its
math is typeset by the site's own MathJax, and search finds a lesson. Then, from the files: no
internal link or anchor is broken, each lesson and exercise page offers its notebook and says how
to run it, and no line of the instructor's solutions or hidden tests reaches the site.
Screenshots of the home page, lesson 06 and exercise set 06 go to test-artifacts/site/.
"""

from __future__ import annotations

import functools
import html
import http.server
import json
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Iterator
from urllib.parse import unquote, urlsplit

import pytest

pytestmark = pytest.mark.slow  # a build and a browser over every page: about a minute

ROOT = Path(__file__).resolve().parent.parent
HTML = ROOT / "site" / "_build" / "html"
MATHJAX = ROOT / ".site" / "node_modules" / "mathjax"
SHOTS = ROOT / "test-artifacts" / "site"
LESSONS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
SETS = sorted((ROOT / "exercises").glob("*/*_exercises.ipynb"))
BLOCK = re.compile(r"### BEGIN (SOLUTION|HIDDEN TESTS)\n(.*?)### END \1", re.S)
MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION", "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")
# A line shorter than this (`return out`, `)`) could be anyone's: only longer ones are looked for.
DISTINCTIVE = 16


@pytest.fixture(scope="module")
def site() -> Path:
    """Build the site from the working tree, as `make site` does (it installs MathJax first)."""
    if not (MATHJAX / "es5" / "tex-chtml-full.js").is_file():
        pytest.fail(f"no MathJax in {MATHJAX}: `make site` installs it (npm ci in .site/)")
    subprocess.run([sys.executable, str(ROOT / "scripts" / "build_site.py"), "--mathjax", str(MATHJAX)],
                   check=True, cwd=ROOT)
    return HTML


@pytest.fixture(scope="module")
def server(site: Path) -> Iterator[str]:
    """A local web server on the built site: its base URL."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_port}"
    httpd.shutdown()
    httpd.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # a request per line would drown pytest's output
        pass


def pages(site: Path) -> list[Path]:
    """The site's pages (not the theme's template pieces in _static)."""
    return sorted(p for p in site.rglob("*.html") if p.relative_to(site).parts[0] != "_static")


def local(url: str) -> bool:
    """A request that stays on this machine (the test's server, the built files, inline data)."""
    return urlsplit(url).hostname in ("127.0.0.1", "localhost") or url.startswith(("data:", "blob:", "about:", "file:"))


@pytest.fixture(scope="module")
def visits(browser, server: str, site: Path) -> dict[str, dict]:
    """Every page opened offline: what went wrong (console errors, failed requests), and what it shows."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    # Offline: anything that would leave the machine is aborted, and so counts as a failed request.
    context.route("**/*", lambda route: route.continue_() if local(route.request.url) else route.abort())
    page = context.new_page()
    problems: list[str] = []
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url} ({r.failure})"))
    page.on("response", lambda r: problems.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None)
    seen = {}
    for path in pages(site):
        name = path.relative_to(site).as_posix()
        problems.clear()
        # networkidle: MathJax's fonts are fetched after load; a page left earlier would abort them.
        page.goto(f"{server}/{name}", wait_until="networkidle")
        seen[name] = page.evaluate(PAGE_REPORT) | {"problems": list(problems)}
    context.close()
    return seen

# Run in the page once it has loaded: wait for MathJax's typesetting and every picture, then report.
PAGE_REPORT = """async () => {
  if (window.MathJax && MathJax.startup) await MathJax.startup.promise;
  await document.fonts.ready;
  const images = [...document.images];
  for (const img of images) { img.loading = 'eager'; await img.decode().catch(() => {}); }
  // The visible prose: code is left out (a regular expression may hold a backslash-parenthesis).
  const body = document.body.cloneNode(true);
  body.querySelectorAll('script, style, pre, code, mjx-container, mjx-assistive-mml').forEach(e => e.remove());
  return {
    images: images.map(img => ({src: img.currentSrc || img.src, width: img.naturalWidth})),
    text: body.textContent,
    math: document.querySelectorAll('mjx-container').length,
    mathErrors: [...document.querySelectorAll('mjx-merror')].map(e => e.textContent),
    snapshots: document.querySelectorAll('.tr-snapshot').length,
  };
}"""


def test_every_page_loads_offline_without_errors(visits: dict[str, dict]) -> None:
    assert len(visits) >= len(LESSONS) + len(SETS) + 2, sorted(visits)  # + the home and search pages
    broken = {name: seen["problems"] for name, seen in visits.items() if seen["problems"]}
    assert not broken, json.dumps(broken, indent=1)


def test_every_picture_loads(visits: dict[str, dict]) -> None:
    images = [(name, img) for name, seen in visits.items() for img in seen["images"]]
    blank = [f"{name}: {img['src'][:120]}" for name, img in images if img["width"] == 0]
    assert not blank, "\n".join(blank)
    # Each lesson shows at least its figures (PNG outputs); widget pictures add SVGs.
    for lesson in LESSONS:
        figures = sum("image/png" in out.get("data", {}) for cell in json.loads(lesson.read_text())["cells"]
                      for out in cell.get("outputs", []))
        shown = len(visits[f"notebooks/{lesson.stem}.html"]["images"])
        assert shown >= figures > 0, f"{lesson.name}: {shown} pictures shown, {figures} figures in the notebook"


def test_math_is_typeset(visits: dict[str, dict]) -> None:
    raw = {name: d for name, seen in visits.items() for d in ("\\(", "\\[", "$$") if d in seen["text"]}
    assert not raw, f"TeX left as source: {raw}"
    errors = {name: seen["mathErrors"] for name, seen in visits.items() if seen["mathErrors"]}
    assert not errors, f"MathJax could not typeset: {errors}"
    for name in [f"notebooks/{lesson.stem}.html" for lesson in LESSONS] + ["docs/glossary.html"]:
        assert visits[name]["math"] > 0, f"{name}: no typeset math"


def test_widgets_show_their_static_picture(visits: dict[str, dict]) -> None:
    """A widget's place shows the picture the lesson stored for it, never an error."""
    for lesson in LESSONS:
        stored = sum("tr-snapshot" in "".join(out.get("data", {}).get("text/html", ""))
                     for cell in json.loads(lesson.read_text())["cells"] for out in cell.get("outputs", []))
        seen = visits[f"notebooks/{lesson.stem}.html"]
        assert seen["snapshots"] == stored > 0, f"{lesson.name}: {seen['snapshots']} of {stored} widget pictures"
        assert "Error displaying widget" not in seen["text"]


@pytest.mark.parametrize("over", ["http", "file"])
def test_search_finds_a_lesson_by_a_word_of_its_text(browser, server: str, site: Path, over: str) -> None:
    """Search works served and opened from disk (where a browser refuses to fetch other pages)."""
    base = server if over == "http" else site.as_uri()
    page = browser.new_page()
    page.route("**/*", lambda route: route.continue_() if local(route.request.url) else route.abort())
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url}"))
    # "Hopfield" is in lesson 10's prose; the results list its page.
    page.goto(f"{base}/search.html?q=Hopfield", wait_until="networkidle")
    page.locator("#search-results a[href*='10_attention_graph']").first.wait_for(timeout=20_000)
    page.close()
    assert not problems, problems


def test_a_lesson_opened_from_disk(browser, site: Path) -> None:
    """`make site` says to open index.html: from disk too, a lesson's math and pictures load."""
    page = browser.new_page()
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url}"))
    page.goto(f"{site.as_uri()}/notebooks/06_copying.html", wait_until="networkidle")
    seen = page.evaluate(PAGE_REPORT)
    page.close()
    assert not problems, problems
    assert seen["math"] > 0 and all(img["width"] > 0 for img in seen["images"])


def test_screenshots(browser, server: str) -> None:
    """Pictures to look at (test-artifacts/site/), 1280 pixels wide: the home page's top, exercise set
    06 whole, and lesson 06's top, its first figure, its widget's picture and a displayed formula."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    shots = {"home.png": ("index.html", "h1"), "exercises-06.png": ("exercises/06_copying/06_copying_exercises.html", None),
             "lesson-06.png": ("notebooks/06_copying.html", "h1"),
             "lesson-06-figure.png": ("notebooks/06_copying.html", ".cell_output img"),
             "lesson-06-widget.png": ("notebooks/06_copying.html", ".tr-snapshot"),
             "lesson-06-math.png": ("notebooks/06_copying.html", "mjx-container[display='true']")}
    for shot, (name, selector) in shots.items():
        # A fresh page each time: the theme keeps the sidebar's scroll from the page before.
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        context.route("**/*", lambda route: route.continue_() if local(route.request.url) else route.abort())
        page = context.new_page()
        page.goto(f"{server}/{name}", wait_until="networkidle")
        page.evaluate(PAGE_REPORT)  # typeset and decoded
        if selector:
            # A little of what comes before it too (Playwright's own scrolling waits for the element
            # to stop moving, which a figure in a scrolling output box never reports).
            page.locator(selector).first.evaluate("e => { e.scrollIntoView({block: 'start'}); window.scrollBy(0, -120); }")
        page.screenshot(path=str(SHOTS / shot), full_page=selector is None)
        context.close()
        assert (SHOTS / shot).stat().st_size > 10_000


def links(page: Path) -> list[str]:
    """Every href and src in an HTML file."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(page.read_text(), "html.parser")
    return [tag[attr] for attr in ("href", "src") for tag in soup.find_all(attrs={attr: True})]


@functools.lru_cache(maxsize=None)
def anchors(page: Path) -> frozenset[str]:
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(page.read_text(), "html.parser")
    return frozenset(tag.get("id") or tag.get("name") for tag in soup.find_all(attrs={"id": True})) | \
        frozenset(tag["name"] for tag in soup.find_all("a", attrs={"name": True}))


def broken_link(site: Path, page: Path, url: str) -> str | None:
    """Why a link of `page` is broken, or None (a link off the site is not checked: it is not ours)."""
    parts = urlsplit(url)
    if parts.scheme or url.startswith("//"):
        return None  # https:, mailto:, data:
    target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
    if target.is_dir():
        target = target / "index.html"
    if not target.is_file() or not target.is_relative_to(site):
        return "no such file"
    if parts.fragment and target.suffix == ".html" and unquote(parts.fragment) not in anchors(target):
        return f"no anchor #{parts.fragment}"
    return None


def test_no_internal_link_is_broken(site: Path) -> None:
    checked, broken = 0, []
    for page in pages(site):
        for url in links(page):
            why = broken_link(site, page, url)
            checked += 1
            if why:
                broken.append(f"{page.relative_to(site)}: {url}: {why}")
    assert checked > 1000, checked  # every page links the theme's files and the other pages
    assert not broken, "\n".join(broken)


def test_lesson_and_exercise_pages_offer_their_notebook(site: Path) -> None:
    for notebook in LESSONS + SETS:
        relative = notebook.relative_to(ROOT)
        page = site / relative.with_suffix(".html")
        from bs4 import BeautifulSoup

        text = words(BeautifulSoup(page.read_text(), "html.parser").get_text(" "))
        assert "run make lab in it" in text, f"{page.name}: says not how to run it"
        downloads = [u for u in links(page) if "_downloads" in u and u.endswith(notebook.name)]
        assert downloads, f"{page.name}: no download link for {notebook.name}"
        offered = (page.parent / unquote(downloads[0])).resolve()
        assert offered.read_bytes() == notebook.read_bytes(), f"{page.name} offers another {notebook.name}"


def code_lines(notebook: Path, kind: str) -> list[str]:
    """The stripped lines between the notebook's `### BEGIN <kind>` and `### END <kind>` markers."""
    cells = json.loads(notebook.read_text())["cells"]
    return [line.strip() for cell in cells for found, block in BLOCK.findall("".join(cell["source"]))
            if found == kind for line in block.splitlines()]


def words(text: str) -> str:
    """Text with its HTML entities decoded and every run of blanks made one space."""
    return " ".join(html.unescape(text).split())


def site_text(site: Path, under: tuple[str, ...] = ()) -> str:
    """All the text the site holds (or its files whose path starts with one of `under`), as a reader
    or a download would get it: each file's own text, each page's words without their markup
    (highlighted code is split into <span>s), and each notebook's cells."""
    from bs4 import BeautifulSoup

    texts = []
    for path in site.rglob("*"):
        if under and not path.relative_to(site).as_posix().startswith(under):
            continue
        if not path.is_file() or path.suffix in (".png", ".jpg", ".svg", ".woff", ".woff2", ".ttf", ".ico"):
            continue
        raw = path.read_text(errors="replace")
        texts.append(words(raw))
        if path.suffix == ".html":
            # No separator: highlighted code's <span>s then join back into the line as written.
            texts.append(words(BeautifulSoup(raw, "html.parser").get_text()))
        if path.suffix in (".ipynb", ".txt") and raw.lstrip().startswith("{"):
            with_cells = json.loads(raw).get("cells", [])
            texts.append(words("\n".join("".join(c.get("source", "")) for c in with_cells)))
    return "\n".join(texts)


def test_no_solution_or_hidden_test_reaches_the_site(site: Path) -> None:
    """The answer key is the instructor's solutions/ (grading/answer_key.py runs their solution cells;
    scripts/grade.py's answer_key_lines are their hidden tests): none of its lines is on the site."""
    lessons = "\n".join(json.dumps(json.loads(p.read_text())["cells"]) for p in LESSONS)
    solutions = sorted((ROOT / "solutions").glob("*/*_exercises.ipynb"))
    assert len(solutions) == len(SETS) == 10
    secret = {kind: [line for nb in solutions for line in code_lines(nb, kind)] for kind in ("SOLUTION", "HIDDEN TESTS")}
    # A line in every set's hidden tests is the grader's mechanism, which the instructors' guide
    # describes (`from course_lib.checks.hand_in import hand_in`), not an answer; nor is a line the
    # lessons also show.
    common = {line for line in secret["HIDDEN TESTS"] if sum(line in code_lines(nb, "HIDDEN TESTS")
                                                               for nb in solutions) == len(solutions)}
    secret = {kind: {line for line in lines if len(line) >= DISTINCTIVE and line not in common
                     and json.dumps(line)[1:-1] not in lessons} for kind, lines in secret.items()}
    # Not vacuous: the solutions have answers and hidden tests to look for...
    assert len(secret["SOLUTION"]) >= 100 and len(secret["HIDDEN TESTS"]) >= 30, {k: len(v) for k, v in secret.items()}
    text = site_text(site)
    # ...and the lines of a lesson's code cell, as distinctive, are found in its rendered page (where
    # they are highlighted, split into <span>s) by the same search.
    lesson = LESSONS[5]
    shown = [line.strip() for cell in json.loads(lesson.read_text())["cells"] if cell["cell_type"] == "code"
             for line in "".join(cell["source"]).splitlines() if len(line.strip()) >= DISTINCTIVE]
    page = site_text(site, (f"notebooks/{lesson.stem}.html",))
    assert len(shown) > 100 and all(words(line) in page for line in shown), \
        f"the search cannot see a lesson's code: {[line for line in shown if words(line) not in page][:3]}"
    leaked = [f"{kind}: {line}" for kind, lines in secret.items() for line in sorted(lines) if words(line) in text]
    # nbgrader's markers would mean an instructor's notebook was published; the guides may name them.
    notebooks = site_text(site, ("notebooks/", "exercises/", "_downloads/", "_sources/notebooks/",
                                 "_sources/exercises/", "_images/"))
    leaked += [marker for marker in MARKERS if marker in notebooks]
    assert not leaked, "\n".join(leaked)
    print(f"looked for {sum(map(len, secret.values()))} lines of solutions and hidden tests: none found")


def test_exercise_sets_are_student_versions() -> None:
    """What the site publishes from exercises/ holds no solution and no hidden test."""
    for notebook in SETS:
        text = notebook.read_text()
        assert not [m for m in MARKERS if m in text], notebook
        solution = ROOT / "solutions" / notebook.parent.name / notebook.name
        for kind in ("SOLUTION", "HIDDEN TESTS"):
            found = [line for line in code_lines(solution, kind) if len(line) >= DISTINCTIVE and line in text]
            assert not found, f"{notebook.name} holds the solution's {found[:3]}"
