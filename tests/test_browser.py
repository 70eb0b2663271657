"""A real browser: JupyterLab serves the course as `make lab` serves it to a learner. It offers
a learner's tools only (the assignment list and Validate; no formgrader, no Create Assignment,
no news pop-up), while the instructor's JupyterLab keeps them. Lesson 01, before anything runs,
shows its widget cells' static snapshot; after Run All, a slider redraws the widget. From the
lesson's opening cell a learner follows the link to exercise set 01 and runs a check as a
newcomer does: before the setup cell, on the stub, on a wrong answer and on a right one."""

from __future__ import annotations

import json
import shutil
import statistics
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Iterator

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from course_lib import exercise_notebook  # noqa: E402
from lab_driver import jupyterlab, open_lesson, run_lesson  # noqa: E402

ARTIFACTS = ROOT / "test-artifacts"
LESSON = "notebooks/01_attention_scores.ipynb"
EXERCISES = f"exercises/01_attention_scores/{exercise_notebook('01_attention_scores')}"
# The set the learner's-tools test validates: not set 01, whose kernel another test wants fresh.
VALIDATED = f"exercises/02_masks/{exercise_notebook('02_masks')}"
RAW_REPR, WIDGET_ERROR = "VBox(children=", "Error displaying widget"
NEWS = "Would you like to get notified about official Jupyter news?"
ANNOUNCEMENTS = "@jupyterlab/apputils-extension:announcements"  # the plugin that asks it


def served_course(folder: Path) -> Path:
    """A copy of the lessons, exercise sets and README in `folder`: JupyterLab writes checkpoints
    (and may autosave) beside what it opens."""
    for name in ("notebooks", "exercises"):
        shutil.copytree(ROOT / name, folder / name)
    shutil.copy(ROOT / "README.md", folder)
    return folder


@pytest.fixture(scope="module")
def learner_lab(tmp_path_factory) -> Iterator[str]:
    """One learner's JupyterLab, as `make lab` starts it, for the module's tests: its URL pattern."""
    ARTIFACTS.mkdir(exist_ok=True)
    with jupyterlab(served_course(tmp_path_factory.mktemp("course")), ARTIFACTS / "jupyterlab.log") as url:
        yield url


@pytest.fixture
def page(browser) -> Iterator[object]:
    """A fresh page of headless Chromium; the test fails if its JavaScript raised."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    yield page
    context.close()
    assert not errors, errors


def server_get(url: str, path: str) -> int:
    """The HTTP status the server behind a lab URL gives `path` (with the URL's token)."""
    parts = urllib.parse.urlsplit(url)
    token = urllib.parse.parse_qs(parts.query)["token"][0]
    try:
        with urllib.request.urlopen(f"{parts.scheme}://{parts.netloc}/{path}?token={token}") as reply:
            return reply.status
    except urllib.error.HTTPError as error:
        return error.code


def lab_tools(page) -> dict[str, object]:
    """What the open notebook's JupyterLab offers a user: the Nbgrader menu's entries, the side
    bars' panels, whether the notebook's toolbar has Validate, and the plugins turned off."""
    page.locator(".lm-MenuBar-itemLabel", has_text="Nbgrader").click()
    entries = page.locator(".lm-Menu-item:visible .lm-Menu-itemLabel").all_inner_texts()
    page.keyboard.press("Escape")
    panels = page.locator(".jp-SideBar .lm-TabBar-tab").evaluate_all(
        "tabs => tabs.map(t => t.getAttribute('title') || t.textContent)")
    toolbar = page.locator(".jp-NotebookPanel:visible .jp-NotebookPanel-toolbar")
    disabled = page.evaluate(
        "() => JSON.parse(document.getElementById('jupyter-config-data').textContent).disabledExtensions")
    return {"menu": entries, "panels": panels, "disabled": disabled,
            "validate": toolbar.get_by_role("button", name="Validate").count() == 1}


def test_make_lab_shows_a_learner_only_the_learners_tools(learner_lab, page):
    open_lesson(page, learner_lab.format(path=VALIDATED))
    tools = lab_tools(page)
    assert tools["menu"] == ["Assignment List"], f"the learner's Nbgrader menu: {tools['menu']}"
    assert not any("Create Assignment" in panel for panel in tools["panels"]), tools["panels"]
    assert tools["validate"], "the notebook toolbar has no Validate button"
    # The news question comes from one plugin, which asks as soon as the page is restored (the
    # instructor's test below waits for it): it is off, and no question showed.
    assert ANNOUNCEMENTS in tools["disabled"], tools["disabled"]
    page.wait_for_timeout(2000)
    assert page.get_by_text(NEWS).count() == 0, "the news question showed"
    page.screenshot(path=str(ARTIFACTS / "learner-lab.png"))
    # The server parts go with the panels: the formgrader's pages are not served at all.
    assert server_get(learner_lab, "formgrader") == 404
    # What stays works: the assignment list opens, and Validate validates the set.
    page.locator(".lm-MenuBar-itemLabel", has_text="Nbgrader").click()
    page.locator(".lm-Menu-item:visible .lm-Menu-itemLabel", has_text="Assignment List").click()
    page.locator(".lm-TabBar-tab:visible", has_text="Assignments").wait_for()
    page.locator(".lm-TabBar-tab:visible", has_text="02_masks").click()
    page.locator(".jp-NotebookPanel:visible .jp-NotebookPanel-toolbar").get_by_role(
        "button", name="Validate").click()
    # The set's stubs are unanswered: Validate runs the set and reports its failing cells.
    page.locator(".jp-Dialog").get_by_text("The following cell failed").first.wait_for(timeout=90_000)
    page.screenshot(path=str(ARTIFACTS / "learner-lab-validate.png"))


def test_the_instructors_lab_keeps_the_formgrader_and_create_assignment(page, tmp_path):
    """`make instructor-lab`'s JupyterLab: the same checks find the instructor's tools, and the
    news question when no answer to it is saved (so their absence above is not a blind spot)."""
    with jupyterlab(served_course(tmp_path), ARTIFACTS / "jupyterlab-instructor.log",
                    instructor=True) as url:
        assert server_get(url, "formgrader") != 404
        # The setting as a fresh settings folder has it: the news question not yet answered.
        parts = urllib.parse.urlsplit(url)
        token = urllib.parse.parse_qs(parts.query)["token"][0]
        request = urllib.request.Request(
            f"{parts.scheme}://{parts.netloc}/lab/api/settings/@jupyterlab/apputils-extension:notification"
            f"?token={token}", method="PUT", data=json.dumps({"raw": '{"fetchNews": "none"}'}).encode(),
            headers={"Content-Type": "application/json"})
        urllib.request.urlopen(request).close()
        open_lesson(page, url.format(path=VALIDATED))
        page.get_by_text(NEWS).wait_for(timeout=30_000)
        tools = lab_tools(page)
    assert {"Formgrader", "Create assignment"} <= set(tools["menu"]), tools["menu"]
    assert any("Create Assignment" in panel for panel in tools["panels"]), tools["panels"]
    assert tools["validate"] and ANNOUNCEMENTS not in tools["disabled"]


def assert_snapshots_before_run(page) -> None:
    """Every widget cell of the unrun (untrusted) notebook shows its static picture: the
    "run the cell" line and images that loaded, not raw repr text nor a widget error."""
    outputs = page.locator(".jp-Cell .jp-OutputArea-output")
    outputs.first.wait_for(timeout=30_000)
    text = page.locator(".jp-Notebook").inner_text()
    assert RAW_REPR not in text, "a widget cell shows its raw VBox repr before Run All"
    assert WIDGET_ERROR not in text, "a widget cell shows a widget error before Run All"
    notes = page.get_by_text("run the cell to make it live")
    assert notes.count() >= 1, "no widget snapshot ('run the cell to make it live') shown"
    note = notes.first
    note.scroll_into_view_if_needed()
    snapshot = page.locator(".jp-OutputArea-output", has=note).first
    pictures = snapshot.locator("img")
    assert pictures.count() >= 1, "the snapshot's figures were stripped"
    loaded = pictures.evaluate_all(
        "imgs => imgs.map(i => i.complete && i.naturalWidth > 0)")
    assert all(loaded), f"a snapshot figure did not load: {loaded}"
    assert page.locator(".tr-live").count() == 0, "a live widget showed before a cell ran"


def test_lesson_01_shows_snapshots_then_live_widgets_in_jupyterlab(learner_lab, page):
    url = learner_lab
    open_lesson(page, url.format(path=LESSON))
    try:
        assert_snapshots_before_run(page)
    finally:
        page.screenshot(path=str(ARTIFACTS / "lesson01-before.png"))
    times = run_lesson(page, url.format(path=LESSON), presses=10, navigate=False,
                       screenshot=ARTIFACTS / "lesson01-after.png")
    after = page.locator(".jp-Notebook").inner_text()
    assert WIDGET_ERROR not in after, "a widget shows an error after Run All"
    stderr = page.locator(
        ".jp-RenderedText[data-mime-type='application/vnd.jupyter.stderr']")
    assert stderr.count() == 0, ("a cell wrote an error in the browser: "
                                 f"{stderr.first.inner_text()[:500]}")
    (ARTIFACTS / "browser_roundtrip.json").write_text(json.dumps({"ms": times}, indent=1))
    print(f"widget round trip over {len(times)} presses: median "
          f"{statistics.median(times):.1f} ms, max {max(times):.1f} ms")
    assert len(times) == 10 and all(t > 0 for t in times)


# softmax_rows as a learner writes it: over the wrong axis, then right.
WRONG = ("def softmax_rows(x: Tensor) -> Tensor:\n    e = torch.exp(x - x.amax(0, keepdim=True))\n"
         "    return e / e.sum(0, keepdim=True)")
RIGHT = WRONG.replace("(0, keepdim", "(-1, keepdim")


def wait_for_kernel(url: str, path: str, timeout: float = 90) -> None:
    """Wait until the server's session of `path` has an idle kernel: a cell run before it has
    one is dropped. (The status bar may still show the previous tab's kernel.)"""
    parts = urllib.parse.urlsplit(url)
    token = urllib.parse.parse_qs(parts.query)["token"][0]
    deadline = time.time() + timeout
    while time.time() < deadline:
        with urllib.request.urlopen(f"{parts.scheme}://{parts.netloc}/api/sessions?token={token}") as reply:
            sessions = json.load(reply)
        if any(s["path"] == path and s["kernel"]["execution_state"] == "idle" for s in sessions):
            return
        time.sleep(0.3)
    raise AssertionError(f"no idle kernel for {path} within {timeout} s")


def notebook_cells(page):
    return page.locator(".jp-NotebookPanel:visible .jp-Notebook .jp-Cell")


def run_cell(page, index: int):
    """Select cell `index` of the visible notebook, press Shift+Enter, wait for its run to end:
    a new execution count in its prompt (counts only grow in a kernel)."""
    cell = notebook_cells(page).nth(index)
    cell.scroll_into_view_if_needed()
    prompt = cell.locator(".jp-InputPrompt").first
    before = prompt.evaluate("p => p.textContent")
    prompt.click()
    page.keyboard.press("Shift+Enter")
    page.wait_for_function("([p, before]) => /\\[\\d+\\]/.test(p.textContent) && p.textContent !== before",
                           arg=[prompt.element_handle(), before], timeout=60_000)
    return cell


def type_answer(page, index: int, source: str) -> None:
    """Replace the code of cell `index`, as a paste does (no auto-indent, no closing brackets)."""
    editor = notebook_cells(page).nth(index).locator(".cm-content")
    editor.click()
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(source)
    assert editor.inner_text() == source


def screenshot_cells(page, cells: list, path: Path) -> None:
    """One picture of consecutive cells: the answer and the check's output under it."""
    boxes = [cell.bounding_box() for cell in cells]
    top, bottom = min(b["y"] for b in boxes), max(b["y"] + b["height"] for b in boxes)
    left, right = min(b["x"] for b in boxes), max(b["x"] + b["width"] for b in boxes)
    page.screenshot(path=str(path), clip={"x": left, "y": top, "width": right - left, "height": bottom - top})


def test_a_learner_follows_the_lesson_to_its_exercises_and_checks_an_answer(learner_lab, page):
    url = learner_lab
    exercise = nbformat.read(ROOT / EXERCISES, as_version=4)
    index = {c.metadata["nbgrader"]["grade_id"]: i for i, c in enumerate(exercise.cells)}
    open_lesson(page, url.format(path=LESSON))
    # (a) The lesson's opening cell links to its exercise set, and the link opens it.
    opening = notebook_cells(page).first
    opening.screenshot(path=str(ARTIFACTS / "lesson01-opening.png"))
    link = opening.get_by_role("link", name="exercise set 01")
    assert link.count() == 1, "the opening cell of lesson 01 has no link 'exercise set 01'"
    assert urllib.parse.urlsplit(link.get_attribute("href")).path.endswith("/" + EXERCISES)
    link.click()
    page.locator(".jp-NotebookPanel:visible").get_by_role("heading", name="Exercise set 01").wait_for()
    # Two tabs, each with its own name: the lesson's and the exercises'.
    labels = page.locator("#jp-main-dock-panel .lm-TabBar-tabLabel").all_inner_texts()
    assert labels.count(Path(LESSON).name) == 1 and labels.count(Path(EXERCISES).name) == 1, labels
    wait_for_kernel(url, EXERCISES)
    answer, check = index["softmax_rows"], index["softmax_rows_check"]
    # (b) The check cell run first, in a fresh kernel: one line naming the cell to run.
    output = run_cell(page, check).locator(".jp-OutputArea-output")
    assert output.inner_text().strip() == "Run the first code cell (setup) first, then your `softmax_rows` cell."
    assert output.locator(".ansi-red-fg").count() == 1
    screenshot_cells(page, [notebook_cells(page).nth(check)], ARTIFACTS / "exercise01-setup-skipped.png")
    # Then as the intro says: the setup cell, the stub, the check.
    run_cell(page, index["setup"])
    run_cell(page, answer)
    assert "`softmax_rows` is not written yet" in run_cell(page, check).inner_text()
    screenshot_cells(page, [notebook_cells(page).nth(i) for i in (answer, check)],
                     ARTIFACTS / "exercise01-stub.png")
    type_answer(page, answer, WRONG)
    run_cell(page, answer)
    # A wrong answer: first the symptom, with the input spelled out; the likely bug stays folded.
    shown = run_cell(page, check)
    hint = shown.locator("details")
    hint.locator("summary").wait_for()
    text = shown.inner_text()
    assert "softmax_rows(LOGITS): wrong values." in text and "LOGITS, shape (2, 3): [[1.0, 2.0, 3.0]" in text
    assert "Show the likely bug" in text and "wrong axis" not in text, text
    screenshot_cells(page, [notebook_cells(page).nth(i) for i in (answer, check)],
                     ARTIFACTS / "exercise01-wrong.png")
    # Then, asked for with one click, the likely bug.
    hint.locator("summary").click()
    page.wait_for_function("d => d.open", arg=hint.element_handle())
    assert "Likely bug: softmax over the wrong axis?" in hint.inner_text()
    screenshot_cells(page, [notebook_cells(page).nth(i) for i in (answer, check)],
                     ARTIFACTS / "exercise01-wrong-hint-opened.png")
    # (c) A right answer: the check prints its one green line, and nothing else.
    type_answer(page, answer, RIGHT)
    run_cell(page, answer)
    output = run_cell(page, check).locator(".jp-OutputArea-output")
    assert output.inner_text().strip() == "✔ softmax_rows: passed"
    assert output.locator(".ansi-green-fg").inner_text() == "✔ softmax_rows: passed"
    screenshot_cells(page, [notebook_cells(page).nth(i) for i in (answer, check)],
                     ARTIFACTS / "exercise01-right.png")


def test_the_last_lessons_closing_links_open_the_exercises_lesson_01_and_the_readme(learner_lab, page):
    """The links a lesson ends with (tests/test_lessons.py checks every lesson's) open in JupyterLab,
    each in a tab of its own; here the last lesson's, which lead back to the start."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    open_lesson(page, learner_lab.format(path="notebooks/10_attention_graph.ipynb"))
    # JupyterLab draws a long notebook's cells as they come into view, later on a busy machine:
    # scroll to the last cell drawn until the closing cell (told by the link only it has) is drawn.
    closing = notebook_cells(page).filter(has=page.get_by_role("link", name="lesson 01"))
    deadline = time.monotonic() + 60
    while closing.count() != 1:
        assert time.monotonic() < deadline, "lesson 10's closing cell was not drawn in 60 s of scrolling"
        notebook_cells(page).last.scroll_into_view_if_needed()
        page.wait_for_timeout(300)
    current = page.locator(".lm-TabBar-tab.lm-mod-current[data-type='document-title']")
    visible = page.locator(".jp-NotebookPanel:visible")
    for name, opened in (("exercise set 10", visible.get_by_role("heading", name="Exercise set 10")),
                         ("lesson 01", visible.get_by_role("heading", name="01 · Attention scores")),
                         ("README", current.filter(has_text="README.md"))):
        # back to the lesson's tab, told by its path (the exercise set's tab may share its name)
        page.locator(".lm-TabBar-tab[title*='Path: notebooks/10_attention_graph.ipynb']").click()
        link = closing.get_by_role("link", name=name)
        try:  # the tab, shown again, may redraw its cells
            link.wait_for(timeout=30_000)
        except PlaywrightTimeout:
            pytest.fail(f"lesson 10's closing cell has no link {name!r}")
        assert link.count() == 1, f"lesson 10's closing cell has {link.count()} links {name!r}"
        link.click()
        opened.first.wait_for()
