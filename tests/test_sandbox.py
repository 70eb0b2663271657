"""The grading sandbox seals each submission: from the grader, and from the next submission.

One grading run through scripts/grade.py (what `make grade` runs) of hostile submissions to set
01, each with honest answers besides its attack, so that its score shows it was still graded:
looking for the answer key by import and on every file it can read, reading the grader's
environment through /proc, leaving a note (and a gigabyte) in the socket folder for the next
kernel, flooding the kernel's own stderr, hiding output in display updates, widgets and
metadata, three processes of 1.8 GB, a thread flood whose error the submission catches, ptrace
of every process it can see, and a test cell pasted above its answer. Then two runs with a
Python environment that imports the course library from another checkout, or finds torch where
the sandbox does not look.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import site
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from course_lib import exercise_notebook
from grading import feedback_page
from exercise_harness import ROOT
from test_grading import HONEST_SOFTMAX, SET01, cells_by_id, csv_rows, points, printed, scores, submission

CANARY = "SEAL_CANARY_7f3a"  # a variable of the grader's environment that no kernel may read

# Every process's environment it can read, pid 1's (bubblewrap's own) first.
ENVIRON = f"""import os
first = open("/proc/1/environ", "rb").read()
others = []
for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
    try:
        others.append(open(f"/proc/{{pid}}/environ", "rb").read())
    except OSError:
        pass
print("PID1", first.split(b"\\0")[:60], "LEAKED" if any(b"{CANARY}" in e for e in others) else "NOT LEAKED")
""" + HONEST_SOFTMAX
# The folder of its own unix sockets, as its connection file says: the one folder it shares.
SOCKETS = """import json, os, sys
_folder = os.path.dirname(json.load(open(sys.argv[sys.argv.index("-f") + 1]))["ip"])
"""
NOTER = SOCKETS + """with open(os.path.join(_folder, "note.txt"), "w") as _f:
    _f.write("for the next kernel")
_written = 0
try:
    with open(os.path.join(_folder, "big"), "wb") as _f:
        for _ in range(1024):  # 1 GiB
            _f.write(b"0" * 2**20)
            _f.flush()
            _written += 1
except OSError:
    pass
print("SOCKETS WROTE", _written, "MiB")
""" + HONEST_SOFTMAX
LOOKER = SOCKETS + """print("SOCKETS SEE", sorted(n for n in os.listdir(_folder) if not n.startswith("kernel")))
""" + HONEST_SOFTMAX
# 600 MiB straight to the kernel process's own stderr (what nbgrader, and so the grader, reads).
FLOODER = """import os, sys
_chunk = b"e" * 2**20
for _ in range(600):
    os.write(sys.stderr.fileno(), _chunk)
""" + HONEST_SOFTMAX
# Output that is not printed: 20 MB of display updates, one 10 kB update shown 2000 times over,
# 100 widgets of 1 MB, 10 MB of display metadata.
UPDATER = """from IPython.display import display
_handle = display("start", display_id=True)
for _ in range(20):
    _handle.update("u" * 2**20)
""" + HONEST_SOFTMAX
# 500 outputs under one id, then one update of 10 kB rewrites them all: 5 MB. (With 2000, on 2
# cores loaded about 8 times over, the notebook kept 1,985 of the displays and not the update:
# nbclient stops reading a cell's output iopub_timeout after its reply. Nothing was multiplied,
# so nothing was flagged, and the test failed.)
MULTIPLIER = """from IPython.display import display, update_display
for _ in range(500):
    display("x", display_id="same")
update_display("y" * 10_000, display_id="same")
""" + HONEST_SOFTMAX
WIDGETS = """import ipywidgets
_kept = [ipywidgets.Textarea(value="w" * 2**20) for _ in range(100)]
""" + HONEST_SOFTMAX
METADATA = """from IPython.display import display
for _ in range(10):
    display({"text/plain": "tag"}, raw=True, metadata={"note": "m" * 2**20})
""" + HONEST_SOFTMAX
# Three processes of 1.8 GB each, at once: under a per-process limit of 3 GiB all three would run.
TRIO = """import subprocess, sys
_hold = "import time; b = b'1' * 1_800_000_000; time.sleep(3)"
_trio = [subprocess.Popen([sys.executable, "-c", _hold]) for _ in range(3)]
print("TRIO", sorted(p.wait() for p in _trio))
""" + HONEST_SOFTMAX
# Runs into the limit on processes and threads, catches the error and goes on as if nothing happened.
CATCHER = """import threading, time
_threads = []
try:
    for _ in range(300):
        _threads.append(threading.Thread(target=time.sleep, args=(1,)))
        _threads[-1].start()
except RuntimeError:
    _threads.pop()  # the one that could not start
for _t in _threads:
    _t.join()
print("STARTED", len(_threads))
""" + HONEST_SOFTMAX
# Looks for the answer key where a kernel could find it: the course's reference modules and
# EXERCISES by import, and any file of the course's reference code, check cases or solutions on
# the disk it can see.
KEYHUNTER = """import importlib, os
_found = []
for _name in ("course_lib.attention_scores", "course_lib.checks.attention_scores", "grading.answer_key"):
    try:
        _module = importlib.import_module(_name)
    except ImportError:
        continue
    _found += [f"{_name}.{a}" for a in ("scaled_dot_product_attention", "softmax", "EXERCISES", "plan") if hasattr(_module, a)]
for _folder, _dirs, _files in os.walk("/"):
    if _folder.startswith(("/proc", "/sys", "/dev")):
        _dirs[:] = []
        continue
    for _file in _files:
        _path = os.path.join(_folder, _file)
        if _file.endswith((".py", ".ipynb")) and ("course" in _path or "solution" in _path or _file.startswith("attention")):
            try:
                _text = open(_path, errors="ignore").read()
            except OSError:
                continue
            if "def naive_softmax(" in _text or "def _attend_cases(" in _text or "def softmax_rows(x: Tensor)" in _text:
                _found.append(_path)
print("KEYS FOUND", _found)
""" + HONEST_SOFTMAX
# Every process the kernel can see, and whether ptrace can attach to it. Allowed by design inside
# the sandbox: all it can see is its own tree (bubblewrap's pid 1, the kernel, what the kernel
# started), as nobody, with no capabilities, in namespaces of its own; nothing of the grader's.
TRACER = """import ctypes, json, os
_libc = ctypes.CDLL(None, use_errno=True)
_seen = {}
for _pid in sorted(int(p) for p in os.listdir("/proc") if p.isdigit()):
    if _pid == os.getpid():
        continue
    try:
        _uid = [l.split()[1] for l in open(f"/proc/{_pid}/status") if l.startswith("Uid:")][0]
        _name = open(f"/proc/{_pid}/comm").read().strip()
    except OSError:
        continue
    _attached = _libc.ptrace(16, _pid, None, None) == 0  # PTRACE_ATTACH
    if _attached:
        os.waitpid(_pid, 0x40000000)  # __WALL: let it stop, then let it go
        _libc.ptrace(17, _pid, None, None)  # PTRACE_DETACH
    _seen[_pid] = [_name, _uid, _attached]
print("TRACE", json.dumps({"self": os.getpid(), "seen": _seen}))
""" + HONEST_SOFTMAX
ATTACKS = {  # student: its softmax_rows cell. Names sort a0 < a1 < a2 < b...: see `course`.
    "a0_noter": NOTER, "a1_honest": HONEST_SOFTMAX, "a2_looker": LOOKER, "b_environ": ENVIRON,
    "b_flooder": FLOODER, "b_updater": UPDATER, "b_multiplier": MULTIPLIER, "b_widgets": WIDGETS,
    "b_metadata": METADATA, "b_trio": TRIO, "b_catcher": CATCHER, "b_paster": HONEST_SOFTMAX,
    "b_keyhunter": KEYHUNTER, "b_tracer": TRACER,
}
OUTPUT_FLOODS = ["b_updater", "b_multiplier", "b_widgets", "b_metadata"]


def socket_mounts() -> list[str]:
    """Where the machine has a kernel socket folder (grading/steps.py's tmpfs "tr-sockets") mounted."""
    return [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines() if line.startswith("tr-sockets ")]


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    """Set 01's course graded once with every attack above, two submissions at a time.

    Submissions are split into batches by sorted name (a batch's kernels run one after another):
    with two batches, a0_noter and a2_looker are in the same one, the looker graded after the noter.
    """
    course = tmp_path_factory.mktemp("sealed")
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(ROOT / "solutions" / SET01, course / "solutions" / SET01)
    subprocess.run([sys.executable, str(ROOT / "scripts" / "grade.py"), "--course", str(course), "--exercises-only"],
                   check=True, capture_output=True)
    for student, softmax in ATTACKS.items():
        nb = submission(course, SET01, {"softmax_rows": softmax})
        if student == "b_paster":  # score_matrix's test cell pasted above its answer, grading id and all
            at = next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == "score_matrix")
            nb.cells.insert(at, nbformat.from_dict(dict(cells_by_id(nb)["score_matrix_tests"])))
        folder = course / "submitted" / student / SET01
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / exercise_notebook(SET01))
    # Another grading run on this machine may hold socket folders (or a killed one may have left
    # one): only the ones this run makes must be gone after it.
    (course / "socket-mounts-before.json").write_text(json.dumps(socket_mounts()))
    # The whole notebook's time limit is raised: this run tests the other limits, and on a busy machine
    # an honest notebook here must not reach that one.
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "grade.py"), "--course", str(course), "--jobs", "2",
                          "--seconds", "600"], capture_output=True, text=True, env=os.environ | {CANARY: "the grader's secret"})
    (course / "grade-output.txt").write_text(run.stdout + "\n--- stderr ---\n" + run.stderr)
    assert run.returncode == 0, run.stderr[-3000:]
    return course


def test_honest_work_beside_the_attacks_is_graded_in_full(course):
    for student in ("a1_honest", "b_environ", "a0_noter", "a2_looker", "b_flooder"):
        assert scores(course, SET01, student) == points(course, SET01), student
        assert csv_rows(course)[(student, SET01)]["status"] == "graded", student


def test_the_kernel_finds_no_answer_key_by_import_or_on_disk(course):
    out = printed(course, "b_keyhunter", "softmax_rows")
    assert "KEYS FOUND []" in out, out
    assert scores(course, SET01, "b_keyhunter") == points(course, SET01)  # graded, and listed for review (it walks the disk)


def test_all_a_kernel_can_trace_is_its_own_sandbox(course):
    """ptrace inside the sandbox is allowed: bubblewrap's pid 1 is the one other process the kernel
    sees, running as nobody like the kernel; the grader, other submissions and the machine's
    processes are not there to attach to."""
    out = printed(course, "b_tracer", "softmax_rows")
    found = json.loads(out.split("TRACE ", 1)[1].splitlines()[0])
    assert set(found["seen"]) == {"1"}, found
    name, uid, _ = found["seen"]["1"]
    assert name == "bwrap" and uid == "65534", found
    assert scores(course, SET01, "b_tracer") == points(course, SET01)


def test_the_kernel_cannot_read_the_graders_environment(course):
    out = printed(course, "b_environ", "softmax_rows")
    assert "PID1 [b'']" in out and "NOT LEAKED" in out, out


def test_a_kernel_leaves_nothing_for_the_next_in_its_socket_folder(course):
    wrote = re.search(r"SOCKETS WROTE (\d+) MiB", printed(course, "a0_noter", "softmax_rows"))
    assert wrote and int(wrote.group(1)) <= 1, "the socket folder took more than 1 MiB"
    assert "SOCKETS SEE []" in printed(course, "a2_looker", "softmax_rows")
    before = json.loads((course / "socket-mounts-before.json").read_text())
    left = set(socket_mounts()) - set(before)
    # Another grading run on the machine may have mounted its own since (a kernel's folder lives as
    # long as that kernel): those go within minutes; one this run left behind stays for good.
    deadline = time.monotonic() + 600
    while left and time.monotonic() < deadline:
        time.sleep(2)
        left &= set(socket_mounts())
    assert not left, f"a socket folder of this run was left mounted: {sorted(left)}"


def imports_peak_mb() -> float:
    """What a fresh Python of this environment holds once it has imported what grade.py imports:
    grading.steps brings torch (grade.py checks the sandbox's first cell in its own process), about
    300 MB with torch's CPU build and 800 MB with its CUDA build."""
    code = "import re, grading.steps; print(re.search(r'VmHWM:\\s+(\\d+) kB', open('/proc/self/status').read()).group(1))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return int(done.stdout) / 1024


def test_a_flood_on_the_kernels_stderr_does_not_grow_the_grader(course):
    out = (course / "grade-output.txt").read_text()
    peak = float(re.search(r"grade.py's own memory peaked at (\d+) MB", out).group(1))
    imports = imports_peak_mb()
    assert peak < imports + 300, (f"grade.py held {peak} MB, its imports alone {imports:.0f} MB: the 600 MiB "
                                  "written to a kernel's stderr was kept")


@pytest.mark.parametrize("student", OUTPUT_FLOODS)
def test_every_output_channel_counts_against_the_output_limit(course, student):
    row = csv_rows(course)[(student, SET01)]
    assert row["status"] == "flagged" and "limit hit (output)" in row["notes"], row
    graded = course / "autograded" / student / SET01 / exercise_notebook(SET01)
    assert graded.stat().st_size < 6_000_000
    html = (course / "feedback" / student / SET01 / feedback_page(SET01)).read_text()
    assert "output cut" in html and len(html) < 10_000_000


def test_memory_is_limited_for_the_whole_submission(course):
    found = re.search(r"TRIO \[(.*)\]", printed(course, "b_trio", "softmax_rows"))
    # On a busy machine the group's limit may stop the kernel itself before it prints: then the
    # flag below is the evidence; when it printed, at most one of the three lived.
    if found is not None:
        survivors = [c for c in found.group(1).split(", ") if c == "0"]
        assert len(survivors) <= 1, f"exit codes of the three: {found.group(1)}"  # two of 1.8 GB exceed 3 GiB
    row = csv_rows(course)[("b_trio", SET01)]
    assert row["status"] == "flagged" and "limit hit (memory)" in row["notes"], row


def test_a_limit_reached_is_flagged_even_when_the_submission_caught_it(course):
    started = int(re.search(r"STARTED (\d+)", printed(course, "b_catcher", "softmax_rows")).group(1))
    assert started < 64
    row = csv_rows(course)[("b_catcher", SET01)]
    assert row["status"] == "flagged" and "limit hit (processes)" in row["notes"], row


def test_a_test_cell_pasted_above_its_answer_grades_the_one_nbgrader_would(course):
    assert scores(course, SET01, "b_paster") == points(course, SET01)
    assert "score_matrix_tests" in csv_rows(course)[("b_paster", SET01)]["notes"]


def test_the_run_prints_no_database_warnings(course):
    assert "SAWarning" not in (course / "grade-output.txt").read_text()


def python_environment(tmp_path: Path, *path_lines: str) -> Path:
    """A Python environment of its own whose site-packages holds only .pth lines (paths to import from)."""
    env = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    packages = next(env.glob("lib/python3*/site-packages"))
    (packages / "paths.pth").write_text("\n".join(path_lines) + "\n")
    (env / "bin" / "alembic").write_text(f"#!/bin/sh\nexec {env / 'bin' / 'python'} -m alembic \"$@\"\n")
    (env / "bin" / "alembic").chmod(0o755)
    return env / "bin" / "python"


def grade_one(tmp_path: Path, python: Path, softmax_rows: str | None = None) -> subprocess.CompletedProcess:
    """Set 01's correct answers (softmax_rows's cell replaced, if given), graded by scripts/grade.py
    run with `python` (no PYTHONPATH)."""
    course = tmp_path / "course"
    (course / "solutions").mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(ROOT / "solutions" / SET01, course / "solutions" / SET01)
    shutil.copytree(ROOT / "exercises" / SET01, course / "exercises" / SET01)  # to write the submission from
    folder = course / "submitted" / "alice" / SET01
    folder.mkdir(parents=True)
    answers = {"softmax_rows": softmax_rows} if softmax_rows else {}
    nbformat.write(submission(course, SET01, answers), folder / exercise_notebook(SET01))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([str(python), str(ROOT / "scripts" / "grade.py"), "--course", str(course)],
                          capture_output=True, text=True, env=env)


@pytest.mark.slow
def test_a_course_library_from_another_checkout_is_not_what_the_kernel_imports(tmp_path):
    """The environment imports course_lib from a checkout the sandbox does not show: the kernel
    imports the graded course's own, the one the judge uses, and the correct answers get full marks."""
    other = tmp_path / "other-checkout"
    for package in ("course_lib", "grading"):
        shutil.copytree(ROOT / package, other / package, ignore=shutil.ignore_patterns("__pycache__"))
    run = grade_one(tmp_path, python_environment(tmp_path, str(other), os.path.realpath(site.getsitepackages()[0])))
    assert run.returncode == 0, run.stderr[-2000:]
    row = csv_rows(tmp_path / "course")[("alice", SET01)]
    assert row["status"] == "graded" and float(row["score"]) == sum(points(tmp_path / "course", SET01).values()), row


@pytest.mark.slow
def test_a_copy_of_the_course_installed_into_the_environment_is_shown_empty(tmp_path):
    """`pip install .` would put the whole course library (and grading/) into site-packages, a
    folder the sandbox shows: the kernel sees those folders empty and imports the sealed library."""
    python = python_environment(tmp_path, os.path.realpath(site.getsitepackages()[0]))
    packages = next((tmp_path / "env").glob("lib/python3*/site-packages"))
    for package in ("course_lib", "grading"):
        shutil.copytree(ROOT / package, packages / package, ignore=shutil.ignore_patterns("__pycache__"))
    looker = (f"import os, course_lib.checks\n"
              f"print('INSTALLED', sorted(os.listdir({str(packages / 'course_lib')!r})), "
              f"sorted(os.listdir({str(packages / 'grading')!r})), 'graded kernel' in course_lib.__doc__)\n"
              ) + HONEST_SOFTMAX
    run = grade_one(tmp_path, python, looker)
    assert run.returncode == 0, run.stderr[-2000:]
    course = tmp_path / "course"
    nb = nbformat.read(course / "autograded" / "alice" / SET01 / exercise_notebook(SET01), as_version=4)
    out = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", [])
                  if c.metadata.get("nbgrader", {}).get("grade_id") == "softmax_rows")
    assert "INSTALLED [] [] True" in out, out
    assert scores(course, SET01, "alice") == points(course, SET01)


@pytest.mark.slow
def test_a_sandbox_that_cannot_import_what_the_grader_needs_stops_the_run(tmp_path):
    """The environment finds its packages through a folder that is not named site-packages (a
    link), so the sandbox does not show it: every graded cell's hand_in import would fail in every kernel."""
    (tmp_path / "deps").symlink_to(os.path.realpath(site.getsitepackages()[0]))
    run = grade_one(tmp_path, python_environment(tmp_path, str(tmp_path / "deps"), str(ROOT)))
    assert run.returncode != 0
    message = run.stderr.strip().splitlines()[-1]
    assert message.startswith("ERROR: nothing was graded") and "No module named" in message, run.stderr[-2000:]
    assert os.path.realpath(site.getsitepackages()[0]) in message and "pip install -e" in message
    assert not (tmp_path / "course" / "grades.csv").exists()
    assert not list((tmp_path / "course").glob("autograded/*"))
