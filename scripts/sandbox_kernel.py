"""Start a Python kernel for one submission inside a bubblewrap sandbox (used by grade.py).

Usage (as a kernelspec's argv): python sandbox_kernel.py --hide DIR [--hide DIR ...]
                                       --show DIR [--show DIR ...] -f {connection_file}
The kernel starts in the folder nbgrader runs the submission in (its cwd); inside it sees:
  - the whole file system read-only, except:
  - every --hide folder replaced by an empty one (the course: solutions, gradebook, hidden
    tests, other students' work; the instructor's home), with the --show folders (the
    installed course library, the Python environment) put back read-only inside them;
  - its own folder (the one it starts in) and /tmp, both empty, private and writable: nbgrader's
    real folder is not shown, as it holds the notebook with the hidden tests while they run;
  - its own process tree only (it cannot see nbgrader's process or environment);
  - as "nobody", with no capabilities, in a user namespace it cannot nest: it cannot remount
    the read-only disk or unmount a stand-in to see what is under it.
So a submission can read the course library and the Python environment, write a folder that
is thrown away afterwards, and nothing else.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path


def bwrap_command(cwd: Path, hide: list[Path], show: list[Path], connection_file: Path,
                  kernel_args: list[str]) -> list[str]:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise SystemExit("bubblewrap (bwrap) is not installed: `apt-get install bubblewrap`")
    command = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    for folder in sorted(hide, key=lambda p: len(p.parts)):  # an outer folder first
        command += ["--tmpfs", str(folder)]
    for folder in show:
        if folder.exists():
            command += ["--ro-bind", str(folder), str(folder)]
    # The connection file may sit in a hidden folder: put back this kernel's own file only.
    # Its folder is an empty, writable stand-in: nbgrader's real folder holds the notebook with the
    # hidden tests in it while they run.
    command += ["--ro-bind", str(connection_file), str(connection_file), "--tmpfs", str(cwd)]
    for folder in hide:  # the empty stand-ins are read-only too (after the mounts made inside them)
        command += ["--remount-ro", str(folder)]
    # As "nobody" in a user namespace of its own with no capabilities, the kernel cannot remount
    # or unmount anything (even when the grader runs as root), nor nest a namespace to try.
    command += ["--unshare-user", "--disable-userns", "--uid", "65534", "--gid", "65534", "--cap-drop", "ALL"]
    command += ["--chdir", str(cwd), "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent",
                "--setenv", "HOME", "/tmp", "--setenv", "IPYTHONDIR", "/tmp/.ipython",
                "--setenv", "MPLCONFIGDIR", "/tmp/.matplotlib", "--setenv", "JUPYTER_RUNTIME_DIR", "/tmp",
                # Inside its own process tree the kernel's parent is pid 1, which ipykernel would take
                # for "my parent has exited": --die-with-parent does that job instead.
                "--unsetenv", "JPY_PARENT_PID", "--unsetenv", "TR_GRADING_MARKER"]
    return command + ["--", sys.executable, "-m", "ipykernel_launcher", "-f", str(connection_file), *kernel_args]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hide", type=Path, action="append", default=[])
    parser.add_argument("--show", type=Path, action="append", default=[])
    parser.add_argument("-f", dest="connection_file", type=Path, required=True)
    args, kernel_args = parser.parse_known_args()  # the rest goes to the kernel (nbgrader adds some)
    cwd = Path.cwd().resolve()
    command = bwrap_command(cwd, [p.resolve() for p in args.hide], [p.resolve() for p in args.show],
                            args.connection_file.resolve(), kernel_args)
    os.execv(command[0], command)


if __name__ == "__main__":
    main()
