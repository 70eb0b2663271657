"""A real browser: JupyterLab serves the course as `make lab` serves it to a learner. It opens on
the start page (START.md), with the course's folders in the file browser, names whole. It offers a
learner's tools only (Validate, and the assignment list where a class's exchange exists; no
formgrader, no Create Assignment, no news pop-up), while the instructor's JupyterLab keeps them.
Validate's dialog shows its summary without scrolling. Lesson 01, before anything runs,
shows its widget cells' static snapshot; after Run All, a slider redraws the widget. From the
lesson's opening cell a learner follows the link to exercise set 01 and runs a check as a
newcomer does: before the setup cell, on the stub, on a wrong answer and on a right one."""

from __future__ import annotations

import json
import re
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
from course_lib.checks import HINT_IN_NOTEBOOK, SHOW_HINT  # noqa: E402
from exercise_harness import mutants  # noqa: E402
from lab_driver import jupyterlab, open_lesson, run_lesson  # noqa: E402

ARTIFACTS = ROOT / "test-artifacts"
SHOTS = ARTIFACTS / "lab"  # what a learner sees first, the assignment list, Validate's dialog
LESSON = "notebooks/01_attention_scores.ipynb"
EXERCISES = f"exercises/01_attention_scores/{exercise_notebook('01_attention_scores')}"
# The set the learner's-tools test validates: not set 01, whose kernel another test wants fresh.
VALIDATED = f"exercises/02_masks/{exercise_notebook('02_masks')}"
RAW_REPR, WIDGET_ERROR = "VBox(children=", "Error displaying widget"
NEWS = "Would you like to get notified about official Jupyter news?"
ANNOUNCEMENTS = "@jupyterlab/apputils-extension:announcements"  # the plugin that asks it


# Set 01 as a learner has it half-way: softmax_rows answered wrongly, the other exercises not yet.
ONE_WRONG = "exercises/01_attention_scores/01_one_wrong_answer.ipynb"
# What nbgrader's assignment list says when it has no exchange to read.
NO_EXCHANGE = ("Error fetching", "does not exist")


def served_course(folder: Path) -> Path:
    """A copy of the start page, lessons, exercise sets and README in `folder` (JupyterLab writes
    checkpoints, and may autosave, beside what it opens), and set 01 with one wrong answer."""
    for name in ("notebooks", "exercises"):
        shutil.copytree(ROOT / name, folder / name)
    for name in ("README.md", "START.md"):
        shutil.copy(ROOT / name, folder)
    nb = nbformat.read(ROOT / EXERCISES, as_version=4)
    for cell in nb.cells:
        if cell.metadata["nbgrader"]["grade_id"] == "softmax_rows":
            cell.source = mutants("01_attention_scores")["softmax_rows"]["wrong axis"]
    nbformat.write(nb, folder / ONE_WRONG)
    return folder


def exchange_config(folder: Path, exchange: Path) -> Path:
    """A folder to start JupyterLab in whose nbgrader_config.py names `exchange` (nbgrader reads
    the configuration in the folder the server starts in): a class's, or none if it does not exist."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "nbgrader_config.py").write_text(
        f"c = get_config()\nc.Exchange.root = {str(exchange)!r}\nc.CourseDirectory.course_id = 'transformer-roots'\n")
    return folder


@pytest.fixture(scope="module")
def learner_lab(tmp_path_factory) -> Iterator[str]:
    """One learner's JupyterLab, as `make lab` starts it, for the module's tests: its URL pattern.
    A learner alone: the exchange nbgrader is configured with does not exist."""
    ARTIFACTS.mkdir(exist_ok=True)
    SHOTS.mkdir(exist_ok=True)
    alone = exchange_config(tmp_path_factory.mktemp("alone"), Path("/nonexistent/nbgrader/exchange"))
    with jupyterlab(served_course(tmp_path_factory.mktemp("course")), ARTIFACTS / "jupyterlab.log",
                    cwd=alone) as url:
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
    """What the open notebook's JupyterLab offers a user: the Nbgrader menu's entries (None: no
    such menu), the side bars' panels, whether the notebook's toolbar has Validate, and the
    plugins turned off."""
    entries = None
    if page.locator(".lm-MenuBar-itemLabel", has_text="Nbgrader").count():
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


def base_url(url: str) -> str:
    """The server's own address, with the token, from a lab URL pattern: what `make lab` opens."""
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}/?token={urllib.parse.parse_qs(parts.query)['token'][0]}"


def cut_names(page) -> dict[str, tuple[int, int]]:
    """The file browser's entries whose name does not fit its box: name -> (needed, shown) px."""
    names = page.locator(".jp-DirListing-item .jp-DirListing-itemText")
    names.first.wait_for()
    widths = names.evaluate_all("els => els.map(e => [e.textContent, e.scrollWidth, e.clientWidth])")
    return {name: (needed, shown) for name, needed, shown in widths if needed > shown}


def browse(page, folder: str) -> list[str]:
    """Open `folder` in the file browser (from its root, by double clicks); its entries' names."""
    page.locator(".jp-BreadCrumbs-home").click()
    for part in folder.split("/"):
        page.locator(".jp-DirListing-item", has_text=part).first.dblclick()
        page.locator(".jp-BreadCrumbs", has_text=part).wait_for()
    page.wait_for_timeout(500)  # the listing redraws after the breadcrumbs
    return page.locator(".jp-DirListing-item .jp-DirListing-itemText").all_inner_texts()


def test_make_lab_opens_on_the_start_page_with_the_course_in_view(page, tmp_path):
    """What `make lab` opens first (its default URL, a new learner's JupyterLab): the start page,
    rendered, linking the ten lessons and their exercise sets in order, and the file browser on the
    course's folder, where notebooks/ and exercises/, the lessons' names and the longest exercise
    set's, show whole."""
    with jupyterlab(served_course(tmp_path / "course"), ARTIFACTS / "jupyterlab-first-view.log",
                    cwd=exchange_config(tmp_path / "alone", tmp_path / "no-exchange")) as url:
        page.goto(base_url(url))
        first_view(page)


def test_served_from_another_folder_the_learners_lab_opens_without_an_error(page, tmp_path):
    """`jupyter lab notebooks` with the learner's configuration (the conda route) serves a folder
    without START.md: JupyterLab opens as usual, not on "Cannot open: Could not find path"."""
    lessons = tmp_path / "notebooks"
    shutil.copytree(ROOT / "notebooks", lessons)
    with jupyterlab(lessons, ARTIFACTS / "jupyterlab-lessons-only.log") as url:
        page.goto(base_url(url))
        page.locator(".jp-DirListing-item", has_text="01_attention_scores").wait_for(timeout=60_000)
        page.wait_for_timeout(2000)  # a failed open shows its dialog after the page is drawn
        assert page.locator(".jp-Dialog").count() == 0, page.locator(".jp-Dialog").all_inner_texts()


def first_view(page) -> None:
    start = page.locator(".jp-RenderedMarkdown", has=page.get_by_role("heading", name="Start here"))
    start.wait_for(timeout=60_000)
    assert urllib.parse.urlsplit(page.url).path == "/lab/tree/START.md", page.url
    assert "Start with lesson 01" in start.inner_text()
    # JupyterLab resolves each link to a URL of the server: the course's path is its end.
    hrefs = start.locator("a").evaluate_all("links => links.map(a => a.getAttribute('href'))")
    paths = [m.group(0) for m in (re.search(r"(notebooks|exercises)/.*\.ipynb$", urllib.parse.urlsplit(h).path)
                                  for h in hrefs) if m]
    lessons = [path for path in paths if path.startswith("notebooks/")]
    sets = [path for path in paths if path.startswith("exercises/")]
    assert lessons == sorted(f"notebooks/{p.name}" for p in (ROOT / "notebooks").glob("*.ipynb")), lessons
    assert sets == sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "exercises").glob("*/*_exercises.ipynb"))
    listing = page.locator(".jp-DirListing-item .jp-DirListing-itemText")
    listing.first.wait_for()
    assert {"notebooks", "exercises", "START.md"} <= set(listing.all_inner_texts())
    page.wait_for_timeout(1000)  # the panels settle
    page.screenshot(path=str(SHOTS / "first-view.png"))
    assert not cut_names(page)
    # The lessons' names whole, in the panel as it first opens (no Last Modified column taking room).
    assert len(browse(page, "notebooks")) == 10 and not cut_names(page), cut_names(page)
    page.screenshot(path=str(SHOTS / "first-view-notebooks.png"))
    # And the exercise set with the longest name (04_positional_encoding_exercises.ipynb): JupyterLab's
    # default panel (250 px) cuts it; a new learner's workspace opens it wider.
    longest = max((ROOT / "exercises").glob("*/*_exercises.ipynb"), key=lambda p: len(p.name))
    assert longest.name in browse(page, longest.parent.relative_to(ROOT).as_posix())
    page.screenshot(path=str(SHOTS / "first-view-exercises.png"))
    assert not cut_names(page), cut_names(page)


def test_the_learners_settings_keep_what_make_setup_gives_every_jupyterlab():
    """The learner's JupyterLab reads its setting defaults from learner-lab/settings (JupyterLab
    reads one overrides.json): it must keep those `make setup` writes for every JupyterLab (the
    venv's, e.g. widgets that keep their state), and adds the start page's and file browser's."""
    line = re.search(r"@echo '(\{.*\})' \\\n\t\t> \$\(VENV\)/share/jupyter/lab/settings/overrides.json",
                     (ROOT / "Makefile").read_text())
    assert line, "the Makefile's setup no longer writes the venv's overrides.json as this test reads it"
    learner = json.loads((ROOT / "learner-lab" / "settings" / "overrides.json").read_text())
    for plugin, settings in json.loads(line.group(1)).items():
        assert learner.get(plugin, {}) | settings == learner.get(plugin), plugin
    assert learner["@jupyterlab/docmanager-extension:plugin"]["defaultViewers"]["markdown"] == "Markdown Preview"


def dialog_shows(page, selector: str) -> bool:
    """Whether the element `selector` in the open dialog is in its visible area as it opens: the
    dialog's content not scrolled, the element's box inside the scrolled box's."""
    return page.locator(".jp-Dialog-content").evaluate("""(dialog, selector) => {
        const element = dialog.querySelector(selector);
        if (!element) return false;
        let box = element.parentElement;
        while (box && box !== dialog && box.scrollHeight <= box.clientHeight) box = box.parentElement;
        const view = (box || dialog).getBoundingClientRect(), it = element.getBoundingClientRect();
        return (box || dialog).scrollTop === 0 && it.top >= view.top && it.bottom <= view.bottom;
    }""", selector)


def test_make_lab_shows_a_learner_only_the_learners_tools(learner_lab, page):
    """A learner alone (no exchange): Validate, and no Nbgrader menu, whose only entry, the
    assignment list, could only say that the exchange does not exist."""
    open_lesson(page, learner_lab.format(path=VALIDATED))
    tools = lab_tools(page)
    assert tools["menu"] is None, f"the learner's Nbgrader menu: {tools['menu']}"
    assert "@jupyter/nbgrader:assignment-list" in tools["disabled"], tools["disabled"]
    assert not any("Create Assignment" in panel for panel in tools["panels"]), tools["panels"]
    assert tools["validate"], "the notebook toolbar has no Validate button"
    # The news question comes from one plugin, which asks as soon as the page is restored (the
    # instructor's test below waits for it): it is off, and no question showed.
    assert ANNOUNCEMENTS in tools["disabled"], tools["disabled"]
    page.wait_for_timeout(2000)
    assert page.get_by_text(NEWS).count() == 0, "the news question showed"
    assert not any(page.get_by_text(words).count() for words in NO_EXCHANGE)
    page.screenshot(path=str(ARTIFACTS / "learner-lab.png"))
    # The server parts go with the panels: the formgrader's pages are not served at all.
    assert server_get(learner_lab, "formgrader") == 404


def test_validate_shows_its_summary_first_and_no_fold_it_does_not_have(learner_lab, page):
    """Validate on set 01 with one wrong answer and three stubs: four failures, more than the dialog
    shows at once; the summary line is in view as it opens, and the wrong answer's failure says
    where its likely bug is (the notebook's check cell) instead of naming a fold the dialog lacks."""
    open_lesson(page, learner_lab.format(path=ONE_WRONG))
    page.locator(".jp-NotebookPanel:visible .jp-NotebookPanel-toolbar").get_by_role(
        "button", name="Validate").click()
    dialog = page.locator(".jp-Dialog")
    dialog.get_by_text("The following cell failed").first.wait_for(timeout=90_000)
    page.wait_for_timeout(500)  # the dialog's layout settles
    page.screenshot(path=str(SHOTS / "validate-one-wrong-answer.png"))
    text = " ".join(dialog.inner_text().split())
    assert text.count("The following cell failed") == 4, text
    summary = dialog.locator(".tr-summary")
    assert summary.inner_text().startswith("Summary: 0 of 4 exercises pass their checks"), text
    # The test means something only if the dialog's content is taller than what it shows.
    content = page.locator(".jp-Dialog-body")
    assert content.evaluate("b => b.scrollHeight > b.clientHeight + 100"), "the dialog shows all at once"
    assert dialog_shows(page, ".tr-summary"), "the summary line is out of view"
    assert SHOW_HINT not in text and "Show the likely bug" not in text, text
    assert HINT_IN_NOTEBOOK in text and "softmax_rows(LOGITS): wrong values." in text, text
    dialog.get_by_role("button", name="Ok", exact=True).click()


def test_a_class_keeps_the_assignment_list_working(page, tmp_path):
    """Where a class's exchange exists (an instructor made it), the learner's JupyterLab keeps the
    Nbgrader menu's Assignment List, and it lists without an error."""
    exchange = tmp_path / "exchange"
    exchange.mkdir()
    with jupyterlab(served_course(tmp_path / "course"), ARTIFACTS / "jupyterlab-class.log",
                    cwd=exchange_config(tmp_path / "class", exchange)) as url:
        open_lesson(page, url.format(path=VALIDATED))
        tools = lab_tools(page)
        assert tools["menu"] == ["Assignment List"], tools["menu"]
        page.locator(".lm-MenuBar-itemLabel", has_text="Nbgrader").click()
        page.locator(".lm-Menu-item:visible .lm-Menu-itemLabel", has_text="Assignment List").click()
        page.locator(".lm-TabBar-tab:visible", has_text="Assignments").wait_for()
        page.get_by_text("Released assignments").first.wait_for()
        page.wait_for_timeout(2000)  # the lists load
        page.screenshot(path=str(SHOTS / "assignment-list-class.png"))
        assert not any(page.get_by_text(words).count() for words in NO_EXCHANGE)


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
    # The symptom in red; under it the input it used, smaller and not red; nothing names a fold twice.
    error = shown.locator(".jp-RenderedText[data-mime-type='application/vnd.jupyter.stderr']")
    inputs = shown.locator(".tr-inputs")
    assert "shape (2, 3)" not in error.inner_text() and "shape (2, 3)" in inputs.inner_text()
    assert inputs.bounding_box()["y"] >= error.bounding_box()["y"] + error.bounding_box()["height"]
    assert inputs.bounding_box()["y"] < hint.bounding_box()["y"]
    style = "e => [parseFloat(getComputedStyle(e).fontSize), getComputedStyle(e).color]"
    (red_size, red), (quiet_size, quiet) = error.locator(".ansi-red-fg").first.evaluate(style), inputs.evaluate(style)
    assert quiet_size < red_size and quiet != red, (red_size, red, quiet_size, quiet)
    assert text.count("Show the likely bug") == 1 and "Stuck?" in text and "Run this check" not in text, text
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
