"""The answer key kept in the grader (grading/answer_key.py), every exercise through the path grading takes.

For each exercise: the grader plans its calls from a fresh seed, the kernel side (`answer`) runs
an answer on the inputs of the hand_in line alone, and the grader's `verdict` judges what came
back, visible check first. The instructor's solution must pass, and every known-wrong answer in
tests/mutants must fail, in the kernel (a refused ready-made) or in the verdict.
"""

from __future__ import annotations

import base64
import json

import nbformat
import pytest

from course_lib.checks import CheckFailed
from course_lib.checks.hand_in import answer
from exercise_harness import ROOT, exercise_names, mutants, solution_notebook, solution_sets
from grading.answer_key import plan, verdict

SEED = 31


def learners_namespace(set_name: str) -> dict:
    """A fresh namespace with the set's setup cell and the solution's answers, as a kernel has them."""
    namespace: dict = {"__name__": "__main__"}
    for cell in nbformat.read(solution_notebook(set_name), as_version=4).cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and (meta.get("solution") or meta.get("grade_id") == "setup"):
            exec(compile(cell.source, "<cell>", "exec"), namespace)
    return namespace


def judged(set_name: str, name: str, namespace: dict) -> list[str]:
    """What the grader says of `namespace[name]`, through the hand_in line and back, as JSON."""
    key = plan(ROOT / "solutions", set_name, name, SEED)
    try:
        record = answer(namespace[name], json.loads(base64.b64decode(key.line())))
    except CheckFailed as refused:  # written_by_hand in the kernel: the cell fails, 0 points
        return [str(refused)]
    return verdict(key, json.loads(json.dumps(record)))


@pytest.mark.parametrize("set_name, name", [(s, n) for s in solution_sets() for n in exercise_names(s)])
def test_the_solution_passes_and_every_known_wrong_answer_fails(set_name, name):
    assert judged(set_name, name, learners_namespace(set_name)) == []
    for label, source in mutants(set_name).get(name, {}).items():
        namespace = learners_namespace(set_name)
        exec(source, namespace)
        assert judged(set_name, name, namespace), f"{name}: the known-wrong answer {label!r} passed"
