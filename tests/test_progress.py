"""course_lib.progress: the bars, and `loading`, the bar of a lesson's first cell."""

from __future__ import annotations

import subprocess
import sys
import time
import types

import pytest

from course_lib.progress import Progress, loading


def test_importing_progress_loads_neither_torch_nor_the_rest_of_the_course():
    # the first cell shows its bar before torch loads: a progress that imported torch would
    # show it only after the wait it is there to show
    code = ("import sys, course_lib.progress; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('torch', 'matplotlib', 'ipywidgets') or m.startswith('course_lib.')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "['course_lib.progress']"


def _wait_until(condition, seconds: float = 2.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.01)
    return False


def test_loading_moves_as_each_module_begins_and_is_full_after_the_block(monkeypatch):
    first, second = "course_test_first_module", "course_test_second_module"
    with loading(first, second) as bar:
        assert (bar.total, bar.bar.value, bar.text.value) == (2, 0, "starting")
        monkeypatch.setitem(sys.modules, first, types.ModuleType(first))  # its import begins
        assert _wait_until(lambda: bar.text.value == f"loading {first}")
        assert bar.bar.value == 0
        time.sleep(0.15)  # the bar redraws at most ten times a second
        monkeypatch.setitem(sys.modules, second, types.ModuleType(second))  # first has ended
        assert _wait_until(lambda: bar.text.value == f"loading {second}")
        assert bar.bar.value == 1
    assert (bar.bar.value, bar.text.value) == (2, "loaded")


def test_a_loading_bar_saves_the_same_text_on_every_run():
    with loading("json") as bar:
        import json  # noqa: F401  (already loaded: the bar still ends full)
    assert bar.bar.value == 1
    assert repr(bar) == "loading json: 1 modules (a live progress bar while the cell runs)"


def test_a_bars_saved_text_is_the_same_whatever_it_showed_live():
    bar = Progress(160, "reverse", unit="training steps")
    before = bar._repr_mimebundle_()["text/plain"]
    bar.update(80, "step 80 of 160, loss 0.412")
    assert bar._repr_mimebundle_()["text/plain"] == before == repr(bar)
    assert before == "reverse: 160 training steps (a live progress bar while the cell runs)"


@pytest.mark.parametrize("modules", [(), ("",), ("torch", 3)])
def test_loading_names_what_it_was_given_when_it_is_not_module_names(modules):
    with pytest.raises(TypeError, match="loading needs the names of the modules") as raised:
        with loading(*modules):
            pass
    assert str(raised.value).endswith(f"got {modules!r}")
