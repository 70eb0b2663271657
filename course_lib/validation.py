"""Validate's one-line summary: how many exercises of a set pass their checks, and their points.

nbgrader's Validate (the button in a learner's notebook, and `nbgrader validate`) runs the notebook
and lists the graded cells that fail, one after the other, with no count. `SummaryValidator` adds
one line, e.g. "Summary: 3 of 5 exercises pass their checks (3 of 9 points before hidden tests)":
short enough for Validate's 87 characters a line. The button's dialog shows it at the top, where it
is seen without scrolling (the dialog shows about 375 px; three failures take over 1,000); the
command prints it last, where a terminal leaves the reader.

nbgrader makes its `Validator` by name in two places, the `nbgrader validate` command and the
Validate button's server handler, and has no option to choose another class; `use_summary_validator`
puts this one in both. `make setup` calls it from the venv's `etc/jupyter/nbgrader_config.py`
(scripts/nbgrader_validate_config.py), which nbgrader reads for both, in the course and in the
student copy alike.
"""

from __future__ import annotations

import html
import typing

from nbformat.notebooknode import NotebookNode
from nbgrader import utils
from nbgrader.validator import Validator


def summary_line(nb: NotebookNode, log: typing.Any = None) -> str:
    """The summary of an executed notebook: graded cells at full marks, and points, out of all.

    Each graded cell is one exercise (its check, and at grading its hidden tests). A learner's copy
    has no hidden tests, so the line counts the checks and says so.
    """
    grades = [utils.determine_grade(cell, log) for cell in nb.cells if utils.is_grade(cell)]
    grades = [(score, most) for score, most in grades if score is not None]  # a markdown answer has none yet
    passed = sum(score == most for score, most in grades)
    points, total = sum(score for score, _ in grades), sum(most for _, most in grades)
    return (f"Summary: {passed} of {len(grades)} exercises pass their checks "
            f"({points:g} of {total:g} points before hidden tests).")


class SummaryValidator(Validator):
    """nbgrader's Validator, whose results end with `summary_line` of the notebook it ran.

    `validate` adds it as `results["summary"]`, and before the first failure's HTML (the Validate
    button's dialog shows each failure's cell, then its HTML: the line comes second, after the first
    failing cell's two lines of code); `validate_and_print` prints it last. When cells were changed (locked
    or test cells edited), nbgrader reports that instead of failures: no summary then, since the
    counts would be of altered tests.
    """

    _summary: str | None = None  # of the notebook being validated, once it ran
    _results: dict[str, typing.Any] | None = None  # what the last validate() returned

    def _preprocess(self, nb: NotebookNode) -> NotebookNode:
        nb = super()._preprocess(nb)
        self._summary = summary_line(nb, self.log)
        return nb

    def validate(self, filename: str) -> dict[str, typing.Any]:
        self._summary = None  # a notebook whose cell types changed is never run: no line then
        results = self._results = super().validate(filename)
        if self._summary is None or "changed" in results or "type_changed" in results:
            return results
        results["summary"] = self._summary
        failed = results.get("failed")
        if failed:
            # It reads as the dialog's heading, though it sits under the first failing cell's code.
            more = f"\nThe {len(failed)} failing cells follow, this one first." if len(failed) > 1 else ""
            failed[0]["error"] = (f'<b class="tr-summary">{html.escape(self._summary)}</b>{more}\n\n'
                                  + failed[0]["error"])
        return results

    def validate_and_print(self, filename: str) -> None:
        super().validate_and_print(filename)  # which runs validate() once
        if self._results and "summary" in self._results:
            self.stream.write(self._results["summary"] + "\n")


def use_summary_validator() -> None:
    """Make `nbgrader validate` and the Validate button use `SummaryValidator`."""
    from nbgrader.apps import validateapp
    from nbgrader.server_extensions.validate_assignment import handlers

    validateapp.Validator = SummaryValidator
    handlers.Validator = SummaryValidator
