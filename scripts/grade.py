"""Instructor's grading run: student versions, autograding, feedback and a grades CSV.

Usage: python scripts/grade.py [--course DIR] [--submissions DIR]
  1. nbgrader generate_assignment for every set in solutions/  -> exercises/<set>/
  2. nbgrader autograde for every set that has submissions     -> autograded/<student>/<set>/
  3. nbgrader generate_feedback                                 -> feedback/<student>/<set>/*.html
  4. nbgrader export                                            -> grades.csv
Submissions are read from <submissions>/<student>/<set>/<set>.ipynb (default: submitted/).
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def nbgrader(course: Path, *args: str, force: bool = True) -> None:
    env = dict(os.environ)
    # nbgrader runs `alembic` to create its database: it must find the venv's executable.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}"
    # Without --force nbgrader silently skips what it did before and still exits 0.
    subprocess.run([sys.executable, "-m", "nbgrader", *args, *(["--force"] if force else []), "--log-level=WARN"],
                   cwd=course, env=env, check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--course", type=Path, default=ROOT, help="course folder holding nbgrader_config.py")
    parser.add_argument("--submissions", type=Path, default=None, help="folder of <student>/<set>/ submissions")
    parser.add_argument("--exercises-only", action="store_true", help="only write the student versions")
    args = parser.parse_args()
    course = args.course.resolve()
    submitted = (args.submissions or course / "submitted").resolve()
    extra = [f"--CourseDirectory.submitted_directory={submitted}"]

    sets = sorted(p.name for p in (course / "solutions").iterdir() if p.is_dir() and not p.name.startswith("."))
    for name in sets:
        nbgrader(course, "generate_assignment", name)
    if args.exercises_only:
        print(f"student versions written to exercises/: {', '.join(sets)}")
        return
    graded = sorted({p.parent.name for p in submitted.glob("*/*/*.ipynb")} & set(sets)) if submitted.exists() else []
    if not graded:
        print(f"student versions written to exercises/; no submissions found under {submitted}")
        return
    for name in graded:
        nbgrader(course, "autograde", name, *extra)
        nbgrader(course, "generate_feedback", name, *extra)
    nbgrader(course, "export", "--to", str(course / "grades.csv"), *extra, force=False)
    print(f"{'student':16s} {'set':28s} {'score':>7s} {'max':>5s}")
    with open(course / "grades.csv") as handle:
        for row in csv.DictReader(handle):
            if row["score"] and row["assignment"] in graded:
                print(f"{row['student_id']:16s} {row['assignment']:28s} {float(row['score']):7.1f} {float(row['max_score']):5.1f}")
    print(f"grades: {course / 'grades.csv'}; feedback: {course / 'feedback'}/<student>/<set>/")


if __name__ == "__main__":
    main()
