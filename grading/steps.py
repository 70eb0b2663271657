"""nbgrader preprocessors for Transformer Roots, in the order nbgrader_config.py runs them.

Autograding a notebook:
1. `PlanHiddenTests` keeps the answer key here: for each graded cell it draws the exercise's
   cases from a fresh seed and runs the instructor's solution on them (grading/answer_key.py),
   then writes only the inputs into the cell's hand_in line. Demonstrations that import the
   course's own modules are not run (a graded kernel has only course_lib's checks).
2. `LimitedExecute` runs the notebook (each cell in the sandboxed kernel) with limits on output
   and on the whole notebook's time that the kernel cannot lift: they are enforced here.
3. `StderrToStdout` keeps warnings from zeroing a cell; `NameLimits` says which limit an error hit.
4. `JudgeHandIns` reads what each graded cell handed in and judges it with the plan: the visible
   check runs here on the learner's results, then each case against the reference answer. A test
   cell keeps its points only if both pass. Nothing the kernel prints or patches decides this.
Feedback: `HideHiddenTests` shows which cell failed and why, never the hidden tests or records.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import secrets
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from nbconvert.preprocessors import Preprocessor
from nbformat.v4 import new_output
from nbgrader.preprocessors import Execute

from course_lib.checks import HINT_BELOW, FoldedHint, ladder
from course_lib.checks.hand_in import MIME
from grading.answer_key import VISIBLE, plan, verdict

TIMEOUT_SECONDS = 20  # per cell: each graded cell runs in well under a second
# The course's own setup cell imports torch: seconds on a quiet machine, tens of them for torch's
# CUDA build on a busy one. It is the instructor's code (nbgrader puts a locked cell's source back),
# so it gets longer, and running out of time there is the grading machine's fault, not the student's.
SETUP_SECONDS = 90
HIDDEN = re.compile(r"### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS", re.S)
HAND_IN = re.compile(r"""hand_in\(\s*["'](\w+)["']""")
HAND_IN_CALL = re.compile(r"""hand_in\(\s*["'](\w+)["']\s*,\s*(\w+)\s*\)""")
# A locked demonstration cell that imports the course's own modules (lesson data, say): a graded
# kernel does not have them, and the cell earns nothing, so it is not run.
COURSE_IMPORT = re.compile(r"^\s*(from|import)\s+course_lib(?!\.checks)\b", re.M)
NOT_RUN = "# (a demonstration with the course's own modules: not run while grading)"
# What every graded kernel must be able to run (scripts/grade.py tries it before grading anyone).
SANDBOX_PROBE = "from course_lib.checks.hand_in import hand_in"
LIMIT = "LimitExceeded"  # the ename of an error that names a limit; grade.py flags such submissions

# Set by scripts/grade.py from its command line; the defaults fit a class on a 2-core, 24 GB machine.
OUTPUT_BYTES_PER_CELL = int(os.environ.get("TR_OUTPUT_BYTES_PER_CELL", 1_000_000))
OUTPUT_BYTES_PER_NOTEBOOK = int(os.environ.get("TR_OUTPUT_BYTES_PER_NOTEBOOK", 4_000_000))
SECONDS_PER_SUBMISSION = float(os.environ.get("TR_SECONDS_PER_SUBMISSION", 120))
MEMORY_BYTES = int(os.environ.get("TR_MEMORY_BYTES", 3 * 2**30))
PROCESSES = int(os.environ.get("TR_PROCESSES", 64))
SCRATCH_BYTES = int(os.environ.get("TR_SCRATCH_BYTES", 512 * 2**20))


def is_test_cell(cell) -> bool:
    return cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("grade", False)


def error_output(ename: str, message: str):
    return new_output("error", ename=ename, evalue=message, traceback=[f"{ename}: {message}"])


def check_failure_outputs(message: str) -> list:
    """A visible check's failure as the learner's notebook shows it (course_lib.checks): the
    symptom as the error, then the likely bug folded under it, so feedback keeps the hint ladder."""
    symptom, hint = ladder(message)
    if not hint:
        return [error_output("CheckFailed", message)]
    # the value too, since HideHiddenTests rebuilds a test cell's traceback from it
    error = new_output("error", ename="CheckFailed", evalue=f"{symptom}\n{HINT_BELOW}",
                       traceback=[f"CheckFailed: {symptom}", HINT_BELOW])
    folded = FoldedHint(hint)
    return [error, new_output("display_data", data={"text/plain": repr(folded), "text/html": folded._repr_html_()})]


class PlanHiddenTests(Preprocessor):
    """Before execution: each hand_in line gets its inputs; the plans that judge them stay here."""

    enabled = True

    def preprocess(self, nb, resources):
        set_name = resources.get("nbgrader", {}).get("assignment")
        solutions = Path(self.config.CourseDirectory.root or ".").resolve() / self.config.CourseDirectory.source_directory
        plans: dict = {}

        def with_inputs(call: re.Match) -> str:
            name, fn = call.groups()
            if name not in plans:
                plans[name] = plan(solutions, set_name, name, secrets.randbelow(2**62))
            return f'hand_in("{name}", {fn}, "{plans[name].line()}")'

        for cell in nb.cells:
            meta = cell.metadata.get("nbgrader", {})
            if is_test_cell(cell):
                cell.source = HIDDEN.sub(lambda block: HAND_IN_CALL.sub(with_inputs, block.group(0)), cell.source)
            elif cell.cell_type == "code" and meta.get("locked") and COURSE_IMPORT.search(cell.source):
                cell.source = NOT_RUN
        resources["hand_in_plans"] = plans
        return nb, resources


class JudgeHandIns(Preprocessor):
    """After execution: each graded cell's points depend on the judge alone.

    The exercises a cell hands in are read from its hidden tests, which nbgrader has restored from
    the instructor's source (the kernel cannot change them). A cell that ran without error keeps
    its points only if it handed in exactly one record per exercise, the visible check passes on
    it and every case is right; otherwise it gets an error output saying why, which makes nbgrader
    give it 0.
    """

    enabled = True

    def preprocess(self, nb, resources):
        plans = resources.pop("hand_in_plans", {})
        for cell in nb.cells:
            names = [n for block in HIDDEN.findall(cell.source) for n in HAND_IN.findall(block)]
            if is_test_cell(cell) and names:
                self._judge_cell(cell, names, plans)
        return nb, resources

    @staticmethod
    def _judge_cell(cell, names: list[str], plans: dict) -> None:
        records = [o["data"][MIME] for o in cell.outputs if o.get("output_type") == "display_data"
                   and MIME in o.get("data", {})]
        if any(o.get("output_type") == "error" for o in cell.outputs):
            return  # it already fails: the learner sees their own error
        for name in names:
            mine = [r for r in records if isinstance(r, dict) and r.get("exercise") == name]
            if len(mine) != 1 or name not in plans:
                message = (f"{name}: the hidden tests handed in {len(mine)} results instead of 1 (the cell was "
                           "skipped, emptied or changed while grading): 0 points; the instructor will look at it")
                cell.outputs.append(error_output("NotGraded", message))
                return
            problems = verdict(plans[name], mine[0])
            if problems and problems[0].startswith(VISIBLE):
                cell.outputs.extend(check_failure_outputs(problems[0].removeprefix(VISIBLE)))
                return
            if problems:
                more = f" (and {len(problems) - 1} more cases)" if len(problems) > 1 else ""
                cell.outputs.append(error_output("HiddenTestFailed", f"{name}: {problems[0]}{more}"))
                return


class StderrToStdout(Preprocessor):
    """Warnings and prints to stderr do not zero a cell: nbgrader counts any stderr as failure.

    The text stays in the output (as stdout) so feedback shows it.
    """

    enabled = True

    def preprocess_cell(self, cell, resources, index):
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream" and output.get("name") == "stderr":
                output["name"] = "stdout"
        return cell, resources


SOCKET_FOLDER_BYTES = 1 << 20  # a kernel's five unix sockets take no room: this holds them, not a flood
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MNT_DETACH = 2, 4, 8, 2


@contextlib.contextmanager
def socket_folder(parent: str) -> Iterator[Path]:
    """A fresh folder in `parent` for one kernel's unix sockets, the only folder it shares with nbgrader.

    As root it is a tmpfs of its own of SOCKET_FOLDER_BYTES, so a kernel cannot fill the grader's
    disk through it; it is removed afterwards, so nothing a kernel leaves there reaches the next.
    """
    folder = Path(tempfile.mkdtemp(prefix="k", dir=parent))
    libc = ctypes.CDLL(None, use_errno=True)
    mounted = os.geteuid() == 0 and libc.mount(b"tr-sockets", bytes(folder), b"tmpfs",
                                               _MS_NOSUID | _MS_NODEV | _MS_NOEXEC,
                                               f"size={SOCKET_FOLDER_BYTES},mode=0700".encode()) == 0
    try:
        yield folder
    finally:
        if mounted:
            libc.umount2(bytes(folder), _MNT_DETACH)
        shutil.rmtree(folder, ignore_errors=True)


# Messages whose content ends up in the notebook or the feedback: outputs, display updates, and
# widget (comm) state, which nbclient saves in the notebook's metadata. Their metadata counts too.
COUNTED = {"stream", "display_data", "execute_result", "error", "update_display_data",
           "comm_open", "comm_msg", "comm_close"}


def message_bytes(msg: dict) -> int:
    """How much a kernel message adds to the notebook: its content as JSON and its binary buffers."""
    return len(json.dumps(msg.get("content", {}), default=str)) + sum(len(b) for b in msg.get("buffers") or [])


class LimitedExecute(Execute):
    """nbgrader's Execute, with limits kept in this process, where code in the kernel cannot lift them.

    - Output: a cell keeps at most OUTPUT_BYTES_PER_CELL bytes of output, the notebook at most
      OUTPUT_BYTES_PER_NOTEBOOK; every channel counts (prints, displays, display updates, each
      times the outputs it rewrites, widget and comm messages, their metadata), and the rest is
      dropped as it arrives, with one note.
    - Time: besides the per-cell timeout, the whole notebook gets SECONDS_PER_SUBMISSION; a cell
      gets what is left of it, and once it is spent the remaining cells are not run.
    - Sockets: each notebook's kernel gets a socket folder of its own (`socket_folder`).
    """

    def preprocess(self, nb, resources=None, km=None):
        self._started, self._notebook_bytes, self._cell_bytes = None, 0, {}
        with socket_folder(os.environ.get("JUPYTER_RUNTIME_DIR") or tempfile.gettempdir()) as self._sockets:
            return super().preprocess(nb, resources, km)

    def create_kernel_manager(self):
        km = super().create_kernel_manager()
        if km.transport == "ipc":  # the sandbox's kernel (nbgrader_config.py)
            km.ip = str(self._sockets / "kernel")
        return km

    def _left(self) -> float:
        return SECONDS_PER_SUBMISSION - (time.monotonic() - self._started)

    def _get_timeout(self, cell):
        if self._started is None:  # waiting for the kernel, before any cell
            return TIMEOUT_SECONDS
        left, limit = self._left(), SETUP_SECONDS if is_setup(cell) else TIMEOUT_SECONDS
        if cell is not None:
            cell.metadata["_tr_budget"] = left < limit
        return max(1, int(min(limit, left)))

    def preprocess_cell(self, cell, resources, index):
        if self._started is None:  # the clock starts with the first cell, not the kernel's start
            self._started = time.monotonic()
        if cell.cell_type == "code" and self._left() <= 0:
            cell.outputs = [error_output(LIMIT, f"not run: the submission used all of its {SECONDS_PER_SUBMISSION:g} s "
                                                "(the limit for a whole notebook); look for the slow cell above")]
            return cell, resources
        return super().preprocess_cell(cell, resources, index)

    def process_message(self, msg, cell, cell_index):
        if msg["msg_type"] in COUNTED:
            size = message_bytes(msg)
            if msg["msg_type"] == "update_display_data":  # it rewrites every output shown under its id
                shown = self._display_id_map.get((msg["content"].get("transient") or {}).get("display_id"), {})
                size *= max(1, sum(map(len, shown.values())))
            cell_bytes = self._cell_bytes.get(cell_index, 0) + size
            self._cell_bytes[cell_index] = cell_bytes
            self._notebook_bytes += size
            if cell_bytes > OUTPUT_BYTES_PER_CELL or self._notebook_bytes > OUTPUT_BYTES_PER_NOTEBOOK:
                if not any(o.get("ename") == LIMIT for o in cell.outputs):
                    cell.outputs.append(error_output(
                        LIMIT, f"output cut: a cell may print {OUTPUT_BYTES_PER_CELL:,} bytes and a notebook "
                               f"{OUTPUT_BYTES_PER_NOTEBOOK:,} (displays, display updates and widgets count too); "
                               "remove the large prints"))
                return None
        return super().process_message(msg, cell, cell_index)


# What the kernel's own limits (scripts/sandbox_kernel.py) look like when code runs into them.
IN_KERNEL_LIMITS = [
    (re.compile(r"MemoryError|can't allocate memory|Cannot allocate memory|std::bad_alloc"),
     f"memory: a process of the notebook may use {MEMORY_BYTES / 2**30:g} GiB"),
    (re.compile(r"can't start new thread|Resource temporarily unavailable|\[Errno 11\]"),
     f"processes: the notebook may run {PROCESSES} processes and threads"),
    (re.compile(r"No space left on device|\[Errno 28\]|File too large"),
     f"disk: the notebook may write {SCRATCH_BYTES / 2**20:g} MiB to each of its folders"),
]


def is_setup(cell) -> bool:
    """The course's setup cell: locked, so its source is the instructor's when it runs."""
    meta = (cell.metadata.get("nbgrader") or {}) if cell is not None else {}
    return meta.get("grade_id") == "setup" and bool(meta.get("locked"))


class NameLimits(Preprocessor):
    """After execution: an error caused by a limit says which limit, and a timeout says which one."""

    enabled = True

    def preprocess_cell(self, cell, resources, index):
        budget = cell.metadata.pop("_tr_budget", False)
        name = cell.metadata.get("nbgrader", {}).get("grade_id", f"cell {index + 1}")
        for k, output in enumerate(cell.get("outputs", [])):
            if output.get("output_type") != "error" or output.get("ename") == LIMIT:
                continue
            text = f"{output.get('ename')}: {output.get('evalue')}"
            if "Timeout" in output.get("ename", "") and is_setup(cell):
                cell.outputs[k] = error_output(LIMIT, (
                    f"the course's setup cell (not this submission's code) was stopped at its limit of "
                    f"{SETUP_SECONDS} s: the grading machine was too busy; grade this submission again"))
                continue
            if "Timeout" in output.get("ename", ""):
                # A loop that never ends is an honest mistake that costs its part; a whole notebook
                # that runs too long is flagged.
                which = (f"time: the whole notebook may run {SECONDS_PER_SUBMISSION:g} s" if budget
                         else f"time: a cell may run {TIMEOUT_SECONDS} s")
                message = (f"the cell `{name}` was stopped at the limit on {which}: look for a loop that never "
                           "ends (this part scores 0, the others are graded)")
                cell.outputs[k] = error_output(LIMIT if budget else "TimeoutError", message)
                continue
            for pattern, which in IN_KERNEL_LIMITS:
                if pattern.search(text):
                    cell.outputs[k] = error_output(LIMIT, f"the cell `{name}` ran into the limit on {which} ({text[:200]})")
                    break
        return cell, resources


class HideHiddenTests(Preprocessor):
    """Feedback shows which test cell failed and its message, never the hidden tests' source.

    Autograding puts the hidden tests back into the test cells; this removes them again from the
    feedback HTML, drops the handed-in records, shortens each error of a test cell to its last line
    (the traceback quotes code), and drops any printed line that quotes the hidden tests (a
    submission can print the source of the cell calling it).
    """

    enabled = True

    def preprocess(self, nb, resources):
        hidden = {line.strip() for cell in nb.cells if cell.cell_type == "code"
                  for block in HIDDEN.findall(cell.source) for line in block.splitlines()[1:-1]
                  if len(line.strip()) > 8}
        for cell in nb.cells:
            if cell.cell_type == "code":
                self._clean(cell, hidden)
        return nb, resources

    @staticmethod
    def _clean(cell, hidden: set[str]) -> None:
        is_test = "### BEGIN HIDDEN TESTS" in cell.source
        cell.source = HIDDEN.sub("# (hidden tests ran here)", cell.source)
        kept = []
        for output in cell.get("outputs", []):
            if MIME in output.get("data", {}):
                continue
            if output.get("output_type") == "stream":
                lines = output["text"].splitlines(keepends=True)
                output["text"] = "".join(line for line in lines if not any(h in line for h in hidden))
            elif output.get("output_type") == "error":
                if is_test or output["ename"] == LIMIT:
                    output["traceback"] = [f"{output['ename']}: {output['evalue']}"]
                if any(h in output["evalue"] for h in hidden):
                    output["evalue"] = "(message withheld: it quoted the hidden tests)"
                    output["traceback"] = [f"{output['ename']}: {output['evalue']}"]
            elif "data" in output:
                text = output["data"].get("text/plain", "")
                if any(h in text for h in hidden):
                    output["data"] = {"text/plain": "(output withheld: it quoted the hidden tests)"}
            kept.append(output)
        cell.outputs = kept
