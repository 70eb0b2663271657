"""nbgrader's exchange for a class on one machine, where the owner of a file is who made it.

nbgrader's own exchange (nbgrader.exchange.default) takes a hand-in's author from its name,
`<student>+<set>+<time>+<random>`, which any student can write in `inbound`: a forged name was
collected (and graded) under another student's name with one warning line, and a name whose time
did not parse stopped Collect for the whole class. Here the unix owner decides:

  - Collect takes an entry only when the entry and everything in it are plain files and folders
    owned by the student its name claims. Anything else (another student's name, a student no
    user of the machine has, a name or time that does not parse, a link, a file the grader cannot
    read, a copy that fails) is refused: never collected, never graded, said in Collect's output
    (the formgrader shows it) and listed in `<course>/refused-submissions.csv`. One refusal never
    stops the others.
  - The exchange's top level belongs to root (mode 0755, `scripts/hub.py setup` makes it so): no
    student can create or rename anything there. nbgrader checks that every user can write there;
    these classes only need to enter it.

`scripts/hub.py setup` names these classes in the class's nbgrader settings (ExchangeFactory).
"""

from __future__ import annotations

import contextlib
import csv
import fnmatch
import os
import pwd
import shutil
import stat
from collections import defaultdict
from datetime import datetime
from pathlib import Path

from nbgrader.exchange.default import (ExchangeCollect, ExchangeFetchAssignment, ExchangeFetchFeedback,
                                       ExchangeList, ExchangeReleaseAssignment, ExchangeReleaseFeedback,
                                       ExchangeSubmit)
from nbgrader.utils import check_mode, ignore_patterns, parse_utc

REFUSED_FILE = "refused-submissions.csv"  # in the course folder, next to gradebook.db
REFUSED_COLUMNS = ["set", "entry", "claimed student", "reason", "collected at"]


class RootOwnedExchange:
    """Mixin: the exchange's root only needs to be entered, not written (it belongs to root)."""

    def ensure_root(self) -> None:
        if not os.path.isdir(self.root) or not os.access(self.root, os.X_OK):
            self.fail(f"The exchange {self.root} is missing or cannot be entered; please contact your instructor")


class FetchAssignment(RootOwnedExchange, ExchangeFetchAssignment):
    pass


class FetchFeedback(RootOwnedExchange, ExchangeFetchFeedback):
    pass


class List(RootOwnedExchange, ExchangeList):
    pass


class Submit(RootOwnedExchange, ExchangeSubmit):
    pass


class ReleaseAssignment(RootOwnedExchange, ExchangeReleaseAssignment):
    pass


class ReleaseFeedback(RootOwnedExchange, ExchangeReleaseFeedback):
    pass


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def refusal(entry: Path, student: str) -> str | None:
    """Why the inbound folder `entry`, whose name claims `student`, is not theirs; None if it is.
    Theirs: a folder owned by the student, holding only folders and regular files they own (no
    links: the grader's copy would follow them), all readable by the grader who collects."""
    try:
        uid = pwd.getpwnam(student).pw_uid
    except KeyError:
        return f"its name claims {student!r}, who is no user of this machine"
    if not entry.is_dir() or entry.is_symlink():
        return "it is not a folder"
    paths = [entry]  # the entry first: a folder os.walk cannot read is one it says nothing of
    for folder, folders, files in os.walk(entry):
        paths += [Path(folder) / name for name in folders + files]
    for path in paths:
        info = path.lstat()
        where = "it" if path == entry else str(path.relative_to(entry))
        if info.st_uid != uid:
            return f"its name claims {student}, but {where} was made by {user_name(info.st_uid)}"
        if not (stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode)):
            return f"{where} is not a plain file or folder"
        if not os.access(path, os.R_OK | (os.X_OK if stat.S_ISDIR(info.st_mode) else 0)):
            return f"{where} cannot be read by the grader"
    return None


class Collect(RootOwnedExchange, ExchangeCollect):
    """Collect that takes each hand-in only from its author (see the module's docstring)."""

    def init_src(self) -> None:
        if self.coursedir.course_id == "":
            self.fail("No course id specified. Re-run with --course flag.")
        self.course_path = os.path.join(self.root, self.coursedir.course_id)
        self.inbound_path = os.path.join(self.course_path, "inbound")
        if not os.path.isdir(self.inbound_path):
            self.fail(f"Course not found: {self.inbound_path}")
        if not check_mode(self.inbound_path, read=True, execute=True):
            self.fail(f"You don't have read permissions for the directory: {self.inbound_path}")
        self.refused: list[dict[str, str]] = []
        duedate = self.due_date()
        by_student: dict[str, list[dict]] = defaultdict(list)
        for entry in sorted(Path(self.inbound_path).iterdir()):
            record = self.accepted(entry)
            if record is not None:
                by_student[record["username"]].append(record)
        self.src_records = [self.pick(records, duedate) for records in by_student.values()]

    def accepted(self, entry: Path) -> dict | None:
        """The entry's record if it is a hand-in of this set by the student its name claims;
        None if it is another set's (skipped) or refused (noted)."""
        parts = entry.name.split("+")
        if len(parts) >= 2 and parts[1] != self.coursedir.assignment_id:
            return None  # another set's hand-in
        if not fnmatch.fnmatchcase(parts[0], self.coursedir.student_id or "*"):
            return None  # Collect was asked for some students only ("*", nbgrader's default: all)
        if len(parts) != 4:
            return self.refuse(entry, parts[0], "its name is not <student>+<set>+<time>+<random>")
        student, _, when, _ = parts
        try:
            timestamp = parse_utc(when)
        except (ValueError, OverflowError):  # dateutil's ParserError is a ValueError
            return self.refuse(entry, student, f"its time {when!r} is not a time")
        reason = refusal(entry, student)
        if reason is not None:
            return self.refuse(entry, student, reason)
        return {"username": student, "filename": entry.name, "timestamp": timestamp}

    def pick(self, records: list[dict], duedate: datetime | None) -> dict:
        """A student's hand-in to collect: the newest, or with before_duedate the newest on time."""
        newest_first = self._sort_by_timestamp(records)
        on_time = []
        if duedate is not None and self.before_duedate:
            on_time = [r for r in newest_first if r["timestamp"] <= duedate]
        return (on_time or newest_first)[0]

    def due_date(self) -> datetime | None:
        from nbgrader.api import Gradebook, MissingEntry

        with Gradebook(self.coursedir.db_url, self.coursedir.course_id) as gradebook:
            try:
                return gradebook.find_assignment(self.coursedir.assignment_id).duedate
            except MissingEntry:
                return None

    def refuse(self, entry: Path, student: str, reason: str) -> None:
        self.log.warning("Refused %s: %s. Not collected; listed in %s", entry.name, reason, REFUSED_FILE)
        self.refused.append({"set": self.coursedir.assignment_id, "entry": entry.name, "claimed student": student,
                             "reason": reason, "collected at": datetime.now().isoformat(timespec="seconds")})
        return None

    def copy_files(self) -> None:
        super().copy_files()
        self.write_refused()

    def do_copy(self, src: str, dest: str, log=None) -> None:
        """nbgrader's copy of one hand-in (its size limit and ignore patterns), with links copied
        as links and then refused: a student who swaps a file of their checked hand-in for a link
        to the grader's files while it is collected gets nothing read through it. One that fails
        is refused, and nbgrader's loop goes on with the others."""
        try:
            size = self.get_size(src)
            if size > 1000 * self.coursedir.max_dir_size:
                raise RuntimeError(f"Directory size is too big. Size is {size}, maximum size is "
                                   f"{1000 * self.coursedir.max_dir_size}")
            shutil.copytree(src, dest, symlinks=True, ignore=ignore_patterns(
                exclude=self.coursedir.ignore, include=self.coursedir.include,
                max_file_size=self.coursedir.max_file_size, log=self.log))
            for folder, folders, files in os.walk(dest):
                for name in folders + files:
                    mode = os.lstat(os.path.join(folder, name)).st_mode
                    if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
                        raise RuntimeError(f"{name} became a link or a special file while it was collected")
        except (OSError, RuntimeError) as error:
            shutil.rmtree(dest, ignore_errors=True)
            with contextlib.suppress(OSError):  # the student's folder nbgrader made for it, if now empty
                os.rmdir(os.path.dirname(dest))
            self.refuse(Path(src), Path(src).name.split("+")[0], f"copying it failed: {error}")

    def write_refused(self) -> None:
        """<course>/refused-submissions.csv: this set's refusals from this Collect, other sets' kept."""
        path = Path(self.coursedir.root) / REFUSED_FILE
        rows = []
        if path.exists():
            with open(path, newline="") as handle:
                rows = [row for row in csv.DictReader(handle) if row["set"] != self.coursedir.assignment_id]
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", newline="") as handle:
            writer = csv.DictWriter(handle, REFUSED_COLUMNS)
            writer.writeheader()
            writer.writerows(rows + self.refused)
