"""Run a test module's function in a new Python process and bring back what it returns.

The ten-seed tables of lessons 02, 05 and 07 are checked by running the lesson's own cells. In
the test process those cells meet whatever earlier tests left behind, and a notebook's kernel
never does: measured, a process whose torch thread count went 1 -> 2 -> 1 (as a test that trains
on one thread and restores two leaves it) trains lesson 05's MLPs to other last digits than a
new process set to one thread, so a printed range moved from 2.47 to 2.42. In a new process the
cells see what a kernel sees.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def in_fresh_process(module: str, function: str) -> object:
    """module.function() run in a new interpreter (tests/ on its path); its result, where a pair
    (namespace, other), with the namespace's values that do not pickle (modules, the lesson's own
    functions, figures) left out."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "result.pickle"
        code = (f"import sys; sys.path.insert(0, {str(TESTS)!r}); import fresh, {module}; "
                f"fresh.write({module}.{function}(), {str(out)!r})")
        run = subprocess.run([sys.executable, "-c", code], cwd=TESTS.parent, capture_output=True, text=True,
                             check=False)  # its stderr goes into the message below
        if run.returncode:
            raise AssertionError(f"{module}.{function}() failed in a new process:\n{run.stderr[-4000:]}")
        return pickle.loads(out.read_bytes())


def write(result: object, path: str) -> None:
    """Pickle result to path; a (namespace, other) pair keeps the namespace's picklable values."""
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], dict):
        result = ({name: value for name, value in result[0].items() if _pickles(value)}, result[1])
    Path(path).write_bytes(pickle.dumps(result))


def _pickles(value: object) -> bool:
    try:
        pickle.dumps(value)
    except (pickle.PicklingError, TypeError, AttributeError):  # modules, the lesson's functions, figures
        return False
    return True


def run_lesson_cells(notebook: Path, skip: Callable[[str], bool]) -> tuple[dict, dict[str, object]]:
    """A lesson's code cells, top to bottom, less those `skip(source)` names (its widget, its timing
    cells): its variables, and each claim's test (a bool, or a Bound with its margin) by
    statement, recorded from the imports cell on. Figures go to Agg and are closed."""
    import warnings

    import matplotlib
    import nbformat

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from course_lib import claims

    namespace: dict = {}
    tests: dict[str, object] = {}

    def recording_claim(statement, holds, *args, **kwargs):
        tests[statement] = holds
        return claims.claim(statement, holds, *args, **kwargs)

    for cell in nbformat.read(notebook, as_version=4).cells:
        if cell.cell_type != "code" or skip(cell.source):
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Agg's "cannot show the figure"
            exec(compile(cell.source, str(notebook), "exec"), namespace)  # noqa: S102 (the lesson's own cells)
        plt.close("all")
        namespace["claim"] = recording_claim
    return namespace, tests
