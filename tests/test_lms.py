"""An LMS download graded by `make grade SUBMISSIONS=download.zip` (scripts/grade.py, grading/lms.py).

One course with set 01 only. The same notebooks (a right one, a wrong one) are graded three
times: from a folder, as Canvas names them in its download and as Moodle does (per-student
folders and flat names). The scores must be the same, the students the roster's, and the import
CSVs hold those scores. The Canvas zip also carries what a class hands in by mistake or on
purpose: a second, later file of one student, a copy suffix, a student not in the roster, a path
that climbs out, an absolute path, a symlink, a PDF, a zip inside the zip. The zip's limits
(a bomb's sizes, many files) and a broken zip are checked on the extractor alone.
"""

from __future__ import annotations

import csv
import shutil
import subprocess
import sys
import uuid
import zipfile
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook

from course_lib import exercise_notebook
from exercise_harness import ROOT, mutants
from test_grading import last_two, points, submission

sys.path.insert(0, str(ROOT))
from grading.lms import PATTERNS, Student, ZipLimits, match_student, safe_extract, set_of  # noqa: E402

SET01 = "01_attention_scores"
STEM = exercise_notebook(SET01).removesuffix(".ipynb")  # what a learner's copy suffixes
ROSTER = "student_id,name,lms_id\nalice,Alice Doe,1001\nbob,Bob Smith,1002\ncarol,Carol King,1004\n"
ABSOLUTE = Path(f"/tmp/lms-test-{uuid.uuid4().hex}.ipynb")  # where an absolute entry would land


def grade(course: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "grade.py"), "--course", str(course), *args],
                          capture_output=True, text=True)


def scores(course: Path) -> dict[str, dict[str, float]]:
    """Every graded student's score per exercise, from the gradebook as the last run left it."""
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        return {s.student.id: {g.name.removesuffix("_tests"): g.score for nb in s.notebooks for g in nb.grades}
                for s in gradebook.assignment_submissions(SET01)}


def csv_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def entry(z: zipfile.ZipFile, name: str, text: str, day: int = 20) -> None:
    """A file of the zip with its modification time (which tells the later of two files)."""
    z.writestr(zipfile.ZipInfo(name, (2026, 11, day, 10, 0, 0)), text)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """Grade the same notebooks from a folder, a Canvas zip and a Moodle zip; keep what each run left."""
    tmp = tmp_path_factory.mktemp("lms")
    course = tmp / "course"
    (course / "solutions").mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(ROOT / "solutions" / SET01, course / "solutions" / SET01)
    assert grade(course, "--exercises-only").returncode == 0
    right = nbformat.writes(submission(course, SET01, {}))
    wrong = nbformat.writes(submission(course, SET01, {ex: next(iter(mutants(SET01)[ex].values()))
                                                       for ex in last_two(SET01)}))
    (tmp / "roster.csv").write_text(ROSTER)
    results = {"course": course, "tmp": tmp}

    folder = tmp / "folder"
    for student, text in [("alice", right), ("bob", wrong)]:
        (folder / student / SET01).mkdir(parents=True)
        (folder / student / SET01 / exercise_notebook(SET01)).write_text(text)
    assert grade(course, "--submissions", str(folder)).returncode == 0
    results["folder"] = scores(course)

    canvas = tmp / "canvas.zip"
    with zipfile.ZipFile(canvas, "w") as z:
        entry(z, f"doealice_1001_5001_{STEM}.ipynb", right)
        entry(z, f"smithbob_1002_4000_{STEM}.ipynb", right, day=19)  # bob's first try: replaced
        entry(z, f"smithbob_LATE_1002_5002_{STEM}-1.ipynb", wrong, day=21)  # uploaded again, late
        entry(z, f"zedzoe_1003_5003_{STEM}-Copy1.ipynb", right)  # not in the roster
        entry(z, f"../../doealice_1001_5004_{STEM}.ipynb", wrong)
        entry(z, str(ABSOLUTE), wrong)
        link = zipfile.ZipInfo(f"doealice_1001_5005_{STEM}.ipynb")
        link.create_system, link.external_attr = 3, 0o120777 << 16  # a symlink, as Info-ZIP stores one
        z.writestr(link, str(course / "gradebook.db"))
        entry(z, "doealice_1001_5006_report.pdf", "%PDF")
        entry(z, "doealice_1001_5007_more.zip", "PK")
    run = grade(course, "--submissions", str(canvas), "--roster", str(tmp / "roster.csv"),
                "--canvas-column", f"{SET01}=Exercise set 01 (31415)")
    assert run.returncode == 0, run.stderr
    results |= {"canvas": scores(course), "canvas_out": run.stdout, "canvas_grades": csv_rows(course / "grades.csv"),
                "canvas_csv": (course / "canvas-grades.csv").read_text(),
                "canvas_mode": (course / "canvas-grades.csv").stat().st_mode & 0o777,
                "grades_mode": (course / "grades.csv").stat().st_mode & 0o777,
                "staging_links": [p for p in (course / ".grading" / "lms").rglob("*") if p.is_symlink()]}

    moodle = tmp / "moodle.zip"
    with zipfile.ZipFile(moodle, "w") as z:
        entry(z, f"Alice Doe_77_assignsubmission_file/{STEM}.ipynb", right)  # "download in folders"
        entry(z, f"Bob Smith_78_assignsubmission_file_{SET01}.ipynb", wrong)  # flat; named as before
        entry(z, "Carol King_79_assignsubmission_file/homework.ipynb", right)  # which set? (no --set)
    run = grade(course, "--submissions", str(moodle), "--roster", str(tmp / "roster.csv"))
    assert run.returncode == 0, run.stderr
    results |= {"moodle": scores(course), "moodle_out": run.stdout, "moodle_grades": csv_rows(course / "grades.csv"),
                "moodle_csv": csv_rows(course / f"moodle-grades-{SET01}.csv"),
                "moodle_mode": (course / f"moodle-grades-{SET01}.csv").stat().st_mode & 0o777}
    return results


def test_the_lms_grade_files_are_readable_by_their_owner_only(runs):
    """Every student's grade is in them, and a class's hub lets students read the checkout."""
    assert runs["canvas_mode"] == 0o600 and runs["moodle_mode"] == 0o600, (oct(runs["canvas_mode"]),
                                                                           oct(runs["moodle_mode"]))
    assert runs["grades_mode"] == 0o600, oct(runs["grades_mode"])


def test_a_download_scores_what_the_same_notebooks_score_from_a_folder(runs):
    full = points(runs["course"], SET01)
    assert runs["folder"]["alice"] == full and runs["folder"]["bob"] != full
    for lms in ("canvas", "moodle"):
        assert runs[lms]["alice"] == runs["folder"]["alice"], lms
        assert runs[lms]["bob"] == runs["folder"]["bob"], lms


def test_the_latest_of_two_files_is_graded_and_said_so(runs):
    # bob's earlier file was right: grading the later, wrong one shows the latest was kept.
    notes = {row["student_id"]: row["notes"] for row in runs["canvas_grades"]}
    assert f"graded the latest, smithbob_LATE_1002_5002_{STEM}-1.ipynb" in notes["bob"]
    assert f"left out smithbob_1002_4000_{STEM}.ipynb" in notes["bob"] and "LATE" in notes["bob"]


def test_a_student_not_in_the_roster_is_graded_and_listed(runs):
    assert runs["canvas"]["canvas-1003"] == points(runs["course"], SET01)
    rows = {row["student_id"]: row for row in runs["canvas_grades"]}
    assert "not in the roster: zedzoe (canvas id 1003)" in rows["canvas-1003"]["notes"]
    assert f"graded {STEM}-Copy1.ipynb" in rows["canvas-1003"]["notes"]
    assert rows["carol"]["status"] == "not submitted" and rows["carol"]["score"] == ""


def test_each_hazard_of_the_zip_is_refused_by_name_and_nothing_lands_outside_staging(runs):
    out = runs["canvas_out"]
    for line in [f"../../doealice_1001_5004_{STEM}.ipynb: a path that climbs out",
                 f"{ABSOLUTE}: an absolute path", f"doealice_1001_5005_{STEM}.ipynb: a symbolic link",
                 "doealice_1001_5006_report.pdf: not a notebook",
                 "doealice_1001_5007_more.zip: an archive inside the download (not opened)"]:
        assert f"download: {line}" in out, line
    assert not ABSOLUTE.exists() and not (runs["tmp"] / f"doealice_1001_5004_{STEM}.ipynb").exists()
    assert not list(runs["tmp"].parent.glob(f"doealice_1001_5004_{STEM}.ipynb"))
    assert runs["staging_links"] == []
    # alice's refused files did not replace her one real file.
    assert runs["canvas"]["alice"] == points(runs["course"], SET01)


def test_the_canvas_import_csv(runs):
    lines = runs["canvas_csv"].splitlines()
    full = sum(points(runs["course"], SET01).values())
    bob = sum(runs["folder"]["bob"].values())
    assert lines[0] == "Student,ID,SIS User ID,SIS Login ID,Section,Exercise set 01 (31415)"
    assert lines[1] == f"    Points Possible,,,,,{full:g}"
    assert sorted(lines[2:]) == sorted([f"Alice Doe,1001,,,,{full:g}", f"Bob Smith,1002,,,,{bob:g}",
                                        f"zedzoe,1003,,,,{full:g}"])


def test_the_moodle_worksheet(runs):
    full = sum(points(runs["course"], SET01).values())
    bob = sum(runs["folder"]["bob"].values())
    got = [(r["Identifier"], r["Full name"], r["Grade"], r["Maximum Grade"]) for r in runs["moodle_csv"]]
    assert got == [("Participant 77", "Alice Doe", f"{full:g}", f"{full:g}"),
                   ("Participant 78", "Bob Smith", f"{bob:g}", f"{full:g}")]
    assert all(r["Last modified (grade)"] for r in runs["moodle_csv"])
    assert "for Moodle to import" in runs["moodle_out"]


def test_a_notebook_named_as_earlier_releases_named_it_is_graded_with_a_note(runs):
    """Bob's Moodle file is named after the set alone, as before the notebooks had names of their own:
    it is his hand-in for that set (his score is the folder's, test above), and the note says why."""
    notes = {row["student_id"]: row["notes"] for row in runs["moodle_grades"]}
    assert (f"graded {SET01}.ipynb, the name earlier releases gave this notebook (now {exercise_notebook(SET01)})"
            in notes["bob"]), notes["bob"]
    assert "earlier releases" not in notes["alice"], notes["alice"]  # named as it should be: no note


def test_a_file_whose_set_cannot_be_told_is_refused_by_name(runs):
    assert ("download: Carol King_79_assignsubmission_file/homework.ipynb: no exercise set is named "
            "homework.ipynb") in runs["moodle_out"] and "pass --set" in runs["moodle_out"]


def test_a_broken_or_unrecognised_zip_stops_with_a_message_naming_it(runs, tmp_path):
    broken = tmp_path / "download.zip"
    broken.write_bytes(b"PK\x03\x04 cut off in the middle")
    run = grade(runs["course"], "--submissions", str(broken))
    assert run.returncode != 0 and "download.zip is not a readable zip file" in run.stderr
    plain = tmp_path / "plain.zip"
    with zipfile.ZipFile(plain, "w") as z:
        z.writestr(exercise_notebook(SET01), "{}")
    run = grade(runs["course"], "--submissions", str(plain))
    assert run.returncode != 0 and "pass --lms canvas or --lms moodle" in run.stderr


def test_a_zip_bomb_is_refused_by_its_sizes_and_its_count(tmp_path):
    bomb = tmp_path / "bomb.zip"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("doealice_1001_1_01_attention_scores.ipynb", b"0" * 3_000_000)  # 3 MB in about 3 kB
        z.writestr("smithbob_1002_2_01_attention_scores.ipynb", b"{}")
    dest = tmp_path / "staging"
    dest.mkdir()
    written, problems = safe_extract(bomb, dest, ZipLimits(file_bytes=1_000_000))
    assert [p.name for p in written] == ["smithbob_1002_2_01_attention_scores.ipynb"]
    assert problems == ["doealice_1001_1_01_attention_scores.ipynb: 3000000 bytes once uncompressed, more than "
                        "the 1000000 a notebook may have; skipped"]
    _, problems = safe_extract(bomb, tmp_path / "again", ZipLimits(total_bytes=2_000_000))
    assert "passes 2000000 bytes uncompressed" in problems[0]
    many = tmp_path / "many.zip"
    with zipfile.ZipFile(many, "w") as z:
        for k in range(101):
            z.writestr(f"student{k}_{k}_{k}_01_attention_scores.ipynb", b"{}")
    with pytest.raises(ValueError, match="many.zip holds 101 files, more than the 100 allowed"):
        safe_extract(many, tmp_path / "many", ZipLimits(files=100))
    assert not (tmp_path / "many").exists()


def test_a_zip_that_understates_a_size_yields_no_more_than_it_declares(tmp_path):
    """A bomb may declare a small size and hold a large one: reading stops at the declared size."""
    archive = tmp_path / "liar.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("doealice_1001_1_01_attention_scores.ipynb", b"0" * 3_000_000)
    data = bytearray(archive.read_bytes())
    for signature, at in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):  # local and central headers' sizes
        start = data.index(signature)
        data[start + at:start + at + 4] = (1000).to_bytes(4, "little")
    archive.write_bytes(bytes(data))
    written, problems = safe_extract(archive, tmp_path / "out")
    assert written == [] and "could not be extracted" in problems[0] and "CRC" in problems[0], problems
    assert not list((tmp_path / "out").rglob("*.ipynb"))


def test_two_entries_with_one_name_keep_the_first(tmp_path):
    archive = tmp_path / "twice.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("a_1_2_01_attention_scores.ipynb", b"first")
        with pytest.warns(UserWarning):  # zipfile warns about the duplicate name itself
            z.writestr("a_1_2_01_attention_scores.ipynb", b"second")
    written, problems = safe_extract(archive, tmp_path / "out")
    assert [p.read_bytes() for p in written] == [b"first"] and "could not be extracted" in problems[0]


def test_names_sets_and_students_are_read_as_each_lms_writes_them():
    import re

    canvas = re.match(PATTERNS["canvas"], "/smithbob_LATE_1002_5002_01_attention_scores-1.ipynb")
    assert canvas and (canvas["name"], canvas["late"], canvas["lms_id"], canvas["file_id"]) == (
        "smithbob", "LATE", "1002", "01_attention_scores-1.ipynb")
    anonymous = re.match(PATTERNS["canvas"], "/anon_x7Yq2_5002_01_attention_scores.ipynb")
    assert anonymous and anonymous["lms_id"] == "anon_x7Yq2"
    moodle = re.match(PATTERNS["moodle"], "/Jean Paul Sartre_42_assignsubmission_file/01_attention_scores.ipynb")
    assert moodle and (moodle["name"], moodle["lms_id"]) == ("Jean Paul Sartre", "42")
    sets = ["01_attention_scores", "02_masks"]
    assert [set_of(n, sets) for n in ["01_attention_scores_exercises.ipynb", "01_attention_scores_exercises-Copy2.ipynb",
                                      "01_attention_scores_exercises (3).ipynb", "02_masks_exercises-1.ipynb",
                                      "01_attention_scores.ipynb", "02_masks-Copy1.ipynb",  # earlier releases' names
                                      "homework.ipynb", "01_attention_scores_v2_final.ipynb",
                                      "01_attention_scores_exercises_v2.ipynb", "02_masks_answers.ipynb"]] == [
        "01_attention_scores", "01_attention_scores", "01_attention_scores", "02_masks",
        "01_attention_scores", "02_masks", None, None, None, None]
    assert set_of("homework.ipynb", sets, forced="02_masks") == "02_masks"
    roster = [Student("alice", "Alice Doe", "1001"), Student("bob", "Bob Smith")]
    assert match_student(roster, "canvas", "1001", "whoever").student_id == "alice"  # the id first
    assert match_student(roster, "canvas", "9", "smithbob").student_id == "bob"  # Canvas's lastfirst
    assert match_student(roster, "moodle", "77", "Alice  Doe").student_id == "alice"
    assert match_student(roster, "moodle", "78", "Alice Smith") is None


def test_the_kubernetes_files_parse_and_pin_what_pyproject_pins():
    """hub/kubernetes/ is documentation, not run here: it must at least parse and agree with the course."""
    import re
    import tomllib

    import yaml

    folder = ROOT / "hub" / "kubernetes"
    values = yaml.safe_load((folder / "values.yaml").read_text())
    mounts = values["singleuser"]["storage"]["extraVolumeMounts"]
    assert {"name": "exchange", "mountPath": "/srv/nbgrader/exchange"} in mounts
    assert 'c.Exchange.root = "/srv/nbgrader/exchange"' in values["singleuser"]["extraFiles"]["nbgrader-config"][
        "stringData"]
    assert values["cull"]["enabled"] and values["hub"]["config"]["Authenticator"]["admin_users"]
    assert len(list(yaml.safe_load_all((folder / "volumes.yaml").read_text()))) == 2
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pinned = dict(re.match(r"([\w-]+)==([^\s;]+)", p).groups() for p in
                  project["dependencies"] + project["optional-dependencies"]["dev"] if "==" in p)
    dockerfile = (folder / "Dockerfile").read_text()
    in_image = dict(re.findall(r"([\w-]+)==([\w.*]+)", dockerfile))
    assert {"torch", "nbgrader"} <= set(in_image)
    # The image's jupyterhub-singleuser follows the chart's hub (z2jh 4.x: JupyterHub 5), not the
    # one-machine hub's pin (6.1.1); every other package is the course's own pin.
    assert in_image.pop("jupyterhub") == "5.*"
    assert {name: version for name, version in in_image.items() if name in pinned} == \
        {name: pinned[name] for name in in_image if name in pinned}
    assert "https://download.pytorch.org/whl/cpu" in dockerfile
    copied = re.findall(r"^COPY (\S+)", dockerfile, re.M)
    assert not {"solutions", "tests", "grading", "nbgrader_config.py"} & set(copied)
    ignored = (folder / "Dockerfile.dockerignore").read_text().split()
    assert {".venv", "solutions", "tests", "grading", "gradebook.db"} <= set(ignored)
    # A student's lab in the image is make lab's: learner-lab/'s files, not a list of its own.
    assert "learner-lab" in copied and "ENV JUPYTER_CONFIG_PATH=/opt/transformer-roots/learner-lab" in dockerfile
    assert "extension disable" not in dockerfile
