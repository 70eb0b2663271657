import sys
from pathlib import Path

import pytest

# exercise_harness.py and the other test helpers are imported by name.
sys.path.insert(0, str(Path(__file__).parent))
# lab_driver.py, which drives JupyterLab and Chromium for the tests, is in scripts/.
sys.path.insert(0, str(Path(__file__).parent.parent / "scripts"))


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium for a test module's pages (the hub's, the formgrader's, the feedback's)."""
    from lab_driver import browser_missing_message, launch_options
    from playwright.sync_api import Error, sync_playwright

    with sync_playwright() as playwright:
        try:
            chromium = playwright.chromium.launch(headless=True, **launch_options())
        except Error as error:
            pytest.fail(f"{browser_missing_message()}\n{error}")
        yield chromium
        chromium.close()
