"""No student content runs script in a page a person opens (grading/sanitize.py), in a real browser.

One student hands in set 01 with every kind of payload we know of: in markdown an <img onerror>,
a <script>, an <iframe srcdoc>, a javascript: link, an SVG with onload and an SVG <use> of a
data: SVG with a script; from code, text/html with <script> and <img onerror>, application/
javascript, an SVG with onload, a markdown output with HTML, an image whose width metadata
carries an attribute, an HTML widget (and its saved state) with <img onerror>, a raw HTML cell;
and, from the graded answer cell itself, printed and displayed HTML. Each payload, if it runs,
logs `TR-RAN:<name>` to the console and asks a local server for /ran/<name>.

The submission is graded by scripts/grade.py (what `make grade` runs), then opened in headless
Chromium as the instructor and the student open it: the feedback HTML (as a file), the
formgrader's Manual Grading view (nbgrader's server extension with grading.sanitize, in one local
Jupyter server; the hub runs the same extensions, see scripts/hub.py), the autograded and the
submitted notebook in JupyterLab. Every javascript: link on each page is clicked. A payload that
ran fails the test. The same submission rendered by nbconvert without sanitizing shows that these
payloads do run when nothing stops them, so the detector is live; and the instructor still sees
the text, the table and the PNG and SVG pictures.
"""

from __future__ import annotations

import base64
import contextlib
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import urllib.parse
import urllib.request
from pathlib import Path

import nbformat
import pytest

from course_lib import exercise_notebook
from grading import feedback_page, notebook_id
from exercise_harness import ROOT
from test_grading import SOLUTION

sys.path.insert(0, str(ROOT / "scripts"))
from lab_driver import jupyterlab  # noqa: E402

SET01 = "01_attention_scores"
STUDENT = "mallory"
ARTIFACTS = ROOT / "test-artifacts" / "student-html"
# A 1x1 PNG and a small SVG: what the instructor must still see.
PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")
SVG = '<svg xmlns="http://www.w3.org/2000/svg" width="20" height="20"><circle cx="10" cy="10" r="8"/></svg>'


class Hits:
    """A local HTTP server: each payload that runs asks it for /ran/<name>."""

    def __init__(self) -> None:
        self.names: list[str] = []
        hits = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                if self.path.startswith("/ran/"):
                    hits.names.append(self.path[5:])
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/ran"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def payloads(hit_url: str) -> dict:
    """The submission's payloads: markdown, raw HTML, outputs (as display_data), widget HTML and
    the graded cell's additions, each naming itself."""
    def ran(name: str) -> str:  # JavaScript with no double quotes: it sits in attributes
        return f"console.log('TR-RAN:{name}');new Image().src='{hit_url}/{name}'"

    svg_with_script = (f'<svg xmlns="http://www.w3.org/2000/svg" id="p"><image href="x" '
                       f'onerror="{ran("md-svg-use")}"/><script>{ran("md-svg-use-script")}</script></svg>')
    used = base64.b64encode(svg_with_script.encode()).decode()
    markdown = "\n\n".join([
        "TR-TEXT: my notes on softmax.",
        f'<img src="x" onerror="{ran("md-img-onerror")}">',
        f"<script>{ran('md-script')}</script>",
        f'<iframe srcdoc="&lt;script&gt;{ran("md-iframe-srcdoc")}&lt;/script&gt;"></iframe>',
        f'<a href="javascript:{ran("md-javascript-link")};void(0)">TR-LINK</a>',
        f'<svg onload="{ran("md-svg-onload")}"><rect width="5" height="5"/></svg>',
        f'<svg><use href="data:image/svg+xml;base64,{used}#p"></use></svg>',
    ])
    outputs = [  # (data, metadata) as display(..., raw=True) shows them
        ({"text/html": f'<script>{ran("out-html-script")}</script><img src="x" onerror="{ran("out-html-img")}">'}, {}),
        ({"application/javascript": ran("out-javascript")}, {}),
        ({"image/svg+xml": f'<svg xmlns="http://www.w3.org/2000/svg" onload="{ran("out-svg-onload")}">'
                           '<rect width="5" height="5"/></svg>'}, {}),
        ({"text/html": f'<iframe srcdoc="&lt;script&gt;{ran("out-iframe-srcdoc")}&lt;/script&gt;"></iframe>'}, {}),
        ({"text/html": f'<a href="javascript:{ran("out-javascript-link")};void(0)">TR-LINK</a>'}, {}),
        ({"text/markdown": f'<img src="x" onerror="{ran("out-markdown-img")}">'}, {}),
        ({"image/png": "eA=="}, {"image/png": {"width": f"1 onerror={ran('out-png-width')}"}}),
        # What the instructor must still see: a table, a PNG and an SVG picture.
        ({"text/html": "<table><tr><th>head</th></tr><tr><td>TR-TABLE-CELL</td></tr></table>"}, {}),
        ({"image/png": PNG, "text/plain": "<Figure>"}, {}),
        ({"image/svg+xml": SVG}, {}),
    ]
    printed, displayed = (f'<img src=x onerror="{ran(name)}">' for name in ("graded-print", "graded-html"))
    return {"markdown": markdown, "outputs": outputs, "attachment": ran("md-svg-attachment"),
            "raw": f'<img src="x" onerror="{ran("raw-html-cell")}">',
            "widget": f'<img src="x" onerror="{ran("widget-html")}">',
            "graded": (f"\nprint({printed!r})\nfrom IPython.display import HTML, display\n"
                       f"display(HTML({displayed!r}))\n"),
            "graded_outputs": [nbformat.v4.new_output("stream", name="stdout", text=printed + "\n"),
                               nbformat.v4.new_output("display_data", data={"text/html": displayed})]}


def malicious_submission(hit_url: str) -> nbformat.NotebookNode:
    """Set 01 answered right, with every payload; outputs saved as the student's run left them."""
    nb = nbformat.read(ROOT / "exercises" / SET01 / exercise_notebook(SET01), as_version=4)
    reference = {c.metadata["nbgrader"]["grade_id"]: c for c in
                 nbformat.read(ROOT / "solutions" / SET01 / exercise_notebook(SET01), as_version=4).cells
                 if "nbgrader" in c.metadata}
    p = payloads(hit_url)
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if cell.metadata.get("nbgrader", {}).get("solution"):
            cell.source = SOLUTION.sub(lambda m: m.group(1), reference[grade_id].source)
            if grade_id == "softmax_rows":
                cell.source += p["graded"]
                cell.outputs = p["graded_outputs"]
    shown = [nbformat.v4.new_output("display_data", data=data, metadata=meta) for data, meta in p["outputs"]]
    model_id = "0123456789abcdef0123456789abcdef"
    widget_view = nbformat.v4.new_output("display_data", data={
        "application/vnd.jupyter.widget-view+json": {"model_id": model_id, "version_major": 2, "version_minor": 0},
        "text/plain": "HTML(value='...')"})
    code = (f"import json\nimport ipywidgets\nfrom IPython.display import display\n"
            f"for data, metadata in json.loads({json.dumps(json.dumps(p['outputs']))}):\n"
            f"    display(data, raw=True, metadata=metadata)\n"
            f"display(ipywidgets.HTML({p['widget']!r}))\n")
    # An SVG attachment with a script (removed by cleaning, which leaves a visible line where the
    # markdown shows it) beside a PNG attachment that stays.
    attached = nbformat.v4.new_markdown_cell("TR-ATTACHED ![evil](attachment:evil.svg) ![kept](attachment:kept.png)")
    attached.attachments = {"evil.svg": {"image/svg+xml": base64.b64encode(
        f'<svg xmlns="http://www.w3.org/2000/svg" onload="{p["attachment"]}"/>'.encode()).decode()},
        "kept.png": {"image/png": PNG}}
    nb.cells += [nbformat.v4.new_markdown_cell(p["markdown"]), attached,
                 nbformat.v4.new_code_cell(code, outputs=[*shown, widget_view], execution_count=9),
                 nbformat.v4.new_raw_cell(p["raw"], metadata={"raw_mimetype": "text/html"})]
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {
        "version_major": 2, "version_minor": 0, "state": {model_id: {
            "model_name": "HTMLModel", "model_module": "@jupyter-widgets/controls", "model_module_version": "2.0.0",
            "state": {"value": p["widget"], "layout": None}}}}}
    return nb


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """A course of set 01 with the malicious submission, graded by scripts/grade.py."""
    course = tmp_path_factory.mktemp("course")
    hits = Hits()
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(ROOT / "solutions" / SET01, course / "solutions" / SET01,
                    ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    folder = course / "submitted" / STUDENT / SET01
    folder.mkdir(parents=True)
    nbformat.write(malicious_submission(hits.url), folder / exercise_notebook(SET01))
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "grade.py"), "--course", str(course)],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    yield course, hits, run.stdout
    hits.server.shutdown()


def visit(browser, hits: Hits, url: str, ready: str, shot: str, login: str | None = None,
          lab: bool = False) -> tuple[list[str], object]:
    """Open `url` in a fresh context (after `login`, a URL that logs the browser in), wait for the
    text `ready`, click every javascript: link, and return the payloads that ran (console lines and
    requests to the local server) with the page."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    if login:
        page.goto(login)
    console: list[str] = []
    page.on("console", lambda message: console.append(message.text))
    before = len(hits.names)
    page.goto(url)
    shown = page.locator(f":text('{ready}'):visible").first
    if lab:  # JupyterLab draws cells as they scroll into view: scroll to the end, where the payloads are
        page.locator(".jp-Notebook").first.wait_for(timeout=90_000)
        for _ in range(60):
            page.locator(".jp-WindowedPanel-outer").evaluate_all("panes => panes.forEach(p => p.scrollTop = p.scrollHeight)")
            if shown.count():
                break
            page.wait_for_timeout(500)
    shown.wait_for(timeout=90_000)
    for link in page.locator("a", has_text="TR-LINK").all():
        if (link.get_attribute("href") or "").startswith("javascript:"):
            link.click()
    page.wait_for_timeout(2000)  # an <img onerror> fires as soon as "x" fails to load: well within this
    if shot:  # (Chromium's screenshot of a bare SVG document under a sandbox CSP never finishes)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / shot), full_page=True)
    ran = sorted({line.split("TR-RAN:", 1)[1] for line in console if "TR-RAN:" in line} | set(hits.names[before:]))
    return ran, page


def assert_gradeable(page) -> None:
    """What the instructor needs: the student's text, the table, and both pictures, loaded."""
    assert page.get_by_text("TR-TEXT").count() >= 1
    assert page.get_by_text("TR-TABLE-CELL").count() >= 1, "the table was lost"
    assert page.get_by_text("[attachment evil.svg not shown").count() >= 1, "no line where the SVG attachment was"
    for kind in ("png", "svg+xml"):
        loaded = page.locator(f'img[src^="data:image/{kind}"]').evaluate_all(
            "imgs => imgs.filter(i => i.complete && i.naturalWidth > 0).length")
        assert loaded >= 1, f"no {kind} picture shown"


def test_unsanitized_the_same_payloads_run(graded, browser, tmp_path):
    """The control: nbconvert's plain HTML of the submission, as nbgrader would write it without
    grading/sanitize.py. If the payloads did not run here, the other tests could not fail."""
    from nbconvert import HTMLExporter

    course, hits, _ = graded
    page_html, _ = HTMLExporter(template_name="classic").from_filename(
        str(course / "submitted" / STUDENT / SET01 / exercise_notebook(SET01)))
    (tmp_path / "plain.html").write_text(page_html)
    ran, page = visit(browser, hits, (tmp_path / "plain.html").as_uri(), "TR-TEXT", "control-unsanitized.png")
    page.context.close()
    # (nbconvert's application/javascript output needs jQuery from the internet: not run offline.)
    assert {"md-img-onerror", "md-script", "md-iframe-srcdoc", "md-javascript-link", "out-html-script",
            "out-html-img", "graded-html"} <= set(ran), ran


def test_each_layer_alone_stops_every_payload(graded, browser, tmp_path):
    """Sanitizing and the CSP each hold without the other: the feedback page with its CSP <meta>
    removed, and the unsanitized page of the control with that <meta> put in."""
    from nbconvert import HTMLExporter

    from grading.sanitize import csp_meta

    course, hits, _ = graded
    feedback = (course / "feedback" / STUDENT / SET01 / feedback_page(SET01)).read_text()
    (tmp_path / "sanitized-only.html").write_text(re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "",
                                                         feedback))
    plain, _ = HTMLExporter(template_name="classic").from_filename(
        str(course / "submitted" / STUDENT / SET01 / exercise_notebook(SET01)))
    (tmp_path / "csp-only.html").write_text(plain.replace("<head>", "<head>" + csp_meta(), 1))
    for name in ("sanitized-only", "csp-only"):
        ran, page = visit(browser, hits, (tmp_path / f"{name}.html").as_uri(), "TR-TEXT", f"{name}.png")
        page.context.close()
        assert ran == [], f"payloads ran with {name}: {ran}"


def test_the_feedback_page_runs_no_student_script_and_shows_text_tables_and_pictures(graded, browser):
    course, hits, _ = graded
    feedback = course / "feedback" / STUDENT / SET01 / feedback_page(SET01)
    text = feedback.read_text()
    assert "Content-Security-Policy" in text.split("</head>")[0]
    ran, page = visit(browser, hits, feedback.as_uri(), "TR-TEXT", "feedback.png")
    assert ran == [], f"payloads ran in the feedback page: {ran}"
    assert_gradeable(page)
    # The payloads cost nothing where the answers are right: cleaning keeps the judge's records.
    assert page.get_by_text("Score: 7.0 / 7.0").count() == 1, "the right answers lost points"
    page.context.close()


@pytest.fixture(scope="module")
def instructor_server(graded, tmp_path_factory):
    """JupyterLab on the course with nbgrader's formgrader and grading.sanitize, configured as the
    hub configures an instructor (scripts/hub.py: the course's nbgrader_config.py, the extensions)."""
    course, _, _ = graded
    config = tmp_path_factory.mktemp("jupyter-config")
    (config / "nbgrader_config.py").write_text(
        f"c = get_config()\nload_subconfig({str(course / 'nbgrader_config.py')!r})\n"
        f"c.CourseDirectory.db_url = {'sqlite:///' + str(course / 'gradebook.db')!r}\n")
    (config / "jupyter_server_config.json").write_text(json.dumps(
        {"ServerApp": {"jpserver_extensions": {"grading.sanitize": True}}}))
    # Its own data folder too: the notebook signatures that say which notebooks it trusts.
    folders = {"JUPYTER_CONFIG_DIR": config, "JUPYTER_DATA_DIR": tmp_path_factory.mktemp("jupyter-data")}
    before = {name: os.environ.get(name) for name in folders}
    os.environ.update({name: str(folder) for name, folder in folders.items()})
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        with jupyterlab(course, ARTIFACTS / "jupyterlab.log", cwd=course, instructor=True) as url:
            yield url, folders["JUPYTER_DATA_DIR"]
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name)
            else:
                os.environ[name] = value


def server_url(lab_url: str, path: str) -> str:
    """A URL of the instructor's server, with its token."""
    parts = urllib.parse.urlsplit(lab_url)
    token = urllib.parse.parse_qs(parts.query)["token"][0]
    return f"{parts.scheme}://{parts.netloc}/{path}?token={token}"


def test_the_formgraders_manual_grading_view_runs_no_student_script_and_still_grades(graded, browser,
                                                                                     instructor_server):
    from nbgrader.api import Gradebook

    course, hits, _ = graded
    instructor_server, _ = instructor_server
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        submission_id = gradebook.find_submission_notebook(notebook_id(SET01), SET01, STUDENT).id
    url = server_url(instructor_server, f"formgrader/submissions/{submission_id}/")
    with urllib.request.urlopen(url) as reply:
        policy = reply.headers["Content-Security-Policy"]
    assert "script-src 'nonce-" in policy and "unsafe-inline" not in policy.split("style-src")[0], policy
    # Logged in as the instructor is, through the server's own pages (nbgrader's pages set the login
    # cookie for their own folder only).
    ran, page = visit(browser, hits, url, "TR-TEXT", "formgrader-submission.png",
                      login=server_url(instructor_server, "api/status"))
    assert ran == [], f"payloads ran in the formgrader: {ran}"
    assert_gradeable(page)
    # The formgrader's own scripts still work: they show each graded cell's score from the gradebook,
    # and "Full credit" saves a manual score into it.
    page.wait_for_function("() => [...document.querySelectorAll('input.score')].every(i => i.placeholder !== '')",
                           timeout=30_000)
    page.locator("button.full-credit").first.click()
    page.wait_for_function("() => document.querySelector('input.score').value !== ''", timeout=30_000)
    page.wait_for_timeout(1000)  # the save's reply
    page.context.close()
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        notebook = gradebook.find_submission_notebook(notebook_id(SET01), SET01, STUDENT)
        assert any(g.manual_score is not None and g.manual_score == g.max_score for g in notebook.grades), \
            "the formgrader's Full credit did not reach the gradebook"
    # A file of the submission, served by the formgrader: no script, a unique origin.
    (course / "autograded" / STUDENT / SET01 / "page.html").write_text(
        f"<p>TR-FILE</p><img src=x onerror=\"console.log('TR-RAN:file');new Image().src='{hits.url}/file'\">")
    with urllib.request.urlopen(server_url(instructor_server, f"formgrader/submissions/{submission_id}/page.html")) as reply:
        assert reply.headers["Content-Security-Policy"].startswith("sandbox;"), reply.headers["Content-Security-Policy"]
    ran, page = visit(browser, hits, server_url(instructor_server, f"formgrader/submissions/{submission_id}/page.html"),
                      "TR-FILE", "formgrader-file.png")
    page.context.close()
    assert ran == [], f"a handed-in file ran script: {ran}"


def test_files_handed_in_run_no_script_through_jupyterlabs_own_routes(graded, browser, instructor_server):
    """An HTML and an SVG file handed in beside the notebook, opened as JupyterLab's "Open in New
    Browser Tab" opens them (/files/), and the submission exported to HTML (/nbconvert/): jupyter_server
    itself serves both with `sandbox allow-scripts`, so these payloads ran before grading.sanitize
    took those routes over in the instructor's server."""
    course, hits, _ = graded
    folder = course / "submitted" / STUDENT / SET01
    payload = "console.log('TR-RAN:{0}');new Image().src='" + hits.url + "/{0}'"
    (folder / "notes.html").write_text(f'<p>TR-FILE</p><script>{payload.format("files-html")}</script>'
                                       f'<img src=x onerror="{payload.format("files-html-img")}">')
    (folder / "figure.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg" width="200" height="40" '
                                       f'onload="{payload.format("files-svg")}"><text y="20">TR-FILE</text></svg>')
    pages = {"files-html": f"files/submitted/{STUDENT}/{SET01}/notes.html",
             "files-svg": f"files/submitted/{STUDENT}/{SET01}/figure.svg",
             "nbconvert": f"nbconvert/html/submitted/{STUDENT}/{SET01}/{exercise_notebook(SET01)}"}
    for name, path in pages.items():
        with urllib.request.urlopen(server_url(instructor_server[0], path)) as reply:
            policy = reply.headers["Content-Security-Policy"]
        assert policy.startswith("sandbox;") and "allow-scripts" not in policy, f"{path}: {policy}"
        ran, page = visit(browser, hits, server_url(instructor_server[0], path),
                          "TR-TEXT" if name == "nbconvert" else "TR-FILE", "" if name == "files-svg" else f"lab-{name}.png",
                          login=server_url(instructor_server[0], "api/status"))
        page.context.close()
        assert ran == [], f"{path} ran a student's script: {ran}"


def test_a_missing_attachment_becomes_a_visible_line_and_the_page_still_renders():
    """A markdown cell showing an attachment that was never handed in: nbconvert alone refuses the
    whole notebook ("missing attachment"); cleaned, the page renders with a line in its place."""
    from nbconvert import HTMLExporter
    from nbconvert.filters.markdown_mistune import InvalidNotebook

    from grading.sanitize import SafeHTMLExporter

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(
        'TR-TEXT ![a](attachment:never.png "title") ![b][ref] <img src="attachment:gone.svg">\n\n'
        "[ref]: attachment:<script>.png")])
    with pytest.raises(InvalidNotebook, match="missing attachment"):
        HTMLExporter().from_notebook_node(nb)
    page, _ = SafeHTMLExporter().from_notebook_node(nb)
    assert "<strong>[attachment never.png not shown: only PNG, JPEG and GIF attachments are kept]</strong>" in page
    assert "attachment:" not in page.split("TR-TEXT", 1)[1] and "<script>.png" not in page


@pytest.mark.slow  # JupyterLab in Chromium, three times: make test-all
@pytest.mark.parametrize("kind", ["autograded", "submitted"])
def test_jupyterlab_opens_the_autograded_and_the_submitted_notebook_without_running_student_script(
        graded, browser, instructor_server, kind):
    course, hits, _ = graded
    url = instructor_server[0].format(path=f"{kind}/{STUDENT}/{SET01}/{exercise_notebook(SET01)}")
    ran, page = visit(browser, hits, url, "TR-TEXT", f"jupyterlab-{kind}.png", lab=True)
    assert page.get_by_text("TR-TABLE-CELL").count() >= 1, "the table's output was not drawn"
    page.context.close()
    assert ran == [], f"payloads ran in JupyterLab's {kind} notebook: {ran}"


@pytest.mark.slow
def test_jupyterlab_would_run_them_in_a_notebook_the_instructor_trusts(graded, browser, instructor_server):
    """The control for JupyterLab: the submission signed as trusted by the instructor's server (what
    `jupyter trust` or "Trust Notebook" does). Never done by grading; shown so the test above can fail."""
    from nbformat.sign import NotebookNotary

    course, hits, _ = graded
    url, data_dir = instructor_server
    trusted = course / "submitted" / STUDENT / SET01 / "trusted-copy.ipynb"
    nb = nbformat.read(course / "submitted" / STUDENT / SET01 / exercise_notebook(SET01), as_version=4)
    NotebookNotary(data_dir=str(data_dir)).sign(nb)
    nbformat.write(nb, trusted)
    ran, page = visit(browser, hits, url.format(path=trusted.relative_to(course).as_posix()), "TR-TEXT",
                      "jupyterlab-trusted-control.png", lab=True)
    page.context.close()
    trusted.unlink()
    assert {"out-html-script", "out-html-img", "out-javascript"} <= set(ran), ran


def test_the_autograded_notebook_keeps_no_script_widget_state_or_unsafe_html(graded):
    course, _, _ = graded
    nb = nbformat.read(course / "autograded" / STUDENT / SET01 / exercise_notebook(SET01), as_version=4)
    assert "widgets" not in nb.metadata
    text = nbformat.writes(nb)
    for unsafe in ("onerror", "onload", "<script", "application/javascript", "widget-view", "srcdoc",
                   "javascript:"):
        # (plain text may quote anything: every renderer escapes it)
        assert unsafe not in json.dumps([{k: v for k, v in o["data"].items() if k != "text/plain"}
                                         for c in nb.cells for o in c.get("outputs", [])
                                         if o["output_type"] in ("display_data", "execute_result")]), unsafe
    assert "TR-TABLE-CELL" in text and PNG in text


def test_the_judges_records_survive_cleaning_and_a_forged_grade_id_does_not():
    """The hand-in records the judge reads stay in the autograded notebook, for review; a grade id
    that nbgrader's templates would print raw into the page is dropped with its metadata."""
    from course_lib.checks.hand_in import MIME
    from grading.sanitize import HAND_IN_MIME, SanitizeOutputs, clean_output

    assert HAND_IN_MIME == MIME
    record = {"output_type": "display_data", "data": {MIME: {"exercise": "softmax_rows", "cases": []}},
              "metadata": {}}
    assert clean_output(record) == record
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("x", metadata={"nbgrader": {
        "grade": True, "grade_id": '"><img src=x onerror=alert(1)>', "points": 1}})])
    SanitizeOutputs().preprocess(nb, {})
    assert "nbgrader" not in nb.cells[0].metadata


def test_the_page_of_a_flagged_submission_escapes_its_notes_and_carries_the_csp(tmp_path):
    import grade

    note = '<img src=x onerror="alert(1)"> is not a readable notebook'
    grade.write_flag_feedback(tmp_path, grade.Submission(STUDENT, SET01, "flagged", [note]))
    page = (tmp_path / "feedback" / STUDENT / SET01 / feedback_page(SET01)).read_text()
    head = page.split("</head>")[0]
    assert '<meta http-equiv="Content-Security-Policy"' in head and "default-src &#x27;none&#x27;" in head
    assert "<img" not in page and "&lt;img" in page
