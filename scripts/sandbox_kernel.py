"""Start a Python kernel for one submission inside a bubblewrap sandbox (used by grade.py).

Usage (as a kernelspec's argv):
    python sandbox_kernel.py --show DIR [--show DIR ...] [--hide DIR ...] [--path DIR] [--memory BYTES]
                             [--processes N] [--scratch BYTES] [--groups NAME] -f {connection_file}

Deny by default: the kernel sees nothing of the disk but
  - the system's programs and libraries (/usr, and the few files of /etc that loading them
    needs), read-only;
  - each --show folder (the Python environment, wherever it lives, and the sealed course
    library: the checks' plumbing, no answers), read-only, at its resolved path, except each
    --hide folder inside them (a full copy of the course library), shown empty; --path is the
    kernel's PYTHONPATH, so that it imports the sealed library, not one an install points at;
  - its connection file, read-only, and the folder where it makes its unix sockets (the grader
    makes one per submission, a small tmpfs when it runs as root, and removes it afterwards);
  - an empty, private, writable working folder, /tmp and /dev/shm, each at most --scratch bytes
    of memory, thrown away afterwards (nbgrader's real folder is not shown: it holds the
    notebook with the hidden tests while they run).
It has a network namespace of its own, with nothing in it: no internet, no loopback shared
with the machine, no abstract unix sockets of the host; it talks to nbgrader over unix sockets
(jupyter's ipc transport). It sees only its own processes, runs as "nobody" with no
capabilities in a user namespace it cannot nest, so it cannot remount anything. bubblewrap
itself starts with an empty environment: its process is the sandbox's pid 1, whose
/proc/1/environ the kernel can read, so the grader's variables never reach it.

Limits (each named in the feedback by grade.py when a submission hits it):
  - with cgroups (root; grading/cgroup.py): memory and processes for the whole submission, every
    process it starts and the files it writes to its tmpfs folders included, in the group
    <--groups>/<student>.<set>, which grade.py reads (which limits were reached, even if the kernel survived) and
    removes after the submission;
  - without cgroups: memory per process (RLIMIT_DATA: what a process allocates, not the
    libraries it maps, so torch's CUDA build still loads); processes per user (RLIMIT_NPROC,
    which counts every task of that user, set to what it already runs plus --processes) when not
    root, not enforced as root;
  - disk: writes go only to the scratch folders above, each a tmpfs of --scratch bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # grading/, wherever this runs from
from grading.cgroup import Group, Limits, available  # noqa: E402

SYSTEM = ["/usr"]
MERGED = {"/bin": "usr/bin", "/sbin": "usr/sbin", "/lib": "usr/lib", "/lib64": "usr/lib64"}
ETC = ["/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/passwd", "/etc/group",
       "/etc/nsswitch.conf", "/etc/localtime", "/etc/fonts"]
CPU_INFO = "/sys/devices/system/cpu"  # torch reads the CPU's topology here


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


def bwrap_command(cwd: Path, show: list[Path], hide: list[Path], python_path: list[Path], connection_file: Path,
                  sockets: Path, scratch: int, kernel_args: list[str]) -> list[str]:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise SystemExit("bubblewrap (bwrap) is not installed: `apt-get install bubblewrap`")
    size = ["--size", str(scratch)]
    command = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", *system_mounts(),
               "--proc", "/proc", "--dev", "/dev", *size, "--tmpfs", "/dev/shm", *size, "--tmpfs", "/tmp"]
    for folder in show:
        if folder.exists():
            command += ["--ro-bind", str(folder), str(folder)]
    for folder in hide:  # an empty read-only folder in its place
        command += ["--size", "4096", "--tmpfs", str(folder)]
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
    if python_path:
        command += ["--setenv", "PYTHONPATH", os.pathsep.join(map(str, python_path))]
    # Inside its own process tree the kernel's parent is pid 1, which ipykernel would take for
    # "my parent has exited": --die-with-parent does that job instead, so JPY_PARENT_PID is not set.
    return command + ["--", sys.executable, "-m", "ipykernel_launcher", "-f", str(connection_file), *kernel_args]


def limit(memory: int, processes: int, group: str) -> None:
    """Limit this process and everything it starts: a cgroup for the whole submission if possible.

    grade.py names the group after the grading run and the submission, and reads and removes it
    once the submission is graded; making it again (a submission graded a second time, alone)
    keeps what the first attempt reached.
    """
    if available():
        Group.make(group, Limits(memory=memory, processes=processes)).enter()
        return
    # No cgroups: per process only. RLIMIT_DATA counts what a process allocates (heap, anonymous
    # maps), not the libraries it maps: an address-space limit would stop torch's CUDA build from
    # even loading, while a data limit is what memory use actually is.
    resource.setrlimit(resource.RLIMIT_DATA, (memory, memory))
    if os.geteuid() != 0:  # the limit counts every task of this user: allow what already runs
        running = sum(len(os.listdir(f"/proc/{pid}/task")) for pid in os.listdir("/proc")
                      if pid.isdigit() and _owned(pid))
        resource.setrlimit(resource.RLIMIT_NPROC, (running + processes, running + processes))
    # As root without cgroups there is no count of one submission's tasks to limit: not enforced.


def _owned(pid: str) -> bool:
    try:
        return os.stat(f"/proc/{pid}").st_uid == os.geteuid()
    except OSError:  # the process ended
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--show", type=Path, action="append", default=[])
    parser.add_argument("--hide", type=Path, action="append", default=[], help="a folder inside a shown one, shown empty")
    parser.add_argument("--path", type=Path, action="append", default=[], help="the kernel's PYTHONPATH")
    parser.add_argument("--memory", type=int, default=3 * 2**30, help="bytes for the whole submission")
    parser.add_argument("--processes", type=int, default=64, help="processes and threads")
    parser.add_argument("--scratch", type=int, default=512 * 2**20, help="bytes of each writable folder")
    parser.add_argument("--groups", default="transformer-roots/grading/manual",
                        help="the grading run's cgroup: each submission gets <groups>/<student>.<set>")
    parser.add_argument("-f", dest="connection_file", type=Path, required=True)
    args, kernel_args = parser.parse_known_args()  # the rest goes to the kernel (nbgrader adds some)
    cwd, connection_file = Path.cwd().resolve(), args.connection_file.resolve()
    command = bwrap_command(cwd, [p.resolve() for p in args.show], [p.resolve() for p in args.hide],
                            [p.resolve() for p in args.path],
                            connection_file, socket_folder(connection_file, cwd), args.scratch, kernel_args)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # nbgrader runs each notebook in its folder <student>/<set>: the submission's group is named so.
    limit(args.memory, args.processes, f"{args.groups}/{cwd.parent.name}.{cwd.name}")
    # An empty environment: bubblewrap's own process stays in the sandbox as its pid 1, and its
    # environment (the grader's, with whatever secrets it holds) would be readable there.
    os.execve(command[0], command, {})


if __name__ == "__main__":
    main()
