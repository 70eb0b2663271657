"""Start a Python kernel for one submission inside a bubblewrap sandbox (used by grade.py).

Usage (as a kernelspec's argv):
    python sandbox_kernel.py --show DIR [--show DIR ...] [--memory BYTES] [--processes N]
                             [--scratch BYTES] [--run NAME] -f {connection_file}

Deny by default: the kernel sees nothing of the disk but
  - the system's programs and libraries (/usr, and the few files of /etc that loading them
    needs), read-only;
  - each --show folder (the Python environment, wherever it lives, and the course library),
    read-only, at its resolved path;
  - its connection file, read-only, and the folder where it makes its unix sockets (grade.py
    gives each batch of submissions a folder of its own; a batch's kernels run one at a time);
  - an empty, private, writable working folder, /tmp and /dev/shm, each at most --scratch bytes
    of memory, thrown away afterwards (nbgrader's real folder is not shown: it holds the
    notebook with the hidden tests while they run).
It has a network namespace of its own, with nothing in it: no internet, no loopback shared
with the machine, no abstract unix sockets of the host; it talks to nbgrader over unix sockets
(jupyter's ipc transport). It sees only its own processes, runs as "nobody" with no
capabilities in a user namespace it cannot nest, so it cannot remount anything.

Limits (each named in the feedback by grade.py when a submission hits it):
  - memory: the address space of each process (RLIMIT_AS), --memory bytes;
  - processes and threads: --processes, through the pids cgroup when this runs as root on a
    machine with cgroup v1 (a cgroup of its own, so no other kernel is affected); as another
    user through RLIMIT_NPROC, which counts every task of that user, set to what it already runs
    plus --processes; as root without cgroup v1, not enforced;
  - disk: writes go only to the scratch folders above, each a tmpfs of --scratch bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import uuid
from pathlib import Path

SYSTEM = ["/usr"]
MERGED = {"/bin": "usr/bin", "/sbin": "usr/sbin", "/lib": "usr/lib", "/lib64": "usr/lib64"}
ETC = ["/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/passwd", "/etc/group",
       "/etc/nsswitch.conf", "/etc/localtime", "/etc/fonts"]
CPU_INFO = "/sys/devices/system/cpu"  # torch reads the CPU's topology here
PIDS_CGROUP = Path("/sys/fs/cgroup/pids")
CGROUP_PARENT = "transformer-roots-grading"


def system_mounts() -> list[str]:
    command: list[str] = []
    for folder in SYSTEM:
        command += ["--ro-bind", folder, folder]
    for link, target in MERGED.items():
        if os.path.islink(link):
            command += ["--symlink", target, link]
        elif os.path.isdir(link):
            command += ["--ro-bind", link, link]
    for path in [*ETC, CPU_INFO]:
        if os.path.exists(path):
            command += ["--ro-bind", path, path]
    return command


def socket_folder(connection_file: Path, cwd: Path) -> Path:
    """The folder where the kernel makes its unix sockets: the only one it shares with nbgrader."""
    connection = json.loads(connection_file.read_text())
    if connection.get("transport") != "ipc":
        raise SystemExit("the sandbox has no network: the kernel must use the ipc transport "
                         "(c.KernelManager.transport = 'ipc', set by nbgrader_config.py)")
    return (cwd / connection["ip"]).resolve().parent


def bwrap_command(cwd: Path, show: list[Path], connection_file: Path, sockets: Path, scratch: int,
                  kernel_args: list[str]) -> list[str]:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise SystemExit("bubblewrap (bwrap) is not installed: `apt-get install bubblewrap`")
    size = ["--size", str(scratch)]
    command = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", *system_mounts(),
               "--proc", "/proc", "--dev", "/dev", *size, "--tmpfs", "/dev/shm", *size, "--tmpfs", "/tmp"]
    for folder in show:
        if folder.exists():
            command += ["--ro-bind", str(folder), str(folder)]
    command += [*size, "--tmpfs", str(cwd), "--ro-bind", str(connection_file), str(connection_file)]
    command += ["--bind", str(sockets), str(sockets), "--chdir", str(cwd)]
    # The folders made to hold those mounts are read-only too: the writable places are only the
    # scratch folders and the socket folder.
    command += ["--remount-ro", "/"]
    # As "nobody" in a user namespace of its own with no capabilities, the kernel cannot remount
    # or unmount anything (even when the grader runs as root), nor nest a namespace to try.
    command += ["--unshare-user", "--disable-userns", "--uid", "65534", "--gid", "65534", "--cap-drop", "ALL",
                "--clearenv", "--setenv", "PATH", f"{Path(sys.executable).parent}:/usr/bin:/bin",
                "--setenv", "HOME", "/tmp", "--setenv", "IPYTHONDIR", "/tmp/.ipython",
                "--setenv", "MPLCONFIGDIR", "/tmp/.matplotlib", "--setenv", "JUPYTER_RUNTIME_DIR", "/tmp",
                "--setenv", "LANG", "C.UTF-8", "--setenv", "MPLBACKEND", "module://matplotlib_inline.backend_inline"]
    # Inside its own process tree the kernel's parent is pid 1, which ipykernel would take for
    # "my parent has exited": --die-with-parent does that job instead, so JPY_PARENT_PID is not set.
    return command + ["--", sys.executable, "-m", "ipykernel_launcher", "-f", str(connection_file), *kernel_args]


def limit_processes(processes: int, cwd: Path, run: str) -> None:
    """A pids cgroup of this kernel's own (root, cgroup v1), else RLIMIT_NPROC (not root).

    The cgroup is named after the grading run and the folder nbgrader runs the submission in
    (<student>/<set>), so grade.py can tell from its count of refusals that a kernel which died
    had hit this limit, and removes its own cgroups only.
    """
    if os.geteuid() == 0 and (PIDS_CGROUP / "cgroup.procs").exists():
        group = PIDS_CGROUP / CGROUP_PARENT / f"{run}.{cwd.parent.name}.{cwd.name}.{uuid.uuid4().hex[:8]}"
        group.mkdir(parents=True)
        (group / "notify_on_release").write_text("1")
        (group / "pids.max").write_text(str(processes))
        (group / "cgroup.procs").write_text(str(os.getpid()))
    elif os.geteuid() != 0:  # the limit counts every task of this user: allow what already runs
        running = sum(len(os.listdir(f"/proc/{pid}/task")) for pid in os.listdir("/proc")
                      if pid.isdigit() and _owned(pid))
        resource.setrlimit(resource.RLIMIT_NPROC, (running + processes, running + processes))
    # As root without a cgroup v1 pids controller there is no per-kernel count to limit: not enforced.


def _owned(pid: str) -> bool:
    try:
        return os.stat(f"/proc/{pid}").st_uid == os.geteuid()
    except OSError:  # the process ended
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--show", type=Path, action="append", default=[])
    parser.add_argument("--memory", type=int, default=3 * 2**30, help="bytes of address space per process")
    parser.add_argument("--processes", type=int, default=64, help="processes and threads")
    parser.add_argument("--scratch", type=int, default=512 * 2**20, help="bytes of each writable folder")
    parser.add_argument("--run", default="manual", help="the grading run, in the names of its cgroups")
    parser.add_argument("-f", dest="connection_file", type=Path, required=True)
    args, kernel_args = parser.parse_known_args()  # the rest goes to the kernel (nbgrader adds some)
    cwd, connection_file = Path.cwd().resolve(), args.connection_file.resolve()
    command = bwrap_command(cwd, [p.resolve() for p in args.show], connection_file,
                            socket_folder(connection_file, cwd), args.scratch, kernel_args)
    resource.setrlimit(resource.RLIMIT_AS, (args.memory, args.memory))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    limit_processes(args.processes, cwd, args.run)
    os.execv(command[0], command)


if __name__ == "__main__":
    main()
