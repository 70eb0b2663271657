"""nbgrader configuration for Transformer Roots: instructors need no setup of their own.

solutions/<set>/ holds the instructor notebooks (with solutions and hidden tests);
`nbgrader generate_assignment` writes the student versions to exercises/<set>/.
Submissions go in submitted/<student>/<set>/; autograded/ and feedback/ are written next to them.
"""

import os
import re
import sys

from nbconvert.preprocessors import ClearMetadataPreprocessor, CSSHTMLHeaderPreprocessor, Preprocessor
from nbformat.v4 import new_code_cell, new_output
from nbgrader.preprocessors import (AssignLatePenalties, CheckCellMetadata, Execute,
                                    GetGrades, LimitOutput, SaveAutoGrades)

c = get_config()  # noqa: F821 (provided by nbgrader when it loads this file)

c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "exercises"
c.CourseDirectory.submitted_directory = "submitted"
c.CourseDirectory.autograded_directory = "autograded"
c.CourseDirectory.feedback_directory = "feedback"
c.CourseDirectory.db_url = "sqlite:///gradebook.db"

# Each graded cell runs in well under a second; 20 s leaves room for a slow laptop and
# stops an infinite loop in a submission (that part scores 0, the rest is still graded).
TIMEOUT_SECONDS = 20
c.Execute.timeout = TIMEOUT_SECONDS

# The student version keeps no outputs of the instructor's run.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}


HIDDEN = re.compile(r"### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS", re.S)


class HideHiddenTests(Preprocessor):
    """Feedback shows which test cell failed and its message, never the hidden tests' source.

    Autograding puts the hidden tests back into the test cells; this removes them again from
    the feedback HTML, shortens each error of a test cell to its last line (the traceback quotes
    code), drops any printed line that quotes the hidden tests (a submission can print the source
    of the cell calling it), and says what a timeout means.
    """

    enabled = True  # nbconvert preprocessors are off unless enabled

    def preprocess(self, nb, resources):
        hidden = {line.strip() for cell in nb.cells if cell.cell_type == "code"
                  for block in HIDDEN.findall(cell.source) for line in block.splitlines()[1:-1]
                  if len(line.strip()) > 8}
        for index, cell in enumerate(nb.cells):
            if cell.cell_type == "code":
                self._clean(cell, index, hidden)
        return nb, resources

    @staticmethod
    def _clean(cell, index: int, hidden: set[str]) -> None:
        is_test = "### BEGIN HIDDEN TESTS" in cell.source
        cell.source = HIDDEN.sub("# (hidden tests ran here)", cell.source)
        name = cell.metadata.get("nbgrader", {}).get("grade_id", f"cell {index + 1}")
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream":
                lines = output["text"].splitlines(keepends=True)
                output["text"] = "".join(l for l in lines if not any(h in l for h in hidden))
            elif output.get("output_type") == "error":
                if "Timeout" in output.get("ename", ""):
                    output["ename"], output["evalue"] = "TimeoutError", (
                        f"the cell `{name}` ran longer than the {TIMEOUT_SECONDS} s limit per cell and was stopped: "
                        "look for a loop that never ends (this part scores 0, the others are graded)")
                if is_test or output["ename"] == "TimeoutError":
                    output["traceback"] = [f"{output['ename']}: {output['evalue']}"]
                if any(h in output["evalue"] for h in hidden):
                    output["evalue"] = "(message withheld: it quoted the hidden tests)"
                    output["traceback"] = [f"{output['ename']}: {output['evalue']}"]
            elif "data" in output:
                text = output["data"].get("text/plain", "")
                if any(h in text for h in hidden):
                    output["data"] = {"text/plain": "(output withheld: it quoted the hidden tests)"}


class StderrToStdout(Preprocessor):
    """Warnings and prints to stderr do not zero a cell: nbgrader counts any stderr as failure.

    Runs right after execution; the text stays in the output (as stdout) so feedback shows it.
    """

    enabled = True

    def preprocess_cell(self, cell, resources, index):
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream" and output.get("name") == "stderr":
                output["name"] = "stdout"
        return cell, resources


# scripts/grade.py passes a fresh secret for each run. It is taken out of the environment here,
# before any kernel starts, so a submission's code never sees it; nbgrader reads this file more
# than once per run, so the secret is kept on the sys module of this (nbgrader's) process.
sys._grading_marker = os.environ.pop("TR_GRADING_MARKER", "") or getattr(sys, "_grading_marker", "")
MARKER = sys._grading_marker
GUARD = f"_guard_{MARKER[:10]}"

# Runs first, before any of the learner's cells: it remembers what the hidden tests rely on.
GUARD_CELL = f"""\
import builtins, sys, torch, torch.nn.functional, torch.testing, course_lib.checks

IPYKERNEL_SETS = {{"builtins.input", "builtins.raw_input", "builtins.getpass", "sys.excepthook",
                  "sys.displayhook", "sys.stdout", "sys.stderr"}}  # replaced for every cell it runs

class _HiddenTestsGuard:
    def __init__(self, marker):
        self.marker, self.seen = marker, self.look()

    @staticmethod
    def look():
        shell = get_ipython()
        seen = {{}}
        for owner in (builtins, sys, torch, torch.Tensor, torch.nn.functional, torch.testing,
                      course_lib.checks, shell, type(shell)):
            for name, value in list(vars(owner).items()):
                if callable(value) or name in ("stdout", "stderr"):
                    seen[getattr(owner, "__name__", "the IPython shell") + "." + name] = id(value)
        for name in ("input_transformers_cleanup", "input_transformers_post", "ast_transformers"):
            seen["IPython " + name] = tuple(map(id, getattr(shell, name)))
        return seen

    def verify(self):
        now = self.look()
        changed = sorted(k for k, v in self.seen.items() if now.get(k) != v and k not in IPYKERNEL_SETS)
        if changed:
            raise AssertionError("the hidden tests did not run as written: the submission replaced "
                                 + ", ".join(changed[:4]))
        print(self.marker)

{GUARD} = _HiddenTestsGuard({MARKER!r})
del _HiddenTestsGuard
"""


def _is_test_cell(cell) -> bool:
    return cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("grade", False)


class GuardHiddenTests(Preprocessor):
    """Points only for test cells that ran to their end, as written, in an untouched kernel.

    Before execution a first cell remembers the functions of torch, course_lib.checks, builtins
    and IPython that the tests rely on, and each graded test cell gets one more line that checks
    them and prints this run's secret marker. A cell emptied or rewritten by the submission (an
    IPython input transformer, a patched torch.allclose) prints no marker or fails the check.
    """

    enabled = True

    def preprocess(self, nb, resources):
        if MARKER:
            nb.cells.insert(0, new_code_cell(GUARD_CELL, metadata={"guard": True}))
            for cell in nb.cells:
                if _is_test_cell(cell):
                    cell.source += f"\n{GUARD}.verify()"
        return nb, resources


class RequireMarker(Preprocessor):
    """After execution: a test cell without the marker fails; the guard leaves no trace."""

    enabled = True

    def preprocess(self, nb, resources):
        if not MARKER:
            return nb, resources
        printed = {id(cell) for cell in nb.cells if _is_test_cell(cell) and f"\n{MARKER}\n" in "\n" + "".join(
            o.text for o in cell.outputs if o.output_type == "stream")}
        nb.cells = [cell for cell in nb.cells if not cell.metadata.get("guard")]
        for cell in nb.cells:  # a submission that prints its calling cells prints the guard too
            for output in cell.get("outputs", []):
                if output.output_type == "stream":
                    output.text = "".join(line for line in output.text.splitlines(keepends=True)
                                          if MARKER not in line and GUARD not in line)
                elif output.output_type == "error":
                    output.traceback = [line for line in output.traceback if GUARD not in line]
        for cell in nb.cells:
            if not _is_test_cell(cell):
                continue
            cell.source = cell.source.removesuffix(f"\n{GUARD}.verify()")
            cell.outputs = [o for o in cell.outputs if o.output_type != "stream" or o.text]
            if id(cell) not in printed and not any(o.output_type == "error" for o in cell.outputs):
                message = ("the hidden tests of this cell did not run to their end (the cell was skipped, "
                           "emptied or rewritten while grading): 0 points for it; the instructor will look at it")
                cell.outputs.append(new_output("error", ename="NotGraded", evalue=message,
                                               traceback=[f"NotGraded: {message}"]))
        return nb, resources


c.Autograde.autograde_preprocessors = [GuardHiddenTests, Execute, StderrToStdout, RequireMarker,
                                       ClearMetadataPreprocessor, LimitOutput, SaveAutoGrades,
                                       AssignLatePenalties, CheckCellMetadata]
# grade.py names a kernel that runs each submission in a sandbox (scripts/sandbox_kernel.py).
if os.environ.get("TR_KERNEL_NAME"):
    c.Execute.kernel_name = os.environ["TR_KERNEL_NAME"]
c.GenerateFeedback.preprocessors = [GetGrades, HideHiddenTests, CSSHTMLHeaderPreprocessor]
