"""Every lesson ends with where to go next: its exercise set, then the next lesson (the last
lesson: back to lesson 01, and the README that lists them all). The links are relative, as
JupyterLab follows them from the lesson's folder, and each names a file of the course; the
browser test follows the last lesson's."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from course_lib import exercise_notebook

ROOT = Path(__file__).resolve().parent.parent
LESSONS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")


def links(source: str) -> list[str]:
    """The targets of a markdown text's links, in order."""
    return [target for _, target in LINK.findall(source)]


def test_there_are_ten_lessons():
    assert [p.name[:2] for p in LESSONS] == [f"{n:02d}" for n in range(1, 11)]


@pytest.mark.parametrize("index", range(len(LESSONS)), ids=[p.stem for p in LESSONS])
def test_a_lesson_ends_with_links_to_its_exercises_and_the_next_lesson(index):
    lesson = LESSONS[index]
    cells = nbformat.read(lesson, as_version=4).cells
    closing = cells[-1]
    assert closing.cell_type == "markdown", f"{lesson.name} ends with a {closing.cell_type} cell"
    targets = links(closing.source)
    for target in targets:
        assert "://" not in target and not target.startswith("/"), f"{lesson.name}: {target} is not relative"
        assert (lesson.parent / target).is_file(), f"{lesson.name} links to {target}, which is no file"
    # Its exercise set first: the same notebook the lesson's opening cell names.
    exercises = [t for t in targets if t.startswith(f"../exercises/{lesson.stem}/")]
    # The set's own notebook, whose name differs from the lesson's: two tabs, two names.
    assert exercises == [f"../exercises/{lesson.stem}/{exercise_notebook(lesson.stem)}"], targets
    assert exercises[0] in links(cells[0].source), "the closing and opening cells name different exercise sets"
    assert targets.index(exercises[0]) == 0, "the exercise set should come before the next lesson"
    if index + 1 < len(LESSONS):
        assert targets[1:] == [LESSONS[index + 1].name], targets
    else:
        assert targets[1:] == [LESSONS[0].name, "../README.md"], targets
