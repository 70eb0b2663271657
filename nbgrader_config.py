"""nbgrader configuration for Transformer Roots: instructors need no setup of their own.

solutions/<set>/ holds the instructor notebooks (with solutions and hidden tests);
`nbgrader generate_assignment` writes the student versions to exercises/<set>/.
Submissions go in submitted/<student>/<set>/; autograded/ and feedback/ are written next to them.
What autograding adds to nbgrader's own steps lives in grading/steps.py.
"""

import os

from nbconvert.preprocessors import ClearMetadataPreprocessor, CSSHTMLHeaderPreprocessor
from nbgrader.preprocessors import AssignLatePenalties, CheckCellMetadata, GetGrades, LimitOutput, SaveAutoGrades

from grading.sanitize import SafeHTMLExporter, SanitizeOutputs
from grading.steps import (TIMEOUT_SECONDS, HideHiddenTests, JudgeHandIns, LimitedExecute, NameLimits,
                           PlanHiddenTests, StderrToStdout)

ROOT = os.path.dirname(os.path.abspath(__file__))

c = get_config()  # noqa: F821 (provided by nbgrader when it loads this file)

c.CourseDirectory.root = ROOT
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "exercises"
c.CourseDirectory.submitted_directory = "submitted"
c.CourseDirectory.autograded_directory = "autograded"
c.CourseDirectory.feedback_directory = "feedback"
c.CourseDirectory.db_url = "sqlite:///gradebook.db"

# The student version keeps no outputs of the instructor's run.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}

# A loop that never ends scores 0 for its part; the rest is still graded.
c.Execute.timeout = TIMEOUT_SECONDS
c.LimitedExecute.timeout = TIMEOUT_SECONDS
# Output still arriving after a cell's reply (a flood that is being cut) is waited for, not fatal.
c.LimitedExecute.iopub_timeout = TIMEOUT_SECONDS
c.LimitedExecute.raise_on_iopub_timeout = False

# Once judged, the outputs keep no script, widget state or unsafe HTML (grading/sanitize.py): the
# autograded notebook is safe to open in JupyterLab and to render in the formgrader and feedback.
c.Autograde.autograde_preprocessors = [PlanHiddenTests, LimitedExecute, StderrToStdout, NameLimits, JudgeHandIns,
                                       SanitizeOutputs, ClearMetadataPreprocessor, LimitOutput, SaveAutoGrades,
                                       AssignLatePenalties, CheckCellMetadata]
c.GenerateFeedback.preprocessors = [GetGrades, HideHiddenTests, CSSHTMLHeaderPreprocessor]
# Feedback pages render the student's notebook cleaned, with a strict CSP in each file.
c.GenerateFeedback.exporter_class = SafeHTMLExporter

# scripts/grade.py names a kernel that runs each submission in a sandbox (scripts/sandbox_kernel.py).
if os.environ.get("TR_KERNEL_NAME"):
    c.LimitedExecute.kernel_name = os.environ["TR_KERNEL_NAME"]
    # The sandbox has no network, not even the machine's loopback: the kernel and nbgrader talk
    # over unix sockets, in a folder that LimitedExecute makes for each notebook inside the batch's
    # runtime folder (this ip is its default), the one folder both see.
    c.KernelManager.transport = "ipc"
    c.KernelManager.ip = os.path.join(os.environ.get("JUPYTER_RUNTIME_DIR", os.getcwd()), "kernel")
