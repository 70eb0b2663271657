"""nbgrader configuration for Transformer Roots: instructors need no setup of their own.

solutions/<set>/ holds the instructor notebooks (with solutions and hidden tests);
`nbgrader generate_assignment` writes the student versions to exercises/<set>/.
Submissions go in submitted/<student>/<set>/; autograded/ and feedback/ are written next to them.
"""

import os
import re

from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor, Preprocessor
from nbgrader.preprocessors import GetGrades

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
c.Execute.timeout = 20

# The student version keeps no outputs of the instructor's run.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}


class HideHiddenTests(Preprocessor):
    """Feedback shows which test cell failed and its message, never the hidden tests' source.

    Autograding puts the hidden tests back into the test cells; this removes them again from
    the feedback HTML and shortens each error to its last line (the traceback quotes code).
    """

    enabled = True  # nbconvert preprocessors are off unless enabled

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code" and "### BEGIN HIDDEN TESTS" in cell.source:
            cell.source = re.sub(r"### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS",
                                 "# (hidden tests ran here)", cell.source, flags=re.S)
            for output in cell.get("outputs", []):
                if output.get("output_type") == "error":
                    output["traceback"] = [f"{output['ename']}: {output['evalue']}"]
        return cell, resources


c.GenerateFeedback.preprocessors = [GetGrades, HideHiddenTests, CSSHTMLHeaderPreprocessor]
