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


# make test runs two workers (pytest-xdist), each taking a whole file at a time (--dist loadfile:
# a module's fixtures are made once, a notebook's cells run in order in one kernel). The files that
# take longest go first (measured here), so that the two workers end together.
LONGEST_FIRST = ["test_grading.py", "test_site.py", "test_lms.py", "test_sandbox.py", "test_student_html.py",
                 "test_browser.py", "test_exercises.py", "test_validation.py", "test_copying.py"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    late = len(LONGEST_FIRST) + 1  # after the lessons and solutions (about 10 s each): the quick files

    def order(item: pytest.Item) -> int:
        return rank.get(item.path.name, late - (item.path.suffix == ".ipynb"))

    items.sort(key=order)  # a stable sort: a notebook's cells keep their order
