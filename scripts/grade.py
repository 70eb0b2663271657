"""Instructor's grading run: student versions, autograding, feedback and a grades CSV.

Usage: python scripts/grade.py [--course DIR] [--submissions DIR|ZIP] [--exercises-only]
  1. nbgrader generate_assignment for every set in solutions/ -> exercises/<set>/
     (skipped when solutions/ and nbgrader_config.py are unchanged since the last run)
  2. every submission <submissions>/<student>/<set>/*.ipynb is checked on its own: a file
     that is not a notebook, or a folder with several notebooks, is flagged (feedback says
     how to fix it) and the rest is graded; a single notebook under another name is graded;
     deleted exercise cells are put back from the student version
  3. the grader's own first cell, run in a sandboxed kernel: if it fails there, it would fail in
     every kernel, so the run stops with one message (what the sandbox could not see, the fix)
  4. nbgrader autograde + generate_feedback -> autograded/, feedback/, in --jobs batches at once
     (default: one per core), each batch with its own copy of the gradebook; the grades are then
     copied into gradebook.db by this process alone. Each kernel runs in a bubblewrap sandbox
     (scripts/sandbox_kernel.py: deny by default, no network, limits); the hidden tests hand in
     plain results that nbgrader's process judges (grading/steps.py). A submission that fails in its
     batch is graded again alone; if that fails too (its kernel dies...) it is flagged, and so
     is one that hit a limit (memory, processes, disk, output, time), with the limit named, even
     if its kernel survived (memory and processes: a cgroup per submission, grading/cgroup.py).
  5. grades.csv written fresh: one row per student and set, with a status column
     (graded, needs manual grading, flagged, not submitted)
Submissions are read from <submissions>/<student>/<set>/ (default: submitted/), or from a zip
downloaded from Canvas or Moodle (grading/lms.py: the zip's files are checked and extracted into
the staging folder, filed per student by nbgrader's zip_collect, and the grades are also written
as the CSV that LMS imports: canvas-grades.csv, or moodle-grades-<set>.csv).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import csv
import datetime
import functools
import hashlib
import html
import os
import json
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import nbformat

from course_lib import exercise_notebook  # the one name of a set's notebook
from grading import cgroup, exercise_sets, feedback_page  # the one list of sets; limits on processes
from grading.sanitize import csp_meta  # every feedback page carries the same strict CSP

if TYPE_CHECKING:  # grading/ is imported only for an LMS download
    from grading.lms import Collected

ROOT = Path(__file__).resolve().parent.parent
STAGING = ".grading"  # inside the course: normalized copies of the submissions, rebuilt every run


@dataclass
class Submission:
    student: str
    set_name: str
    status: str = "graded"  # graded | needs manual grading | flagged | not submitted
    notes: list[str] = field(default_factory=list)
    score: float | None = None
    max_score: float | None = None
    seconds: float = 0.0


def nbgrader(course: Path, *args: str, force: bool = True, check: bool = True,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run nbgrader; with check=False its output is kept (bounded: see `run_bounded`) for the caller."""
    env = os.environ | (env or {})
    # nbgrader runs `alembic` to create its database: it must find the venv's executable.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}"
    # Without --force nbgrader silently skips what it did before and still exits 0.
    command = [sys.executable, "-m", "nbgrader", *args, *(["--force"] if force else []), "--log-level=WARN"]
    if check:
        return subprocess.run(command, cwd=course, env=env, check=True)
    return run_bounded(command, cwd=course, env=env)


OUTPUT_KEPT = 64 * 1024  # bytes kept from each end of nbgrader's output: its errors, not a flood


def run_bounded(command: list[str], **popen) -> subprocess.CompletedProcess:
    """Run `command` with stdout and stderr merged, keeping only their first and last OUTPUT_KEPT bytes.

    Each kernel inherits nbgrader's stderr, so a submission can write gigabytes to it: they are
    read as they come (nbgrader never blocks on a full pipe) and dropped, not held in memory.
    """
    head, tail, dropped = bytearray(), bytearray(), 0
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **popen) as process:
        while chunk := process.stdout.read1(1 << 16):
            room = OUTPUT_KEPT - len(head)
            head += chunk[:room]
            tail += chunk[room:] if room > 0 else chunk
            if len(tail) > OUTPUT_KEPT:
                dropped += len(tail) - OUTPUT_KEPT
                del tail[:-OUTPUT_KEPT]
    cut = f"\n[... {dropped:,} bytes of output left out ...]\n".encode() if dropped else b""
    text = (bytes(head) + cut + bytes(tail)).decode(errors="replace")
    return subprocess.CompletedProcess(command, process.returncode, text, "")


def solutions_digest(course: Path) -> str:
    """Hash of everything generate_assignment reads: regenerate only when it changed."""
    digest = hashlib.sha256()
    for path in sorted([course / "nbgrader_config.py", *(course / "solutions").rglob("*.ipynb")]):
        if ".ipynb_checkpoints" not in path.parts:
            digest.update(str(path.relative_to(course)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def generate_student_versions(course: Path, sets: list[str]) -> bool:
    """nbgrader generate_assignment for every set, unless nothing changed; True if it ran."""
    stamp = course / STAGING / "solutions.sha256"
    digest = solutions_digest(course)
    if (course / "gradebook.db").exists() and stamp.exists() and stamp.read_text() == digest \
            and all((course / "exercises" / s / exercise_notebook(s)).exists() for s in sets):
        return False
    # One nbgrader run for every set: each run costs some seconds of start-up (nbgrader_config.py
    # imports torch), ten times over. nbgrader reads the id as a glob over solutions/, and "*",
    # like exercise_sets, skips hidden folders.
    nbgrader(course, "generate_assignment", "*")
    missing = [name for name in sets if not (course / "exercises" / name / exercise_notebook(name)).exists()]
    if missing:
        sys.exit(f"ERROR: nbgrader wrote no student version of {', '.join(missing)}: is "
                 f"{', '.join(f'solutions/{name}/{exercise_notebook(name)}' for name in missing)} there?")
    stamp.parent.mkdir(exist_ok=True)
    stamp.write_text(digest)
    return True


def _grade_id(cell) -> str | None:
    return cell.metadata.get("nbgrader", {}).get("grade_id")


def restore_deleted_cells(nb, release) -> list[str]:
    """Put back every nbgrader cell of the student version that the submission lost.

    A missing cell goes right after the cell that preceded it in the student version, so the
    hidden tests still run after the learner's answer. Returns the restored grade ids.
    """
    present = {_grade_id(c) for c in nb.cells}
    restored, last_index = [], -1
    for cell in release.cells:
        grade_id = _grade_id(cell)
        if grade_id is None:
            continue
        if grade_id in present:
            last_index = next(i for i, c in enumerate(nb.cells) if _grade_id(c) == grade_id)
            continue
        last_index += 1
        nb.cells.insert(last_index, nbformat.from_dict(dict(cell)))
        restored.append(grade_id)
    return restored


def demote_duplicate_cells(nb) -> list[str]:
    """A cell copied with its nbgrader metadata makes nbgrader abort the whole batch: every occurrence
    of a grade id but the last becomes an ordinary cell. The last is the one nbgrader's own
    DeduplicateIds keeps, so the cell graded is the one nbgrader would grade. Returns those ids."""
    seen, duplicated = set(), []
    for cell in reversed(nb.cells):
        grade_id = _grade_id(cell)
        if grade_id is None:
            continue
        if grade_id in seen:
            del cell.metadata["nbgrader"]
            duplicated.append(grade_id)
        seen.add(grade_id)
    return sorted(set(duplicated))


def stage(course: Path, folder: Path, sub: Submission) -> Path | None:
    """Check one submission folder and write its normalized copy; None (and sub flagged) if unusable."""
    expected = exercise_notebook(sub.set_name)
    notebooks = sorted(p for p in folder.glob("*.ipynb") if p.is_file())
    if not notebooks:
        sub.status, sub.notes = "not submitted", ["no notebook in the folder"]
        return None
    chosen = folder / expected if (folder / expected).exists() else None
    if chosen is None and len(notebooks) == 1:
        chosen = notebooks[0]
    if chosen is None:
        sub.status = "flagged"
        sub.notes.append(f"several notebooks ({', '.join(p.name for p in notebooks)}) and none named {expected}: "
                         f"keep only your answer, named {expected}")
        return None
    try:
        nb = nbformat.read(chosen, as_version=4)
        nbformat.validate(nb)
    except Exception as error:  # truncated JSON, not a notebook at all, an invalid cell...
        sub.status = "flagged"
        sub.notes.append(f"{chosen.name} is not a readable notebook ({type(error).__name__}: "
                         f"{str(error).splitlines()[0][:160]}); open it in JupyterLab, save it and submit again")
        return None
    release = nbformat.read(course / "exercises" / sub.set_name / expected, as_version=4)
    if not {_grade_id(c) for c in nb.cells} & {_grade_id(c) for c in release.cells} - {None}:
        # Graded, it would be the whole exercise put back, unanswered: a 0 that hides the mix-up.
        sub.status = "flagged"
        sub.notes.append(f"{chosen.name} holds none of the exercise set's cells (the lesson's notebook, or "
                         f"another set's?): hand in {expected}, from exercises/{sub.set_name}/")
        return None
    if chosen.name == f"{sub.set_name}.ipynb":  # what releases before the rename called it
        sub.notes.append(f"graded {chosen.name}, the name earlier releases gave this notebook (now {expected})")
    elif chosen.name != expected:
        sub.notes.append(f"graded {chosen.name} (the file should be named {expected})")
    sub.notes += scan(nb) + answer_key_text(nb, answer_key_lines(course, sub.set_name))
    duplicated = demote_duplicate_cells(nb)
    if duplicated:
        sub.notes.append(f"cells copied with their grading id ({', '.join(duplicated)}): the last of each "
                         "is graded (as nbgrader does), the ones above it run as ordinary cells")
    restored = restore_deleted_cells(nb, release)
    if restored:
        sub.notes.append(f"deleted cells put back from the exercise: {', '.join(restored)}")
    target = course / STAGING / "submitted" / sub.student / sub.set_name / expected
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, target)
    # What `nbgrader collect` keeps beside the notebook, which nbgrader carries on to the feedback:
    # when it was handed in, and the secret that names its feedback in the exchange (without it
    # `nbgrader release_feedback` stops, and the student cannot fetch their feedback).
    for kept in ("timestamp.txt", "submission_secret.txt"):
        if (folder / kept).is_file():
            shutil.copy(folder / kept, target.parent / kept)
    return target


# Code a submission has no honest reason to run, and that nbgrader's model cannot stop: each hit
# is listed in the report and grades.csv so the instructor looks at it (see docs/instructors.md).
SUSPICIOUS = {
    "reads the notebook's own cells or the caller's frame": r"get_ipython|_getframe|inspect\.(stack|currentframe|getouterframes)|\b_ih\b|\bIn\[|f_back|f_globals",
    "opens files or databases": r"\bopen\(|sqlite3|gradebook|solutions/|pathlib|os\.(walk|listdir|scandir|system|remove)|subprocess|shutil",
    # (by any alias: `import IPython.display as d` then `d.display = ...`; a class's own `self.x = ...`
    # is fine, and none of the course's answers assigns to anything else's attributes)
    "patches a module or an object (torch, course_lib, IPython)":
        r"^\s*(?!self\.)\w+(\.\w+)+\s*(\[[^\]]*\])?\s*[-+*/]?=[^=]|input_transformers|sys\.modules",
    "stops the kernel": r"\b(exit|quit)\(|os\._exit|sys\.exit",
    # The kernel hands in what it computed; code that reaches into that machinery could hand in
    # answers its own functions did not compute (docs/instructors.md: what the grader does not guarantee).
    "reaches into the grading code or torch's dispatch": r"course_lib\.checks|hand_in|"
        r"Torch(Function|Dispatch)Mode|__torch_(function|dispatch)__|_(enable|disable|prepare)_profiler|"
        r"settrace|setprofile|\bgc\.|__code__|events\.register|(pre|post)_run_cell",
    # Python calls are recorded only in the calling thread and threads started during a check.
    "starts threads or processes": r"\bthreading\b|ThreadPool|concurrent\.futures|multiprocessing|os\.fork",
    # A name spelled at run time ("soft" + "max"), or text run as code, hides what it reaches from
    # every pattern above and from the check of the answer's own source: the record of what ran is
    # written in the kernel, where such code can rewrite it. None of the course's answers needs one.
    "builds names or code at run time": r"\b(getattr|setattr|delattr|vars|globals|locals|eval|exec|compile|"
        r"__import__)\s*\(|importlib|import_module|__dict__|__builtins__|__getattribute__|attrgetter|"
        r"methodcaller|__getattr|\b(ctypes|marshal|pickle|codecs|base64)\b|\bchr\s*\(|fromhex",
}


def scan(nb) -> list[str]:
    """What in the learner's own cells (not the locked ones) needs a look by hand."""
    source = "\n".join(c.source for c in nb.cells if c.cell_type == "code"
                       and not c.metadata.get("nbgrader", {}).get("locked"))
    return [f"review by hand: {why}" for why, pattern in SUSPICIOUS.items() if re.search(pattern, source, re.M)]


# nbgrader's markers, which only the instructor's source has: the student version drops them.
MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION", "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")
HIDDEN_BLOCK = re.compile(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", re.S)
ANSWER_KEY = "review by hand: it holds text of the instructor's solution notebook"


@functools.lru_cache(maxsize=None)
def answer_key_lines(course: Path, set_name: str) -> frozenset[str]:
    """The lines of a set's hidden tests in the instructor's source (blank ones left out)."""
    nb = nbformat.read(course / "solutions" / set_name / exercise_notebook(set_name), as_version=4)
    return frozenset(line.strip() for cell in nb.cells if cell.cell_type == "code"
                     for block in HIDDEN_BLOCK.findall(cell.source) for line in block.splitlines() if line.strip())


def answer_key_text(nb, hidden_lines: frozenset[str]) -> list[str]:
    """A note if any cell, locked or not, holds nbgrader's markers or a line of the hidden tests.

    Such a notebook came from the instructor's source (handed in as it is, or copied from it):
    its score does not count until someone has read it (read_scores flags it)."""
    found = set()
    for cell in nb.cells:
        found |= {marker for marker in MARKERS if marker in cell.source}
        found |= {f"hidden test line `{line}`" for line in map(str.strip, cell.source.splitlines()) if line in hidden_lines}
    if not found:
        return []
    return [f"{ANSWER_KEY} ({', '.join(sorted(found)[:3])}{', ...' if len(found) > 3 else ''}): was the answer key "
            "handed in, or copied from?"]


def why_it_failed(output: str, limits: list[str] = ()) -> str:
    """One sentence for the instructor and the learner from nbgrader's log of a failed run and the
    limits (cgroup) the submission reached."""
    # A limit reached explains the failure, whatever it looked like to nbgrader: a kernel that cannot
    # start a thread may die, or garble a message (pyzmq starts a thread to send a large one).
    if "memory" in limits:
        return ("limit hit (memory): the notebook's kernel failed when the notebook's processes together "
                "used more memory than they may; use less and submit again")
    if "processes" in limits:
        return ("limit hit (processes): the notebook's kernel failed after the notebook started more "
                "processes and threads than it may; start fewer and submit again")
    if "DeadKernelError" in output or "Kernel died" in output or "kernel died" in output.lower():
        return ("the notebook's kernel stopped while it ran (exit(), quit(), os._exit, or a limit on memory or "
                "processes): remove that call and submit again")
    if "Timeout" in output:
        return "the notebook did not finish in time: look for a loop that never ends"
    lines = [line for line in output.strip().splitlines()
             if line.strip() and "WARNING" not in line and "Warning" not in line]
    last = lines[-1:] or ["no message"]
    return f"nbgrader could not grade it ({last[0][:200]}); the instructor will look at it by hand"


def write_flag_feedback(course: Path, sub: Submission) -> None:
    """A feedback page for a submission that could not be graded: what is wrong, how to fix it."""
    folder = course / "feedback" / sub.student / sub.set_name
    folder.mkdir(parents=True, exist_ok=True)
    items = "".join(f"<li>{html.escape(note)}</li>" for note in sub.notes)
    (folder / feedback_page(sub.set_name)).write_text(
        f"<!DOCTYPE html><html><head>{csp_meta()}<meta charset='utf-8'><title>{sub.set_name}</title></head><body>"
        f"<h1>{html.escape(sub.set_name)}: not graded</h1><p>Your submission could not be graded:</p>"
        f"<ul>{items}</ul><p>Fix it and hand it in again; nothing else is wrong with the other sets.</p>"
        "</body></html>")


KERNEL = "transformer-roots-sandbox"


@dataclass
class Limits:
    """What one submission may use; each is named in its feedback when hit (see docs/instructors.md)."""
    memory: int = 3 * 2**30  # bytes for all its processes together (cgroup); without cgroups, per process
    processes: int = 64  # processes and threads at once, all of the submission's
    scratch: int = 512 * 2**20  # bytes of each writable folder (working folder, /tmp, /dev/shm)
    output_per_cell: int = 1_000_000  # bytes
    output_per_notebook: int = 4_000_000  # bytes
    seconds: float = 120.0  # the whole notebook, besides nbgrader_config's limit per cell

    def environment(self) -> dict[str, str]:
        """For nbgrader_config.py, which enforces the output and time limits and names them all."""
        return {"TR_MEMORY_BYTES": str(self.memory), "TR_PROCESSES": str(self.processes),
                "TR_SCRATCH_BYTES": str(self.scratch), "TR_OUTPUT_BYTES_PER_CELL": str(self.output_per_cell),
                "TR_OUTPUT_BYTES_PER_NOTEBOOK": str(self.output_per_notebook),
                "TR_SECONDS_PER_SUBMISSION": str(self.seconds)}


# What a graded kernel may import of the course: the checks' plumbing (comparisons, the hand-in).
# Each set's visible checks are no-ops there, since the grader runs them on the results
# (grading/answer_key.py); no lesson module, no EXERCISES, no reference answer is copied.
SEALED_COPIES = ["__init__.py", "bug_hints.py", "hand_in.py"]
SEALED_CHECKS = '''"""While grading, the grader runs this set's visible checks on what hand_in hands in (grading/answer_key.py)."""


def _checked_by_the_grader(fn) -> None:
    """Nothing to do in the kernel: the grader runs the check on the results handed in."""


'''


def sealed_course_lib(course: Path) -> Path:
    """A folder holding the course library as a graded kernel sees it (the kernel's PYTHONPATH)."""
    folder = course / STAGING / "sealed"
    shutil.rmtree(folder, ignore_errors=True)
    checks = folder / "course_lib" / "checks"
    checks.mkdir(parents=True)
    (folder / "course_lib" / "__init__.py").write_text(
        '"""The course library as a graded kernel sees it: only the checks\' plumbing (scripts/grade.py)."""\n')
    for module in sorted((ROOT / "course_lib" / "checks").glob("*.py")):
        if module.name in SEALED_COPIES:
            shutil.copy(module, checks / module.name)
            continue
        names = [node.name for node in ast.parse(module.read_text()).body
                 if isinstance(node, ast.FunctionDef) and node.name.startswith("check_")]
        (checks / module.name).write_text(SEALED_CHECKS + " = ".join([*names, "_checked_by_the_grader"]) + "\n")
    return folder


def sandbox_environment(course: Path, limits: Limits) -> dict[str, str]:
    """Environment for nbgrader that runs every submission's kernel in scripts/sandbox_kernel.py.

    The kernel sees only the system's libraries, the Python environment (wherever it lives:
    symlinks resolved, a conda or pyenv folder included) and the course library, all read-only;
    see sandbox_kernel.py. Without bubblewrap, grading still runs, unsandboxed, and says so.
    """
    if shutil.which("bwrap") is None:
        print("WARNING: bubblewrap (bwrap) is not installed, so submissions run unsandboxed and could "
              "read solutions/ or the gradebook: install it (`apt-get install bubblewrap`)", file=sys.stderr)
        return limits.environment()
    python = Path(os.path.realpath(sys.executable)).parent.parent  # may sit in the home folder (pyenv)
    sealed = sealed_course_lib(course)
    show = {sealed, Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(), python}
    show |= {Path(p).resolve() for p in sys.path if p and Path(p).is_dir() and "site-packages" in p}
    # The kernel imports the sealed course library shown here, whatever the Python environment's
    # own .pth files point at (an editable install of another checkout, say); a full copy of the
    # course's packages installed into a shown folder (`pip install .`) is hidden.
    hide = {p / package for p in show if p != sealed for package in ("course_lib", "grading")
            if (p / package).is_dir()}
    argv = [sys.executable, str(ROOT / "scripts" / "sandbox_kernel.py"), *(f"--show={p}" for p in sorted(show)),
            *(f"--hide={p}" for p in sorted(hide)),
            f"--path={sealed}", f"--memory={limits.memory}", f"--processes={limits.processes}",
            f"--scratch={limits.scratch}", f"--groups={GROUPS}", "-f", "{connection_file}"]
    spec = course / STAGING / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": argv, "display_name": "Python 3 (sandboxed for grading)", "language": "python",
        "interrupt_mode": "message"}))  # a signal would stop at bwrap; a message reaches the kernel
    return limits.environment() | {
        "TR_KERNEL_NAME": KERNEL,
        "JUPYTER_PATH": os.pathsep.join(filter(None, [str(course / STAGING / "jupyter"),
                                                      os.environ.get("JUPYTER_PATH")]))}


@dataclass
class Batch:
    """Some submissions, of any sets, graded by one nbgrader run with a gradebook of its own."""
    subs: list[Submission]
    folder: Path

    @property
    def gradebook(self) -> Path:
        return self.folder / "gradebook.db"


def make_batches(course: Path, subs: list[Submission], jobs: int) -> list[Batch]:
    """Deal the staged submissions, by set then student, into `jobs` batches, each in a folder of its
    own. Not a batch per set: each nbgrader run costs some seconds of start-up, for one submission or fifty."""
    ordered = sorted(subs, key=lambda sub: (sub.set_name, sub.student))
    batches = []
    for k in range(min(jobs, len(ordered))):
        batch = Batch(ordered[k::jobs], course / STAGING / "batches" / str(k))
        for sub in batch.subs:
            staged = course / STAGING / "submitted" / sub.student / sub.set_name
            shutil.copytree(staged, batch.folder / "submitted" / sub.student / sub.set_name)
        shutil.copy(course / "gradebook.db", batch.gradebook)
        batches.append(batch)
    return batches


def grade_batch(course: Path, batch: Batch, env: dict[str, str]) -> None:
    """Autograde and write feedback for one batch (runs in a thread; nbgrader is a subprocess).

    nbgrader goes on past a submission it cannot grade (and then exits 1): each one without an
    autograded notebook is graded again on its own; if that run fails too, it is flagged with the
    reason. A submission that hit a limit is flagged with that limit.
    """
    # Each batch has its own folders: nbgrader works on every student it finds in them. Its kernels
    # (one at a time) make their sockets in a folder of their own inside its runtime folder
    # (grading/steps.py, socket_folder): the only folder of the disk each shares with nbgrader.
    extra = [f"--CourseDirectory.{kind}_directory={batch.folder / kind}" for kind in ("submitted", "autograded",
                                                                                     "feedback")]
    extra.append(f"--CourseDirectory.db_url=sqlite:///{batch.gradebook}")
    # A unix socket's path may be at most 107 bytes, so the folder is a short one of its own, not
    # one inside a course that may sit deep in the disk.
    runtime = Path(tempfile.mkdtemp(prefix="tr-grading-"))
    try:
        _grade_batch(course, batch, env | {"JUPYTER_RUNTIME_DIR": str(runtime)}, extra)
    finally:
        shutil.rmtree(runtime, ignore_errors=True)


def _grade_batch(course: Path, batch: Batch, env: dict[str, str], extra: list[str]) -> None:
    start = time.perf_counter()
    # nbgrader reads the set's id as a glob over the batch's submitted/<student>/ folders.
    nbgrader(course, "autograde", "*", *extra, check=False, env=env)
    for sub in batch.subs:
        if not autograded(batch, sub).exists():
            again = nbgrader(course, "autograde", sub.set_name, *extra, "--student", sub.student,
                             check=False, env=env)
            if not autograded(batch, sub).exists():
                sub.status = "flagged"
                sub.notes.append(why_it_failed(again.stdout + again.stderr, cgroup_limits_hit(sub)))
                write_flag_feedback(course, sub)
    nbgrader(course, "generate_feedback", "*", *extra, check=False, env=env)
    for sub in batch.subs:
        sub.seconds = (time.perf_counter() - start) / len(batch.subs)
        if sub.status == "flagged":
            continue
        sub.notes += limits_hit(autograded(batch, sub))
        # A limit reached, even by a submission that caught the error and went on, is flagged.
        for kind in cgroup_limits_hit(sub):
            if not any(note.startswith(f"limit hit ({kind})") for note in sub.notes):
                sub.notes.append(f"limit hit ({kind}): {CGROUP_LIMITS[kind]}")
        for kind in ("autograded", "feedback"):
            done = batch.folder / kind / sub.student / sub.set_name
            if done.exists():
                (course / kind / sub.student).mkdir(parents=True, exist_ok=True)
                shutil.move(done, course / kind / sub.student / sub.set_name)


def autograded(batch: Batch, sub: Submission) -> Path:
    return batch.folder / "autograded" / sub.student / sub.set_name / exercise_notebook(sub.set_name)


def limits_hit(path: Path) -> list[str]:
    """The limits a graded notebook ran into, one note per limit, as grading/steps.py named them;
    and each graded cell that handed in nothing (skipped, emptied or rewritten while grading)."""
    nb = nbformat.read(path, as_version=4)
    found: dict[str, str] = {}
    unseen = []
    for cell in nb.cells:
        for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
            if output.get("ename") == "LimitExceeded":
                message = output.evalue
                named = re.search(r"limit on (\w+)", message)
                kind = named.group(1) if named else "output" if message.startswith("output cut") else "time"
                found.setdefault(kind, message)
            elif output.get("ename") == "NotGraded":
                unseen.append(_grade_id(cell) or "a test cell")
    notes = [f"limit hit ({kind}): {message}" for kind, message in found.items()]
    if unseen:
        notes.append(f"review by hand: the hidden tests of {', '.join(unseen)} handed in nothing")
    return notes


def record_grades(course: Path, batch: Batch) -> None:
    """Copy a batch's grades into the course gradebook: its only writer, one batch after another."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as main, \
            Gradebook(f"sqlite:///{batch.gradebook}") as graded:
        for sub in batch.subs:
            try:
                done = graded.find_submission(sub.set_name, sub.student)
            except MissingEntry:
                continue
            main.update_or_create_student(sub.student)
            with contextlib.suppress(MissingEntry):
                main.remove_submission(sub.set_name, sub.student)  # an earlier run's
            # add_submission builds the submission's rows, and reading the set's notebooks meanwhile
            # would flush them half-built (SQLAlchemy's "not in session" warnings): it flushes once, at its commit.
            with main.db.no_autoflush:
                main.add_submission(sub.set_name, sub.student, timestamp=done.timestamp)
            for notebook in done.notebooks:
                for grade in notebook.grades:
                    row = main.find_grade(grade.name, notebook.name, sub.set_name, sub.student)
                    row.auto_score, row.manual_score = grade.auto_score, grade.manual_score
                    row.extra_credit, row.needs_manual_grade = grade.extra_credit, grade.needs_manual_grade
                for comment in notebook.comments:
                    row = main.find_comment(comment.name, notebook.name, sub.set_name, sub.student)
                    row.auto_comment, row.manual_comment = comment.auto_comment, comment.manual_comment
            main.db.commit()


def check_the_sandbox(course: Path, env: dict[str, str]) -> None:
    """Run the line every graded cell needs in a kernel like the submissions'; stop the run if it fails.

    If it fails, it fails in every kernel (the course library or torch cannot be imported there,
    say) and every submission would score 0 while looking graded: nothing is graded, and the one
    message says what the kernel could not see and how to fix it.
    """
    from traitlets.config.loader import PyFileConfigLoader

    from grading.steps import SANDBOX_PROBE, LimitedExecute

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(SANDBOX_PROBE)])
    folder = course / STAGING / "check" / "first-cell"  # so its cgroup is <run>/check.first-cell
    folder.mkdir(parents=True, exist_ok=True)
    log = folder.parent / "kernel.log"  # the kernel's own stderr: why it died, if it did

    class Checked(LimitedExecute):
        def start_new_kernel(self, **kwargs):
            with open(log, "wb") as stderr:  # the kernel keeps its own copy of the file
                return super().start_new_kernel(stdout=subprocess.DEVNULL, stderr=stderr, **kwargs)

    # The kernel, its transport and its time limits as nbgrader's runs get them: the course's
    # nbgrader_config.py, read with the environment grade.py gives nbgrader.
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        config = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()
        Checked(config=config).preprocess(nb, {"metadata": {"path": str(folder)}})
        errors = [o for o in nb.cells[0].outputs if o.get("output_type") == "error"]
        error = f"{errors[0].ename}: {errors[0].evalue}" if errors else None
    except Exception as failure:  # the kernel did not start, or died
        said = log.read_bytes()[-4000:].decode(errors="replace").strip().splitlines() if log.exists() else []
        error = f"{type(failure).__name__}: {failure}" + (f"; the kernel said: {said[-1]}" if said else "")
    finally:
        os.environ.clear()
        os.environ.update(saved)
        if cgroup.available():
            cgroup.Group.find(f"{GROUPS}/check.first-cell").remove()
    if error:
        sys.exit(unseen_by_the_sandbox(error, env))


def unseen_by_the_sandbox(error: str, env: dict[str, str]) -> str:
    """The message that stops a run whose probe failed in the sandbox: what it could not see, the fix."""
    from grading.steps import SANDBOX_PROBE

    message = (f"ERROR: nothing was graded: the line every graded cell runs ({SANDBOX_PROBE}) fails in the "
               f"sandbox's kernel, so every submission would score 0 ({' '.join(error.split())[:400]}).")
    missing = re.search(r"No module named '?([\w.]+)'?", error)
    if missing:
        import importlib.util

        name = missing.group(1).split(".")[0]
        spec = importlib.util.find_spec(name)
        where = f"imports {name} from {Path(spec.origin).resolve().parent}" if spec and spec.origin else f"cannot import {name}"
        spec_file = Path(env.get("JUPYTER_PATH", "").split(os.pathsep)[0]) / "kernels" / KERNEL / "kernel.json"
        argv = json.loads(spec_file.read_text())["argv"] if spec_file.is_file() else []
        shown = [a.split("=", 1)[1] for a in argv if a.startswith("--show=")]
        message += (f" The grading Python ({sys.executable}) {where}, which the sandbox does not show: it shows "
                    f"only the system and {', '.join(shown) or 'the Python environment'}. Fix: install the "
                    f"course's packages into the Python environment that grades (`{sys.executable} -m pip install "
                    f"-e {ROOT}`), so that everything it imports sits in its own site-packages.")
    return message


def grade_all(course: Path, subs: list[Submission], jobs: int, limits: Limits) -> None:
    """Grade every staged submission, `jobs` nbgrader runs at a time, then record the grades."""
    env = sandbox_environment(course, limits)
    check_the_sandbox(course, env)
    batches = make_batches(course, subs, jobs)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(lambda batch: grade_batch(course, batch, env), batches))
    for batch in batches:
        record_grades(course, batch)
    remove_cgroups(subs)


# This run's cgroups carry its name: another grading run on the machine keeps its own.
RUN = f"{os.getpid()}-{int(time.time())}"
GROUPS = f"transformer-roots/grading/{RUN}"  # sandbox_kernel.py adds <student>.<set>
CGROUP_LIMITS = {"memory": "the notebook's processes together reached the memory they may use",
                 "processes": "the notebook tried to run more processes and threads at once than it may"}


def cgroup_limits_hit(sub: Submission) -> list[str]:
    """The limits ("memory", "processes") this submission's cgroup reached, even if its kernel lived on."""
    if cgroup.available() is None:
        return []
    return cgroup.Group.find(f"{GROUPS}/{sub.student}.{sub.set_name}").limits_hit()


def remove_cgroups(subs: list[Submission]) -> None:
    """Each submission's cgroup (anything still running in it is killed), then this run's own."""
    if cgroup.available() is None:
        return
    for sub in subs:
        cgroup.Group.find(f"{GROUPS}/{sub.student}.{sub.set_name}").remove()
    cgroup.Group.find(GROUPS).remove()


def read_scores(course: Path, subs: list[Submission]) -> None:
    """Scores and manual-grading flags from the gradebook (one reader, after every run)."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        for sub in subs:
            if sub.status != "graded":
                continue
            try:
                result = gradebook.find_submission(sub.set_name, sub.student)
            except MissingEntry:
                sub.status = "flagged"
                sub.notes.append("no grade was recorded")
                continue
            sub.score, sub.max_score = result.score, result.max_score
            if any(note.startswith(("limit hit", ANSWER_KEY)) for note in sub.notes):
                sub.status, sub.score = "flagged", None  # the instructor reads it before any score counts
            elif result.needs_manual_grade:
                sub.status = "needs manual grading"


def write_csv(path: Path, subs: list[Submission], max_scores: dict[str, float]) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["assignment", "student_id", "status", "score", "max_score", "seconds", "notes"])
        for sub in subs:
            score = "" if sub.score is None else f"{sub.score:g}"
            writer.writerow([sub.set_name, sub.student, sub.status, score, f"{max_scores.get(sub.set_name, 0):g}",
                             f"{sub.seconds:.1f}", "; ".join(sub.notes)])


def set_max_scores(course: Path, sets: list[str]) -> dict[str, float]:
    scores = {}
    for name in sets:
        nb = nbformat.read(course / "solutions" / name / exercise_notebook(name), as_version=4)
        scores[name] = sum(c.metadata.get("nbgrader", {}).get("points", 0) for c in nb.cells
                           if c.metadata.get("nbgrader", {}).get("grade"))
    return scores


def print_table(subs: list[Submission], elapsed: float, jobs: int) -> None:
    print(f"{'student':16s} {'set':24s} {'score':>6s} {'max':>5s} {'s':>5s}  status")
    for sub in subs:
        score = "" if sub.score is None else f"{sub.score:6.1f}"
        print(f"{sub.student:16s} {sub.set_name:24s} {score:>6s} {sub.max_score or 0:5.1f} {sub.seconds:5.1f}  "
              f"{sub.status}{': ' + '; '.join(sub.notes) if sub.notes else ''}")
    counts = {status: sum(s.status == status for s in subs)
              for status in ("graded", "needs manual grading", "flagged", "not submitted")}
    ran = [s.seconds for s in subs if s.seconds]
    review = sum(any(note.startswith("review by hand") for note in s.notes) for s in subs)
    print(", ".join(f"{n} {status}" for status, n in counts.items()) + f" ({review} to review by hand)"
          + f"; {elapsed:.0f} s in all, {elapsed / max(len(ran), 1):.1f} s per submission "
          f"({sum(ran) / max(len(ran), 1):.1f} s each, {jobs} at a time)")


def lms_rows(collected: Collected, subs: list[Submission]) -> list[dict]:
    """One row per graded file of the download, for the LMS's import CSV: a score only if graded."""
    rows = []
    for sub in subs:
        handed = [h for h in collected.handed if (h.student, h.set_name) == (sub.student, sub.set_name)]
        if handed:
            rows.append({"lms_id": handed[-1].lms_id, "name": handed[-1].name, "set_name": sub.set_name,
                         "status": sub.status, "score": sub.score if sub.status == "graded" else None})
    return rows


def private_file(path: Path) -> Path:
    """`path`, made empty and readable by its owner only before anything is written to it: every
    student's grade is in grades.csv and the LMS files, and a class's hub lets students read the checkout."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
    path.chmod(0o600)
    return path


def write_lms_csv(course: Path, collected: Collected, subs: list[Submission], max_scores: dict[str, float],
                  columns: dict[str, str]) -> list[Path]:
    """The grades as the LMS the download came from imports them; returns the files written."""
    from grading.lms import write_canvas_csv, write_moodle_csv

    rows = lms_rows(collected, subs)
    sets = sorted({row["set_name"] for row in rows})
    if collected.lms == "canvas":
        write_canvas_csv(private_file(course / "canvas-grades.csv"), rows, sets, max_scores, columns)
        return [course / "canvas-grades.csv"]
    written = []
    for name in sets:  # Moodle's worksheet holds one assignment
        path = course / f"moodle-grades-{name}.csv"
        write_moodle_csv(private_file(path), [r for r in rows if r["set_name"] == name], max_scores[name],
                         datetime.datetime.now())
        written.append(path)
    return written


def own_peak_memory() -> int:
    """Bytes this process has held at most. Linux's VmHWM is this program's own: getrusage's maxrss
    also counts the process it was started from (it is kept across exec), such as a test runner."""
    status = Path("/proc/self/status")
    found = re.search(r"VmHWM:\s+(\d+) kB", status.read_text()) if status.exists() else None
    if found:
        return int(found.group(1)) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--course", type=Path, default=ROOT, help="course folder holding nbgrader_config.py")
    parser.add_argument("--submissions", type=Path, default=None,
                        help="folder of <student>/<set>/ submissions, or a zip downloaded from Canvas or Moodle")
    parser.add_argument("--lms", choices=["canvas", "moodle"], default=None,
                        help="the LMS the zip comes from (default: told by its file names)")
    parser.add_argument("--set", default=None, help="the set every notebook of the zip is for "
                        "(default: told by each file's name, e.g. 01_attention_scores_exercises.ipynb)")
    parser.add_argument("--roster", type=Path, default=None,
                        help="CSV: student id, full name, LMS user id (Canvas); maps the zip's students to the course's")
    parser.add_argument("--canvas-column", action="append", default=[], metavar="SET=HEADER",
                        help="the Canvas gradebook column of a set, as Canvas exports it: 'Set 01 (12345)'")
    parser.add_argument("--exercises-only", action="store_true", help="only write the student versions")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="submissions graded at once")
    default = Limits()
    parser.add_argument("--memory-gb", type=float, default=default.memory / 2**30,
                        help="memory of a submission, all its processes together (per process without cgroups)")
    parser.add_argument("--processes", type=int, default=default.processes, help="processes and threads")
    parser.add_argument("--scratch-mb", type=float, default=default.scratch / 2**20,
                        help="size of each writable folder of a submission")
    parser.add_argument("--output-kb", type=float, default=default.output_per_cell / 1000,
                        help="output kept per cell (a notebook keeps 4 times this)")
    parser.add_argument("--seconds", type=float, default=default.seconds, help="wall time per submission")
    args = parser.parse_args()
    limits = Limits(int(args.memory_gb * 2**30), args.processes, int(args.scratch_mb * 2**20),
                    int(args.output_kb * 1000), int(args.output_kb * 4000), args.seconds)
    course = args.course.resolve()
    submitted = (args.submissions or course / "submitted").resolve()
    started = time.perf_counter()

    sets = exercise_sets(course)
    if args.exercises_only:
        (course / STAGING / "solutions.sha256").unlink(missing_ok=True)
    generate_student_versions(course, sets)
    if args.exercises_only:
        print(f"student versions written to exercises/: {', '.join(sets)}")
        return

    # Nothing from an earlier run may look current: results are rebuilt from scratch.
    for stale in ("feedback", "autograded", f"{STAGING}/submitted", f"{STAGING}/batches", f"{STAGING}/lms"):
        shutil.rmtree(course / stale, ignore_errors=True)
    for stale_csv in ["grades.csv", "canvas-grades.csv", *(p.name for p in course.glob("moodle-grades-*.csv"))]:
        (course / stale_csv).unlink(missing_ok=True)
    collected = None
    if args.submissions is not None and submitted.is_file():
        from grading.lms import collect, read_roster

        try:
            collected = collect(course, submitted, course / STAGING / "lms", sets, args.lms, args.set, args.roster)
        except ValueError as error:
            sys.exit(f"ERROR: {error}")
        for problem in collected.problems:
            print(f"download: {problem}")
        submitted = collected.submitted
    students = sorted(p.name for p in submitted.iterdir() if p.is_dir() and not p.name.startswith(".")) \
        if submitted.exists() else []
    if collected is not None:  # the roster's students who handed nothing in are listed too
        students = sorted(set(students) | {s.student_id for s in read_roster(args.roster)})
    handed_in = sorted({p.name for s in students if (submitted / s).is_dir()
                        for p in (submitted / s).iterdir() if p.is_dir()} & set(sets))
    if not handed_in:
        print(f"student versions are in exercises/; no submissions found under {submitted}")
        return
    subs = [Submission(student, name) for student in students for name in handed_in]
    for sub in subs if collected is not None else []:
        sub.notes += collected.notes.get((sub.student, sub.set_name), [])
    for sub in subs:
        folder = submitted / sub.student / sub.set_name
        if not folder.is_dir():
            sub.status = "not submitted"
        elif stage(course, folder, sub) is None and sub.status == "flagged":
            write_flag_feedback(course, sub)
    grade_all(course, [s for s in subs if s.status == "graded"], args.jobs, limits)
    read_scores(course, subs)
    max_scores = set_max_scores(course, sets)
    for sub in subs:
        sub.max_score = max_scores[sub.set_name]
    write_csv(private_file(course / "grades.csv"), subs, max_scores)
    print_table(subs, time.perf_counter() - started, args.jobs)
    # What a class of any size holds here: each kernel's output is read with a bound (run_bounded).
    print(f"grade.py's own memory peaked at {own_peak_memory() / 2**20:.0f} MB")
    print(f"grades: {course / 'grades.csv'}; feedback: {course / 'feedback'}/<student>/<set>/")
    if collected is not None:
        columns = dict(column.split("=", 1) for column in args.canvas_column)
        for path in write_lms_csv(course, collected, subs, max_scores, columns):
            print(f"for {collected.lms.capitalize()} to import: {path}")


if __name__ == "__main__":
    main()
