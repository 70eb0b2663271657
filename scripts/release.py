"""Build the student copy of the course: everything a learner needs, and no answers.

Usage: python scripts/release.py DEST      (what `make release DEST=...` runs)

Copies the files git tracks into DEST (a new or empty folder), except the instructor's:
solutions/ (answers and hidden tests), tests/ (they read solutions/; only nbval's
sanitize.cfg stays), nbgrader_config.py, the grading scripts and the class hub's files. Its
README.md is the students' (README.student.md with the lessons table of README.md), not the
instructors'. Then it reads
every copied file and refuses the release if any holds a solution or hidden-test line. DEST can
then be pushed to a public class repository while the instructor's repository stays private;
`make lab` and `make test` (the lessons under nbval) work in it.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
PRIVATE = ("solutions/", "tests/", ".ci/", "grading/", "nbgrader_config.py", "scripts/grade.py",
           "scripts/sandbox_kernel.py", "scripts/release.py", "README.student.md",
           "hub/", "scripts/hub", "scripts/student_sim.py", "docs/hub/",  # the class's hub is the instructor's
           # The guides for those who teach and maintain: they say how grading works, a map to get around it.
           "docs/instructors.md", "docs/new-exercise.md", "docs/hub.md", "docs/maintainers.md",
           "site/", "scripts/build_site.py")  # the course's website is built from the instructor's copy
LESSONS_MARK = "<!-- lessons:"
SECRET = re.compile(r"### BEGIN (SOLUTION|HIDDEN TESTS)\n(.*?)### END (SOLUTION|HIDDEN TESTS)", re.S)


def public_files() -> list[str]:
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, check=True, capture_output=True, text=True).stdout
    # tests/sanitize.cfg stays: the student copy's `make test` runs nbval over the lessons with it.
    return [path for path in tracked.splitlines() if not path.startswith(PRIVATE) or path == "tests/sanitize.cfg"]


def student_readme() -> str:
    """README.student.md, with the lessons table of README.md where its marker line stands.

    The table is taken rather than copied by hand, so the students' list of lessons and exercises
    is always the instructors'; the rest of README.md (grading, releasing) stays out.
    """
    lessons = (ROOT / "README.md").read_text().split("\n## Lessons\n", 1)[1].split("\n## ", 1)[0]
    table = "\n".join(line for line in lessons.splitlines() if line.startswith("|"))
    lines = (ROOT / "README.student.md").read_text().splitlines(keepends=True)
    return "".join(table + "\n" if line.startswith(LESSONS_MARK) else line for line in lines)


def secret_lines() -> set[str]:
    """Lines of the solutions and hidden tests that appear nowhere in what students may see."""
    secrets, visible = set(), []
    for path in (ROOT / "solutions").rglob("*.ipynb"):
        source = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells)
        for match in SECRET.finditer(source):
            secrets |= {line.strip() for line in match.group(2).splitlines()  # specific lines, not imports
                        if len(line.strip()) > 30 and not line.strip().startswith(("from ", "import "))}
        visible.append(SECRET.sub("", source))
    return {line for line in secrets if not any(line in text for text in visible)}


def shape(path: Path) -> list[tuple[str, str | None, str | None]]:
    """A notebook's cells as (type, grade id, source), the source None where a solution or hidden tests
    are to be cut out (generate_assignment changes those cells only)."""
    cells = nbformat.read(path, as_version=4).cells
    return [(c.cell_type, c.metadata.get("nbgrader", {}).get("grade_id"),
             None if "### BEGIN" in c.source else c.source) for c in cells]


def stale_sets() -> list[str]:
    """The sets whose exercises/ notebook is not what solutions/ would now generate (a cell added,
    removed or changed since `make exercises`)."""
    stale = []
    for solution in sorted((ROOT / "solutions").glob("*/*.ipynb")):
        student = ROOT / "exercises" / solution.relative_to(ROOT / "solutions")
        ours = shape(solution)
        theirs = shape(student) if student.exists() else []
        if [cell[:2] for cell in ours] != [cell[:2] for cell in theirs] or any(
                mine[2] is not None and mine[2] != given[2] for mine, given in zip(ours, theirs)):
            stale.append(solution.parent.name)
    return stale


def untracked() -> list[str]:
    """Files of the course's code, lessons and exercise sets that git does not track: the copy (of what
    git tracks) would leave them out."""
    listed = subprocess.run(["git", "ls-files", "--others", "--exclude-standard", "--", "course_lib", "notebooks",
                             "exercises"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return listed.splitlines()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dest", type=Path)
    dest = parser.parse_args().dest.resolve()
    if dest.exists() and any(dest.iterdir()):
        sys.exit(f"{dest} is not empty: give a new folder (the release never overwrites)")
    if dest == ROOT or ROOT in dest.parents:
        sys.exit(f"{dest} is inside the course: give a folder outside it")
    if stale := stale_sets():
        sys.exit(f"release refused: exercises/ is older than solutions/ for {', '.join(stale)}: run "
                 "`make exercises`, commit exercises/, then release")
    if new := untracked():
        sys.exit(f"release refused: git does not track {', '.join(new)}, so the copy would leave it out: "
                 "`git add` it (or remove it), then release")
    secrets = secret_lines()
    leaks = []
    for path in public_files():
        target = dest / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if path == "README.md":
            target.write_text(student_readme())
        else:
            shutil.copy2(ROOT / path, target)
        text = target.read_text(errors="ignore")
        # course_lib holds the reference implementations by design; notebooks must not quote the answers.
        if path.endswith((".ipynb", ".py")) and ("### BEGIN SOLUTION" in text or "### BEGIN HIDDEN TESTS" in text
                                                 or path.endswith(".ipynb") and any(s in text for s in secrets)):
            leaks.append(path)
    if leaks:
        shutil.rmtree(dest)
        sys.exit(f"release refused: these files hold solution or hidden-test text: {', '.join(leaks)}")
    print(f"student copy written to {dest} ({len(public_files())} files; no solutions/, tests/ or grading "
          "scripts). Next: cd there, git init, commit, push to the class repository.")


if __name__ == "__main__":
    main()
