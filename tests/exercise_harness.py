"""Run an exercise notebook's checks in-process against the reference or a known-wrong answer.

An exercise with solution cell `fn` (nbgrader grade_id "fn") has a locked visible-check cell
"fn_check" and a graded tests cell "fn_tests" whose ### BEGIN HIDDEN TESTS region must catch a
wrong answer on its own. `outcome` execs the notebook's cells up to that exercise, with the
learner's answer swapped for `answer`, and reports whether the visible check and the hidden
tests each passed.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import re
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import nbformat

from course_lib import exercise_notebook
from grading import exercise_sets

ROOT = Path(__file__).resolve().parent.parent
HIDDEN = re.compile(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", re.S)


@dataclass
class Outcome:
    check_passed: bool
    hidden_passed: bool
    messages: list[str]


def solution_sets() -> list[str]:
    """Names of the exercise sets (the course's one list: grading.exercise_sets)."""
    return exercise_sets(ROOT)


def known_answers(set_name: str) -> ModuleType:
    """The set's module of known answers, tests/mutants/<set_name>.py (see tests/mutants/__init__.py)."""
    return importlib.import_module(f"mutants.{set_name}")


def mutants(set_name: str) -> dict[str, dict[str, str]]:
    """Known-wrong answers for each exercise of a set: exercise -> answer's name -> source."""
    return known_answers(set_name).MUTANTS


def solution_notebook(set_name: str) -> Path:
    return ROOT / "solutions" / set_name / exercise_notebook(set_name)


def _grade_id(cell) -> str | None:
    return cell.metadata.get("nbgrader", {}).get("grade_id")


def exercise_names(set_name: str) -> list[str]:
    nb = nbformat.read(solution_notebook(set_name), as_version=4)
    return [_grade_id(c) for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]


def _run(source: str, namespace: dict, messages: list[str]) -> bool:
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            exec(compile(source, "<cell>", "exec"), namespace)
        except Exception as error:  # a failing check is the expected result for a wrong answer
            messages.append(f"{type(error).__name__}: {error}")
            return False
    return True


def outcome(set_name: str, exercise: str, answer: str | None = None) -> Outcome:
    """Visible check and hidden tests of `exercise`, with `answer` (None = the reference)."""
    nb = nbformat.read(solution_notebook(set_name), as_version=4)
    namespace: dict = {"__name__": "__exercise__"}
    messages: list[str] = []
    code = [c for c in nb.cells if c.cell_type == "code"]
    for cell in code:
        grade_id, meta = _grade_id(cell), cell.metadata.get("nbgrader", {})
        if grade_id == exercise:
            if not _run(answer if answer is not None else cell.source, namespace, messages):
                return Outcome(False, False, messages)
        elif grade_id == f"{exercise}_check":
            check_passed = _run(cell.source, namespace, messages)
        elif grade_id == f"{exercise}_tests":
            hidden = HIDDEN.search(cell.source)
            assert hidden, f"{exercise}_tests has no hidden tests region"
            return Outcome(check_passed, _run(hidden.group(1), namespace, messages), messages)
        elif meta.get("solution") or not (grade_id or "").endswith(("_check", "_tests")):
            _run(cell.source, namespace, messages)  # setup cells and the other exercises' references
    raise AssertionError(f"exercise {exercise!r} not found in {set_name}")


def hints(set_name: str) -> dict[str, dict[str, str]]:
    """For each exercise, its likely wrong answers (MUTANTS names) and words its message must contain."""
    return known_answers(set_name).HINTS


def accepted(set_name: str) -> dict[str, dict[str, str]]:
    """Right answers written another way, which keep full credit (none for most sets)."""
    return getattr(known_answers(set_name), "ACCEPTED", {})


def ready_made(set_name: str) -> dict[str, dict[str, str]]:
    """Ready-made code under names no reading of the source catches, refused by the hidden tests."""
    return getattr(known_answers(set_name), "READY_MADE", {})


def in_place(set_name: str) -> dict[str, dict[str, str]]:
    """Answers that change their input in place: the MUTANTS named "... in place", and IN_PLACE."""
    named = {e: {m: a for m, a in ms.items() if m.endswith(" in place")} for e, ms in mutants(set_name).items()}
    for exercise, answers in getattr(known_answers(set_name), "IN_PLACE", {}).items():
        named[exercise] = named.get(exercise, {}) | answers
    return {e: ms for e, ms in named.items() if ms}
