"""A real browser: JupyterLab serves lesson 01, every cell runs, and a slider redraws its widget."""

from __future__ import annotations

import json
import shutil
import statistics
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from lab_driver import browser_missing_message, jupyterlab, launch_options, run_lesson  # noqa: E402

ARTIFACTS = ROOT / "test-artifacts"


def test_lesson_01_runs_in_jupyterlab_and_its_slider_redraws_the_widget(tmp_path):
    from playwright.sync_api import Error, sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    # Serve a copy: JupyterLab writes checkpoints (and could autosave) next to the notebooks it opens.
    shutil.copytree(ROOT / "notebooks", tmp_path / "notebooks")
    with jupyterlab(tmp_path, ARTIFACTS / "jupyterlab.log") as url, sync_playwright() as playwright:
        try:
            browser = playwright.chromium.launch(headless=True, **launch_options())
        except Error as error:
            pytest.fail(f"{browser_missing_message()}\n{error}")
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            errors = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            times = run_lesson(page, url.format(path="notebooks/01_attention_scores.ipynb"), presses=10,
                               screenshot=ARTIFACTS / "lesson01.png")
            stderr = page.locator(".jp-RenderedText[data-mime-type='application/vnd.jupyter.stderr']")
            assert stderr.count() == 0, f"a cell wrote an error in the browser: {stderr.first.inner_text()[:500]}"
        finally:
            browser.close()
    (ARTIFACTS / "browser_roundtrip.json").write_text(json.dumps({"ms": times}, indent=1))
    print(f"widget round trip over {len(times)} presses: median {statistics.median(times):.1f} ms, max {max(times):.1f} ms")
    assert len(times) == 10 and all(t > 0 for t in times)
    assert not errors, errors
