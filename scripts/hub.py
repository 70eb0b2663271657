"""One JupyterHub for a class on this machine: setup, start, teardown (`make hub` runs the first two).

Usage, as root (it creates unix users and starts servers as them):
  python scripts/hub.py setup --roster hub/roster.csv --instructor ID [--instructor ID ...]
                              [--state DIR] [--homes DIR] [--sets 01_attention_scores,...]
                              [--memory 1.5G --processes 256 --cpu-weight 100
                               --home-size 2G --tmp-size 512M --shm-size 256M]   (per student)
  python scripts/hub.py start [--state DIR]      JupyterHub and its proxy, in the foreground
  python scripts/hub.py teardown [--state DIR]   removes the users, homes and state setup made

setup makes:
  - one unprivileged unix user per roster student and per instructor, named by their id (no
    prefix; ids must match ID_PATTERN; an id that is already a user of the machine is refused),
    with a home folder only they can enter and a first password of its own, listed for the
    instructor in <state>/hub/first-passwords.csv (root only); the hub checks it through PAM;
  - the nbgrader exchange, <state>/exchange: the root root's own, 0755 (no student creates or
    renames anything there; grading/exchange.py's classes, which the class's nbgrader settings
    name, take a hand-in only from its author), the course's folder in it owned by the
    grader (the first instructor) with nbgrader's own modes: outbound 0755, inbound 2733
    (students write, only the grader lists), feedback 0711 (read by exact, secret name);
  - <state>/etc/jupyter/nbgrader_config.py, read by every user's server: course id, exchange;
  - the grader's course folder, <grader home>/transformer-roots: the course's nbgrader_config.py,
    solutions/ (nbgrader's source), exercises/ (the student versions, generated) and a gradebook
    holding every roster student; and their ~/.jupyter/nbgrader_config.py pointing at it;
  - each student's lessons (a copy of notebooks/) and JupyterLab without the instructors' panels;
  - each student's home on a disk of its own: an ext4 image, <state>/disks/<id>.img, of the
    class's home size (ClassLimits: the class's limits, in one place);
  - the class's Python kernel spec, <state>/share/jupyter (it names a limit a student hits);
  - <state>/class.json: the roster, the instructors and what was made (read by
    hub/jupyterhub_config.py, and by teardown).
start runs JupyterHub (hub/jupyterhub_config.py) in a mount namespace of its own, in which
  - a folder users cannot enter that holds the course's Python (a pyenv Python in /root, say)
    shows them only that Python's folders;
  - the checkout's private parts (solutions/, tests/, the git history, any grading output of
    `make grade`) are empty folders;
  - each student's home image is mounted on their home;
nothing changes on the disk. It then checks, as user nobody, that the course's Python runs
and that solutions/ cannot be read, and stops with the reason if not. Each student's server
then runs in a control group with the class's limits and in a mount namespace of its own with
private /tmp, /var/tmp and /dev/shm ("Limits per student" below; hub/jupyterhub_config.py).
teardown removes the users, their homes, home images and control groups, every file they left
in /tmp, /var/tmp, /dev/shm and /run/lock, and the state folder.

From Python (the tests): setup(...), launch(...) -> the running hub, stop(hub), teardown(state).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import ctypes
import grp
import json
import os
import pwd
import re
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "hub" / "jupyterhub_config.py"
PROXY = ROOT / ".hub" / "node_modules" / ".bin" / "configurable-http-proxy"
COURSE_ID = "transformer-roots"
COURSE_FOLDER = "transformer-roots"  # in the grader's home
DEFAULT_STATE = Path("/srv/transformer-roots-hub")
# A unix user name that every tool accepts as it is: lower case, starts with a letter, at most
# 32 characters; no dot, no capital, no "+" (nbgrader joins names with "+" in the exchange).
ID_PATTERN = re.compile(r"[a-z][a-z0-9_-]{0,31}")
# What students must not read in the checkout: answers, hidden tests, tests that hold right
# answers, and what `make grade` may have left there (submissions, grades, the gradebook, the
# grades as an LMS imports them). Names or glob patterns, in the checkout's root.
PRIVATE = ["solutions", "tests", ".grading", "submitted", "autograded", "feedback", "gradebook.db",
           "grades.csv", "canvas-grades.csv", "moodle-grades-*.csv"]
# Where any user may leave files outside their home: teardown removes the class's users' files
# there (a uid the next class's user may be given must not find them).
SHARED_WRITABLE = [Path("/tmp"), Path("/var/tmp"), Path("/dev/shm"), Path("/run/lock")]
# A student's JupyterLab is the learner's of `make lab` (learner-lab/, read here): the assignment list
# and Validate, without the JupyterLab plugins and server parts only an instructor uses (the
# formgrader, Create Assignment, the course list) nor the news pop-up.
LEARNER_LAB = ROOT / "learner-lab"
LEARNER_LAB_OFF = [name for name, off in json.loads(
    (LEARNER_LAB / "labconfig" / "page_config.json").read_text())["disabledExtensions"].items() if off]
SERVER_EXTENSIONS = ["jupyterlab", "jupyter_server_terminals", "notebook_shim",
                     "nbgrader.server_extensions.formgrader", "nbgrader.server_extensions.validate_assignment",
                     "nbgrader.server_extensions.assignment_list", "nbgrader.server_extensions.course_list",
                     "grading.sanitize"]  # the formgrader's submission pages, sanitized and with a strict CSP
# nbgrader's exchange steps, each done by the class's own exchange (grading/exchange.py).
EXCHANGE_CLASSES = {"fetch_assignment": "FetchAssignment", "fetch_feedback": "FetchFeedback", "list": "List",
                    "submit": "Submit", "release_assignment": "ReleaseAssignment",
                    "release_feedback": "ReleaseFeedback", "collect": "Collect"}
LEARNER_SERVER_OFF = [name for name, on in json.loads(
    (LEARNER_LAB / "jupyter_server_config.json").read_text())["ServerApp"]["jpserver_extensions"].items() if not on]


@dataclass
class Member:
    id: str
    name: str


GiB, MiB = 2**30, 2**20


@dataclass(frozen=True)
class ClassLimits:
    """What each student's server, with everything it starts, may use: the one place a class's
    limits are set (`hub.py setup --memory ...`; kept in class.json). The defaults come from the
    sizing table (README, "How many students one machine holds"): a student who runs every lesson
    peaks at 0.8 GB (lesson 07's kernel) plus about 0.1 GB of server, and 16 such students fill
    this 24 GB machine's memory at 1.5 GiB each; a server with a kernel runs about 60 tasks."""
    memory: int = 3 * GiB // 2  # RAM of all they run, their /tmp and /dev/shm files included
    processes: int = 256  # tasks (processes and threads) alive at once
    cpu_weight: int = 100  # each student an equal share of a busy CPU
    home: int = 2 * GiB  # their home: an ext4 image of this size, mounted on it
    tmp: int = 512 * MiB  # their own /tmp (also their /var/tmp): a tmpfs of this size
    shm: int = 256 * MiB  # their own /dev/shm: a tmpfs of this size

    def cgroup(self):
        from grading.cgroup import Limits

        return Limits(memory=self.memory, processes=self.processes, cpu_weight=self.cpu_weight)


def size(text: str) -> int:
    """Bytes from "1.5G", "512M", "4096" (K, M, G: powers of 1024); a bad size is named."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([KMG]?)i?B?\s*", text, re.IGNORECASE)
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size: write e.g. 1.5G, 512M or 4096")
    return int(float(match.group(1)) * 1024 ** " KMG".index(match.group(2).upper() or " "))


def read_roster(path: Path) -> list[Member]:
    """The students of a roster CSV with columns student_id,name; a bad row stops with its line."""
    with open(path, newline="", encoding="utf-8-sig") as handle:  # utf-8-sig: a spreadsheet's export
        rows = list(csv.reader(handle))
    if not rows or [c.strip() for c in rows[0][:2]] != ["student_id", "name"]:
        raise SystemExit(f"{path}: the first line must be the header 'student_id,name'")
    members, seen = [], set()
    for line, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue  # a blank line
        if len(row) != 2:
            raise SystemExit(f"{path}, line {line}: expected 2 columns (student_id,name), got {len(row)}: {row}")
        member = Member(row[0].strip(), row[1].strip())
        check_id(member.id, f"{path}, line {line}")
        if member.id in seen:
            raise SystemExit(f"{path}, line {line}: student id {member.id!r} is listed twice")
        seen.add(member.id)
        members.append(member)
    if not members:
        raise SystemExit(f"{path}: no students")
    return members


def check_id(name: str, where: str) -> None:
    if not ID_PATTERN.fullmatch(name):
        raise SystemExit(f"{where}: {name!r} is not a usable id: lower-case letters, digits, '-' and '_', "
                         "starting with a letter, at most 32 characters (it becomes a unix user name)")


def require_root(what: str) -> None:
    if os.geteuid() != 0:
        raise SystemExit(f"hub.py {what} needs root: it creates one unix user per student and starts "
                         "each student's server as that user (run it with sudo)")


def run(*command: str, **kwargs) -> subprocess.CompletedProcess:
    """A command that must succeed; its output is shown only when it fails (never its input)."""
    done = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return done


def class_file(state: Path) -> Path:
    return state / "class.json"


def load_class(state: Path) -> dict:
    if not class_file(state).exists():
        raise SystemExit(f"no class in {state}: run `hub.py setup` (or `make hub`) first")
    return json.loads(class_file(state).read_text())


def save_class(state: Path, data: dict) -> None:
    class_file(state).write_text(json.dumps(data, indent=1))
    class_file(state).chmod(0o600)  # the roster's names: read by the hub's config (root) only


def write_owned(path: Path, text: str, user: str, mode: int = 0o644) -> None:
    """Write a file (and its missing folders) belonging to `user`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    chown_tree(path.parent, user)


def chown_tree(path: Path, user: str) -> None:
    entry = pwd.getpwnam(user)
    for folder, folders, files in os.walk(path):
        os.chown(folder, entry.pw_uid, entry.pw_gid)
        for name in files:
            os.chown(os.path.join(folder, name), entry.pw_uid, entry.pw_gid)


# A kernel's socket is <home>/.jr/kernel-<36-character id>-ipc-<1..5> (hub/jupyterhub_config.py),
# and a unix socket's path holds at most 107 bytes: 53 of them are taken after the home.
MAX_HOME = 107 - len("/.jr/kernel-") - 36 - len("-ipc-5")


def create_user(member: Member, homes: Path) -> str:
    """A unix user with a home only they can enter; returns their first password."""
    home = homes / member.id
    if len(str(home).encode()) > MAX_HOME:
        raise SystemExit(f"{home}: a home path this long ({len(str(home).encode())} bytes) leaves no room for "
                         f"the kernels' socket paths (at most {MAX_HOME} bytes): choose a shorter --homes")
    # bash, so that JupyterLab's terminal works (and `passwd` changes the password).
    run("useradd", "--create-home", "--home-dir", str(home), "--shell", "/bin/bash", "--user-group",
        "--comment", member.name.replace(":", " "), member.id)
    home.chmod(0o700)
    password = secrets.token_urlsafe(12)  # 16 characters, 96 random bits
    run("chpasswd", input=f"{member.id}:{password}\n")
    return password


def seed_lab_settings(member: Member, home: Path, student: bool) -> None:
    """JupyterLab as each user first sees it: the server extensions it runs, named here rather
    than left to what each package's install wrote into its environment (a venv layered on
    another has none of its own); students with the learner's JupyterLab of `make lab`
    (learner-lab/: without the parts an instructor uses, the formgrader is the grader's); no
    "news?" pop-up."""
    # A terminal's login shell resets PATH (/etc/profile): the course's Python is put back first.
    with open(home / ".profile", "a") as profile:
        profile.write(f"\n# Transformer Roots: the course's Python first, as in its notebooks\n"
                      f"PATH=\"{Path(sys.executable).parent}:$PATH\"\n")
    extensions = {name: not (student and name in LEARNER_SERVER_OFF) for name in SERVER_EXTENSIONS}
    server = {"jpserver_extensions": extensions}
    if not student:
        # Nbgrader > Formgrader shows the formgrader framed in JupyterLab, which JupyterHub's default
        # header (frame-ancestors 'none') refused ("127.0.0.1 refused to connect"): the grader's
        # own server may frame its own pages.
        server["tornado_settings"] = {"headers": {"Content-Security-Policy": "frame-ancestors 'self'"}}
    write_owned(home / ".jupyter" / "jupyter_server_config.json", json.dumps({"ServerApp": server}, indent=1),
                member.id)
    settings = home / ".jupyter" / "lab" / "user-settings"
    write_owned(settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings",
                json.dumps({"fetchNews": "false"}), member.id)
    # One formgrader entry in the menu: "Formgrader (local)" (a course folder per JupyterLab tab) off.
    write_owned(settings / "@jupyter" / "nbgrader" / "formgrader.jupyterlab-settings",
                json.dumps({"local_config": False}), member.id)
    if student:
        write_owned(home / ".jupyter" / "labconfig" / "page_config.json",
                    json.dumps({"disabledExtensions": {name: True for name in LEARNER_LAB_OFF}}), member.id)
        shutil.copytree(ROOT / "notebooks", home / "lessons")
        chown_tree(home / "lessons", member.id)
    chown_tree(home / ".jupyter", member.id)


def make_exchange(state: Path, grader: str) -> Path:
    exchange = state / "exchange"
    exchange.mkdir()
    # Root's, 0755: no student creates or renames anything at the top (nbgrader's 1777 let them);
    # the class's exchange classes (grading/exchange.py) only need to enter it.
    exchange.chmod(0o755)
    course = exchange / COURSE_ID
    # Made now, by the grader, so no student can make the course's folder first and own it.
    for folder, mode in [(course, 0o755), (course / "outbound", 0o755), (course / "inbound", 0o2733),
                         (course / "feedback", 0o711)]:
        folder.mkdir()
        entry = pwd.getpwnam(grader)
        os.chown(folder, entry.pw_uid, entry.pw_gid)
        folder.chmod(mode)
    return exchange


def make_course(grader: Member, home: Path, students: list[Member], sets: list[str]) -> Path:
    """The grader's course folder: nbgrader_config.py, solutions/, exercises/, gradebook.db."""
    course = home / COURSE_FOLDER
    course.mkdir()
    shutil.copy(ROOT / "nbgrader_config.py", course)
    for name in sets:
        shutil.copytree(ROOT / "solutions" / name, course / "solutions" / name,
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    # The student versions and the gradebook's record of every graded cell, as `make grade` makes them.
    env = os.environ | {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    run(sys.executable, str(ROOT / "scripts" / "grade.py"), "--course", str(course), "--exercises-only", env=env)
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        for student in students:
            first, _, last = student.name.partition(" ")
            gradebook.update_or_create_student(student.id, first_name=first, last_name=last)
    # The course's nbgrader_config.py names the gradebook relative to the folder nbgrader runs in;
    # the grader's server runs in their home, so the path is made absolute there.
    write_owned(home / ".jupyter" / "nbgrader_config.py",
                f"c = get_config()  # noqa: F821\n"
                f"# The course's own settings (folders, grading steps), then the gradebook's full path.\n"
                f"load_subconfig({str(course / 'nbgrader_config.py')!r})  # noqa: F821\n"
                f"c.CourseDirectory.db_url = {'sqlite:///' + str(course / 'gradebook.db')!r}\n", grader.id)
    chown_tree(course, grader.id)
    course.chmod(0o700)
    return course


def write_kernel_spec(state: Path) -> None:
    """The class's Python kernel (found first through JUPYTER_PATH, hub/jupyterhub_config.py):
    the course's, with grading/notice.py, which names a class limit a student's work hits."""
    spec = {"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}", "--ext=grading.notice"],
            "display_name": "Python 3 (ipykernel)", "language": "python", "metadata": {"debugger": True}}
    write_owned(state / "share" / "jupyter" / "kernels" / "python3" / "kernel.json", json.dumps(spec, indent=1), "root")


def setup(roster: Path, instructors: list[str], state: Path = DEFAULT_STATE, homes: Path = Path("/home"),
          sets: list[str] | None = None, limits: ClassLimits = ClassLimits()) -> dict:
    """Make the class (see the module's docstring); returns what class.json records."""
    require_root("setup")
    students = read_roster(roster)
    staff = [Member(name, name) for name in instructors]
    for member in staff:
        check_id(member.id, "--instructor")
    if not staff:
        raise SystemExit("name at least one instructor (--instructor ID): the first one grades")
    clash = {m.id for m in students} & {m.id for m in staff}
    if clash:
        raise SystemExit(f"{', '.join(sorted(clash))}: both a student of {roster} and an instructor")
    if class_file(state).exists():
        raise SystemExit(f"{state} already holds a class: `hub.py teardown --state {state}` first, or "
                         "`hub.py start` to run it")
    for member in students + staff:
        try:
            pwd.getpwnam(member.id)
        except KeyError:
            continue
        raise SystemExit(f"{member.id!r} is already a user of this machine; hub.py makes its own users "
                         "and never lends a server to an existing account: choose another id")
    sets = sets or sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir())
    for folder in (state, homes):
        folder.mkdir(parents=True, exist_ok=True)
        if not folder.stat().st_mode & stat.S_IXOTH:
            raise SystemExit(f"{folder} cannot be entered by other users: they could not reach their home")
    data = {"course_id": COURSE_ID, "checkout": str(ROOT), "homes": str(homes), "sets": sets,
            "limits": asdict(limits), "students": [vars(m) for m in students], "instructors": [vars(m) for m in staff],
            "created_users": [], "exchange": str(state / "exchange")}
    save_class(state, data)
    (state / "hub").mkdir(mode=0o700)
    passwords = state / "hub" / "first-passwords.csv"
    with open(os.open(passwords, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "name", "first_password"])
        for member in students + staff:
            writer.writerow([member.id, member.name, create_user(member, homes)])
            data["created_users"].append(member.id)
            save_class(state, data)  # teardown removes what was made, even if a later step fails
            seed_lab_settings(member, homes / member.id, student=member in students)
            if member in students:
                make_home_disk(state, member, homes / member.id, limits)
    make_exchange(state, staff[0].id)
    write_owned(state / "etc" / "jupyter" / "nbgrader_config.py",
                "c = get_config()  # noqa: F821\n"
                "# Read by every user's server (hub/jupyterhub_config.py sets JUPYTER_CONFIG_PATH).\n"
                f"c.CourseDirectory.course_id = {COURSE_ID!r}\n"
                f"c.Exchange.root = {str(state / 'exchange')!r}\n"
                "# A hand-in counts only for the user who made it (grading/exchange.py).\n"
                + "".join(f"c.ExchangeFactory.{step} = 'grading.exchange.{name}'\n"
                          for step, name in EXCHANGE_CLASSES.items()), "root")

    write_kernel_spec(state)
    data["course"] = str(make_course(staff[0], homes / staff[0].id, students, sets))
    save_class(state, data)
    return data


# --- Limits per student: a control group for memory, tasks and CPU; disks of their own.
#
# The control group (grading/cgroup.py: v1 here, v2 elsewhere) holds the student's server and
# everything it starts; the memory limit also covers their /tmp and /dev/shm, which are tmpfs
# (RAM). Disk: the home is an ext4 image of its own, mounted on the home by `start` (a full home
# says "No space left on device" and fills no one else's disk); /tmp (and /var/tmp) and /dev/shm
# are tmpfs of their own in the server's own mount namespace, gone when the server stops. A
# systemd machine would give the same with SystemdSpawner (MemoryMax, TasksMax, CPUWeight,
# PrivateTmp) and project quotas for homes.

CLASS_GROUP = "transformer-roots/hub"  # the students' groups are in it


def group_name(student: str) -> str:
    return f"{CLASS_GROUP}/{student}"


def make_class_group(limits: ClassLimits, n_students: int):
    """The group that holds every student's group, with n students' limits in total: on a machine
    that runs other work too, the class competes for the CPU as n equal shares, not as one (with
    one, a student who spins on every core spent the whole class's share, and the others waited)."""
    from grading.cgroup import Group, Limits

    return Group.make(CLASS_GROUP, Limits(memory=limits.memory * n_students, processes=limits.processes * n_students,
                                          cpu_weight=limits.cpu_weight * n_students))


def home_image(state: Path, student: str) -> Path:
    return state / "disks" / f"{student}.img"


def make_home_disk(state: Path, member: Member, home: Path, limits: ClassLimits) -> Path:
    """Move the student's home onto an ext4 image of `limits.home` bytes (sparse: it takes disk
    only as it fills); the folder on the disk stays as the image's mount point."""
    entry = pwd.getpwnam(member.id)
    image = home_image(state, member.id)
    image.parent.mkdir(mode=0o700, exist_ok=True)
    with open(os.open(image, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as handle:
        handle.truncate(limits.home)
    # No journal: a home that is lost with the class needs none, and it saves 64 MB per student.
    run("mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal",
        "-E", f"root_owner={entry.pw_uid}:{entry.pw_gid}", str(image))
    with tempfile.TemporaryDirectory(prefix="tr-home-") as mounted:
        run("mount", "-o", "loop,nosuid,nodev", str(image), mounted)
        try:
            shutil.rmtree(Path(mounted) / "lost+found")
            shutil.copytree(home, mounted, symlinks=True, dirs_exist_ok=True)
            chown_tree(Path(mounted), member.id)
            os.chmod(mounted, 0o700)
        finally:
            run("umount", mounted)
    for child in home.iterdir():
        shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
    return image


def mount_homes(state: Path) -> list[str]:
    """(In the hub's namespace.) Each student's home image on their home; one line each, for the log."""
    data = load_class(state)
    said = []
    for student in data["students"]:
        image, home = home_image(state, student["id"]), Path(data["homes"]) / student["id"]
        if image.exists():
            mount("-o", "loop,nosuid,nodev", str(image), str(home))
            said.append(f"{home}: its own disk of {image.stat().st_size / GiB:.1f} GiB ({image})")
    return said


# Raw system calls for what the student's server does before it starts (after fork, as root).
_LIBC = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNS, MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE, MNT_DETACH = 0x20000, 2, 4, 4096, 16384, 1 << 18, 2
STAGE = Path("/run/transformer-roots-hub")  # a mount point for a moment, in each server's namespace


def _check(result: int, what: str) -> None:
    if result != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{what}: {os.strerror(error)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, options: str | None = None) -> None:
    _check(_LIBC.mount(source and source.encode(), target.encode(), fstype and fstype.encode(), flags,
                       options and options.encode()), f"mount {target}")


def _private_tmpfs(target: Path, size_bytes: int, keep: list[Path]) -> None:
    """A tmpfs of its own on `target`, in which the folders of `keep` that lie under it (the
    class's homes and exchange, when a test makes them in /tmp) are still what they were."""
    kept = [path for path in keep if target in path.parents]
    if kept:
        _mount(str(target), str(STAGE), None, MS_BIND | MS_REC)  # the old view, for a moment
    _mount("tmpfs", str(target), "tmpfs", MS_NOSUID | MS_NODEV, f"size={size_bytes},mode=1777")
    for path in kept:
        path.mkdir(parents=True, exist_ok=True)  # root's, in the new tmpfs
        _mount(str(STAGE / path.relative_to(target)), str(path), None, MS_BIND | MS_REC)
    if kept:
        _check(_LIBC.umount2(str(STAGE).encode(), MNT_DETACH), f"umount {STAGE}")


def confine(limits: ClassLimits, keep: list[Path]):
    """The part of a student's server start that runs as root after fork: a mount namespace of
    its own with private /tmp, /var/tmp and /dev/shm of the class's sizes. Returns the function."""
    def private_mounts() -> None:
        _check(_LIBC.unshare(CLONE_NEWNS), "unshare the mount namespace")
        _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing mounted here reaches the hub
        _private_tmpfs(Path("/tmp"), limits.tmp, keep)
        _mount("/tmp", "/var/tmp", None, MS_BIND)  # one limit for both
        _private_tmpfs(Path("/dev/shm"), limits.shm, keep)
    return private_mounts


def notice_environment(student: str, limits: ClassLimits) -> dict[str, str]:
    """What the kernel's notice (grading/notice.py) reads: the limits, and the group's file whose
    line `oom_kill N` counts the processes killed for memory (v1 and v2 alike)."""
    from grading.cgroup import Group

    folders = Group.find(group_name(student)).folders
    events = folders["memory"] / "memory.oom_control" if "memory" in folders else folders[""] / "memory.events"
    return {"TR_LIMITS": json.dumps(asdict(limits)), "TR_MEMORY_EVENTS": str(events)}


# --- start: a mount namespace in which students see what they need, and nothing private.

def python_paths() -> list[Path]:
    """Every folder the course's Python reads: its prefix, the base Python's, its sys.path."""
    found = subprocess.run([sys.executable, "-c", "import json, sys; print(json.dumps("
                            "[sys.prefix, sys.base_prefix, *sys.path]))"], capture_output=True, text=True,
                           check=True, cwd="/")
    paths = {Path(p).resolve() for p in json.loads(found.stdout) if p and Path(p).is_dir()}
    return sorted(paths | {ROOT})


def closed_ancestor(path: Path) -> Path | None:
    """The first folder on the way to `path` that other users cannot enter (no o+x), if any."""
    for folder in reversed(path.parents):
        if not folder.stat().st_mode & stat.S_IXOTH:
            return folder
    return None


def private_paths() -> list[Path]:
    paths = [path for pattern in PRIVATE for path in ROOT.glob(pattern)]
    if shutil.which("git"):
        for flag in ("--absolute-git-dir", "--git-common-dir"):
            found = subprocess.run(["git", "rev-parse", flag], cwd=ROOT, capture_output=True, text=True)
            if found.returncode == 0:
                paths.append((ROOT / found.stdout.strip()).resolve())
    # A worktree's git folder lies inside the repository's: hiding the outer one hides both.
    return sorted(p for p in set(paths) if not any(q in p.parents for q in paths))


def mount(*args: str) -> None:
    run("mount", *args)


def prepare_view(stage: Path) -> list[str]:
    """Inside the hub's own mount namespace: open the Python's closed folders, hide the private
    paths. Returns one line per change, for the log."""
    said = []
    closed: dict[Path, list[Path]] = {}
    for path in python_paths():
        folder = closed_ancestor(path)
        if folder is not None:
            closed.setdefault(folder, []).append(path)
    for folder, paths in closed.items():
        # Keep only the outermost of the paths under this folder (the rest lie inside them).
        outer = [p for p in paths if not any(q != p and q in p.parents for q in paths)]
        staged = []
        for k, path in enumerate(outer):
            (stage / str(k)).mkdir()
            mount("--bind", str(path), str(stage / str(k)))
            staged.append((stage / str(k), path))
        # An empty folder users can cross (0711: enter, not list) replaces the closed one ...
        mount("-t", "tmpfs", "-o", "mode=0711,size=1m", "tmpfs", str(folder))
        for source, path in staged:  # ... with only the Python's folders put back in it.
            path.mkdir(parents=True)
            mount("--move", str(source), str(path))
            source.rmdir()
        said.append(f"{folder} (closed to users) shows them only: {', '.join(map(str, outer))}")
    for path in private_paths():
        if path.is_dir():
            mount("-t", "tmpfs", "-o", "mode=0700,size=1m,ro", "tmpfs", str(path))
        else:
            empty = stage / f"empty-{path.name}"
            empty.touch(mode=0o000)
            mount("--bind", "-o", "ro", str(empty), str(path))
        said.append(f"hidden: {path}")
    return said


USER_CHECK = """
import jupyterhub.singleuser, nbgrader, course_lib, torch
import os, sys
for path in sys.argv[1:]:
    try:
        open(path).close() if os.path.isfile(path) else os.listdir(path)
    except OSError:
        continue
    sys.exit(f"a user can read {path}")
"""


def check_view() -> None:
    """As nobody: the course's Python runs, and no private path can be read."""
    command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--", sys.executable, "-c",
               USER_CHECK, *map(str, private_paths())]
    done = subprocess.run(command, capture_output=True, text=True, cwd="/", env={"PATH": "/usr/bin:/bin"})
    if done.returncode != 0:
        raise SystemExit(
            f"As an ordinary user, the course's Python ({sys.executable}) did not pass the hub's check:\n"
            f"{done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}\n"
            "Every student's server runs that Python as the student: put the checkout and its .venv where "
            "every user can enter and read (e.g. /srv or /opt, not /root), and keep solutions/ private.")


def serve(state: Path) -> None:
    """(What start runs inside its namespace.) Prepare the view, check it, exec JupyterHub."""
    with tempfile.TemporaryDirectory(prefix="tr-hub-view-") as stage:
        for line in prepare_view(Path(stage)) + mount_homes(state):
            print(f"hub.py: {line}", flush=True)
    STAGE.mkdir(mode=0o700, exist_ok=True)
    check_view()
    (state / "hub").mkdir(mode=0o700, exist_ok=True)
    os.chdir(state / "hub")
    env = os.environ | {"TR_HUB_STATE": str(state),
                        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    os.execve(sys.executable, [sys.executable, "-m", "jupyterhub", "-f", str(CONFIG)], env)


def start(state: Path) -> None:
    """JupyterHub in the foreground, in a mount namespace of its own (see the docstring)."""
    require_root("start")
    load_class(state)
    if not PROXY.exists():
        raise SystemExit(f"{PROXY} is missing: `make hub-proxy` installs configurable-http-proxy with npm")
    if shutil.which("unshare") is None or shutil.which("setpriv") is None:
        raise SystemExit("start needs unshare and setpriv (Debian: apt-get install util-linux)")
    from grading.cgroup import available

    if available() is None:
        raise SystemExit("start needs control groups (cgroup v1 or v2, with memory and pids, writable by root): "
                         "without them one student's server could take the whole machine")
    # Ctrl+C (SIGINT) and SIGTERM stop the hub, which first stops its idle culler with SIGINT. An
    # ignored signal stays ignored across exec, and JupyterHub starts the culler before it sets its
    # own handlers: when `make hub` was started by something that ignores SIGINT (a script, a job a
    # non-interactive shell put in the background), the culler ignored the hub's SIGINT and the hub
    # waited 30 s for it before its SIGTERM (Ctrl+C took 41 s). The hub and all it starts get the
    # default handling; SIGHUP is left as it is (`nohup make hub` keeps the hub past a closed terminal).
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, signal.SIG_DFL)
    # A private copy of the mount table: what serve() mounts is seen by the hub and its servers only.
    os.execvp("unshare", ["unshare", "--mount", "--propagation", "private", "--",
                          sys.executable, __file__, "serve", "--state", str(state)])


# --- From Python: start the hub, wait for it, stop it.

@dataclass
class RunningHub:
    process: subprocess.Popen
    url: str  # the public address, e.g. http://127.0.0.1:8000
    log: Path
    state: Path


def launch(state: Path, port: int, api_port: int, proxy_api_port: int, log: Path, ip: str = "127.0.0.1",
           env: dict[str, str] | None = None, timeout: float = 90) -> RunningHub:
    """`hub.py start` in the background on the given ports; returns once the hub answers."""
    settings = {"TR_HUB_IP": ip, "TR_HUB_PORT": str(port), "TR_HUB_API_PORT": str(api_port),
                "TR_HUB_PROXY_API_PORT": str(proxy_api_port)}
    with open(log, "w") as out:
        process = subprocess.Popen([sys.executable, __file__, "start", "--state", str(state)], stdout=out,
                                   stderr=subprocess.STDOUT, env=os.environ | settings | (env or {}),
                                   start_new_session=True)
    hub = RunningHub(process, f"http://{ip}:{port}", log, state)
    deadline = time.time() + timeout
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"the hub exited with code {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            urllib.request.urlopen(f"{hub.url}/hub/api/", timeout=2)
            return hub
        except OSError:
            if time.time() > deadline:
                stop(hub)
                raise RuntimeError(f"the hub did not answer at {hub.url} within {timeout} s; see {log}")
            time.sleep(0.5)


def stop(hub: RunningHub, timeout: float = 90) -> None:
    """Stop the hub: it stops its idle culler, every user's server and its proxy first (a few
    seconds; up to the spawner's 30 s wait for a server that ignores SIGINT)."""
    if hub.process.poll() is None:
        os.killpg(hub.process.pid, signal.SIGTERM)
        try:
            hub.process.wait(timeout)
        except subprocess.TimeoutExpired:  # stuck: killed, with the proxy it started in a session of its own
            os.killpg(hub.process.pid, signal.SIGKILL)
            hub.process.wait()
            with contextlib.suppress(OSError, ValueError):
                os.kill(int((hub.state / "hub" / "proxy.pid").read_text()), signal.SIGTERM)


# --- teardown

def processes_of(uid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    pids.append(int(entry))
            except OSError:
                pass  # it ended
    return pids


def remove_files_of(uids: set[int], places: list[Path]) -> list[Path]:
    """Remove every file and folder owned by `uids` under `places` (each on its own file system,
    links not followed); returns what was removed."""
    removed = []
    for place in places:
        if not place.is_dir():
            continue
        device = place.lstat().st_dev
        for folder, folders, files in os.walk(place):
            for name in list(folders) + files:
                path = Path(folder) / name
                try:
                    info = path.lstat()
                except FileNotFoundError:
                    continue
                if info.st_dev != device:
                    folders[:] = [f for f in folders if f != name]  # another file system mounted here
                elif info.st_uid in uids:
                    if stat.S_ISDIR(info.st_mode):
                        shutil.rmtree(path, ignore_errors=True)
                        folders[:] = [f for f in folders if f != name]
                    else:
                        path.unlink(missing_ok=True)
                    removed.append(path)
    return removed


def teardown(state: Path) -> list[str]:
    """Remove the users (their processes, homes, groups and every file they left in /tmp,
    /var/tmp and /dev/shm) and the state folder setup made."""
    require_root("teardown")
    if not class_file(state).exists():
        return []
    data = load_class(state)
    uids = set()
    for name in data["created_users"]:
        try:
            uid = pwd.getpwnam(name).pw_uid
        except KeyError:
            continue
        uids.add(uid)
        for pid in processes_of(uid):  # servers left by a hub that was killed: only this user's
            os.kill(pid, signal.SIGKILL)
        run("userdel", "--remove", name)
        try:
            grp.getgrnam(name)
            run("groupdel", name)
        except KeyError:
            pass
    remove_files_of(uids, SHARED_WRITABLE)
    for student in data["students"]:  # a home image's loop device, should a mount have outlived the hub
        image = home_image(state, student["id"])
        if image.exists() and shutil.which("losetup"):
            attached = subprocess.run(["losetup", "--associated", str(image), "--output", "NAME", "--noheadings"],
                                      capture_output=True, text=True).stdout.split()
            for device in attached:
                subprocess.run(["losetup", "--detach", device], capture_output=True)
    from grading.cgroup import Group, available

    if available():
        for student in data["students"]:  # what a killed hub left running in them
            Group.find(group_name(student["id"])).remove()
    shutil.rmtree(state)
    return data["created_users"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["setup", "start", "serve", "teardown"])
    parser.add_argument("--state", type=Path, default=Path(os.environ.get("TR_HUB_STATE", DEFAULT_STATE)),
                        help="the class's state folder (hub database, exchange, class.json)")
    parser.add_argument("--roster", type=Path, default=ROOT / "hub" / "roster.csv", help="CSV: student_id,name")
    parser.add_argument("--instructor", action="append", default=[], help="an instructor's id (the first grades)")
    parser.add_argument("--homes", type=Path, default=Path("/home"), help="where the users' homes are made")
    parser.add_argument("--sets", default="", help="comma-separated exercise sets (default: all)")
    default = ClassLimits()
    limits = parser.add_argument_group("limits per student (setup; defaults from the sizing table)")
    limits.add_argument("--memory", type=size, default=default.memory, help="RAM of all they run, /tmp and /dev/shm included")
    limits.add_argument("--processes", type=int, default=default.processes, help="processes and threads at once")
    limits.add_argument("--cpu-weight", type=int, default=default.cpu_weight, help="share of a busy CPU (100 = equal)")
    limits.add_argument("--home-size", type=size, default=default.home, help="their home's disk")
    limits.add_argument("--tmp-size", type=size, default=default.tmp, help="their own /tmp and /var/tmp")
    limits.add_argument("--shm-size", type=size, default=default.shm, help="their own /dev/shm")
    args = parser.parse_args()
    state = args.state.resolve()
    if args.command == "setup":
        data = setup(args.roster, args.instructor, state, args.homes.resolve(),
                     [s for s in args.sets.split(",") if s],
                     ClassLimits(args.memory, args.processes, args.cpu_weight, args.home_size, args.tmp_size,
                                 args.shm_size))
        print(f"class {data['course_id']}: {len(data['students'])} students, instructors "
              f"{', '.join(i['id'] for i in data['instructors'])}; course folder {data['course']}; state {state}\n"
              f"first passwords, to hand out: {state / 'hub' / 'first-passwords.csv'} (root only)")
    elif args.command == "start":
        start(state)
    elif args.command == "serve":
        serve(state)
    else:
        removed = teardown(state)
        print(f"removed {len(removed)} users ({', '.join(removed)}) and {state}")


if __name__ == "__main__":
    main()
