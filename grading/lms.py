"""Submissions downloaded from an LMS (Canvas or Moodle) as one zip, and grades it can import.

`scripts/grade.py --submissions download.zip` runs `collect`:
  1. `safe_extract` copies the zip's notebooks into the staging folder, refusing what an honest
     mistake or an attack puts in a zip (paths that climb out, absolute paths, symlinks, sizes
     and counts past `ZipLimits`, files that are not notebooks), each with a message naming it.
     nbgrader's own extractor (`ExtractorPlugin`, setuptools' `unpack_zipfile`) is not used: it
     skips climbing and absolute paths without a word, reads each entry whole into memory with
     no limit on size or count, opens zips found inside the zip, and applies the permission bits
     the zip declares.
  2. nbgrader's `zip_collect` moves each notebook to <staging>/submitted/<student>/<set>/,
     reading the student and the file from its name with `LmsCollector`, nbgrader's
     `FileNameCollectorPlugin` configured with the LMS's named regex. When a student handed
     in two files for one set, nbgrader keeps the one with the newer timestamp (the zip entry's).
  3. `write_canvas_csv` / `write_moodle_csv` write the grades in the form each LMS imports.
"""

from __future__ import annotations

import csv
import datetime
import os
import re
import shutil
import stat
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from nbgrader.plugins import FileNameCollectorPlugin
from traitlets import Unicode

from course_lib import exercise_notebook

# The names each LMS gives a downloaded file, looked up in their source code:
# Canvas (lib/content_zipper.rb): <sortable name, lowercased, only word characters>[_LATE]_<user id>
#   _<attachment id>_<file name>; an anonymous assignment puts anon_<id> in place of the name and id
#   (so a name never starts with anon_ or LATE_, and the shortest name that fits is the one).
# Moodle (mod/assign/classes/downloader.php): <full name, "_" made " ">_<participant id>
#   _assignsubmission_file_<file name>, or, with "download submissions in folders" (the default
#   since Moodle 3.1), <full name>_<participant id>_assignsubmission_file/<file name>.
# Each pattern sees the path of the file inside the staging folder, hence the leading `.*/`.
PATTERNS = {
    "canvas": r".*/(?:(?!anon_|LATE_)(?P<name>\w*?)_)?(?:(?P<late>LATE)_)?(?P<lms_id>anon_[A-Za-z0-9]+|\d+)_"
              r"(?P<attachment>\d+)_(?P<file_id>[^/]+)$",
    "moodle": r".*/(?P<name>[^/_]+)_(?P<lms_id>\d+)_assignsubmission_file[_/](?P<file_id>[^/]+)$",
}


@dataclass(frozen=True)
class ZipLimits:
    """What a download may hold; an LMS zip of 300 students' notebooks is far under each."""
    files: int = 5000  # entries, folders included
    file_bytes: int = 50 * 2**20  # one notebook, uncompressed
    total_bytes: int = 2 * 2**30  # every notebook together, uncompressed


@dataclass
class Handed:
    """One notebook found in the download: whose it is, for which set, and where it was put."""
    path: Path  # the extracted copy, in the staging folder
    entry: str  # its name in the zip
    lms_id: str
    name: str
    set_name: str
    student: str  # the course's student id (the roster's), or <lms>-<lms id> when unknown
    known: bool
    time: datetime.datetime
    file_name: str  # the name the learner gave it
    late: bool = False


@dataclass
class Collected:
    """What `collect` found: where the submissions now are, who handed in what, what was refused."""
    lms: str
    submitted: Path
    handed: list[Handed] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # about the zip's files, each naming one
    notes: dict[tuple[str, str], list[str]] = field(default_factory=dict)  # (student, set): notes


def is_symlink(info: zipfile.ZipInfo) -> bool:
    """A zip made on Unix stores a symlink as an entry whose mode says link and whose data is the target."""
    return info.create_system == 3 and stat.S_ISLNK(info.external_attr >> 16)


def entry_problem(info: zipfile.ZipInfo) -> str | None:
    """Why one entry of the zip is not extracted, or None if it may be (a notebook, safely named)."""
    name = info.filename.replace("\\", "/")  # Windows zips may use backslashes
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name):
        return f"{info.filename}: an absolute path; skipped"
    if ".." in name.split("/"):
        return f"{info.filename}: a path that climbs out of the download ('..'); skipped"
    if is_symlink(info):
        return f"{info.filename}: a symbolic link, not a file; skipped"
    if not name.endswith(".ipynb"):
        kind = "an archive inside the download (not opened)" if name.endswith((".zip", ".gz", ".tar")) \
            else "not a notebook"
        return f"{info.filename}: {kind}; skipped"
    return None


def safe_extract(archive: Path, dest: Path, limits: ZipLimits = ZipLimits()) -> tuple[list[Path], list[str]]:
    """Copy the zip's notebooks under dest, keeping their relative paths; return them and the problems.

    Nothing is written outside dest: every entry that is not a plainly named notebook is refused
    before anything is written, and each file is created new (never through an existing link).
    Raises ValueError, naming the zip, when it cannot be read or holds more than the limits allow.
    """
    try:
        zf = zipfile.ZipFile(archive)
    except (zipfile.BadZipFile, OSError) as error:
        raise ValueError(f"{archive.name} is not a readable zip file ({error}): download it again") from error
    with zf:
        entries = zf.infolist()
        if len(entries) > limits.files:
            raise ValueError(f"{archive.name} holds {len(entries)} files, more than the {limits.files} allowed; "
                             "nothing was extracted")
        problems, extracted, total = [], [], 0
        for info in entries:
            if info.is_dir():
                continue
            problem = entry_problem(info)
            if problem is None and info.file_size > limits.file_bytes:
                problem = (f"{info.filename}: {info.file_size} bytes once uncompressed, more than the "
                           f"{limits.file_bytes} a notebook may have; skipped")
            if problem is None and total + info.file_size > limits.total_bytes:
                problem = (f"{info.filename}: the download passes {limits.total_bytes} bytes uncompressed here; "
                           "skipped, with every later file")
            if problem:
                problems.append(problem)
                continue
            total += info.file_size
            target = dest / info.filename.replace("\\", "/")
            try:
                copy_entry(zf, info, dest, target, limits.file_bytes)
            except (zipfile.BadZipFile, OSError, ValueError, EOFError) as error:
                problems.append(f"{info.filename}: could not be extracted ({error}); skipped")
                continue
            extracted.append(target)
    return extracted, problems


def copy_entry(zf: zipfile.ZipFile, info: zipfile.ZipInfo, dest: Path, target: Path, most: int) -> None:
    """Write one entry to target (a new file under dest), at most `most` bytes, with the zip's time.

    zipfile already stops at the size the entry declares (and then checks its CRC); the count
    here keeps the limit whatever the zip says.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    if not target.parent.resolve().is_relative_to(dest.resolve()):  # only files are written: never true
        raise ValueError("its folder leads out of the staging folder")
    # O_EXCL: a second entry with the same name, or anything already there, is refused, not overwritten.
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    written = 0
    try:
        with os.fdopen(fd, "wb") as out, zf.open(info) as data:
            while chunk := data.read(2**20):
                written += len(chunk)
                if written > most:
                    raise ValueError(f"more than {most} bytes once uncompressed")
                out.write(chunk)
    except BaseException:
        target.unlink()  # this entry's own file, half written (a file already there was never opened)
        raise
    stamp = datetime.datetime(*info.date_time).timestamp()
    os.utime(target, (stamp, stamp))


def set_of(file_name: str, sets: list[str], forced: str | None = None) -> str | None:
    """The exercise set a handed-in file is for, told by its original name (or `forced`, from --set).

    The name is the set's notebook (`exercise_notebook`), or the set's own name, which earlier
    releases gave it; either may carry what a learner's or the LMS's copy adds:
    01_attention_scores_exercises-Copy1.ipynb, 01_attention_scores_exercises-1.ipynb (Canvas renames
    a file uploaded again), 01_attention_scores_exercises (2).ipynb.
    """
    if forced:
        return forced
    stem = file_name.removesuffix(".ipynb")
    for name in sets:
        for form in (exercise_notebook(name).removesuffix(".ipynb"), name):
            rest = stem[len(form):] if stem.startswith(form) else None
            if rest is not None and re.fullmatch(r"([ _-]?copy)?[ _-]?\(?\d*\)?", rest, re.I):
                return name
    return None


@dataclass(frozen=True)
class Student:
    """A roster row: the course's id, the full name, and the LMS's user id when known (Canvas)."""
    student_id: str
    name: str
    lms_id: str = ""


def read_roster(path: Path | None) -> list[Student]:
    """The roster CSV: student id, name and, optionally, the LMS's user id; a header row is allowed.

    Moodle's participant ids change from one assignment to the next, so Moodle students are
    matched by full name; Canvas's user ids stay, so they are matched by id first, then by name.
    """
    if path is None:
        return []
    with open(path, newline="") as handle:
        rows = [row for row in csv.reader(handle) if row and any(cell.strip() for cell in row)]
    if rows and rows[0][0].strip().lower() in ("student_id", "student id", "id"):
        rows = rows[1:]
    return [Student(*(cell.strip() for cell in row[:3])) for row in rows]


def squeeze(name: str) -> str:
    """A name as Canvas writes it in a file name, for comparing: lowercase word characters only."""
    return re.sub(r"\W|_", "", name).lower()


def match_student(roster: list[Student], lms: str, lms_id: str, name: str) -> Student | None:
    """The roster's student behind an LMS id and the name in the file name, or None."""
    by_id = [s for s in roster if lms == "canvas" and s.lms_id and s.lms_id == lms_id]
    if by_id:
        return by_id[0]
    if lms == "canvas":  # Canvas writes "Last, First" as lastfirst; a roster may say First Last
        def forms(student: Student) -> set[str]:
            words = student.name.split()
            return {squeeze(student.name), squeeze(" ".join(words[-1:] + words[:-1]))}
        found = [s for s in roster if name and squeeze(name) in forms(s)]
    else:
        found = [s for s in roster if " ".join(s.name.split()).lower() == " ".join(name.split()).lower()]
    return found[0] if len(found) == 1 else None


class LmsCollector(FileNameCollectorPlugin):
    """nbgrader's FileNameCollectorPlugin with the LMS's named regex, and two steps it lacks:

    the LMS id becomes the course's student id (from the roster; `<lms>-<id>` when the student
    is not in it), and the file becomes `exercise_notebook(<set>)` whatever name or copy suffix it
    carries, so that two files of one student for one set meet in nbgrader, which keeps the newer. The timestamp is the
    file's modification time, which `safe_extract` set from the zip.
    """

    lms = Unicode("canvas", help="canvas or moodle").tag(config=True)
    roster = Unicode("", help="roster CSV: student id, name, LMS user id").tag(config=True)
    set_name = Unicode("", help="the set every notebook is for (otherwise told by its name)").tag(config=True)
    sets = Unicode("", help="the course's sets, comma-separated").tag(config=True)

    def collect(self, submitted_file: str) -> dict | None:
        found = super().collect(submitted_file)
        if not found:
            return None
        set_name = set_of(found["file_id"], self.sets.split(","), self.set_name or None)
        if set_name is None:
            return None
        student = match_student(read_roster(Path(self.roster) if self.roster else None), self.lms,
                                found["lms_id"], found["name"] or "")
        found["student_id"] = student.student_id if student else f"{self.lms}-{found['lms_id']}"
        found["file_id"] = exercise_notebook(set_name)
        found["timestamp"] = datetime.datetime.fromtimestamp(os.path.getmtime(submitted_file),
                                                             datetime.timezone.utc).isoformat()
        return found


def detect_lms(paths: list[Path], root: Path) -> str | None:
    """The one LMS whose naming the notebooks' names follow (canvas or moodle); None if neither or both."""
    fits = {lms: sum(bool(re.match(p, "/" + str(path.relative_to(root)))) for path in paths)
            for lms, p in PATTERNS.items()}
    matching = [lms for lms, n in fits.items() if n]
    return matching[0] if len(matching) == 1 else None


def collect(course: Path, archive: Path, staging: Path, sets: list[str], lms: str | None = None,
            set_name: str | None = None, roster_path: Path | None = None,
            limits: ZipLimits = ZipLimits()) -> Collected:
    """Extract the LMS download into staging and have nbgrader's zip_collect file it per student and set.

    staging must be a folder inside the course (nbgrader's paths are relative to it); it is
    emptied first. Raises ValueError when the zip cannot be read or its LMS cannot be told.
    """
    shutil.rmtree(staging, ignore_errors=True)
    extracted_root = staging / "extracted"
    extracted_root.mkdir(parents=True)
    paths, problems = safe_extract(archive, extracted_root, limits)
    lms = lms or detect_lms(paths, extracted_root)
    if lms is None:
        raise ValueError(f"cannot tell whether {archive.name} comes from Canvas or Moodle by its file names: "
                         "pass --lms canvas or --lms moodle")
    collector = LmsCollector(lms=lms, named_regexp=PATTERNS[lms], roster=str(roster_path or ""),
                             set_name=set_name or "", sets=",".join(sets))
    roster = read_roster(roster_path)
    result = Collected(lms, staging / "submitted", problems=problems)
    for path in sorted(paths):
        found = re.match(PATTERNS[lms], "/" + str(path.relative_to(extracted_root)))
        entry = str(path.relative_to(extracted_root))
        if not found:
            result.problems.append(f"{entry}: not named the way {lms.capitalize()} names a download; skipped")
            continue
        chosen = set_of(found["file_id"], sets, set_name)
        if chosen is None:
            result.problems.append(f"{entry}: no exercise set is named {found['file_id']} (the sets: "
                                   f"{', '.join(sets)}); name it {exercise_notebook('<set>')} or pass --set; skipped")
            continue
        info = collector.collect(str(path))
        student = match_student(roster, lms, found["lms_id"], found["name"] or "")
        result.handed.append(Handed(path, entry, found["lms_id"], student.name if student else found["name"] or "",
                                    chosen, info["student_id"], student is not None,
                                    datetime.datetime.fromtimestamp(path.stat().st_mtime), found["file_id"],
                                    bool(found.groupdict().get("late"))))
    for set_ in sorted({h.set_name for h in result.handed}):
        run_zip_collect(course, staging, [h for h in result.handed if h.set_name == set_], collector)
    describe(result, roster_path is not None)
    return result


def run_zip_collect(course: Path, staging: Path, handed: list[Handed], collector: LmsCollector) -> None:
    """nbgrader zip_collect for one set, over the files already extracted for it."""
    set_name = handed[0].set_name
    downloaded = staging.relative_to(course) / "downloaded"
    extracted = course / downloaded / set_name / "extracted"
    for h in handed:  # flat: the pattern still reads each name (a Moodle folder joins with "/")
        target = extracted / h.entry
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(h.path, target)
    env = os.environ | {"PYTHONPATH": f"{Path(__file__).resolve().parent.parent}{os.pathsep}"
                                      f"{os.environ.get('PYTHONPATH', '')}"}
    run = subprocess.run(
        [sys.executable, "-m", "nbgrader", "zip_collect", set_name, "--force", "--log-level=WARN",
         "--ZipCollectApp.collector_plugin=grading.lms.LmsCollector",
         f"--ZipCollectApp.downloaded_directory={downloaded}",
         f"--CourseDirectory.submitted_directory={staging.relative_to(course) / 'submitted'}",
         f"--LmsCollector.named_regexp={collector.named_regexp}", f"--LmsCollector.lms={collector.lms}",
         f"--LmsCollector.roster={collector.roster}", f"--LmsCollector.set_name={set_name}",
         f"--LmsCollector.sets={collector.sets}"],
        cwd=course, env=env, capture_output=True, text=True)
    if run.returncode != 0:
        raise ValueError(f"nbgrader zip_collect failed for {set_name}: {(run.stderr or run.stdout).strip()[-400:]}")


def describe(result: Collected, with_roster: bool) -> None:
    """Notes for each student and set: the file graded, a second file left out, a name not in the roster."""
    for key in sorted({(h.student, h.set_name) for h in result.handed}):
        files = sorted((h for h in result.handed if (h.student, h.set_name) == key), key=lambda h: h.time)
        expected = exercise_notebook(key[1])
        kept = result.submitted / key[0] / key[1] / expected
        graded = next((h for h in reversed(files) if kept.exists() and h.path.read_bytes() == kept.read_bytes()),
                      files[-1])
        notes = result.notes.setdefault(key, [])
        if len(files) > 1:
            others = ", ".join(h.entry for h in files if h is not graded)
            notes.append(f"{len(files)} files for {key[1]} in the download: graded the latest, {graded.entry} "
                         f"({graded.time:%Y-%m-%d %H:%M}); left out {others}")
        elif graded.file_name != expected:
            earlier = (set_of(graded.file_name, [key[1]]) == key[1]  # the set's name, not its notebook's
                       and not graded.file_name.startswith(expected.removesuffix(".ipynb")))
            notes.append(f"graded {graded.file_name}, the name earlier releases gave this notebook (now {expected})"
                         if earlier else f"graded {graded.file_name} (the file should be named {expected})")
        if graded.late:
            notes.append("marked LATE by the LMS")
        if with_roster and not graded.known:
            notes.append(f"not in the roster: {graded.name or 'no name'} ({result.lms} id {graded.lms_id}), "
                         f"graded as {key[0]}")


def _score(score: float | None) -> str:
    return "" if score is None else f"{score:g}"


def write_canvas_csv(path: Path, rows: list[dict], sets: list[str], max_scores: dict[str, float],
                     columns: dict[str, str]) -> None:
    """Canvas's gradebook import: Student, ID, SIS User ID, SIS Login ID, Section, one column per set.

    Canvas's importer (app/models/gradebook_importer.rb) wants those five student columns, a row
    per student found by its ID (the Canvas user id), and reads the "Points Possible" row when
    there is one, as its own export writes it: here the set's points. A column is matched to an
    assignment by "<title> (<assignment id>)", as that export names it (`columns` maps a set to
    it), or by the title alone; a title Canvas does not know makes a new assignment. A blank cell
    leaves Canvas's grade as it is. Rows: each Canvas user of the download (not anonymous ids).
    """
    by_user: dict[str, dict] = {}
    for row in rows:
        if row["lms_id"] and not row["lms_id"].startswith("anon_"):
            by_user.setdefault(row["lms_id"], {"name": row["name"]})[row["set_name"]] = row["score"]
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["Student", "ID", "SIS User ID", "SIS Login ID", "Section", *(columns.get(s, s) for s in sets)])
        writer.writerow(["    Points Possible", "", "", "", "", *(f"{max_scores[s]:g}" for s in sets)])
        for lms_id, got in sorted(by_user.items(), key=lambda item: item[1]["name"]):
            writer.writerow([got["name"], lms_id, "", "", "", *(_score(got.get(s)) for s in sets)])


MOODLE_DATE = "%A, %d %B %Y, %I:%M %p"  # how Moodle writes "Last modified (grade)" (its strftimedatetime)


def write_moodle_csv(path: Path, rows: list[dict], max_score: float, when: datetime.datetime) -> None:
    """Moodle's offline grading worksheet for one assignment, the columns its importer reads.

    The importer (mod/assign/feedback/offline) needs Identifier ("Participant <id>"), Grade and
    "Last modified (grade)": a grade whose date is older than the one in Moodle is not imported.
    No "Feedback comments" column: the grader's notes are for the instructor, not the student.
    """
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["Identifier", "Full name", "Email address", "Status", "Grade", "Maximum Grade",
                         "Grade can be changed", "Last modified (submission)", "Last modified (grade)"])
        for row in sorted(rows, key=lambda r: int(r["lms_id"])):
            writer.writerow([f"Participant {row['lms_id']}", row["name"], "", row["status"], _score(row["score"]),
                             f"{max_score:g}", "Yes", "", when.strftime(MOODLE_DATE)])
