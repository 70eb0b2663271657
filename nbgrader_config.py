"""nbgrader configuration for Transformer Roots: instructors need no setup of their own.

solutions/<set>/ holds the instructor notebooks (with solutions and hidden tests);
`nbgrader generate_assignment` writes the student versions to exercises/<set>/.
Submissions go in submitted/<student>/<set>/; autograded/ and feedback/ are written next to them.
"""

import os
import re

from nbconvert.preprocessors import ClearMetadataPreprocessor, CSSHTMLHeaderPreprocessor, Preprocessor
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


c.Autograde.autograde_preprocessors = [Execute, StderrToStdout, ClearMetadataPreprocessor, LimitOutput,
                                       SaveAutoGrades, AssignLatePenalties, CheckCellMetadata]
c.GenerateFeedback.preprocessors = [GetGrades, HideHiddenTests, CSSHTMLHeaderPreprocessor]
