"""A student's notebook as the instructor and the learner see it: no script of the student's runs.

Every page rendered from a student's notebook goes through here:
- the feedback HTML (`make grade`, nbgrader's generate_feedback): `SafeHTMLExporter`, named in
  nbgrader_config.py, with a Content-Security-Policy in a <meta> tag of each file;
- the formgrader's Manual Grading view of a submission, and the files of a submission it serves:
  this module is also a Jupyter server extension (`grading.sanitize`) that answers those two
  routes before nbgrader does, with the same exporter and a strict CSP header;
- the autograded notebook opened in JupyterLab: `SanitizeOutputs` runs in autograde, so the
  notebook on disk keeps no script, widget state or unsafe HTML in its outputs (JupyterLab itself
  sanitizes the markdown of a notebook it does not trust, and an autograded or submitted notebook
  is never signed by the instructor).

The sanitizer is nh3 (Ammonia): maintained, an HTML5 parser (so it parses as browsers do), and
allow-list based. bleach, which nbconvert's own `sanitize_html` uses, is deprecated, and
nbconvert's allow-list drops images, while nbgrader's templates bypass it for markdown.
What survives: text, headings, lists, tables, links (http, https, mailto, relative), and images
(PNG, JPEG, GIF; SVG only as an <img>, where it cannot run script or load anything).
"""

from __future__ import annotations

import base64
import copy
import html
import re
import secrets
from pathlib import Path

import nh3
from jinja2 import pass_context
from nbconvert.exporters import HTMLExporter
from nbconvert.preprocessors import Preprocessor
from traitlets import Unicode
from traitlets.config import Config


# course_lib.checks.hand_in.MIME (not imported: that imports torch, seconds for every server):
# the records the judge reads, plain data that no renderer shows (tests/test_student_html.py checks it).
HAND_IN_MIME = "application/vnd.transformer-roots.hand-in+json"

TEMPLATES = Path(__file__).resolve().parent / "templates"
# The only data: URLs a page may show: pictures, as <img src>.
IMAGE_DATA_URL = re.compile(r"data:image/(png|jpeg|gif|webp|svg\+xml)(;base64)?,", re.IGNORECASE)
# Output types kept as they are (text, pictures, plain JSON data) or cleaned (HTML, markdown, SVG);
# anything else (script, widget views, LaTeX, other vendor types) is replaced by a line saying so.
KEPT = {"text/plain", "image/png", "image/jpeg", "image/gif", "application/json", HAND_IN_MIME}
PICTURES = {"image/png", "image/jpeg", "image/gif"}
CLEANED = {"text/html", "text/markdown", "image/svg+xml"}
# nbgrader's grade ids, as its own CheckCellMetadata accepts them; the templates print them raw.
GRADE_ID = re.compile(r"[A-Za-z0-9_-]+")
# A markdown picture of a cell attachment, ![alt](attachment:name "title"), and any other use of one
# (a reference definition, a link, an <img src>).
ATTACHMENT_PICTURE = re.compile(r"!\[[^\]]*\]\(\s*<?attachment:([^\s)>]+)>?[^)]*\)")
ATTACHMENT_URL = re.compile(r"attachment:([^\s)>\"'\]]+)")

# A feedback file: no script at all, pictures only from inside the page, styles inline.
FEEDBACK_CSP = ("default-src 'none'; img-src data:; style-src 'unsafe-inline'; font-src data:; "
                "base-uri 'none'; form-action 'none'")


def _keep_attribute(tag: str, name: str, value: str) -> str | None:
    """nh3's hook for each attribute it allows: a data: URL only as a picture's source."""
    if value.lstrip().lower().startswith("data:"):
        return value if tag == "img" and name == "src" and IMAGE_DATA_URL.match(value.lstrip()) else None
    return value


_CLEANER = nh3.Cleaner(url_schemes=nh3.ALLOWED_URL_SCHEMES | {"data"}, attribute_filter=_keep_attribute)


def clean_html(fragment: str) -> str:
    """The HTML of a student's output or markdown, with only what cannot run script: no script,
    event handler, iframe, object, form, style, SVG, class, id or javascript: link survives."""
    return _CLEANER.clean(fragment)


def svg_as_image(svg: str) -> str:
    """An SVG picture as an <img>: a browser runs no script and loads nothing inside one."""
    encoded = base64.b64encode(svg.encode()).decode()
    return f'<img src="data:image/svg+xml;base64,{encoded}" alt="SVG figure">'


def _number_or_none(value) -> float | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def clean_output(output: dict) -> dict:
    """One output of a code cell, safe to render: see KEPT and CLEANED. Output metadata keeps only
    numeric widths and heights (nbconvert prints them unquoted into <img>)."""
    if output.get("output_type") not in ("display_data", "execute_result"):
        return output  # stream and error: plain text, escaped by every renderer
    data = {}
    for kind, value in output.get("data", {}).items():
        text = "".join(value) if isinstance(value, list) else value
        if kind in KEPT:
            data[kind] = value
        elif kind == "image/svg+xml":
            data["text/html"] = svg_as_image(text)
        elif kind in CLEANED:
            data[kind] = clean_html(text)
    removed = sorted(set(output.get("data", {})) - KEPT - CLEANED)
    if removed and "text/plain" not in data:
        data["text/plain"] = f"[output not shown for safety: {', '.join(removed)}]"
    sizes = {}
    for kind, meta in output.get("metadata", {}).items():
        if isinstance(meta, dict):
            kept = {k: _number_or_none(meta.get(k)) for k in ("width", "height")}
            if any(v is not None for v in kept.values()):
                sizes[kind] = {k: v for k, v in kept.items() if v is not None}
    cleaned = copy.deepcopy(output)
    cleaned["data"], cleaned["metadata"] = data, sizes
    return cleaned


def missing_attachments_shown(source: str, attachments: dict) -> str:
    """A markdown source whose uses of attachments that are not in `attachments` (removed as not a
    picture, or never handed in) say so in a visible line: nbconvert refuses to render a cell that
    shows a missing attachment, so one such cell would cost its author the feedback page and the
    instructor the Manual Grading view."""
    def placeholder(match: re.Match) -> str:
        if match.group(1) in attachments:
            return match.group(0)
        name = re.sub(r"[^\w.-]", "_", match.group(1))[:80]  # the student's text, shown as a name only
        return f"**[attachment {name} not shown: only PNG, JPEG and GIF attachments are kept]**"

    source = ATTACHMENT_PICTURE.sub(placeholder, source)
    return ATTACHMENT_URL.sub(lambda m: m.group(0) if m.group(1) in attachments else "#attachment-not-shown",
                              source)


class SanitizeOutputs(Preprocessor):
    """Make a notebook safe to render anywhere: every output cleaned (clean_output), widget state
    dropped, raw cells made plain text, attachments kept only when they are pictures, and nbgrader
    metadata with a grade id nbgrader would not have written (the templates print it raw) dropped.
    Markdown sources are left as written, but for their uses of attachments that are not there
    (missing_attachments_shown): each renderer cleans them (SafeHTMLExporter, JupyterLab)."""

    enabled = True  # nbconvert's preprocessors are off unless told; this one must never be

    def preprocess(self, nb, resources):
        nb.metadata.pop("widgets", None)
        for cell in nb.cells:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            if grade_id is not None and not GRADE_ID.fullmatch(str(grade_id)):
                del cell.metadata["nbgrader"]
            if cell.cell_type == "code":
                cell.outputs = [clean_output(o) for o in cell.outputs]
            elif cell.cell_type == "raw":
                cell.metadata.pop("raw_mimetype", None)
                cell.metadata.pop("format", None)
            for name, bundle in list(cell.get("attachments", {}).items()):
                if not set(bundle) <= PICTURES:
                    del cell.attachments[name]
            if cell.cell_type == "markdown":
                cell.source = missing_attachments_shown(cell.source, cell.get("attachments", {}))
        return nb, resources


class SafeHTMLExporter(HTMLExporter):
    """nbconvert's HTMLExporter for pages rendered from a student's notebook (nbgrader's feedback
    and formgrade templates): outputs cleaned by SanitizeOutputs before the template sees them,
    every markdown cell cleaned after it becomes HTML, and the page's CSP in a <meta> tag."""

    content_security_policy = Unicode(FEEDBACK_CSP, help="CSP put in the page's <meta> tag ('' for none: "
                                      "a page served with its own CSP header)").tag(config=True)
    csp_nonce = Unicode("", help="the nonce of the page's own scripts, for a template that marks them")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # First, so nbgrader's and the template's preprocessors never see the unsafe outputs.
        self._preprocessors.insert(0, SanitizeOutputs(parent=self))

    @pass_context  # as HTMLExporter's: the cell's attachments come from the template's context
    def markdown2html(self, context, source):
        return clean_html(super().markdown2html(context, source))

    def from_notebook_node(self, nb, resources=None, **kw):
        resources = dict(resources or {}, csp_nonce=self.csp_nonce)
        page, resources = super().from_notebook_node(nb, resources, **kw)
        if self.content_security_policy:
            meta = csp_meta(self.content_security_policy)
            page, found = re.subn(r"<head>", lambda _: "<head>\n" + meta, page, count=1, flags=re.IGNORECASE)
            if not found:  # a template without a <head>: the policy must still come first
                page = meta + page
        return page, resources


def csp_meta(policy: str = FEEDBACK_CSP) -> str:
    """A CSP as a <meta> tag (by default the feedback's, for grade.py's page of a flagged submission)."""
    return f'<meta http-equiv="Content-Security-Policy" content="{html.escape(policy)}">'


# --- The formgrader (a Jupyter server extension; scripts/hub.py and the Makefile enable it).

def formgrader_csp(nonce: str) -> str:
    """The Manual Grading page's CSP: only the formgrader's own scripts (marked with the nonce)."""
    return (f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'self' 'unsafe-inline'; "
            "img-src 'self' data:; font-src 'self' data:; connect-src 'self'; base-uri 'none'; "
            "form-action 'self'; frame-ancestors 'self'; object-src 'none'")


# A file of a submission (an image a notebook shows, or anything else handed in): no script, and a
# unique origin, as Jupyter's own /files/ does for HTML.
FILES_CSP = "sandbox; default-src 'none'; img-src 'self' data:; style-src 'unsafe-inline'"


def _formgrader_handlers():
    """nbgrader's routes of one submission, in nbgrader's order, with its two page handlers
    replaced by ones that send a CSP and render through SafeHTMLExporter."""
    from nbgrader.server_extensions.formgrader import handlers

    class SafeSubmissionHandler(handlers.SubmissionHandler):
        @property
        def nonce(self) -> str:
            if not hasattr(self, "_nonce"):
                self._nonce = secrets.token_urlsafe(18)
            return self._nonce

        @property
        def content_security_policy(self) -> str:
            return formgrader_csp(self.nonce)

        @property
        def exporter(self) -> SafeHTMLExporter:
            config = Config(copy.deepcopy(self.settings["nbgrader_formgrader"].config))
            config.SafeHTMLExporter.template_name = "safe_formgrade"
            config.SafeHTMLExporter.extra_template_basedirs = [str(TEMPLATES), handlers.template_path]
            # nbgrader's page and its macros, for the template that extends it
            config.SafeHTMLExporter.extra_template_paths = [handlers.template_path,
                                                            str(Path(handlers.template_path) / "formgrade")]
            config.SafeHTMLExporter.content_security_policy = ""  # the header carries it
            return SafeHTMLExporter(config=config, csp_nonce=self.nonce)

    class SafeSubmissionFilesHandler(handlers.SubmissionFilesHandler):
        @property
        def content_security_policy(self) -> str:
            return FILES_CSP

    replace = {handlers.SubmissionHandler: SafeSubmissionHandler,
               handlers.SubmissionFilesHandler: SafeSubmissionFilesHandler}
    return [(pattern, replace.get(handler, handler), *rest) for pattern, handler, *rest
            in handlers.default_handlers if pattern.startswith("/formgrader/submissions/")]


def _scriptless(handler: type) -> type:
    """`handler` (Jupyter's /files/ or /nbconvert/ route) answering with FILES_CSP: jupyter_server's
    own policy there is `sandbox allow-scripts`, so an HTML or SVG file a student handed in, opened
    with "Open in New Browser Tab", or a submission exported to HTML, would run its script."""
    return type(f"Scriptless{handler.__name__}", (handler,),
                {"content_security_policy": property(lambda self: FILES_CSP)})


def _handler_rules(router) -> list:
    """Every rule of a tornado router that leads to a handler, through its nested routers."""
    found = []
    for rule in router.rules:
        found += _handler_rules(rule.target) if hasattr(rule.target, "rules") else [rule]
    return found


def _jupyter_server_extension_points():
    return [{"module": "grading.sanitize"}]


def _load_jupyter_server_extension(serverapp) -> None:
    """Answer the submission routes before nbgrader's formgrader does, whichever loads first."""
    from jupyter_server.utils import url_path_join

    if not serverapp.jpserver_extensions.get("nbgrader.server_extensions.formgrader"):
        return  # a student's server: no formgrader to guard
    from jupyter_server.base.handlers import AuthenticatedFileHandler
    from jupyter_server.nbconvert.handlers import NbconvertFileHandler, NbconvertPostHandler

    web_app = serverapp.web_app
    shows_files = (AuthenticatedFileHandler, NbconvertFileHandler, NbconvertPostHandler)
    for rule in _handler_rules(web_app.default_router):
        if isinstance(rule.target, type) and issubclass(rule.target, shows_files):
            rule.target = _scriptless(rule.target)
    routes = [(url_path_join(web_app.settings["base_url"], pattern.lstrip("/")), *rest)
              for pattern, *rest in _formgrader_handlers()]
    web_app.add_handlers(".*$", routes)
    # add_handlers puts the new host rule just before the last (catch-all) one: move it first.
    rules = web_app.default_router.rules
    rules.insert(0, rules.pop(-2))
    serverapp.log.info("grading.sanitize: the formgrader's submission pages are sanitized, with a strict CSP; "
                       "/files/ and /nbconvert/ run no script")
