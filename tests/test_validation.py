"""Validate's one-line summary (course_lib/validation.py), as a learner meets it.

Set 01's student version is filled in as a learner would: some answers right, some wrong, one left
a stub, and validated by `nbgrader validate` and by the Validate button's own server handler, each
in a process of its own that reads nbgrader's configuration from a folder holding only what
`make setup` puts in the venv (scripts/nbgrader_validate_config.py). The numbers are counted here
from the set's own points, not written in.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from course_lib import exercise_notebook
from exercise_harness import ROOT, mutants, solution_notebook

SET = "01_attention_scores"
WRONG = {"softmax_rows": "wrong axis", "attend": "mask applied after softmax"}


def points_of(nb: nbformat.NotebookNode) -> dict[str, float]:
    """Each exercise's points, from its graded cell (<exercise>_tests)."""
    return {c.metadata.nbgrader["grade_id"].removesuffix("_tests"): c.metadata.nbgrader["points"]
            for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")}


def learner_notebook(folder: Path, right: set[str], wrong: dict[str, str]) -> Path:
    """Set 01's student version with the reference answer in `right`, a known-wrong one in `wrong`
    (exercise: mutant), and the rest left as the stub."""
    solution = {c.metadata["nbgrader"]["grade_id"]: c.source
                for c in nbformat.read(solution_notebook(SET), as_version=4).cells}
    nb = nbformat.read(ROOT / "exercises" / SET / exercise_notebook(SET), as_version=4)
    for cell in nb.cells:
        grade_id = cell.metadata["nbgrader"]["grade_id"]
        if grade_id in wrong:
            cell.source = mutants(SET)[grade_id][wrong[grade_id]]
        elif grade_id in right:
            cell.source = re.sub(r" *### (BEGIN|END) SOLUTION\n", "", solution[grade_id])
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, folder / exercise_notebook(SET))
    return folder / exercise_notebook(SET)


def expected_line(passed: list[str], points: dict[str, float]) -> str:
    return (f"Summary: {len(passed)} of {len(points)} exercises pass their checks "
            f"({sum(points[e] for e in passed):g} of {sum(points.values()):g} points before hidden tests).")


@pytest.fixture(scope="module")
def config(tmp_path_factory) -> Path:
    """A jupyter config folder with what `make setup` writes into the venv's etc/jupyter/."""
    folder = tmp_path_factory.mktemp("jupyter-config")
    makefile = (ROOT / "Makefile").read_text()
    assert "cp scripts/nbgrader_validate_config.py $@" in makefile  # VALIDATE_CONFIG := .../nbgrader_config.py
    shutil.copy(ROOT / "scripts" / "nbgrader_validate_config.py", folder / "nbgrader_config.py")
    return folder


def run(argv: list[str], cwd: Path, config: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}",
               PYTHONPATH=str(ROOT), JUPYTER_CONFIG_PATH=str(config))
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def validate(notebook: Path, config: Path) -> str:
    """What `nbgrader validate` prints."""
    done = run([sys.executable, "-m", "nbgrader", "validate", notebook.name], notebook.parent, config)
    assert done.returncode == 0, done.stderr
    return done.stdout


# The Validate button posts the notebook's path to nbgrader's handler, which answers this JSON.
BUTTON = """
import json, logging, sys
from types import SimpleNamespace
from nbgrader.server_extensions.validate_assignment.handlers import ValidateAssignmentHandler as Handler
server = SimpleNamespace(root_dir=sys.argv[1], log=logging.getLogger(), load_config=lambda: Handler.load_config(None))
print(json.dumps(Handler.validate_notebook(server, sys.argv[2])))
"""


def press_validate(notebook: Path, config: Path) -> dict:
    done = run([sys.executable, "-c", BUTTON, str(notebook.parent), notebook.name], notebook.parent, config)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout.splitlines()[-1])
    assert answer["success"], answer
    return answer["value"]


def test_some_right_some_wrong_one_stub(tmp_path, config):
    notebook = learner_notebook(tmp_path / "learner", right={"score_matrix"}, wrong=WRONG)
    points = points_of(nbformat.read(notebook, as_version=4))
    line = expected_line(["score_matrix"], points)
    assert line.startswith("Summary: 1 of 4 exercises pass their checks (1 of 7 points")  # set 01 as it is

    printed = validate(notebook, config)
    assert "VALIDATION FAILED ON 3 CELL(S)" in " ".join(printed.split())
    assert printed.endswith("\n" + line + "\n"), printed  # the last line, once
    assert printed.count("Summary:") == 1

    results = press_validate(notebook, config)
    assert results["summary"] == line
    # The dialog shows each failure's HTML, and can show only its top without scrolling: the first
    # failure's starts with the line, and says that the others follow.
    first = results["failed"][0]["error"]
    assert len(results["failed"]) == 3 and first.startswith(f'<b class="tr-summary">{line}</b>\n'), first
    assert "The 3 failing cells follow, this one first." in first.split("\n\n", 1)[0]
    assert all("Summary" not in failure["error"] for failure in results["failed"][1:])
    # No failure points to a fold the dialog does not have ("Show the likely bug" is the notebook's).
    assert all("Show the likely bug" not in failure["error"] for failure in results["failed"])
    assert "the likely bug is folded under it" in " ".join(first.split())


def test_all_right(tmp_path, config):
    points = points_of(nbformat.read(ROOT / "exercises" / SET / exercise_notebook(SET), as_version=4))
    notebook = learner_notebook(tmp_path / "learner", right=set(points), wrong={})
    printed = validate(notebook, config)
    assert printed == f"Success! Your notebook passes all the tests.\n{expected_line(list(points), points)}\n"


def test_a_learner_who_edits_a_check_gets_no_summary(tmp_path, config):
    """A check cell edited to pass anything: nbgrader names the changed cell, and no summary counts it
    as passed."""
    notebook = learner_notebook(tmp_path / "learner", right=set(), wrong={})
    nb = nbformat.read(notebook, as_version=4)
    for cell in nb.cells:
        if cell.metadata["nbgrader"]["grade_id"] == "softmax_rows_tests":
            cell.source = "pass"
    nbformat.write(nb, notebook)
    printed = validate(notebook, config)
    assert "THE CONTENTS OF 1 TEST CELL(S) HAVE CHANGED" in " ".join(printed.split()) and "Summary" not in printed
    assert "summary" not in press_validate(notebook, config)

