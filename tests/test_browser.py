"""A real browser: JupyterLab serves lesson 01 as a learner gets it. Before anything
runs, its widget cells show their static snapshot; after Run All, a slider redraws the
widget."""

from __future__ import annotations

import json
import shutil
import statistics
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from lab_driver import (browser_missing_message, jupyterlab, launch_options,  # noqa: E402
                        open_lesson, run_lesson)

ARTIFACTS = ROOT / "test-artifacts"
LESSON = "notebooks/01_attention_scores.ipynb"
RAW_REPR, WIDGET_ERROR = "VBox(children=", "Error displaying widget"


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


def test_lesson_01_shows_snapshots_then_live_widgets_in_jupyterlab(tmp_path):
    from playwright.sync_api import Error, sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    # Serve a copy: JupyterLab writes checkpoints (and may autosave) beside what it opens.
    shutil.copytree(ROOT / "notebooks", tmp_path / "notebooks")
    log = ARTIFACTS / "jupyterlab.log"
    with jupyterlab(tmp_path, log) as url, sync_playwright() as playwright:
        try:
            browser = playwright.chromium.launch(headless=True, **launch_options())
        except Error as error:
            pytest.fail(f"{browser_missing_message()}\n{error}")
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            errors = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
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
        finally:
            browser.close()
    (ARTIFACTS / "browser_roundtrip.json").write_text(json.dumps({"ms": times}, indent=1))
    print(f"widget round trip over {len(times)} presses: median "
          f"{statistics.median(times):.1f} ms, max {max(times):.1f} ms")
    assert len(times) == 10 and all(t > 0 for t in times)
    assert not errors, errors
