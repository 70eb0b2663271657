"""The instructor's grading machinery: what nbgrader runs in its own process, around the kernels.

`steps` holds the nbgrader preprocessors that nbgrader_config.py lists: the seed and the judge
of the hidden tests (see course_lib/checks/hand_in.py), the limits on output and time, and what
feedback may show. scripts/grade.py runs nbgrader with them, each kernel in a sandbox
(scripts/sandbox_kernel.py).
"""
