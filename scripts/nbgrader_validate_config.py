"""nbgrader configuration a learner's venv gets from `make setup` (as .venv/etc/jupyter/nbgrader_config.py).

Validate, the button and `nbgrader validate`, ends with a one-line summary of the exercises that
pass and their points (course_lib/validation.py). nbgrader reads this file beside the course's own
nbgrader_config.py (the instructor's; the student copy has none).
"""

from course_lib.validation import use_summary_validator

use_summary_validator()
