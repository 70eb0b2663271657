"""A class on one hub, end to end in a real browser (headless Chromium): `make hub`'s JupyterHub
with nbgrader's exchange, three students and an instructor.

The instructor releases set 01 from the formgrader. Each student logs in, fetches it from the
Assignments tab, types answers into the notebook (one the reference's, one wrong in the last two
exercises, one a cheat from test_grading.py: a Tensor subclass that says yes to every
comparison), saves and submits. The instructor collects from the formgrader, grades in their
server's terminal with the course's pipeline (scripts/grade.py: sandbox, hidden tests judged
outside the kernel), and releases feedback; each student fetches it and reads their score.
The scores must be exactly what `make grade` gives the same notebooks. Then, as each student's
unix user (in their server's terminal) and through the hub: no student can read another's
submission, the instructor's course (solutions, gradebook), the checkout's solutions/, nor
reach another student's server.

Needs root (it creates unix users, removed at the end even on failure). The users, ports and
state folder are this test's own. Screenshots go to test-artifacts/hub/.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import pytest

from exercise_harness import exercise_names, mutants
from test_grading import CHEATS, SOLUTION

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import hub  # noqa: E402
from lab_driver import browser_missing_message, free_port, launch_options  # noqa: E402

ARTIFACTS = ROOT / "test-artifacts" / "hub"
SET01 = "01_attention_scores"
INSTRUCTOR = "trhub-prof"
# Ids no real user has; each student's answers: None = the reference answer.
STUDENTS = {
    "trhub-right": {},
    "trhub-wrong": {name: next(iter(mutants(SET01)[name].values())) for name in exercise_names(SET01)[-2:]},
    "trhub-cheat": CHEATS["subclass"][0],
}
STUDENT_PASSWORD = "students-test-password"  # test mode: the hub listens on 127.0.0.1 only
INSTRUCTOR_PASSWORD = "instructors-test-password-of-32-characters-or-more"


@dataclass
class Class:
    state: Path
    data: dict
    running: hub.RunningHub
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.running.url


@pytest.fixture(scope="module")
def hub_class():
    """The class made by `hub.py setup` on a throwaway roster, its hub on free local ports;
    stopped, and its users and folders removed, whatever happens."""
    if os.geteuid() != 0:
        pytest.fail("the hub test needs root: it creates unix users and runs servers as them "
                    "(CI runs as root; locally: sudo make test)")
    if not hub.PROXY.exists():
        pytest.fail(f"{hub.PROXY} is missing: run `make hub-proxy` (make test does)")
    for earlier in Path("/tmp").glob("trhub-*/class.json"):  # a run that was killed left its class
        hub.teardown(earlier.parent)
    state = Path(tempfile.mkdtemp(prefix="trhub-", dir="/tmp"))
    state.chmod(0o755)  # the students' homes are in it
    roster = state / "roster.csv"
    roster.write_text("student_id,name\n" + "".join(f"{s},Test {s.split('-')[1].title()}\n" for s in STUDENTS))
    the_class = None
    started = time.perf_counter()
    try:
        data = hub.setup(roster, [INSTRUCTOR], state, state / "home", sets=[SET01])
        setup_seconds = time.perf_counter() - started
        running = hub.launch(state, free_port(), free_port(), free_port(), state / "hub.log",
                             env={"TR_HUB_TEST_PASSWORD": STUDENT_PASSWORD,
                                  "TR_HUB_TEST_ADMIN_PASSWORD": INSTRUCTOR_PASSWORD})
        the_class = Class(state, data, running, {"setup": setup_seconds,
                                                 "start": time.perf_counter() - started - setup_seconds})
        yield the_class
    finally:
        if the_class is not None:  # the hub running now (a test may have restarted it)
            hub.stop(the_class.running)
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            shutil.copy(the_class.running.log, ARTIFACTS / "hub.log")
        hub.teardown(state)
        shutil.rmtree(state, ignore_errors=True)


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import Error, sync_playwright

    with sync_playwright() as playwright:
        try:
            chromium = playwright.chromium.launch(headless=True, **launch_options())
        except Error as error:
            pytest.fail(f"{browser_missing_message()}\n{error}")
        yield chromium
        chromium.close()


# --- What a user does in the browser.

def log_in(browser, url: str, user: str, password: str):
    """A fresh browser session that logs in at the hub and waits for the user's JupyterLab."""
    page = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
    page.goto(f"{url}/hub/login")
    page.fill("input[name=username]", user)
    page.fill("input[name=password]", password)
    page.click("#login_submit")
    page.wait_for_url(f"**/user/{user}/lab**", timeout=150_000)
    page.locator(".lm-MenuBar-itemLabel", has_text="Nbgrader").wait_for(timeout=60_000)
    return page


def close_modal(page) -> str:
    """The formgrader's answer to a button: its success dialog's text (an error dialog fails)."""
    dialog = page.locator("#success-modal, #error-modal").first
    dialog.wait_for(state="visible", timeout=120_000)
    text = dialog.inner_text()
    assert dialog.get_attribute("id") == "success-modal", text
    dialog.locator(".modal-footer button").first.click()
    dialog.wait_for(state="hidden")
    return text


def formgrader_button(page, url: str, user: str, column: str, shot: str | None = None) -> str:
    """Click the formgrader's Release, Collect or Release-feedback button for set 01."""
    page.goto(f"{url}/user/{user}/formgrader/manage_assignments")
    row = page.locator("tr", has_text=SET01)
    row.locator(f"td.{column} a").click()
    text = close_modal(page)
    if shot:
        page.reload()
        row.wait_for()
        page.screenshot(path=str(ARTIFACTS / shot), clip={"x": 0, "y": 0, "width": 1280, "height": 470})
    return text


TOP = {"x": 0, "y": 0, "width": 1280, "height": 400}  # JupyterLab's menu and the Assignments tab's lists


def open_assignments(page):
    """The Assignments tab (Nbgrader > Assignment List), refreshed."""
    page.locator(".lm-MenuBar-itemLabel", has_text="Nbgrader").click()
    page.locator(".lm-Menu-itemLabel", has_text="Assignment List").click()
    panel = page.locator("#nbgrader-assignment-list")
    panel.wait_for()
    return panel


def type_cell(page, index: int, source: str) -> None:
    """Replace the code of cell `index` of the open notebook, as a paste does."""
    cell = page.locator(".jp-NotebookPanel:visible .jp-Notebook .jp-Cell").nth(index)
    cell.scroll_into_view_if_needed()
    editor = cell.locator(".cm-content")
    editor.click()
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(source)


def answer(exercise: nbformat.NotebookNode, reference: nbformat.NotebookNode, own: dict[str, str]) -> dict[int, str]:
    """Cell index -> what the student types: their own answer, else the reference's."""
    reference_cells = {c.metadata["nbgrader"]["grade_id"]: c for c in reference.cells if "nbgrader" in c.metadata}
    typed = {}
    for index, cell in enumerate(exercise.cells):
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if cell.metadata.get("nbgrader", {}).get("solution"):
            typed[index] = own.get(grade_id, SOLUTION.sub(lambda m: m.group(1), reference_cells[grade_id].source))
    return typed


def fetch_answer_submit(page, user: str, own: dict[str, str]) -> None:
    panel = open_assignments(page)
    panel.get_by_role("button", name="Fetch").click()
    downloaded = panel.locator("#fetched_assignments_list")
    downloaded.get_by_text(SET01).first.wait_for(timeout=60_000)
    if user == "trhub-right":
        page.screenshot(path=str(ARTIFACTS / "student-assignments-fetched.png"), clip=TOP)
    exercise = nbformat.read(ROOT / "exercises" / SET01 / f"{SET01}.ipynb", as_version=4)
    reference = nbformat.read(ROOT / "solutions" / SET01 / f"{SET01}.ipynb", as_version=4)
    page.goto(page.url.split("/lab")[0] + f"/lab/tree/{SET01}/{SET01}.ipynb")
    page.get_by_role("heading", name="Exercise set 01").first.wait_for(timeout=90_000)
    for index, source in answer(exercise, reference, own).items():
        type_cell(page, index, source)
    page.keyboard.press("Control+s")
    # Saved when the tab no longer shows the unsaved-changes dot; the server's copy holds each answer.
    page.locator(".jp-mod-current.jp-mod-dirty").wait_for(state="detached", timeout=30_000)
    saved = page.request.get(page.url.split("/lab")[0] + f"/api/contents/{SET01}/{SET01}.ipynb").json()
    for index, source in answer(exercise, reference, own).items():
        assert saved["content"]["cells"][index]["source"].rstrip() == source.rstrip(), (user, index)
    panel = open_assignments(page)
    panel.locator("#fetched_assignments_list").get_by_role("button", name="Submit").click()
    panel.locator("#submitted_assignments_list").get_by_text(SET01).first.wait_for(timeout=60_000)
    if user == "trhub-right":
        page.screenshot(path=str(ARTIFACTS / "student-assignments-submitted.png"), clip=TOP)


TERMINAL = """async ([base, command, marker]) => {
  const xsrf = document.cookie.split('; ').find(c => c.startsWith('_xsrf='))?.slice(6) ?? '';
  const made = await fetch(base + 'api/terminals', {method: 'POST', headers: {'X-XSRFToken': xsrf}});
  if (!made.ok) throw new Error('no terminal: ' + made.status + ' ' + await made.text());
  const name = (await made.json()).name;
  const url = location.origin.replace('http', 'ws') + base + 'terminals/websocket/' + name;
  return await new Promise((resolve, reject) => {
    const socket = new WebSocket(url);
    let out = '';
    const timer = setTimeout(() => reject(new Error('no end marker in 600 s: ' + out.slice(-2000))), 600000);
    socket.onopen = () => socket.send(JSON.stringify(['stdin', command + '; echo ' + marker + '$?\\r']));
    socket.onmessage = event => {
      const [kind, text] = JSON.parse(event.data);
      if (kind === 'stdout') out += text;
      const end = out.match(new RegExp(marker + '(\\\\d+)'));
      if (end && out.lastIndexOf(marker) > out.indexOf(marker)) {
        clearTimeout(timer); socket.close();
        fetch(base + 'api/terminals/' + name, {method: 'DELETE', headers: {'X-XSRFToken': xsrf}});
        resolve(out);
      }
    };
    socket.onerror = () => reject(new Error('terminal websocket failed'));
  });
}"""


def in_terminal(page, command: str) -> tuple[int, str]:
    """Run a shell command in a terminal of the server this page shows, as its user types it;
    returns its exit code and output. (The marker is echoed twice: as typed, then as printed.)"""
    marker = "__END_OF_COMMAND__"
    base = re.match(r"https?://[^/]+(/user/[^/]+/)", page.url).group(1)
    out = page.evaluate(TERMINAL, [base, command, marker])
    code = int(re.findall(marker + r"(\d+)", out)[-1])
    return code, re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out)


# --- The cycle.

@dataclass
class Cycle:
    pages: dict
    seen_scores: dict[str, tuple[float, float]]  # student -> (score, max) read in their feedback
    grade_output: str
    seconds: float


@pytest.fixture(scope="module")
def cycle(hub_class, browser) -> Cycle:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    url = hub_class.url
    prof = log_in(browser, url, INSTRUCTOR, INSTRUCTOR_PASSWORD)
    formgrader_button(prof, url, INSTRUCTOR, "release", shot="formgrader-released.png")
    pages = {"prof": prof}
    for student, own in STUDENTS.items():
        pages[student] = page = log_in(browser, url, student, STUDENT_PASSWORD)
        fetch_answer_submit(page, student, own)
    text = formgrader_button(prof, url, INSTRUCTOR, "collect")
    assert "Successfully collected" in text, text
    course = hub_class.data["course"]
    code, grade_output = in_terminal(prof, f"cd {course} && python {ROOT}/scripts/grade.py --course {course}")
    (ARTIFACTS / "grade-output.txt").write_text(grade_output)
    assert code == 0, grade_output
    formgrader_button(prof, url, INSTRUCTOR, "release-feedback", shot="formgrader-feedback-released.png")
    seen = {}
    for student in STUDENTS:
        page = pages[student]
        panel = open_assignments(page)
        submitted = panel.locator("#submitted_assignments_list")
        submitted.get_by_role("button", name="Fetch Feedback").click()
        submitted.get_by_text("(view feedback)").first.wait_for(timeout=60_000)
        if student == "trhub-right":
            page.screenshot(path=str(ARTIFACTS / "student-feedback-fetched.png"), clip=TOP)
        # The feedback lands in ~/<set>/feedback/<time handed in>/<set>.html: opened as a page.
        folder = page.request.get(f"{url}/user/{student}/api/contents/{SET01}/feedback").json()
        (handed_in,) = [entry["path"] for entry in folder["content"] if entry["type"] == "directory"]
        page.goto(f"{url}/user/{student}/files/{handed_in}/{SET01}.html")
        header = page.locator("body").inner_text()
        score = re.search(r"Score: ([\d.]+) / ([\d.]+)", header)
        assert score, header[:500]
        seen[student] = (float(score.group(1)), float(score.group(2)))
        page.screenshot(path=str(ARTIFACTS / f"feedback-{student}.png"), clip={"x": 0, "y": 0, "width": 1280, "height": 560})
        # Back to JupyterLab: the feedback page is sandboxed (no scripts, no cookies).
        page.goto(f"{url}/user/{student}/lab")
        page.locator(".lm-MenuBar-itemLabel", has_text="Nbgrader").wait_for(timeout=60_000)
    seconds = time.perf_counter() - started
    print(f"hub cycle: setup {hub_class.seconds['setup']:.0f} s, start {hub_class.seconds['start']:.0f} s, "
          f"release, 3 students fetch/answer/submit, collect, grade, feedback: {seconds:.0f} s; scores {seen}")
    (ARTIFACTS / "cycle.json").write_text(json.dumps({"seconds": seconds, **hub_class.seconds, "scores": seen}))
    return Cycle(pages, seen, grade_output, seconds)


def gradebook_scores(gradebook: Path, student: str) -> dict[str, float]:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{gradebook}") as book:
        notebook = book.find_submission_notebook(SET01, SET01, student)
        return {grade.name.removesuffix("_tests"): grade.score for grade in notebook.grades}


def full_marks() -> dict[str, float]:
    nb = nbformat.read(ROOT / "solutions" / SET01 / f"{SET01}.ipynb", as_version=4)
    return {c.metadata["nbgrader"]["grade_id"].removesuffix("_tests"): c.metadata["nbgrader"]["points"]
            for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")}


def test_the_hub_cycle_scores_exactly_what_make_grade_gives_the_same_notebooks(hub_class, cycle, tmp_path):
    """The collected notebooks, graded again by scripts/grade.py (what `make grade` runs) in a
    course of their own, as root: the same score for every graded cell."""
    course = Path(hub_class.data["course"])
    copy = tmp_path / "course"
    copy.mkdir()
    shutil.copy(ROOT / "nbgrader_config.py", copy)
    shutil.copytree(course / "solutions", copy / "solutions")
    shutil.copytree(course / "submitted", tmp_path / "handed-in")
    subprocess.run([sys.executable, str(ROOT / "scripts" / "grade.py"), "--course", str(copy),
                    "--submissions", str(tmp_path / "handed-in")], check=True, capture_output=True)
    for student in STUDENTS:
        on_hub = gradebook_scores(course / "gradebook.db", student)
        assert on_hub == gradebook_scores(copy / "gradebook.db", student), student
        assert cycle.seen_scores[student] == (sum(on_hub.values()), sum(full_marks().values())), student


def test_right_answers_score_full_wrong_ones_less_and_the_cheat_nothing_for_its_exercise(hub_class, cycle):
    course = Path(hub_class.data["course"])
    full = full_marks()
    assert gradebook_scores(course / "gradebook.db", "trhub-right") == full
    wrong = gradebook_scores(course / "gradebook.db", "trhub-wrong")
    assert sum(wrong.values()) < sum(full.values())
    assert wrong == full | {name: 0.0 for name in exercise_names(SET01)[-2:]}
    cheated = CHEATS["subclass"][1]
    assert gradebook_scores(course / "gradebook.db", "trhub-cheat") == full | {name: 0.0 for name in cheated}
    assert cycle.seen_scores["trhub-right"][0] == sum(full.values())


def test_a_student_cannot_read_another_submission_the_course_the_gradebook_or_solutions(hub_class, cycle):
    """As each student's unix user, in their own server's terminal."""
    course = hub_class.data["course"]
    inbound = Path(hub_class.data["exchange"]) / hub.COURSE_ID / "inbound"
    checkout_solution = ROOT / "solutions" / SET01 / f"{SET01}.ipynb"
    for student in STUDENTS:
        other = next(s for s in STUDENTS if s != student)
        page = cycle.pages[student]
        checks = {
            "list the submissions in inbound": f"ls {inbound}",
            "read another's submission": f"cat {inbound}/{other}+{SET01}+*/{SET01}.ipynb",
            "list the released feedback": f"ls {inbound.parent / 'feedback'}",
            "change the released set": f"touch {inbound.parent / 'outbound' / SET01 / SET01}.ipynb",
            "enter the instructor's course": f"ls {course}",
            "read the gradebook": f"cat {course}/gradebook.db",
            "read the instructor's source": f"cat {course}/solutions/{SET01}/{SET01}.ipynb",
            "read the checkout's solutions": f"cat {checkout_solution}",
            "enter another student's home": f"ls {Path(hub_class.data['homes']) / other}",
        }
        for what, command in checks.items():
            code, out = in_terminal(page, command)
            assert code != 0 and "BEGIN SOLUTION" not in out and "SQLite" not in out, (student, what, out)
        code, out = in_terminal(page, f"id -un; ls ~/{SET01}")
        assert code == 0 and student in out and f"{SET01}.ipynb" in out, out  # the terminal works at all


def test_a_students_login_or_token_does_not_open_another_students_server(hub_class, cycle):
    url = hub_class.url
    page = cycle.pages["trhub-wrong"]
    # Their browser session, sent to another student's server: refused.
    reply = page.request.get(f"{url}/user/trhub-right/api/contents", max_redirects=10)
    assert reply.status == 403, (reply.status, reply.text()[:300])
    # An API token of their own, asked for on the hub's token page: it opens their server only.
    page.goto(f"{url}/hub/token")
    page.locator("#request-token-form").get_by_role("button").click()
    result = page.locator("#token-result")
    result.wait_for(timeout=30_000)
    token = result.inner_text().strip()
    assert re.fullmatch(r"[0-9a-f]{32}", token), token
    request = browser_free_request(page)
    assert request.get(f"{url}/user/trhub-wrong/api/status", headers={"Authorization": f"token {token}"}).status == 200
    for other in ("trhub-right", "trhub-cheat", INSTRUCTOR):
        reply = request.get(f"{url}/user/{other}/api/contents", headers={"Authorization": f"token {token}"},
                            max_redirects=0)
        assert reply.status == 403, (other, reply.status)
    assert request.get(f"{url}/hub/api/users", headers={"Authorization": f"token {token}"}).status == 403


def browser_free_request(page):
    """An HTTP client with no cookies: only the token speaks for the student."""
    return page.context.browser.new_context().request


def test_the_cycle_screenshots_exist_and_its_time_is_printed(hub_class, cycle, capsys):
    with capsys.disabled():
        print(f"\nhub cycle (release, 3 students fetch, answer and submit, collect, grade, feedback): "
              f"{cycle.seconds:.0f} s; setup {hub_class.seconds['setup']:.0f} s, start {hub_class.seconds['start']:.0f} s;"
              f" scores seen in feedback {cycle.seen_scores}")
    for name in ("formgrader-released.png", "student-assignments-fetched.png", "student-assignments-submitted.png",
                 "formgrader-feedback-released.png", "student-feedback-fetched.png", "feedback-trhub-right.png"):
        assert (ARTIFACTS / name).stat().st_size > 10_000, name


def test_test_mode_refuses_to_listen_beyond_this_machine(hub_class):
    """The shared test password on a public address: the config stops JupyterHub from starting."""
    load = ("from traitlets.config import Config\n"
            f"exec(open({str(hub.CONFIG)!r}).read(), {{'get_config': Config, '__file__': {str(hub.CONFIG)!r}}})")
    env = os.environ | {"TR_HUB_STATE": str(hub_class.state), "TR_HUB_TEST_PASSWORD": STUDENT_PASSWORD,
                        "TR_HUB_TEST_ADMIN_PASSWORD": INSTRUCTOR_PASSWORD}
    refused = subprocess.run([sys.executable, "-c", load], env=env | {"TR_HUB_IP": ""}, capture_output=True, text=True)
    assert refused.returncode != 0 and "listens on 127.0.0.1 only" in refused.stderr, refused.stderr
    local = subprocess.run([sys.executable, "-c", load], env=env | {"TR_HUB_IP": "127.0.0.1"}, capture_output=True,
                           text=True)
    assert local.returncode == 0, local.stderr


def test_a_bad_roster_row_is_named(tmp_path):
    roster = tmp_path / "roster.csv"
    roster.write_text("student_id,name\nada,Ada Lovelace\nBob Smith,Bob Smith\n")
    with pytest.raises(SystemExit, match=r"line 3: 'Bob Smith' is not a usable id"):
        hub.read_roster(roster)
    roster.write_text("student_id,name\nada,Ada Lovelace\nada,Ada Again\n")
    with pytest.raises(SystemExit, match="line 3: student id 'ada' is listed twice"):
        hub.read_roster(roster)


def test_the_instructors_formgrader_shows_a_submission_under_the_strict_csp(hub_class, cycle):
    """The hub turns on grading.sanitize in the instructor's server (scripts/hub.py): the Manual
    Grading view of a collected submission answers with a nonce-only script policy. (What the page
    then runs, payload by payload, is tests/test_student_html.py's.)"""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{Path(hub_class.data['course']) / 'gradebook.db'}") as gradebook:
        submission = gradebook.find_submission_notebook(SET01, SET01, "trhub-right").id
    reply = cycle.pages["prof"].request.get(f"{hub_class.url}/user/{INSTRUCTOR}/formgrader/submissions/{submission}/")
    policy = reply.headers.get("content-security-policy", "")
    assert reply.status == 200 and "script-src 'nonce-" in policy and "default-src 'none'" in policy, (reply.status, policy)


def test_real_authentication_takes_each_users_own_password_and_only_the_class(hub_class, cycle, browser):
    """The same class with the deployment's authenticator (PAM): a student logs in with the first
    password setup gave them, not with another's nor the test password; a user of the machine
    who is not in the class cannot log in. (Last in this file: it replaces the test-mode hub.)"""
    import csv

    with open(hub_class.state / "hub" / "first-passwords.csv") as handle:
        passwords = {row["id"]: row["first_password"] for row in csv.DictReader(handle)}
    assert set(passwords) == set(STUDENTS) | {INSTRUCTOR} and len(set(passwords.values())) == len(passwords)
    outsider = "trhub-outsider"  # a user of the machine with a password, but not in the class
    subprocess.run(["useradd", "--no-create-home", outsider], check=True)
    try:
        subprocess.run(["chpasswd"], input=f"{outsider}:{passwords['trhub-right']}\n", text=True, check=True)
        hub.stop(hub_class.running)
        hub_class.running = hub.launch(hub_class.state, free_port(), free_port(), free_port(),
                                       hub_class.state / "hub-pam.log")
        for name, password, allowed in [("trhub-right", passwords["trhub-right"], True),
                                        ("trhub-right", passwords["trhub-wrong"], False),
                                        ("trhub-right", STUDENT_PASSWORD, False),
                                        (outsider, passwords["trhub-right"], False)]:
            page = browser.new_context().new_page()
            page.goto(f"{hub_class.url}/hub/login")
            page.fill("input[name=username]", name)
            page.fill("input[name=password]", password)
            page.click("#login_submit")
            page.wait_for_load_state()
            logged_in = f"/user/{name}/" in page.url or f"/hub/spawn-pending/{name}" in page.url
            assert logged_in == allowed, (name, page.url, page.locator("body").inner_text()[:300])
            page.context.close()
    finally:
        subprocess.run(["userdel", outsider], check=True)
