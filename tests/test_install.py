"""Installing on a learner's machine: which Python `make` picks, what it says when none fits, and
where torch comes from.

Each case runs the real Makefile and scripts/find_python.sh in a copy of the course, with a PATH
that holds the system tools they need and only the Pythons the case puts there. Those Pythons are
this test's own interpreter behind a small wrapper that changes one thing: that it reports 3.9,
or that it has no ensurepip (Debian's Python without its python3.X-venv package), or that pyenv
installed it without selecting it. Nothing here installs a package: `make -n` shows the install
commands without running them, and the cases where torch cannot be installed run the real pip
against an index that cannot be reached or that has no build for this Python.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ("sh", "make", "sed", "uname", "dirname", "id", "rm", "mkdir", "touch", "cat", "grep", "tail")
MINOR = sys.version_info.minor  # the wrapped interpreter's own version, 3.MINOR


def supported_minors() -> tuple[int, int]:
    """The lowest and highest 3.x that pyproject.toml's requires-python admits."""
    line = re.search(r'^requires-python = "(.*)"$', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    minors = [m for m in range(30) if f"3.{m}.0" in SpecifierSet(line)]
    return minors[0], minors[-1]


LOW, HIGH = supported_minors()
NEEDS = f"this course needs Python 3.{LOW} to 3.{HIGH}"


@pytest.fixture
def course(tmp_path: Path) -> Path:
    """What `make setup` reads: the Makefile, pyproject.toml and the scripts it runs or copies."""
    course = tmp_path / "course"
    (course / "scripts").mkdir(parents=True)
    for name in ("Makefile", "pyproject.toml", "scripts/find_python.sh", "scripts/install_torch.sh",
                 "scripts/nbgrader_validate_config.py"):
        shutil.copy(ROOT / name, course / name)
    return course


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    """This case's fakes, first on PATH; the system tools (no Python among them) come after."""
    tools = tmp_path / "tools"
    tools.mkdir()
    for tool in TOOLS:
        os.symlink(shutil.which(tool), tools / tool)
    (tmp_path / "bin").mkdir()
    return tmp_path / "bin"


def write_executable(path: Path, text: str) -> None:
    # "x": a new file only, so a fake can never be written through a link onto a real tool.
    with path.open("x") as file:
        file.write(text)
    path.chmod(0o755)


def fake_python(bin_dir: Path, name: str, site: dict[str, str]) -> None:
    """This interpreter under `name`, with modules in `site` shadowing the standard library."""
    folder = bin_dir.parent / f"site-{name}"
    for module, source in site.items():
        (folder / module).parent.mkdir(parents=True, exist_ok=True)
        (folder / module).write_text(source)
    write_executable(bin_dir / name, f'#!/bin/sh\nexport PYTHONPATH="{folder}"\nexec "{sys.executable}" "$@"\n')


# Python 3.9 as far as anything that asks can tell.
OLD = {"sitecustomize.py": "import sys, collections\n"
       "sys.version_info = collections.namedtuple('v', 'major minor micro releaselevel serial')(3, 9, 18, 'final', 0)\n"}
# Debian's Python without python3.X-venv: no ensurepip module at all.
NO_ENSUREPIP = {"ensurepip.py": "raise ModuleNotFoundError(\"No module named 'ensurepip'\", name='ensurepip')\n"}
# A venv module that makes the environment, then fails before pip is in it (as Debian's does
# when ensurepip is missing): .venv/bin/python exists, pip does not.
HALF_VENV = {"venv/__init__.py": "",
             "venv/__main__.py": "import os, sys\n"
             "os.makedirs(sys.argv[-1] + '/bin')\n"
             "os.symlink(sys.executable, sys.argv[-1] + '/bin/python')\n"
             "sys.exit('The virtual environment was not created successfully')\n"}


def run(argv: list[str], cwd: Path, bin_dir: Path, **pip: str) -> subprocess.CompletedProcess:
    # pip offline and without this machine's settings: should a case reach an install, it fails at once.
    # `pip` sets pip's other variables (PIP_CONSTRAINT=...), or takes PIP_NO_INDEX away (PIP_NO_INDEX="").
    env = {"PATH": f"{bin_dir}:{bin_dir.parent / 'tools'}", "HOME": str(cwd), "LANG": "C", "PIP_NO_INDEX": "1",
           "PIP_CONFIG_FILE": os.devnull, **pip}
    return subprocess.run(argv, cwd=cwd, env={k: v for k, v in env.items() if v}, capture_output=True, text=True,
                          timeout=120)


def find_python(course: Path, bin_dir: Path, *candidates: str) -> subprocess.CompletedProcess:
    return run(["sh", "scripts/find_python.sh", *candidates], course, bin_dir)


def make_setup(course: Path, bin_dir: Path) -> subprocess.CompletedProcess:
    return run(["make", "setup"], course, bin_dir)


def fake_system(bin_dir: Path, system: str) -> None:
    """`uname -s` says `system`; on "Debian", also an apt-get (never run, only looked up)."""
    write_executable(bin_dir / "uname", f"#!/bin/sh\necho {'Darwin' if system == 'macOS' else 'Linux'}\n")
    if system == "Debian":
        write_executable(bin_dir / "apt-get", "#!/bin/sh\nexit 1\n")


@pytest.mark.parametrize("system, get", [
    ("Debian", f"sudo apt install python3.{LOW} python3.{LOW}-venv"),
    ("macOS", f"brew install python@3.{LOW}"),
    ("Linux", "see https://www.python.org/downloads/"),
])
def test_no_python_at_all_says_which_to_install(course, bin_dir, system, get):
    fake_system(bin_dir, system)
    # A pyenv shim for a version not selected exists on PATH but does not run: not a Python.
    write_executable(bin_dir / "python3.12", "#!/bin/sh\necho 'pyenv: python3.12: command not found' >&2\nexit 127\n")
    found = find_python(course, bin_dir, "python3.12", "python3")
    assert (found.returncode, found.stdout) == (1, "")
    assert found.stderr == f"no Python found (tried python3.12 python3); {NEEDS}: {get}, then run make again\n"

    made = make_setup(course, bin_dir)
    assert made.returncode != 0 and not (course / ".venv").exists()
    assert made.stderr.count(NEEDS) == 1 and "tried python3.11 python3.12 python3.13 python3.14 python3" in made.stderr


def test_a_python_too_old_is_named_with_its_version(course, bin_dir):
    fake_system(bin_dir, "macOS")
    fake_python(bin_dir, "python3", OLD)
    found = find_python(course, bin_dir, "python3.11", "python3")
    assert (found.returncode, found.stdout) == (1, "")
    assert found.stderr == (f"python3 is Python 3.9; {NEEDS}: brew install python@3.{LOW}, then run make again\n")

    made = make_setup(course, bin_dir)
    assert made.returncode != 0 and not (course / ".venv").exists()
    assert made.stderr.count("python3 is Python 3.9; ") == 1


def test_a_python_without_ensurepip_names_the_venv_package(course, bin_dir):
    fake_system(bin_dir, "Debian")
    fake_python(bin_dir, "python3", NO_ENSUREPIP)
    found = find_python(course, bin_dir, "python3")
    assert (found.returncode, found.stdout) == (1, "")
    assert found.stderr == ("python3 cannot create a virtual environment (its ensurepip module is missing): "
                            f"sudo apt install python3.{MINOR}-venv, then run make again\n")

    made = make_setup(course, bin_dir)
    assert made.returncode != 0 and not (course / ".venv").exists()
    assert made.stderr.count(f"sudo apt install python3.{MINOR}-venv") == 1


def test_a_venv_that_fails_half_way_is_removed(course, bin_dir):
    # Left in place, its python without pip would make the next run fail with "No module named pip".
    fake_python(bin_dir, "python3", HALF_VENV)
    made = make_setup(course, bin_dir)
    assert made.returncode != 0 and "was not created successfully" in made.stderr
    assert not (course / ".venv").exists()


def test_the_first_supported_python_that_can_make_a_venv_is_used(course, bin_dir):
    fake_system(bin_dir, "Debian")
    # Another supported version than this interpreter's: the two fakes need two names.
    other = next(m for m in range(LOW, HIGH + 1) if m != MINOR)
    fake_python(bin_dir, "python3.10", OLD)
    fake_python(bin_dir, f"python3.{other}", NO_ENSUREPIP)
    fake_python(bin_dir, f"python3.{MINOR}", {})
    found = find_python(course, bin_dir, "python3.10", f"python3.{other}", f"python3.{MINOR}")
    assert (found.returncode, found.stdout, found.stderr) == (0, f"{bin_dir}/python3.{MINOR}\n", "")


def pyenv_install(root: Path, version: str, python: str) -> Path:
    """`python` as pyenv installs it, in root/versions/<version>/bin/; this interpreter behind a wrapper."""
    (root / "versions" / version / "bin").mkdir(parents=True)
    write_executable(root / "versions" / version / "bin" / python, f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    return root / "versions" / version / "bin" / python


def fake_pyenv(bin_dir: Path, root: Path) -> None:
    """pyenv with nothing selected: its shim for python3.MINOR fails as pyenv's does, `pyenv root` answers."""
    write_executable(bin_dir / "pyenv", f'#!/bin/sh\n[ "$1" = root ] && echo "{root}"\n')
    write_executable(bin_dir / f"python3.{MINOR}", f"#!/bin/sh\necho 'pyenv: python3.{MINOR}: command not found' >&2\n"
                     "exit 127\n")


@pytest.mark.parametrize("asked", ["pyenv root", "~/.pyenv without pyenv on PATH"])
def test_a_python_pyenv_installed_but_did_not_select_is_found(course, bin_dir, tmp_path, asked):
    # The newest patch by number (10 after 9, not before it as text would sort); a dev build skipped.
    root = tmp_path / "somewhere" if asked == "pyenv root" else course / ".pyenv"  # HOME is the course
    newest = [pyenv_install(root, f"3.{MINOR}.{patch}", f"python3.{MINOR}") for patch in (9, 10, 2)][1]
    (root / "versions" / f"3.{MINOR}-dev" / "bin").mkdir(parents=True)
    write_executable(root / "versions" / f"3.{MINOR}-dev" / "bin" / f"python3.{MINOR}", "#!/bin/sh\nexit 1\n")
    fake_pyenv(bin_dir, root)
    if asked != "pyenv root":
        (bin_dir / "pyenv").unlink()
    found = find_python(course, bin_dir, f"python3.{MINOR}")
    assert (found.returncode, found.stdout, found.stderr) == (0, f"{newest}\n", "")


def test_a_version_pyenv_does_not_have_is_still_not_found(course, bin_dir, tmp_path):
    other = next(m for m in range(LOW, HIGH + 1) if m != MINOR)
    fake_system(bin_dir, "Linux")
    pyenv_install(tmp_path / "pyenv", f"3.{other}.1", f"python3.{other}")  # another minor than asked
    fake_pyenv(bin_dir, tmp_path / "pyenv")
    found = find_python(course, bin_dir, f"python3.{MINOR}")
    assert (found.returncode, found.stdout) == (1, "")
    assert found.stderr.startswith(f"no Python found (tried python3.{MINOR}); {NEEDS}")


@pytest.fixture
def dead_index():
    """An http index on this machine's loopback where nothing listens: pip's connection is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))  # bound, never listening: refused, and no other process can take it
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/simple"


def test_make_setup_names_the_python_it_chose_and_why_torch_failed(course, bin_dir, tmp_path, dead_index):
    """A learner with pyenv and nothing selected, on a machine that cannot reach the torch index."""
    fake_system(bin_dir, "Linux")
    python = pyenv_install(tmp_path / "pyenv", f"3.{MINOR}.1", f"python3.{MINOR}")
    fake_pyenv(bin_dir, tmp_path / "pyenv")
    # pip may look for an index now: every one it knows is the dead one (its upgrade of itself then does nothing).
    made = run(["make", "setup", f"PYTHON=python3.{MINOR}", f"TORCH_INDEX={dead_index}"], course, bin_dir,
               PIP_NO_INDEX="", PIP_INDEX_URL=dead_index, PIP_RETRIES="0")
    assert made.returncode != 0
    assert f"make: .venv gets Python {platform.python_version()} ({python})\n" in made.stdout
    reason = [line for line in made.stderr.splitlines() if line.startswith("cannot install")]
    assert reason == [f"cannot install {torch_pin()} for Python {platform.python_version()} "
                      f"({course}/.venv/bin/python): {dead_index} could not be reached; run make again with TORCH_INDEX= to take PyPI's build "
                      f"instead (on Linux the CUDA one, several GB), or check the connection (pip's own output: "
                      f"{course}/.venv/pip-torch.log)"], made.stderr
    # Nothing else was installed, and the next run starts again from torch.
    assert not (course / ".venv" / ".installed").exists() and (course / ".venv" / "bin" / "python").exists()


def install_commands(course: Path, bin_dir: Path, *assignments: str) -> str:
    """What `make setup` would run on a fresh machine (make -n prints it; -B: as if .venv were stale)."""
    made = run(["make", "-n", "-B", "setup", *assignments], course, bin_dir)
    assert made.returncode == 0, made.stderr
    return made.stdout


def torch_pin() -> str:
    return re.search(r'"(torch==[^"]+)"', (ROOT / "pyproject.toml").read_text()).group(1)


def test_linux_takes_torch_alone_from_the_cpu_index(course, bin_dir):
    fake_system(bin_dir, "Linux")
    commands = install_commands(course, bin_dir)
    torch_line = (f"sh scripts/install_torch.sh {course}/.venv/bin/python '{torch_pin()}' "
                  "'https://download.pytorch.org/whl/cpu'")
    # Only torch comes from there, and before the rest: pip then keeps it for the pinned torch.
    assert torch_line in commands.splitlines()
    assert commands.index(torch_line) < commands.index("install --quiet -e '.[dev]'")
    assert commands.count("download.pytorch.org") == 1


@pytest.mark.parametrize("system, assignments, index", [
    ("Linux", ["TORCH_INDEX="], None),
    ("Linux", ["TORCH_INDEX=https://download.pytorch.org/whl/cu128"], "https://download.pytorch.org/whl/cu128"),
    ("macOS", [], None),
])
def test_torch_index_override_and_other_systems(course, bin_dir, system, assignments, index):
    fake_system(bin_dir, system)
    commands = install_commands(course, bin_dir, *assignments)
    assert f"install_torch.sh {course}/.venv/bin/python '{torch_pin()}' '{index or ''}'\n" in commands
    assert "pip install --quiet -e '.[dev]'" in commands and commands.count("--index-url") == 0


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A venv of this Python with pip and nothing else: where install_torch.sh meets the real pip."""
    folder = tmp_path_factory.mktemp("venv") / ".venv"
    subprocess.run([sys.executable, "-m", "venv", folder], check=True, timeout=120)
    return folder


def install_torch(venv: Path, bin_dir: Path, index: str, **pip: str) -> subprocess.CompletedProcess:
    return run(["sh", str(ROOT / "scripts" / "install_torch.sh"), str(venv / "bin" / "python"), torch_pin(), index],
               venv.parent, bin_dir, PIP_NO_INDEX="", **pip)


@pytest.mark.parametrize("reach", ["refused", "no such host"])
def test_an_index_out_of_reach_is_named_with_the_fix(venv, bin_dir, dead_index, reach):
    # .invalid is a name that never resolves (RFC 2606): pip fails at the name, not the connection.
    index = dead_index if reach == "refused" else "https://download.pytorch.invalid/whl/cpu"
    made = install_torch(venv, bin_dir, index)
    assert made.returncode == 1
    assert made.stderr == (f"cannot install {torch_pin()} for Python {platform.python_version()} ({venv}/bin/python): "
                           f"{index} could not be reached; run make again with TORCH_INDEX= to take PyPI's build "
                           "instead (on Linux the CUDA one, several GB), or check the connection "
                           f"(pip's own output: {venv}/pip-torch.log)\n")
    assert "connection broken by" in (venv / "pip-torch.log").read_text()  # what the diagnosis read


@pytest.mark.parametrize("constraint", [None, "torch<=99"])
def test_an_index_without_a_build_for_this_python_is_named(venv, bin_dir, tmp_path, constraint):
    """An index that has the torch asked for, for another Python only. pip says "No matching distribution"
    or, with a constraint file on torch (as some machines have), "conflicting dependencies"."""
    version = torch_pin().split("==")[1]
    (tmp_path / "index" / "torch").mkdir(parents=True)
    (tmp_path / "index" / "torch" / f"torch-{version}-cp39-cp39-manylinux_2_28_x86_64.whl").write_bytes(b"")
    pip = {}
    if constraint:
        (tmp_path / "constraints.txt").write_text(constraint + "\n")
        pip["PIP_CONSTRAINT"] = str(tmp_path / "constraints.txt")
    made = install_torch(venv, bin_dir, (tmp_path / "index").as_uri(), **pip)
    words = "conflicting dependencies" if constraint else "No matching distribution found"
    assert made.returncode == 1 and words in (venv / "pip-torch.log").read_text()
    assert made.stderr.startswith(f"cannot install {torch_pin()} for Python {platform.python_version()} ({venv}/bin/"
                                  f"python): {(tmp_path / 'index').as_uri()} has no build of it for Python "
                                  f"{platform.python_version()} on {platform.system()} {platform.machine()}; run "
                                  "make again with TORCH_INDEX= to take PyPI's build instead"), made.stderr
