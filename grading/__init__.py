"""The instructor's grading machinery: what nbgrader runs in its own process, around the kernels.

`steps` holds the nbgrader preprocessors that nbgrader_config.py lists: the seed and the judge
of the hidden tests (see course_lib/checks/hand_in.py), the limits on output and time, and what
feedback may show. scripts/grade.py runs nbgrader with them, each kernel in a sandbox
(scripts/sandbox_kernel.py).
"""

from pathlib import Path

from course_lib import exercise_notebook


def exercise_sets(course: Path) -> list[str]:
    """The course's exercise sets, in order: the folders solutions/NN_<concept>/ of `course`.
    The one list: the grader and the tests read it here."""
    return sorted(p.name for p in (course / "solutions").iterdir() if p.is_dir() and not p.name.startswith("."))


def notebook_id(set_name: str) -> str:
    """nbgrader's id of a set's notebook (in the gradebook, the formgrader, the feedback): its file stem."""
    return Path(exercise_notebook(set_name)).stem


def feedback_page(set_name: str) -> str:
    """The file name of a set's feedback page, as nbgrader's generate_feedback names it: after the notebook."""
    return f"{notebook_id(set_name)}.html"
