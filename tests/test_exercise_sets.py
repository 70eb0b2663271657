"""Each exercise set opens with its time, and each exercise's heading gives its difficulty.

The times are the course's estimate, stated as such in each set: minutes and difficulty follow
from an exercise's points by one rule (EFFORT), and the set's total is the sum of its exercises'.
Read from the student versions (exercises/), what a learner opens, against the points of their
graded cells, so a change of points that leaves a heading or a total behind fails here.
"""

from __future__ import annotations

import re

import nbformat
import pytest

from course_lib import exercise_notebook
from exercise_harness import ROOT, solution_sets

# points -> (difficulty, minutes): the rule each set's introduction states.
EFFORT = {1: ("easy", 5), 2: ("medium", 10), 3: ("hard", 15)}
RULE = ("That is the course's estimate, not a measurement of learners: 5 minutes for an easy exercise "
        "(1 point), 10 for a medium one (2 points), 15 for a hard one (3 points). Each exercise's heading "
        "gives its own.")


def student_version(set_name: str) -> nbformat.NotebookNode:
    return nbformat.read(ROOT / "exercises" / set_name / exercise_notebook(set_name), as_version=4)


@pytest.mark.parametrize("set_name", solution_sets())
def test_each_heading_and_the_total_follow_the_points(set_name):
    nb = student_version(set_name)
    ids = {c.metadata.nbgrader["grade_id"]: c for c in nb.cells if "nbgrader" in c.metadata}
    points = {gid.removesuffix("_tests"): c.metadata.nbgrader["points"] for gid, c in ids.items()
              if c.metadata.nbgrader.get("grade")}
    total = 0
    for number, (exercise, value) in enumerate(points.items(), start=1):
        level, minutes = EFFORT[value]
        heading = ids[f"{exercise}_text"].source.splitlines()[0]
        unit = "point" if value == 1 else "points"
        assert re.fullmatch(rf"## {number}\. .+ \({value} {unit} · {level} · about {minutes} minutes\)", heading), \
            (set_name, heading)
        total += minutes
    intro = " ".join(nb.cells[0].source.split())
    assert f"**Time and difficulty.** About {total} minutes, after the lesson. {RULE}" in intro, intro


def test_the_rule_covers_every_point_value_in_use():
    """A 4-point exercise would have no difficulty: it must be added to the rule (and the sets' text) first."""
    used = {c.metadata.nbgrader["points"] for s in solution_sets() for c in student_version(s).cells
            if c.metadata.get("nbgrader", {}).get("grade")}
    assert used <= set(EFFORT), used - set(EFFORT)


def test_the_readmes_lesson_table_gives_each_sets_exercises_and_points():
    """README.md's row of each set says "<exercises>, <points> points": counted from the set's graded cells."""
    table = (ROOT / "README.md").read_text().split("\n## Lessons\n", 1)[1].split("\n## ", 1)[0]
    for set_name in solution_sets():
        graded = [c.metadata.nbgrader["points"] for c in student_version(set_name).cells
                  if c.metadata.get("nbgrader", {}).get("grade")]
        link = f"(exercises/{set_name}/{exercise_notebook(set_name)}): {len(graded)}, {sum(graded)} points |"
        assert link in table, f"README.md's lessons table must link set {set_name} as ...{link}"
