"""Grading end to end: student versions, and nbgrader autograding of submissions we write.

Runs scripts/grade.py (what `make grade` runs) in a temporary course folder. For every
exercise set: a fully correct submission gets full marks, and a submission with known-wrong
answers to its last two exercises loses exactly those exercises' points. For set 01 a third submission raises in one
answer and loops forever in another: both score 0, the other parts are still graded.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook

from exercise_harness import HIDDEN, ROOT, exercise_names, mutants, solution_sets

SETS = solution_sets()
SOLUTION = re.compile(r"[ \t]*### BEGIN SOLUTION\n(.*?)[ \t]*### END SOLUTION\n?", re.S)


def last_two(set_name: str) -> list[str]:
    """The set's last two exercises: later answers may build on earlier ones, never the reverse,
    so a wrong answer here costs its own points only."""
    return exercise_names(set_name)[-2:]


def cells_by_id(nb) -> dict:
    return {c.metadata["nbgrader"]["grade_id"]: c for c in nb.cells if "nbgrader" in c.metadata}


def submission(course: Path, set_name: str, answers: dict[str, str]) -> nbformat.NotebookNode:
    """The student version with every answer filled in: the reference, or answers[grade_id]."""
    student = nbformat.read(course / "exercises" / set_name / f"{set_name}.ipynb", as_version=4)
    reference = cells_by_id(nbformat.read(course / "solutions" / set_name / f"{set_name}.ipynb", as_version=4))
    for grade_id, cell in cells_by_id(student).items():
        if cell.metadata["nbgrader"].get("solution"):
            source = reference[grade_id].source
            cell.source = answers.get(grade_id, SOLUTION.sub(lambda m: m.group(1), source))
    return student


def points(course: Path, set_name: str) -> dict[str, float]:
    nb = nbformat.read(course / "solutions" / set_name / f"{set_name}.ipynb", as_version=4)
    return {c.metadata["nbgrader"]["grade_id"].removesuffix("_tests"): c.metadata["nbgrader"]["points"]
            for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")}


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    """A temporary course folder, graded once by scripts/grade.py with our three kinds of submission."""
    course = tmp_path_factory.mktemp("course")
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(ROOT / "solutions", course / "solutions", ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    subprocess.run([sys.executable, str(ROOT / "scripts" / "grade.py"), "--course", str(course)], check=True)
    for set_name in SETS:
        wrong = {ex: next(iter(mutants(set_name)[ex].values())) for ex in last_two(set_name)}
        for student, answers in [("correct", {}), ("wrong", wrong)]:
            folder = course / "submitted" / student / set_name
            folder.mkdir(parents=True)
            nbformat.write(submission(course, set_name, answers), folder / f"{set_name}.ipynb")
    broken = {"softmax_rows": "def softmax_rows(x):\n    raise RuntimeError('not finished')",
              "attend": "while True:\n    pass"}
    folder = course / "submitted" / "broken" / "01_attention_scores"
    folder.mkdir(parents=True)
    nbformat.write(submission(course, "01_attention_scores", broken), folder / "01_attention_scores.ipynb")
    subprocess.run([sys.executable, str(ROOT / "scripts" / "grade.py"), "--course", str(course)], check=True)
    return course


def scores(course: Path, set_name: str, student: str) -> dict[str, float]:
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        notebook = gradebook.find_submission_notebook(set_name, set_name, student)
        return {grade.name.removesuffix("_tests"): grade.score for grade in notebook.grades}


def test_committed_student_versions_are_what_nbgrader_generates_today(course):
    for set_name in SETS:
        generated = json.loads((course / "exercises" / set_name / f"{set_name}.ipynb").read_text())
        committed = json.loads((ROOT / "exercises" / set_name / f"{set_name}.ipynb").read_text())
        assert generated == committed, f"exercises/{set_name} is stale: run `make exercises`"


def test_student_versions_hold_no_solution_or_hidden_test_text(course):
    for set_name in SETS:
        solution = (course / "solutions" / set_name / f"{set_name}.ipynb").read_text()
        student = (course / "exercises" / set_name / f"{set_name}.ipynb").read_text()
        source = "\n".join(c.source for c in nbformat.reads(solution, as_version=4).cells)
        secret = [line.strip() for block in SOLUTION.findall(source) + HIDDEN.findall(source)
                  for line in block.splitlines() if len(line.strip()) > 12]
        assert secret, f"{set_name} has no solution or hidden test text to look for"
        student_text = "\n".join(c.source for c in nbformat.reads(student, as_version=4).cells)
        leaked = [line for line in secret if line in student_text and line not in _visible(source)]
        assert not leaked and "BEGIN SOLUTION" not in student and "BEGIN HIDDEN" not in student, leaked


def _visible(source: str) -> str:
    """Instructor text outside the solution and hidden regions (students may see it)."""
    return HIDDEN.sub("", SOLUTION.sub("", source))


@pytest.mark.parametrize("set_name", SETS)
def test_correct_submission_gets_full_marks(course, set_name):
    assert scores(course, set_name, "correct") == points(course, set_name)


@pytest.mark.parametrize("set_name", SETS)
def test_wrong_answers_lose_exactly_their_points(course, set_name):
    wrong = last_two(set_name)
    expected = {name: (0.0 if name in wrong else full) for name, full in points(course, set_name).items()}
    assert scores(course, set_name, "wrong") == expected


def test_an_answer_that_raises_or_loops_scores_zero_and_the_rest_is_graded(course):
    expected = points(course, "01_attention_scores") | {"softmax_rows": 0.0, "attend": 0.0}
    assert scores(course, "01_attention_scores", "broken") == expected


def test_grades_csv_and_feedback_are_written(course):
    rows = (course / "grades.csv").read_text().splitlines()
    assert rows[0].startswith("assignment,") and len(rows) > len(SETS)
    for student in ("correct", "wrong", "broken"):
        assert list((course / "feedback" / student / "01_attention_scores").glob("*.html")), student


def test_feedback_names_failed_tests_without_showing_hidden_tests(course):
    html = (course / "feedback" / "wrong" / "01_attention_scores" / "01_attention_scores.html").read_text()
    source = (course / "solutions" / "01_attention_scores" / "01_attention_scores.ipynb").read_text()
    hidden_lines = [line.strip() for block in HIDDEN.findall("\n".join(
        c.source for c in nbformat.reads(source, as_version=4).cells)) for line in block.splitlines() if len(line.strip()) > 12]
    assert "written_by_hand" not in html and not any(line in html for line in hidden_lines if "check_" not in line)
    assert "AssertionError" in html and "hidden tests ran here" in html
