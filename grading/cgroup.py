"""Limits on a group of processes, through the kernel's control groups (cgroups), as root.

One `Group` holds a student's server on the hub, or one submission's kernel while it is graded:
everything those processes start stays in the group, so the limits hold for the group in total,
not per process. Three limits:
  - memory: RAM in use by the group, files it writes to a tmpfs (/tmp, /dev/shm) included,
    since the kernel charges tmpfs pages to the writer's group; past it the kernel reclaims,
    then kills a process of the group (the rest of the machine is untouched);
  - processes: tasks (processes and threads) alive at once; past it fork and thread creation fail;
  - CPU: a share relative to other groups (100 = an equal share), which only matters when the
    CPU is busy: an idle machine gives a group every core.

Two layouts exist. cgroup v1 has one tree per controller (/sys/fs/cgroup/memory/..., pids/...,
cpu/...); cgroup v2 has one tree (/sys/fs/cgroup or, mixed with v1, /sys/fs/cgroup/unified) whose
controllers a parent must hand down. `available()` says which one this machine lets us use.
Under v1 a group is made inside this process's own group of each controller, so it also stays
within any limit the machine puts on us (a container's, say). This machine has v1 (no systemd);
the v2 path follows the kernel's documented interface but has not run here.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
V1 = ("memory", "pids", "cpu")
V2_ROOTS = (ROOT, ROOT / "unified")


@dataclass(frozen=True)
class Limits:
    memory: int  # bytes
    processes: int  # tasks alive at once: processes and threads
    cpu_weight: int = 100  # a share of a busy CPU, relative to 100


def _own_paths() -> dict[str, str]:
    """This process's group in each hierarchy: controller name ("" for v2) -> path."""
    paths = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            paths[name] = path
    return paths


def _v2_root() -> Path | None:
    """The v2 tree whose root offers memory and pids, if there is one."""
    for root in V2_ROOTS:
        controllers = root / "cgroup.controllers"
        if controllers.exists() and {"memory", "pids"} <= set(controllers.read_text().split()):
            return root
    return None


def available() -> str | None:
    """"v1" or "v2" when this process can make groups with memory and process limits, else None."""
    if os.geteuid() != 0:
        return None
    if all(os.access(ROOT / c / _own_paths().get(c, "/").lstrip("/"), os.W_OK) for c in V1[:2]):
        return "v1"
    return "v2" if _v2_root() is not None else None


class Group:
    """One group of processes with limits; its folders are named `name` in every hierarchy used."""

    def __init__(self, name: str):
        self.name = name.strip("/")
        self.version = available()
        if self.version is None:
            raise RuntimeError("cgroups are not available here: they need root and a writable "
                               "memory and pids controller (cgroup v1 or v2)")
        own = _own_paths()
        if self.version == "v1":
            self.folders = {c: ROOT / c / own.get(c, "/").lstrip("/") / self.name for c in V1
                            if (ROOT / c).is_dir()}
        else:
            self.folders = {"": _v2_root() / self.name}  # see _hand_down_v2

    @classmethod
    def find(cls, name: str) -> Group:
        """The group called `name`, as it is (no limits written)."""
        return cls(name)

    @classmethod
    def make(cls, name: str, limits: Limits) -> Group:
        """The group called `name`, made if needed, with `limits` written (again) into it."""
        group = cls(name)
        for controller, folder in group.folders.items():
            if controller == "" and not folder.exists():
                group._hand_down_v2(folder)
            folder.mkdir(parents=True, exist_ok=True)
        group._write_limits(limits)
        return group

    def _hand_down_v2(self, folder: Path) -> None:
        """v2: each level from the tree's root down to `folder` passes memory, pids and cpu on.

        v2 lets a group hand controllers down only while it holds no process itself, so v2 groups
        sit below the tree's root (which is exempt), not below this process's own group."""
        level = folder.parents[len(Path(self.name).parts) - 1]  # the tree's root
        for part in Path(self.name).parts:
            present = (level / "cgroup.controllers").read_text().split()
            wanted = " ".join(f"+{c}" for c in ("memory", "pids", "cpu") if c in present)
            (level / "cgroup.subtree_control").write_text(wanted)
            level = level / part
            level.mkdir(exist_ok=True)

    def _write_limits(self, limits: Limits) -> None:
        if self.version == "v1":
            memory = self.folders["memory"]
            (memory / "memory.limit_in_bytes").write_text(str(limits.memory))
            if (memory / "memory.memsw.limit_in_bytes").exists():  # swap may not take what RAM refuses
                (memory / "memory.memsw.limit_in_bytes").write_text(str(limits.memory))
            (self.folders["pids"] / "pids.max").write_text(str(limits.processes))
            if "cpu" in self.folders:  # v1's default share is 1024
                (self.folders["cpu"] / "cpu.shares").write_text(str(max(2, 1024 * limits.cpu_weight // 100)))
        else:
            folder = self.folders[""]
            (folder / "memory.max").write_text(str(limits.memory))
            if (folder / "memory.swap.max").exists():
                (folder / "memory.swap.max").write_text("0")
            (folder / "pids.max").write_text(str(limits.processes))
            if (folder / "cpu.weight").exists():
                (folder / "cpu.weight").write_text(str(max(1, min(10000, limits.cpu_weight))))

    def add(self, pid: int) -> None:
        """Move process `pid` into the group; what it starts from now on is in it too."""
        for folder in self.folders.values():
            (folder / "cgroup.procs").write_text(str(pid))

    def enter(self) -> None:
        """Move the calling process in (as a subprocess's preexec_fn, or before an exec)."""
        self.add(os.getpid())

    def pids(self) -> list[int]:
        folder = self.folders.get("pids", self.folders.get(""))
        try:
            return [int(p) for p in (folder / "cgroup.procs").read_text().split()]
        except FileNotFoundError:
            return []

    def memory_peak(self) -> int | None:
        """The most memory the group has used at once, in bytes (None: this kernel does not say)."""
        folder = self.folders.get("memory", self.folders.get(""))
        name = "memory.max_usage_in_bytes" if self.version == "v1" else "memory.peak"
        try:
            return int((folder / name).read_text())
        except (FileNotFoundError, ValueError):
            return None

    def limits_hit(self) -> list[str]:
        """Which limits the group has reached at least once: "memory", "processes"."""
        hit = []
        if self.version == "v1":
            memory = self.folders["memory"]
            oom = _counters(memory / "memory.oom_control").get("oom_kill", 0)
            if oom or _number(memory / "memory.failcnt"):
                hit.append("memory")
            if _counters(self.folders["pids"] / "pids.events").get("max", 0):
                hit.append("processes")
        else:
            folder = self.folders[""]
            events = _counters(folder / "memory.events")
            if events.get("max", 0) or events.get("oom_kill", 0):
                hit.append("memory")
            if _counters(folder / "pids.events").get("max", 0):
                hit.append("processes")
        return hit

    def kill(self, timeout: float = 5.0) -> None:
        """SIGKILL every process of the group and wait until none is left."""
        deadline = time.monotonic() + timeout
        while (pids := self.pids()) and time.monotonic() < deadline:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.02)

    def remove(self) -> None:
        """Kill what is left, then remove the group's folders (a later `make` starts afresh)."""
        self.kill()
        for folder in self.folders.values():
            for attempt in range(50):  # the kernel frees a killed group's last task a little later
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)


def _counters(path: Path) -> dict[str, int]:
    """A cgroup file of "name value" lines, as a dict (empty when the file is missing)."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return {}
    return {name: int(value) for name, value in (line.split() for line in lines if line.strip())}


def _number(path: Path) -> int:
    try:
        return int(path.read_text())
    except (FileNotFoundError, ValueError):
        return 0
