"""The notebook's word when a student's work hits one of the class's limits on the hub.

Each student's server on the hub runs within limits (scripts/hub.py, ClassLimits): memory,
processes, a disk for the home, /tmp and /dev/shm of a fixed size. Hit without a word, a limit
looks like a broken course: "Kernel died", "Resource temporarily unavailable", "No space left on
device". This IPython extension, which the class's kernel loads (`--ext=grading.notice`, in the
kernel spec `hub.py setup` writes), names the limit instead:

  - an error that comes from a limit gets a line after its traceback naming the limit and its
    size: memory (MemoryError, torch's "can't allocate memory"), processes (a fork or thread
    refused), disk (no space left: home, /tmp or /dev/shm, told by the path);
  - a kernel stopped by the memory limit cannot say so itself: the next kernel does, at its
    first cell (the control group counts the processes it killed);
  - the kernel asks for less memory than the limit for itself (RLIMIT_DATA), so that one huge
    array fails with an error the student can read instead of the kernel being killed. That
    allowance counts on top of the private data torch's libraries map at import and mostly never
    use (about 220 MB for its CPU build, 760 MB for PyPI's CUDA build), so torch is imported
    first: a fixed allowance below that made `import torch` fail ("failed to map segment").

It reads the environment the hub's spawner sets: TR_LIMITS (the limits, JSON) and the group's
file that counts memory kills, TR_MEMORY_EVENTS. Without TR_LIMITS it does nothing.
"""

from __future__ import annotations

import errno
import io
import json
import os
import re
import resource
import sys
from pathlib import Path

# Kept out of the kernel's own memory allowance: the server and what else the student runs.
SERVER_ROOM = 256 * 2**20
SEEN = "oom-kills-seen"  # in the runtime folder: the memory kills a kernel has already told of


def gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def counter(path: str | None, name: str) -> int:
    """The value of the line `name N` in a control group's counter file (0 if there is none)."""
    try:
        lines = Path(path).read_text().splitlines() if path else []
    except OSError:
        return 0
    return next((int(line.split()[1]) for line in lines if line.split()[:1] == [name]), 0)


def written_path(tb) -> str | None:
    """The file a failed write was writing, when the error names none (a write's error does not):
    the one open file among the local variables of the frames the error came through."""
    streams = {id(s) for s in (sys.stdin, sys.stdout, sys.stderr, sys.__stdin__, sys.__stdout__, sys.__stderr__)}
    files = set()
    while tb is not None:
        files |= {value.name for value in tb.tb_frame.f_locals.values()
                  if isinstance(value, io.IOBase) and id(value) not in streams
                  and isinstance(getattr(value, "name", None), str)}
        tb = tb.tb_next
    return os.path.abspath(files.pop()) if len(files) == 1 else None


def disk_limit(path: str | None, limits: dict) -> str:
    """Which disk limit a full disk is: told by the path when there is one, else by which of the
    student's disks is full now."""
    disks = {"/tmp": ("/tmp", limits["tmp"]), "/var/tmp": ("/tmp", limits["tmp"]),
             "/dev/shm": ("/dev/shm", limits["shm"])}
    home = ("home folder", limits["home"])
    if path and (path + "/").startswith(str(Path.home()) + "/"):  # first: a home may lie in /tmp
        full = [home]
    elif path:
        full = [next((disk for top, disk in disks.items() if path.startswith(top + "/")), home)]
    else:
        full = [disk for top, disk in {**disks, str(Path.home()): home}.items() if top != "/var/tmp" and free(top) < 2**20]
    if len(full) != 1:  # freed meanwhile, or several: name them all
        full = [("home folder", limits["home"]), ("/tmp", limits["tmp"]), ("/dev/shm", limits["shm"])]
    return " or ".join(f"the class's limit on your {name} ({gib(size)})" for name, size in full)


def free(folder: str) -> int:
    try:
        info = os.statvfs(folder)
    except OSError:
        return 2**62
    return info.f_bavail * info.f_frsize


def explain(error: BaseException, limits: dict) -> str | None:
    """The notice for an error that comes from a class limit; None for any other error."""
    text = str(error)
    memory = (f"This reached the class's memory limit: {gib(limits['memory'])} for everything you run "
              "(kernels, terminals, and files in /tmp and /dev/shm). Use smaller tensors, or shut down "
              "kernels you no longer use (Kernel > Shut Down All Kernels).")
    processes = (f"This reached the class's limit on processes: {limits['processes']} processes and threads "
                 "at once for everything you run. Shut down kernels and terminals you no longer use.")
    if isinstance(error, MemoryError) or "can't allocate memory" in text or "Cannot allocate memory" in text:
        return memory
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        path = error.filename or written_path(error.__traceback__)
        return f"The disk is full: this reached {disk_limit(path, limits)}. Delete files you no longer need."
    if "No space left on device" in text:  # torch's own message (e.g. its /dev/shm files)
        return f"The disk is full: this reached {disk_limit(None, limits)}. Delete files you no longer need."
    if (isinstance(error, OSError) and error.errno == errno.EAGAIN) or "can't start new thread" in text:
        return processes
    return None


def data_allowance(memory: int) -> int:
    """RLIMIT_DATA for a kernel whose student may use `memory` bytes in all: the private data this
    process has mapped so far, plus what the limit leaves for the student's own arrays once the
    server's room and what the process holds now are taken out (at least a quarter of it)."""
    status = Path("/proc/self/status").read_text()
    mapped, held = (int(re.search(rf"{key}:\s+(\d+) kB", status).group(1)) * 1024 for key in ("VmData", "VmRSS"))
    return mapped + max(memory - SERVER_ROOM - held, memory // 4)


def load_ipython_extension(shell) -> None:
    if not os.environ.get("TR_LIMITS"):
        return
    limits = json.loads(os.environ["TR_LIMITS"])
    try:
        import torch  # noqa: F401  (every lesson's first cell does; its mappings must come first)
    except ImportError:
        pass
    allowance = data_allowance(limits["memory"])
    resource.setrlimit(resource.RLIMIT_DATA, (allowance, allowance))

    def with_notice(shell, etype, value, tb, tb_offset=None):
        shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
        notice = explain(value, limits)
        if notice:
            print(f"\n[class limit] {notice}", file=sys.stderr, flush=True)

    shell.set_custom_exc((MemoryError, OSError, RuntimeError), with_notice)

    # Memory kills since a kernel of this student last looked: told at this kernel's first cell.
    seen_file = Path(os.environ.get("JUPYTER_RUNTIME_DIR", Path.home())) / SEEN
    kills = counter(os.environ.get("TR_MEMORY_EVENTS"), "oom_kill")
    try:
        seen = int(seen_file.read_text())
    except (OSError, ValueError):
        seen = 0
    if kills != seen:
        seen_file.write_text(str(kills))

    def first_cell(*_) -> None:
        shell.events.unregister("pre_run_cell", first_cell)
        if kills > seen:
            print(f"[class limit] A process of yours, most likely your previous kernel, was stopped: it reached "
                  f"the class's memory limit ({gib(limits['memory'])} for everything you run, files in /tmp "
                  "and /dev/shm included). Run the notebook's cells again from the top.",
                  file=sys.stderr, flush=True)

    shell.events.register("pre_run_cell", first_cell)
