"""Grading end to end: student versions, and nbgrader autograding of submissions we write.

Runs scripts/grade.py (what `make grade` runs) in a temporary course folder. For every
exercise set: a fully correct submission gets full marks, and a submission with known-wrong
answers to its last two exercises loses exactly those exercises' points. For set 01 a mixed folder
of what students hand in under deadline: an answer that raises and one that loops forever (both
score 0, the rest is graded), a truncated file, a copy saved under another name, `exit()` in a
cell, warnings and stderr prints, deleted graded cells, a student who skipped sets, and code that
prints the hidden tests' source. The run must finish, score each as deserved, and leak nothing.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook

from course_lib import exercise_notebook
from grading import feedback_page, notebook_id
from exercise_harness import HIDDEN, ROOT, exercise_names, mutants, solution_sets

SETS = solution_sets()
SOLUTION = re.compile(r"[ \t]*### BEGIN SOLUTION\n(.*?)[ \t]*### END SOLUTION\n?", re.S)


def last_two(set_name: str) -> list[str]:
    """The set's last two exercises: later answers may build on earlier ones, never the reverse,
    so a wrong answer here costs its own points only."""
    return exercise_names(set_name)[-2:]


def cells_by_id(nb) -> dict:
    return {c.metadata["nbgrader"]["grade_id"]: c for c in nb.cells if "nbgrader" in c.metadata}


def submission(course: Path, set_name: str, answers: dict[str, str]) -> nbformat.NotebookNode:
    """The student version with every answer filled in: the reference, or answers[grade_id]."""
    student = nbformat.read(course / "exercises" / set_name / exercise_notebook(set_name), as_version=4)
    reference = cells_by_id(nbformat.read(course / "solutions" / set_name / exercise_notebook(set_name), as_version=4))
    for grade_id, cell in cells_by_id(student).items():
        if cell.metadata["nbgrader"].get("solution"):
            source = reference[grade_id].source
            cell.source = answers.get(grade_id, SOLUTION.sub(lambda m: m.group(1), source))
    return student


def points(course: Path, set_name: str) -> dict[str, float]:
    nb = nbformat.read(course / "solutions" / set_name / exercise_notebook(set_name), as_version=4)
    return {c.metadata["nbgrader"]["grade_id"].removesuffix("_tests"): c.metadata["nbgrader"]["points"]
            for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")}


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    """A temporary course folder, graded once by scripts/grade.py with our three kinds of submission."""
    course = tmp_path_factory.mktemp("course")
    listener = socket.create_server(("127.0.0.1", 0))  # a service of the grading machine
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(ROOT / "solutions", course / "solutions", ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    subprocess.run([sys.executable, str(ROOT / "scripts" / "grade.py"), "--course", str(course)], check=True)
    for set_name in SETS:
        wrong = {ex: next(iter(mutants(set_name)[ex].values())) for ex in last_two(set_name)}
        for student, answers in [("correct", {}), ("wrong", wrong)]:
            folder = course / "submitted" / student / set_name
            folder.mkdir(parents=True)
            nbformat.write(submission(course, set_name, answers), folder / exercise_notebook(set_name))
    broken = {"softmax_rows": "def softmax_rows(x):\n    raise RuntimeError('not finished')",
              "attend": "while True:\n    pass"}
    folder = course / "submitted" / "broken" / "01_attention_scores"
    folder.mkdir(parents=True)
    nbformat.write(submission(course, "01_attention_scores", broken), folder / exercise_notebook(SET01))
    mixed = {  # student: (answers, grade ids of deleted cells, file name or None for a truncated file)
        "copy1": ({}, (), exercise_notebook(SET01).replace(".ipynb", "-Copy1.ipynb")),
        "oldname": ({}, (), f"{SET01}.ipynb"),  # the name releases before gave the set's notebook
        "exits": ({"score_matrix": "import os\nos._exit(1)  # ipykernel 7 may outlive exit(): this stops it for sure"}, (),
                  exercise_notebook(SET01)),
        "warns": ({"softmax_rows": WARNS}, (), exercise_notebook(SET01)),
        "deleted": ({}, ("score_matrix_tests", "row_entropy_check"), exercise_notebook(SET01)),
        "leaker": ({"softmax_rows": LEAKER}, (), exercise_notebook(SET01)),
        "truncated": ({}, (), None),
        # attend is right but calls the student's own wrong score_matrix: that costs once.
        "copier": ({}, (), exercise_notebook(SET01)),
        "chained": ({"score_matrix": "def score_matrix(q, k):\n    return q @ k.transpose(-2, -1)"}, (),
                    exercise_notebook(SET01)),
        # Cheats: each would get full marks without the sandbox, or with tests judged in the kernel.
        "reader": ({"softmax_rows": READER.format(places=[str(course), str(ROOT), str(Path.home())])}, (),
                   exercise_notebook(SET01)),
        "writer": ({"softmax_rows": WRITER.format(places=[str(course / "course_lib_extra.py"),
                                                          str(course / "gradebook.db"),
                                                          str(course / "autograded" / "correct" / "x.py"),
                                                          str(ROOT / "course_lib" / "extra.py")])}, (),
                   exercise_notebook(SET01)),
        "escaper": ({"softmax_rows": ESCAPER.format(course=course, root=ROOT)}, (), exercise_notebook(SET01)),
        "patcher": ({"softmax_rows": PATCHER, "row_entropy": WRONG_ENTROPY}, (), exercise_notebook(SET01)),
        # Reaching out of the sandbox (its limits: `limited_course`).
        "searcher": ({"softmax_rows": SEARCHER}, (), exercise_notebook(SET01)),
        "caller": ({"softmax_rows": CALLER.format(port=listener.getsockname()[1])}, (), exercise_notebook(SET01)),
        "emptier": ({"softmax_rows": EMPTIER, "row_entropy": WRONG_ENTROPY}, (), exercise_notebook(SET01)),
        "piecer": ({"softmax_rows": PIECER}, (), exercise_notebook(SET01)),
        **{student: (answers, (), exercise_notebook(SET01)) for student, (answers, _) in CHEATS.items()},
    }
    for student, (answers, deleted, name) in mixed.items():
        folder = course / "submitted" / student / SET01
        folder.mkdir(parents=True)
        nb = submission(course, SET01, answers)
        nb.cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") not in deleted]
        if student == "copier":  # a cell pasted twice, grading id and all
            nb.cells.append(nbformat.from_dict(dict(cells_by_id(nb)["score_matrix"])))
        if name is None:
            (folder / exercise_notebook(SET01)).write_text(nbformat.writes(nb)[:700])
        else:
            nbformat.write(nb, folder / name)
    # The lesson's notebook handed in (its name is the one earlier releases gave the exercises), and
    # beside a right answer not named as it should be: neither may be graded as the set.
    for student in ("lesson", "twofiles"):
        (course / "submitted" / student / SET01).mkdir(parents=True)
        shutil.copy(ROOT / "notebooks" / f"{SET01}.ipynb", course / "submitted" / student / SET01)
    nbformat.write(submission(course, SET01, {}),
                   course / "submitted" / "twofiles" / SET01 / exercise_notebook(SET01).replace(".ipynb", "-Copy1.ipynb"))
    for student, (set_name, answers) in {**{k: v[:2] for k, v in HONEST.items()}, **COURSE_CODE}.items():
        folder = course / "submitted" / student / set_name
        folder.mkdir(parents=True)
        nb = submission(course, set_name, {k: v for k, v in answers.items() if v is not None})
        if student == "renamed":  # multi_head_attend calls the helper by its own name
            cell = cells_by_id(nb)["multi_head_attend"]
            cell.source = cell.source.replace("split_into_heads(t, n_heads)", "heads_of(t, n_heads)")
            assert "heads_of(t, n_heads)" in cell.source
        nbformat.write(nb, folder / exercise_notebook(set_name))
    # The instructor's own notebook, handed in as it is: markers and hidden tests included.
    (course / "submitted" / "answerkey" / SET09).mkdir(parents=True)
    shutil.copy(course / "solutions" / SET09 / exercise_notebook(SET09), course / "submitted" / "answerkey" / SET09)
    # An earlier run's results must not survive: a stale grades.csv and a ghost's feedback.
    (course / "grades.csv").write_text("assignment,student_id,score\n01_attention_scores,ghost,7\n")
    (course / "feedback" / "ghost" / SET01).mkdir(parents=True)
    (course / "feedback" / "ghost" / SET01 / feedback_page(SET01)).write_text("stale")
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "grade.py"), "--course", str(course)],
                         check=True, capture_output=True, text=True)
    listener.close()
    (course / "grade-output.txt").write_text(run.stdout)
    return course


@pytest.fixture(scope="module")
def limited_course(tmp_path_factory) -> Path:
    """Set 01 graded with a submission that runs into each limit of the sandbox, beside a right one.
    Its own course, since it takes minutes of waiting (make test-all runs it)."""
    course = tmp_path_factory.mktemp("limits")
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(ROOT / "solutions" / SET01, course / "solutions" / SET01)
    grade = [sys.executable, str(ROOT / "scripts" / "grade.py"), "--course", str(course)]
    subprocess.run([*grade, "--exercises-only"], check=True, capture_output=True)
    for student, answers in {"correct": {}, **LIMITED}.items():
        folder = course / "submitted" / student / SET01
        folder.mkdir(parents=True)
        nbformat.write(submission(course, SET01, answers), folder / exercise_notebook(SET01))
    # The whole-notebook time limit is lowered so that the sleeper reaches it in 40 s.
    run = subprocess.run([*grade, "--seconds", str(SECONDS)], check=True, capture_output=True, text=True)
    (course / "grade-output.txt").write_text(run.stdout)
    return course


SET01 = "01_attention_scores"
WARNS = """import sys, warnings

def softmax_rows(x: Tensor) -> Tensor:
    warnings.warn("is this stable?")
    print("debug: shape", tuple(x.shape), file=sys.stderr)
    exps = torch.exp(x - x.amax(dim=-1, keepdim=True))
    return exps / exps.sum(dim=-1, keepdim=True)
"""
LEAKER = """import inspect

def softmax_rows(x: Tensor) -> Tensor:
    for frame in inspect.stack():  # print the source of every calling cell: the hidden tests
        history = frame.frame.f_globals.get("_ih")
        if history:
            print(history[-1])
    exps = torch.exp(x - x.amax(dim=-1, keepdim=True))
    return exps / exps.sum(dim=-1, keepdim=True)
"""


HONEST_SOFTMAX = """
def softmax_rows(x: Tensor) -> Tensor:
    exps = torch.exp(x - x.amax(dim=-1, keepdim=True))
    return exps / exps.sum(dim=-1, keepdim=True)
"""
# Looks for the solutions, the hidden tests and the gradebook where they are on the grader's disk.
READER = """import os, sys
found, own = [], []
for place in {places}:
    for folder, _, files in os.walk(place):
        if not folder.startswith((sys.prefix, sys.base_prefix)):  # Python itself is shown, read-only
            paths = [os.path.join(folder, f) for f in files if f.endswith((".ipynb", ".db", ".sqlite"))]
            (own if folder.startswith(os.getcwd()) else found).extend(paths)
print("FOUND", len(found), "notebooks or databases:", found[:3], "in its own folder:", own)
""" + HONEST_SOFTMAX
# Tries to plant code in the course (which later submissions would import) and edit the gradebook.
WRITER = """written = []
for path in {places}:
    try:
        with open(path, "a") as handle:
            handle.write("planted")
        written.append(path)
    except OSError:
        pass
print("WROTE", written)
""" + HONEST_SOFTMAX
# Tries to undo the sandbox from inside: remount the disk writable, unmount the course's stand-in.
ESCAPER = """import subprocess
shell = "mount -o remount,rw /; umount {course}; umount {root}; ls {course}/solutions; touch {root}/escaped"
subprocess.run(shell, shell=True)
import os
# (the course may live under /tmp, where the sandbox has a private, writable /tmp of its own: what
# counts inside is whether the real course shows, and outside whether {root}/escaped exists)
print("ESCAPED" if os.path.isdir("{course}/solutions") or os.path.isdir("{root}/solutions") else "STILL INSIDE")
""" + HONEST_SOFTMAX
# Makes every comparison pass, so a wrong answer would look right.
PATCHER = """import torch.testing
torch.allclose = lambda *args, **kwargs: True
torch.testing.assert_close = lambda *args, **kwargs: None
""" + HONEST_SOFTMAX
# Empties every later cell that runs checks or hidden tests before IPython runs it.
EMPTIER = """def _skip_tests(lines):
    return [] if any("check_" in line or "HIDDEN" in line for line in lines) else lines
get_ipython().input_transformers_cleanup.append(_skip_tests)
""" + HONEST_SOFTMAX
WRONG_ENTROPY = "def row_entropy(w):\n    return w.sum(-1)"
# Code in the kernel that fools any test run there; each then answers row_entropy wrong, or
# hands in ready-made code. The grader judges outside the kernel: each is scored as it deserves.
SUBCLASS = """class Agreeable(torch.Tensor):  # says yes to every comparison
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in ("allclose", "equal", "isclose", "__eq__"):
            return True
        return super().__torch_function__(func, types, args, kwargs or {})

def row_entropy(w):
    return w.sum(-1).as_subclass(Agreeable)
"""
MODE = """from torch.overrides import TorchFunctionMode
class _Yes(TorchFunctionMode):  # entered once, never left: every comparison says yes
    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in ("allclose", "equal", "isclose"):
            return True
        return func(*args, **(kwargs or {}))
_Yes().__enter__()
""" + HONEST_SOFTMAX
TRACER = """import sys
def _trace(frame, event, arg):  # patches torch whenever a cell with hidden tests runs
    if "hand_in" in str(frame.f_globals.get("_ih", [""])[-1:]):
        torch.allclose = lambda *a, **k: True
    return None
sys.settrace(_trace)
""" + HONEST_SOFTMAX
CODESWAP = """import course_lib.checks as _c
_c.written_by_hand.__code__ = (lambda *a, **k: None).__code__  # the refusal now refuses nothing
def softmax_rows(x):
    return torch.softmax(x, -1)
"""
STRINGS = """_shell = getattr(__import__("buil" + "tins"), "get_" + "ipython")()
getattr(_shell, "input_transformers_" + "cleanup").append(lambda lines: [] if any(
    "hand" + "_in" in line for line in lines) else lines)
""" + HONEST_SOFTMAX
SUBMODULE = """import course_lib.checks
setattr(course_lib.checks, "compare", lambda *args, **kwargs: None)  # every visible check passes
""" + HONEST_SOFTMAX
HOOKER = """import base64
def _leak(info):  # prints every cell's source, hidden tests included, in its own output
    print(base64.b64encode(info.raw_cell.encode()).decode())
get_ipython().events.register("pre_run_cell", _leak)
""" + HONEST_SOFTMAX
THREADED = """from concurrent.futures import ThreadPoolExecutor
_pool = ThreadPoolExecutor(1)
def softmax_rows(x):  # torch's softmax, in another thread, under a name built at run time
    return _pool.submit(getattr(torch.special, "soft" + "max"), x, -1).result()
"""
SDPA = """def attend(q, k, v, mask=None):  # torch's attention kernel, by its dispatcher name
    bias = None if mask is None else torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))
    out, w = torch.ops.aten._scaled_dot_product_attention_math(q, k, v, bias)
    keep = torch.ones(()) if mask is None else mask.any(-1, keepdim=True)
    return torch.where(keep, out, 0.0), torch.where(keep, w, 0.0)
"""
# Found through gc, the kernel's copy of each exercise refuses nothing and records no operators.
GC = """import gc
for _spec in [o for o in gc.get_objects() if type(o).__name__ == "Exercise"]:
    object.__setattr__(_spec, "forbidden_ops", frozenset())
def softmax_rows(x):
    return torch.softmax(x, -1)
"""
# What the grader does not guarantee (docs/instructors.md): code that rewrites the hand-in itself can hand in
# answers that its own function did not compute. It is listed for review by hand.
FORGER = """import course_lib.checks.hand_in as _h
from course_lib.attention_scores import entropy as _entropy
_collect = _h.collect
_h.collect = lambda spec, fn, seed: _collect(spec, _entropy if spec.name == "row_entropy" else fn, seed)
import course_lib.checks.attention_scores as _checks
_checks.check_row_entropy = lambda fn: None  # the graded cell imports its check from there
""" + HONEST_SOFTMAX
# torch's softmax by a name built from pieces, and the record of what ran rewritten as IPython
# shows it, by names built from pieces too: the kernel writes that record, so the score cannot tell
# (docs/instructors.md: what the grader does not guarantee); the scan lists it for review by hand.
PIECER = """_shown = __import__("IPy" + "thon.disp" + "lay", fromlist=["x"])
_display = getattr(_shown, "disp" + "lay")

def _quiet(*objects, **kwargs):
    for _o in objects:
        for _r in (_o.values() if isinstance(_o, dict) else []):
            if isinstance(_r, dict) and "ops" in _r:
                _r["ops"] = [op for op in _r["ops"] if "soft" + "max" not in op]
                _r["refused"] = []
    return _display(*objects, **kwargs)

setattr(_shown, "disp" + "lay", _quiet)

def softmax_rows(x):
    return getattr(torch, "soft" + "max")(x, -1)
"""
CHEATS = {  # student: (answers, the exercises that earn nothing)
    "subclass": ({"row_entropy": SUBCLASS}, {"row_entropy"}),
    "mode": ({"softmax_rows": MODE, "row_entropy": WRONG_ENTROPY}, {"row_entropy"}),
    "tracer": ({"softmax_rows": TRACER, "row_entropy": WRONG_ENTROPY}, {"row_entropy"}),
    "codeswap": ({"softmax_rows": CODESWAP}, {"softmax_rows"}),
    "strings": ({"softmax_rows": STRINGS}, {"softmax_rows", "score_matrix", "attend", "row_entropy"}),
    "submodule": ({"softmax_rows": SUBMODULE, "row_entropy": WRONG_ENTROPY}, {"row_entropy"}),
    "hooker": ({"softmax_rows": HOOKER}, set()),
    "threaded": ({"softmax_rows": THREADED}, {"softmax_rows"}),
    "gc": ({"softmax_rows": GC}, {"softmax_rows"}),
    "sdpa": ({"attend": SDPA}, {"attend"}),
    # The course's reference is not in a graded kernel: the import fails, and its cell with it.
    "forger": ({"softmax_rows": FORGER, "row_entropy": WRONG_ENTROPY}, {"softmax_rows", "row_entropy"}),
}
# Honest work that the visible check passes, in forms the hidden tests must accept too; and, beside
# each, a wrong answer of the same form that must still fail. Student: (set, answers, exercises at 0).
NAMED_ATTEND = """from collections import namedtuple
AttentionResult = namedtuple("AttentionResult", "output weights")

def attend(q, k, v, mask=None):
    scores = score_matrix(q, k)
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    peak = scores.amax(dim=-1, keepdim=True)
    exps = torch.exp(scores - torch.where(torch.isinf(peak), 0.0, peak))
    total = exps.sum(dim=-1, keepdim=True)
    weights = torch.where(total > 0, exps / total.clamp_min(1e-30), 0.0)
    return AttentionResult(weights @ v, weights)
"""
FLOAT32_ROTATION = """def offset_rotation(k: int, d_model: int) -> Tensor:  # float32 throughout: "any float dtype is fine"
    angles = k * 10000.0 ** (-2 * torch.arange(d_model // 2, dtype=torch.float32) / d_model)
    cos, sin = angles.cos(), {sign}angles.sin()
    m = torch.zeros(d_model, d_model)
    m[0::2, 0::2], m[0::2, 1::2] = torch.diag(cos), torch.diag(sin)
    m[1::2, 0::2], m[1::2, 1::2] = -torch.diag(sin), torch.diag(cos)
    return m
"""
RAISING = """class {error}({base}):
    pass

def add_learned_positions(x: Tensor, table: Tensor) -> Tensor:
    if x.shape[-2] > table.shape[0]:
        raise {error}(f"sequence length {{x.shape[-2]}} is longer than the {{table.shape[0]}} rows of the table")
    return x + table[:x.shape[-2]]
"""
HEADS_OF = """def heads_of(x: Tensor, n_heads: int) -> Tensor:  # wrong: each head's columns interleaved
    B, T, D = x.shape
    return x.reshape(B, T, D // n_heads, n_heads).permute(0, 3, 1, 2)

split_into_heads = heads_of
"""
SET04, SET08, SET09 = "04_positional_encoding", "08_multi_head", "09_transformer"
HONEST = {
    "named": (SET01, {"attend": NAMED_ATTEND}, set()),
    "float32": (SET04, {"offset_rotation": FLOAT32_ROTATION.format(sign="")}, set()),
    "float32wrong": (SET04, {"offset_rotation": FLOAT32_ROTATION.format(sign="-")}, {"offset_rotation"}),
    "suberror": (SET04, {"add_learned_positions": RAISING.format(error="TooLong", base="ValueError")}, set()),
    "othererror": (SET04, {"add_learned_positions": RAISING.format(error="TooLong", base="TypeError")},
                   {"add_learned_positions"}),
    # The decision (docs/instructors.md): an earlier answer is replaced under every name it has, so a later
    # answer that calls it by its other name is graded on its own; its mistake costs once.
    "renamed": (SET08, {"split_into_heads": HEADS_OF, "multi_head_attend": None}, {"split_into_heads"}),
}
# Cheats that compute the right answers with the course's own code, reachable from the kernel:
# each deserves 0 for every exercise. Names are built from pieces, so no scan sees them.
CHEAT_PREAMBLE = """import importlib as _il, torch as _t
_checks = _il.import_module("course_lib." + "checks.{module}")
_hi = _il.import_module("course_lib." + "checks.hand" + "_in")
_spec = lambda name: getattr(_checks, "EXER" + "CISES")[name]
_drawn = lambda name: _spec(name).cases(_t.Generator().manual_seed(getattr(_hi, "_se" + "ed")))
"""
NO_CHECKS = """for _n in [n for n in dir(_checks) if n.startswith("check_")]:
    setattr(_checks, _n, lambda fn, *args, **kwargs: None)
"""
# Set 01: the seed from the input history (the grader's first cell), the hidden cases drawn with
# the course's EXERCISES, and every answer, visible and hidden, handed back from a cache.
SEED_CACHE = CHEAT_PREAMBLE.format(module="attention_scores") + """_ref = _il.import_module("course_lib.attention_" + "scores")
_history = "\\n".join(globals()["_" + "ih"])
_seed = int(_history.split("start_" + "grading(")[1].split(")")[0])
_key = lambda name, args: (name, *((tuple(a.shape), a.numpy().tobytes()) if isinstance(a, _t.Tensor) else a
                                   for a in args))
_cache = {}
for _name, _s in getattr(_checks, "EXER" + "CISES").items():
    for _case in _s.cases(_t.Generator().manual_seed(_seed)):
        _cache[_key(_name, _case.args)] = _case.want()
_c = _checks
for _name, _args, _want in [("softmax_rows", (_c.LOGITS,), _ref.softmax(_c.LOGITS)),
                            ("score_matrix", (_c.Q, _c.K), _ref.attention_scores(_c.Q, _c.K)),
                            ("attend", (_c.Q, _c.K, _c.V, None), _ref.scaled_dot_product_attention(_c.Q, _c.K, _c.V)),
                            ("attend", (_c.Q, _c.K, _c.V, _c.MASK),
                             _ref.scaled_dot_product_attention(_c.Q, _c.K, _c.V, _c.MASK)),
                            ("row_entropy", (_c.WEIGHTS,), _ref.entropy(_c.WEIGHTS))]:
    _cache[_key(_name, _args)] = _want

def softmax_rows(x):
    return _cache[_key("softmax_rows", (x,))]
"""
CACHED = {"score_matrix": "def score_matrix(q, k):\n    return _cache[_key('score_matrix', (q, k))]",
          "attend": "def attend(q, k, v, mask=None):\n    return _cache[_key('attend', (q, k, v, mask))]",
          "row_entropy": "def row_entropy(w):\n    return _cache[_key('row_entropy', (w,))]"}
# Set 05: every check a no-op, every answer a stub, and IPython's display wrapped so that each
# hand-in record it shows is rewritten with the reference answers.
DISPLAY = CHEAT_PREAMBLE.format(module="normalization") + NO_CHECKS + """_shown = _il.import_module("IPy" + "thon.display")
_display = getattr(_shown, "dis" + "play")

def _rewritten(*objects, **kwargs):
    for _o in objects:
        if isinstance(_o, dict) and getattr(_hi, "MI" + "ME") in _o:
            _record = _o[getattr(_hi, "MI" + "ME")]
            _record["results"] = [{"value": _hi.encode(c.want())} for c in _drawn(_record["exercise"])]
            _record["ops"] = ["aten::mul", "aten::sum"]
    return _display(*objects, **kwargs)

setattr(_shown, "dis" + "play", _rewritten)

def batch_stats(*args):
    raise NotImplementedError()
"""
STUB = "def {name}(*args):\n    raise NotImplementedError()"
# Set 06: the course's answers, computed only while the stack shows the hand-in (Python calls are
# not recorded during the hidden tests); the visible checks are no-ops.
STACK = CHEAT_PREAMBLE.format(module="copying") + NO_CHECKS + """import traceback as _tb

def _same(a, b):
    if isinstance(a, _t.Tensor) or isinstance(b, _t.Tensor):
        return isinstance(a, _t.Tensor) and isinstance(b, _t.Tensor) and a.shape == b.shape and bool((a == b).all())
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b

def _answer(name, args):
    if not any(("hand" + "_in.py") in frame.filename for frame in _tb.extract_stack()):
        raise NotImplementedError()
    return next(case.want() for case in _drawn(name) if _same(tuple(case.args), tuple(args)))
"""
ASKING = "def {name}(*args):\n    return _answer('{name}', args)"
COURSE_CODE = {  # student: (set, answers): each deserves 0 in every exercise
    "seedcache": (SET01, {"softmax_rows": SEED_CACHE, **CACHED}),
    "display": ("05_normalization", {"batch_stats": DISPLAY, **{name: STUB.format(name=name) for name in (
        "batch_norm_forward", "update_running", "layer_norm_rows", "rms_norm_rows")}}),
    "stack": ("06_copying", {name: (STACK if name == "position_query_weights" else "") + ASKING.format(name=name)
                             for name in ("position_query_weights", "min_gap", "ov_lookup_accuracy",
                                          "induction_targets")}),
}
# Looks for any course, notebook or database anywhere on the disk it can see.
SEARCHER = """import os
found = []
for top in os.listdir("/"):
    if top not in ("proc", "sys", "dev", "usr", "lib", "lib64", "bin", "sbin", "tmp"):  # system, own
        for folder, _, files in os.walk("/" + top):
            found += [os.path.join(folder, f) for f in files if f.endswith((".ipynb", ".db", ".sqlite"))
                      and "site-packages" not in folder and not folder.startswith(os.getcwd())]
print("SEARCHED", found[:5])
""" + HONEST_SOFTMAX
# The internet, a service of the grading machine on loopback, and the host's abstract unix sockets.
CALLER = """import socket
reached = []
for address in [("1.1.1.1", 53), ("127.0.0.1", {port})]:
    try:
        socket.create_connection(address, timeout=2).close()
        reached.append(address)
    except OSError:
        pass
abstract = [line for line in open("/proc/net/unix").read().splitlines()[1:] if "@" in line]
print("REACHED", reached, "ABSTRACT", len(abstract))
""" + HONEST_SOFTMAX
HOG = """_kept = torch.ones(6 * 2**30, dtype=torch.uint8)  # 6 GB
""" + HONEST_SOFTMAX
FORKER = """import threading, time
_threads = [threading.Thread(target=time.sleep, args=(5,)) for _ in range(300)]
for _t in _threads:
    _t.start()
""" + HONEST_SOFTMAX
FILLER = """with open("/tmp/fill", "wb") as _f:
    for _ in range(2048):
        _f.write(b"0" * 2**20)  # 2 GB
""" + HONEST_SOFTMAX
SHOUTER = """for _ in range(200):
    print("x" * 2**20)  # 200 MB
""" + HONEST_SOFTMAX
SECONDS = 40  # the whole-notebook time limit of the limits run (its right notebook takes some 3 s)
SLEEPER = "import time\ntime.sleep(11)"  # under the 20 s per cell, but 4 of them pass SECONDS
LIMITED = {"hog": {"softmax_rows": HOG}, "forker": {"softmax_rows": FORKER}, "filler": {"softmax_rows": FILLER},
           "shouter": {"softmax_rows": SHOUTER}, "sleeper": {name: SLEEPER for name in exercise_names(SET01)}}


def csv_rows(course: Path) -> dict[tuple[str, str], dict[str, str]]:
    with open(course / "grades.csv") as handle:
        return {(row["student_id"], row["assignment"]): row for row in csv.DictReader(handle)}


def hidden_lines(course: Path, set_name: str) -> list[str]:
    source = (course / "solutions" / set_name / exercise_notebook(set_name)).read_text()
    return [line.strip() for block in HIDDEN.findall("\n".join(c.source for c in nbformat.reads(source, as_version=4).cells))
            for line in block.splitlines() if len(line.strip()) > 12]


def scores(course: Path, set_name: str, student: str) -> dict[str, float]:
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        notebook = gradebook.find_submission_notebook(notebook_id(set_name), set_name, student)
        return {grade.name.removesuffix("_tests"): grade.score for grade in notebook.grades}


def test_committed_student_versions_are_what_nbgrader_generates_today(course):
    for set_name in SETS:
        generated = json.loads((course / "exercises" / set_name / exercise_notebook(set_name)).read_text())
        committed = json.loads((ROOT / "exercises" / set_name / exercise_notebook(set_name)).read_text())
        assert generated == committed, f"exercises/{set_name} is stale: run `make exercises`"


def test_student_versions_hold_no_solution_or_hidden_test_text(course):
    for set_name in SETS:
        solution = (course / "solutions" / set_name / exercise_notebook(set_name)).read_text()
        student = (course / "exercises" / set_name / exercise_notebook(set_name)).read_text()
        source = "\n".join(c.source for c in nbformat.reads(solution, as_version=4).cells)
        secret = [line.strip() for block in SOLUTION.findall(source) + HIDDEN.findall(source)
                  for line in block.splitlines() if len(line.strip()) > 12]
        assert secret, f"{set_name} has no solution or hidden test text to look for"
        student_text = "\n".join(c.source for c in nbformat.reads(student, as_version=4).cells)
        leaked = [line for line in secret if line in student_text and line not in _visible(source)]
        assert not leaked and "BEGIN SOLUTION" not in student and "BEGIN HIDDEN" not in student, leaked


def _visible(source: str) -> str:
    """Instructor text outside the solution and hidden regions (students may see it)."""
    return HIDDEN.sub("", SOLUTION.sub("", source))


@pytest.mark.parametrize("set_name", SETS)
def test_correct_submission_gets_full_marks(course, set_name):
    assert scores(course, set_name, "correct") == points(course, set_name)


@pytest.mark.parametrize("set_name", SETS)
def test_wrong_answers_lose_exactly_their_points(course, set_name):
    wrong = last_two(set_name)
    expected = {name: (0.0 if name in wrong else full) for name, full in points(course, set_name).items()}
    assert scores(course, set_name, "wrong") == expected


def test_an_answer_that_raises_or_loops_scores_zero_and_the_rest_is_graded(course):
    expected = points(course, "01_attention_scores") | {"softmax_rows": 0.0, "attend": 0.0}
    assert scores(course, "01_attention_scores", "broken") == expected


def test_grades_csv_and_feedback_are_written(course):
    rows = (course / "grades.csv").read_text().splitlines()
    assert rows[0].startswith("assignment,") and len(rows) > len(SETS)
    for student in ("correct", "wrong", "broken"):
        assert list((course / "feedback" / student / "01_attention_scores").glob("*.html")), student


def test_feedback_names_failed_tests_without_showing_hidden_tests(course):
    html = (course / "feedback" / "wrong" / SET01 / feedback_page(SET01)).read_text()
    source = (course / "solutions" / SET01 / exercise_notebook(SET01)).read_text()
    hidden_lines = [line.strip() for block in HIDDEN.findall("\n".join(
        c.source for c in nbformat.reads(source, as_version=4).cells)) for line in block.splitlines() if len(line.strip()) > 12]
    assert "written_by_hand" not in html and not any(line in html for line in hidden_lines if "check_" not in line)
    assert "CheckFailed" in html and "hidden tests ran here" in html


@pytest.mark.parametrize("student", ["copy1", "oldname", "warns", "deleted", "leaker"])
def test_correct_work_gets_full_marks_despite_name_warnings_deleted_cells_or_prints(course, student):
    assert scores(course, SET01, student) == points(course, SET01)
    assert csv_rows(course)[(student, SET01)]["status"] == "graded"


def test_a_notebook_under_another_name_is_graded_with_a_note_naming_the_file_it_should_be(course):
    rows, expected = csv_rows(course), exercise_notebook(SET01)
    assert f"graded {SET01}.ipynb, the name earlier releases gave this notebook (now {expected})" \
        in rows[("oldname", SET01)]["notes"]
    assert f"graded {SET01}_exercises-Copy1.ipynb (the file should be named {expected})" in rows[("copy1", SET01)]["notes"]
    assert "should be named" not in rows[("correct", SET01)]["notes"]


def test_the_lesson_handed_in_or_two_notebooks_are_flagged_and_told_what_to_hand_in(course):
    rows, expected = csv_rows(course), exercise_notebook(SET01)
    lesson, two = rows[("lesson", SET01)], rows[("twofiles", SET01)]
    assert lesson["status"] == "flagged" and lesson["score"] == "", lesson
    assert (f"{SET01}.ipynb holds none of the exercise set's cells (the lesson's notebook, or another set's?): "
            f"hand in {expected}") in lesson["notes"] and "earlier releases" not in lesson["notes"]
    assert two["status"] == "flagged" and two["score"] == "", two
    assert f"several notebooks ({SET01}.ipynb, {SET01}_exercises-Copy1.ipynb) and none named {expected}" in two["notes"]
    for student in ("lesson", "twofiles"):  # no grade at all, neither a 0 nor the answer beside the lesson
        with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
            assert student not in {s.student_id for s in gradebook.assignment_submissions(SET01)}
        html = (course / "feedback" / student / SET01 / feedback_page(SET01)).read_text()
        assert "not graded" in html and expected in html


def test_the_run_finishes_and_broken_submissions_are_flagged_with_a_reason(course):
    rows = csv_rows(course)
    assert rows[("truncated", SET01)]["status"] == "flagged" and "not a readable notebook" in rows[("truncated", SET01)]["notes"]
    assert rows[("exits", SET01)]["status"] == "flagged" and "kernel stopped" in rows[("exits", SET01)]["notes"]
    assert rows[("truncated", SET01)]["score"] == "" and rows[("exits", SET01)]["score"] == ""
    for student, fix in [("truncated", "open it in JupyterLab, save it"), ("exits", "remove that call")]:
        html = (course / "feedback" / student / SET01 / feedback_page(SET01)).read_text()
        assert "not graded" in html and fix in html
    # Sets graded after set 01 were still graded for everybody.
    assert all(rows[("correct", s)]["status"] == "graded" for s in SETS)


def test_grades_csv_is_fresh_and_tells_missing_from_zero(course):
    rows = csv_rows(course)
    assert not any(student == "ghost" for student, _ in rows)
    assert not (course / "feedback" / "ghost").exists()
    # "copy1" handed in set 01 only: the other sets are "not submitted", not a 0.
    for set_name in SETS[1:]:
        assert rows[("copy1", set_name)]["status"] == "not submitted" and rows[("copy1", set_name)]["score"] == ""
    assert rows[("wrong", SET01)]["score"] == f"{sum(points(course, SET01).values()) - sum(points(course, SET01)[e] for e in last_two(SET01)):g}"


def test_printed_table_counts_graded_flagged_and_missing(course):
    out = (course / "grade-output.txt").read_text()
    graded = sum(r["status"] == "graded" for r in csv_rows(course).values())
    missing = sum(r["status"] == "not submitted" for r in csv_rows(course).values())
    flagged = sum(r["status"] == "flagged" for r in csv_rows(course).values())
    assert flagged == 5  # truncated, exits, set 09's solution notebook, lesson, twofiles
    assert f"{graded} graded" in out and f"{flagged} flagged" in out and f"{missing} not submitted" in out
    assert "s per submission" in out


def test_deleted_cells_are_put_back_and_reported(course):
    notes = csv_rows(course)[("deleted", SET01)]["notes"]
    assert "score_matrix_tests" in notes and "row_entropy_check" in notes


def test_warnings_and_stderr_prints_stay_visible_in_feedback(course):
    html = (course / "feedback" / "warns" / SET01 / feedback_page(SET01)).read_text()
    assert "is this stable?" in html and "debug: shape" in html


def test_a_timeout_message_names_the_limit_and_the_cell(course):
    html = (course / "feedback" / "broken" / SET01 / feedback_page(SET01)).read_text()
    assert "`attend` was stopped at the limit on time: a cell may run 20 s" in html
    assert "CellTimeoutError" not in html


def test_the_sandbox_shows_no_course_notebook_or_database_anywhere_on_the_disk(course):
    assert "SEARCHED []" in printed(course, "searcher", "softmax_rows")
    assert scores(course, SET01, "searcher") == points(course, SET01)


def test_the_sandbox_has_no_network_and_no_host_sockets(course):
    assert "REACHED [] ABSTRACT 0" in printed(course, "caller", "softmax_rows")
    assert scores(course, SET01, "caller") == points(course, SET01)


@pytest.mark.slow
@pytest.mark.parametrize("student, limit", [("hog", "memory"), ("forker", "processes"), ("filler", "disk"),
                                            ("shouter", "output cut"), ("sleeper", "the whole notebook may run")])
def test_a_submission_that_hits_a_limit_is_flagged_with_that_limit(limited_course, student, limit):
    course = limited_course
    assert csv_rows(course)[("correct", SET01)]["status"] == "graded"
    assert scores(course, SET01, "correct") == points(course, SET01)
    row = csv_rows(course)[(student, SET01)]
    assert row["status"] == "flagged" and "limit hit" in row["notes"] and limit in row["notes"], row
    html = (course / "feedback" / student / SET01 / feedback_page(SET01)).read_text()
    assert limit in html
    assert len(html) < 10_000_000
    graded = course / "autograded" / student / SET01 / exercise_notebook(SET01)  # none when the kernel died
    assert not graded.exists() or graded.stat().st_size < 6_000_000


def test_a_cell_pasted_twice_is_graded_once_and_spoils_no_one_else(course):
    row = csv_rows(course)[("copier", SET01)]
    assert row["status"] == "graded" and "score_matrix" in row["notes"], row
    assert scores(course, SET01, "copier") == points(course, SET01)
    assert not any("WARNING" in r["notes"] for r in csv_rows(course).values())


def test_feedback_never_shows_hidden_test_source_even_when_the_submission_prints_it(course):
    autograded = nbformat.read(course / "autograded" / "leaker" / SET01 / exercise_notebook(SET01), as_version=4)
    printed = "".join(o.get("text", "") for c in autograded.cells if c.cell_type == "code" for o in c.outputs)
    lines = hidden_lines(course, SET01)
    assert any(line in printed for line in lines)  # the submission really printed them
    for student in ("leaker", "wrong", "broken", "warns"):
        html = (course / "feedback" / student / SET01 / feedback_page(SET01)).read_text()
        assert not [line for line in lines if line in html and "check_" not in line], student


def test_code_that_reads_frames_or_stops_the_kernel_is_listed_for_review(course):
    rows = csv_rows(course)
    assert "review by hand: reads the notebook's own cells" in rows[("leaker", SET01)]["notes"]
    assert "review by hand: stops the kernel" in rows[("exits", SET01)]["notes"]
    assert not any("review by hand" in rows[(student, SET01)]["notes"] for student in ("correct", "warns", "copy1"))


def printed(course: Path, student: str, grade_id: str) -> str:
    nb = nbformat.read(course / "autograded" / student / SET01 / exercise_notebook(SET01), as_version=4)
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
    return "".join(o.get("text", "") for o in cell.outputs)


def test_a_mistake_in_an_earlier_exercise_costs_only_its_own_points(course):
    assert scores(course, SET01, "chained") == points(course, SET01) | {"score_matrix": 0.0}


def test_a_submission_cannot_read_solutions_hidden_tests_or_the_gradebook(course):
    out = printed(course, "reader", "softmax_rows")
    assert "FOUND 0 notebooks or databases: [] in its own folder: []" in out, out
    assert scores(course, SET01, "reader") == points(course, SET01)  # its honest answers still count


def test_a_submission_cannot_remount_or_unmount_its_way_out(course):
    assert "STILL INSIDE" in printed(course, "escaper", "softmax_rows")
    assert not (ROOT / "escaped").exists()


def test_a_submission_cannot_write_outside_its_own_folder(course):
    # Inside, the course's path may exist in the sandbox's own /tmp (this test's course lives under
    # /tmp), so what counts is the real disk after grading.
    assert "WROTE" in printed(course, "writer", "softmax_rows")
    assert not (course / "course_lib_extra.py").exists() and not (ROOT / "course_lib" / "extra.py").exists()
    assert not (course / "autograded" / "correct" / "x.py").exists()
    assert b"planted" not in (course / "gradebook.db").read_bytes()
    assert scores(course, SET01, "writer") == points(course, SET01)


def test_patching_torch_earns_nothing_for_the_wrong_answer(course):
    """patcher makes torch.allclose say yes: its right answers count, its wrong one does not."""
    assert scores(course, SET01, "patcher") == points(course, SET01) | {"row_entropy": 0.0}
    html = (course / "feedback" / "patcher" / SET01 / feedback_page(SET01)).read_text()
    assert "row_entropy(WEIGHTS): wrong values" in html  # the visible check, run by the grader on its results


def test_emptying_the_test_cells_earns_nothing_and_is_listed_for_review(course):
    assert scores(course, SET01, "emptier") == {name: 0.0 for name in points(course, SET01)}
    html = (course / "feedback" / "emptier" / SET01 / feedback_page(SET01)).read_text()
    assert "handed in 0 results instead of 1" in html
    assert "handed in nothing" in csv_rows(course)[("emptier", SET01)]["notes"]


@pytest.mark.parametrize("student", CHEATS)
def test_each_cheat_is_scored_as_it_deserves_and_listed_for_review(course, student):
    earn_nothing = CHEATS[student][1]
    assert scores(course, SET01, student) == {name: (0.0 if name in earn_nothing else full)
                                              for name, full in points(course, SET01).items()}
    # Plain ready-made code needs no look: the refusal says what ran. The others reach into the kernel.
    listed = "review by hand" in csv_rows(course)[(student, SET01)]["notes"]
    assert listed == (student != "sdpa"), csv_rows(course)[(student, SET01)]["notes"]


def test_names_built_at_run_time_are_listed_for_review(course):
    """piecer's record says no softmax ran, and nothing in the kernel can be believed over it: the
    scan of its source, outside the kernel, lists it (before, nothing did, and it scored 7 of 7)."""
    assert "review by hand: builds names or code at run time" in csv_rows(course)[("piecer", SET01)]["notes"]


@pytest.mark.parametrize("student", ["threaded", "sdpa", "codeswap"])
def test_ready_made_kernels_are_refused_by_what_the_dispatcher_ran(course, student):
    html = (course / "feedback" / student / SET01 / feedback_page(SET01)).read_text()
    assert "ready-made" in html and "earns no credit" in html


def test_the_hidden_inputs_and_the_handed_in_results_never_reach_feedback(course):
    inputs = re.compile(r'hand_in\("\w+", \w+, "([A-Za-z0-9+/=]{100,})"\)')
    for student in ("correct", "leaker", "hooker"):
        autograded = nbformat.read(course / "autograded" / student / SET01 / exercise_notebook(SET01), as_version=4)
        lines = [m.group(1) for c in autograded.cells for m in inputs.finditer(c.source)]
        assert len(lines) == len(points(course, SET01))  # each graded cell got its inputs
        assert any("hand-in+json" in json.dumps(c.get("outputs", [])) for c in autograded.cells)  # kept for review
        html = (course / "feedback" / student / SET01 / feedback_page(SET01)).read_text()
        assert not [line for line in lines if line[:40] in html] and "hand-in" not in html


def test_release_is_the_course_without_answers(tmp_path):
    dest = tmp_path / "public"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "release.py"), str(dest)], check=True, capture_output=True)
    files = {p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()}
    lessons = {p.relative_to(ROOT).as_posix() for p in (ROOT / "notebooks").glob("*.ipynb")}
    assert {f"exercises/{s}/{exercise_notebook(s)}" for s in SETS} | lessons | {"course_lib/checks/__init__.py"} <= files
    assert not any(f.startswith(("solutions/", ".ci/", "grading/")) or f in ("nbgrader_config.py", "scripts/grade.py")
                   for f in files)
    assert {f for f in files if f.startswith("tests/")} == {"tests/sanitize.cfg"}
    for path in dest.rglob("*.ipynb"):
        text = path.read_text()
        assert "BEGIN SOLUTION" not in text and "BEGIN HIDDEN TESTS" not in text, path
    # The students' README: how to start, every lesson with its exercises, how to hand in; nothing
    # of how grading works, which would tell a student what to get around.
    readme = (dest / "README.md").read_text()
    assert "README.student.md" not in files and "## Handing in" in readme and "make lab" in readme
    assert all(f"]({lesson})" in readme for lesson in lessons) and "<!-- lessons:" not in readme
    instructor_only = ("sandbox", "hidden test", "nbgrader_config", "bubblewrap", "grade.py", "solutions/",
                       "make grade", "scan", "guard", "marker", "review by hand", "autograde", "gradebook")
    assert [word for word in instructor_only if word in readme.lower()] == []
    refused = subprocess.run([sys.executable, str(ROOT / "scripts" / "release.py"), str(dest)], capture_output=True,
                             text=True)
    assert refused.returncode != 0 and "is not empty" in refused.stderr


def test_release_refuses_stale_exercise_sets_and_files_git_does_not_track(tmp_path):
    """An instructor who changed a set and forgot `make exercises`, or who wrote a check module and
    forgot `git add`: the copy would ship the old set, or leave the module out, and say nothing."""
    course = tmp_path / "course"
    subprocess.run(["git", "clone", "--quiet", "--local", str(ROOT), str(course)], check=True)
    shutil.copy(ROOT / "scripts" / "release.py", course / "scripts")  # the release as it is now, if not committed
    release = [sys.executable, str(course / "scripts" / "release.py")]
    solution = next((course / "solutions").glob("03_*/*.ipynb"))
    nb = nbformat.read(solution, as_version=4)
    nb.cells.insert(1, nbformat.v4.new_markdown_cell("A new exercise's text."))
    nbformat.write(nb, solution)
    refused = subprocess.run(release + [str(tmp_path / "a")], capture_output=True, text=True)
    assert refused.returncode != 0 and f"older than solutions/ for {solution.parent.name}" in refused.stderr
    assert not (tmp_path / "a").exists()
    subprocess.run(["git", "checkout", "--quiet", "--", "solutions"], cwd=course, check=True)
    (course / "course_lib" / "checks" / "new_set.py").write_text("CHECKS = []\n")
    refused = subprocess.run(release + [str(tmp_path / "b")], capture_output=True, text=True)
    assert refused.returncode != 0 and "git does not track course_lib/checks/new_set.py" in refused.stderr


@pytest.mark.slow
def test_a_python_environment_outside_the_course_grades_correctly(tmp_path):
    """Set up as a conda user's would be: its own python (a copy, not a link to the system's) in a
    folder under the home folder, with its own scripts. The sandbox hides the disk by default; it
    must still show the environment grading runs from, or every submission would fail to start."""
    import site

    env = tmp_path / "home" / "miniconda3" / "envs" / "transformer-roots"
    subprocess.run([sys.executable, "-m", "venv", "--copies", "--without-pip", str(env)], check=True)
    packages = next(env.glob("lib/python3*/site-packages"))
    (packages / "course.pth").write_text(os.path.realpath(site.getsitepackages()[0]) + "\n")
    for installed in Path(site.getsitepackages()[0]).glob("__editable__*"):  # `pip install -e .` in that env
        shutil.copy(installed, packages)
    (env / "bin" / "alembic").write_text(f"#!/bin/sh\nexec {env / 'bin' / 'python'} -m alembic \"$@\"\n")
    (env / "bin" / "alembic").chmod(0o755)
    course = tmp_path / "course"
    (course / "solutions").mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(ROOT / "solutions" / SET01, course / "solutions" / SET01)
    python = [str(env / "bin" / "python"), str(ROOT / "scripts" / "grade.py"), "--course", str(course)]
    subprocess.run([*python, "--exercises-only"], check=True, capture_output=True)
    folder = course / "submitted" / "conda" / SET01
    folder.mkdir(parents=True)
    nbformat.write(submission(course, SET01, {}), folder / exercise_notebook(SET01))
    subprocess.run(python, check=True, capture_output=True)
    row = csv_rows(course)[("conda", SET01)]
    assert row["status"] == "graded" and float(row["score"]) == sum(points(course, SET01).values()), row


@pytest.mark.parametrize("student", HONEST)
def test_honest_work_in_another_form_scores_as_it_deserves(course, student):
    set_name, _, earn_nothing = HONEST[student]
    assert scores(course, set_name, student) == {name: (0.0 if name in earn_nothing else full)
                                                 for name, full in points(course, set_name).items()}
    assert csv_rows(course)[(student, set_name)]["status"] == "graded"


@pytest.mark.parametrize("student", COURSE_CODE)
def test_answers_computed_with_the_course_code_in_the_kernel_earn_nothing(course, student):
    set_name = COURSE_CODE[student][0]
    assert scores(course, set_name, student) == {name: 0.0 for name in points(course, set_name)}
    # every module and attribute name built from pieces: the scan lists it all the same
    assert "review by hand: builds names or code at run time" in csv_rows(course)[(student, set_name)]["notes"]


def test_the_solution_notebook_handed_in_is_listed_for_review_not_graded(course):
    row = csv_rows(course)[("answerkey", SET09)]
    assert row["status"] == "flagged" and row["score"] == "", row
    assert "solution notebook" in row["notes"] and "### BEGIN SOLUTION" in row["notes"], row["notes"]
    # Honest work never carries the note: the student version has neither markers nor hidden lines.
    assert not [key for key, r in csv_rows(course).items() if "solution notebook" in r["notes"] and key[0] != "answerkey"]


def test_the_answer_key_scan_finds_the_instructors_text_in_any_cell_and_nothing_in_honest_work():
    """Fast, without grading: what the scan finds in each set's source, student version and in
    single lines copied from the hidden tests into an answer cell."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from grade import answer_key_lines, answer_key_text

    for set_name in SETS:
        lines = answer_key_lines(ROOT, set_name)
        assert any(line.startswith("hand_in(") for line in lines), set_name
        source = nbformat.read(ROOT / "solutions" / set_name / exercise_notebook(set_name), as_version=4)
        assert answer_key_text(source, lines) and "### BEGIN SOLUTION" in answer_key_text(source, lines)[0]
        student = nbformat.read(ROOT / "exercises" / set_name / exercise_notebook(set_name), as_version=4)
        assert answer_key_text(student, lines) == [], set_name
        copied = sorted(line for line in lines if line.startswith("hand_in("))[0]
        student.cells[-1].source += "\n    " + copied  # indented, in the learner's own last cell
        assert copied in answer_key_text(student, lines)[0]


def _timed_out(grade_id: str, locked: bool) -> nbformat.NotebookNode:
    """A code cell as nbclient leaves one it stopped at its time limit."""
    cell = nbformat.v4.new_code_cell("import torch")
    cell.metadata["nbgrader"] = {"grade_id": grade_id, "locked": locked, "solution": not locked, "grade": False}
    cell.outputs = [nbformat.v4.new_output("error", ename="CellTimeoutError", evalue="timed out", traceback=[])]
    return cell


def test_the_courses_setup_cell_gets_longer_and_its_timeout_is_the_graders_not_the_students():
    """The setup cell imports torch (tens of seconds for its CUDA build on a busy machine): it gets
    SETUP_SECONDS, and a timeout there is flagged as the machine's. A student who names a cell of
    their own "setup" gains nothing: only a locked cell, whose source nbgrader puts back, counts."""
    import time

    sys.path.insert(0, str(ROOT))
    from grading.steps import LIMIT, SETUP_SECONDS, TIMEOUT_SECONDS, LimitedExecute, NameLimits

    execute = LimitedExecute()
    execute._started = time.monotonic()
    assert SETUP_SECONDS > TIMEOUT_SECONDS
    assert execute._get_timeout(_timed_out("setup", locked=True)) == SETUP_SECONDS
    assert execute._get_timeout(_timed_out("setup", locked=False)) == TIMEOUT_SECONDS
    assert execute._get_timeout(_timed_out("attend", locked=False)) == TIMEOUT_SECONDS

    setup, _ = NameLimits().preprocess_cell(_timed_out("setup", locked=True), {}, 0)
    assert setup.outputs[0].ename == LIMIT  # flagged: grade it again
    assert "setup cell (not this submission's code)" in setup.outputs[0].evalue
    own, _ = NameLimits().preprocess_cell(_timed_out("setup", locked=False), {}, 0)
    assert own.outputs[0].ename == "TimeoutError" and "loop that never ends" in own.outputs[0].evalue
