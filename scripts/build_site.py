"""Build the course's static website (`make site`): site/_build/html, from the committed files.

The pages are laid out in site/_build/src as the repository lays them out (so the notebooks' and
guides' relative links keep working), then Sphinx with MyST-NB (site/conf.py) renders them
without running anything:
- notebooks/*.ipynb, the ten lessons with their committed outputs (figures, claims, and each
  widget's static picture, which the lessons store as HTML);
- exercises/<set>/<set>_exercises.ipynb, the student versions: the build refuses one that holds
  nbgrader's solution or hidden-test markers. solutions/ is never read;
- README.md, docs/*.md (whatever guides exist now, with docs/glossary.md) and docs' pictures;
- a home page that lists the lessons and exercise sets in order.
Each lesson and exercise page gets a line under its title: a link to download the notebook as
committed, and how to run it. MathJax is copied from npm's mathjax@3 (MATHJAX, installed by the
Makefile) into the site, so that math renders with no network.

Usage: python scripts/build_site.py [--mathjax .site/node_modules/mathjax]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from course_lib import exercise_notebook  # noqa: E402  (the one place that names a set's notebook)
SITE = ROOT / "site"
BUILD = SITE / "_build"
SRC = BUILD / "src"  # the pages, laid out for Sphinx
HTML = BUILD / "html"
VENDOR = BUILD / "vendor"  # html_static_path in site/conf.py: MathJax goes here
ORIGINALS = "_originals"  # the committed notebooks, offered for download as they are

# nbgrader's markers exist only in the instructor's source: a student version never has them.
MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION", "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")
# The guides in the order a reader wants them; any other docs/*.md follows, by name.
GUIDE_ORDER = ["learners", "instructors", "hub", "maintainers"]
# A markdown link (not an image): [text](target "optional title").
LINK = re.compile(r'(?<!!)\[(?P<text>[^\]\n]*)\]\((?P<target>[^)\s]+)(?:\s+"[^"]*")?\)')

LESSON_NOTE = """```{{note}}
This page shows the lesson as committed, with its outputs; nothing on it runs, and each widget is a
static picture of its first view. Download the notebook: {{download}}`{name} <{original}>`.
To run it, clone the course's repository and run `make lab` in it: JupyterLab opens on its
start page, and Run All in a lesson makes every widget live.
```"""

EXERCISE_NOTE = """```{{note}}
This page shows the exercise set as a learner gets it. Download the notebook:
{{download}}`{name} <{original}>`. To work on it, clone the course's repository, run `make lab`
in it and open `{path}` in JupyterLab: each check cell tells you whether your answer is right.
```"""


def first_heading(cells: list[dict]) -> str:
    """The notebook's title: its first markdown '# ' line."""
    for cell in cells:
        if cell["cell_type"] == "markdown":
            for line in "".join(cell["source"]).splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    raise ValueError("a notebook without a '# ' title")


def markdown_cell(text: str, cell_id: str) -> dict:
    """A markdown cell with an id (nbformat 4.5 requires one)."""
    return {"cell_type": "markdown", "id": cell_id, "metadata": {}, "source": text}


def with_note(nb: dict, note: str) -> dict:
    """The notebook with `note` right under its title (the first cell's '# ' line)."""
    first = "".join(nb["cells"][0]["source"])
    title, _, rest = first.partition("\n")
    if not title.startswith("# "):
        raise ValueError(f"the first cell does not start with a '# ' title: {title!r}")
    head = [markdown_cell(title, "site-title"), markdown_cell(note, "site-note")]
    tail = [dict(nb["cells"][0], source=rest)] if rest.strip() else []
    return dict(nb, cells=head + tail + nb["cells"][1:])


def unlink_missing(text: str, here: Path) -> str:
    """`text` with each relative link to a file the site does not have made plain text.

    The guides and the README link files of the repository (a script, the Makefile) that are not
    pages of the site: on the site such a link would lead nowhere, so its words stay, unlinked."""
    def replace(match: re.Match) -> str:
        target = match["target"]
        if re.match(r"^([a-zA-Z][a-zA-Z0-9+.-]*:|#|/|<)", target):  # a URL, an anchor, absolute
            return match[0]
        path = (here / target.split("#")[0]).resolve()
        return match[0] if path.is_file() and path.is_relative_to(SRC) else match["text"]
    return LINK.sub(replace, text)


def one_line_display_math(text: str) -> str:
    """`text` with each $$...$$ on one line.

    Jupyter takes the math out before it reads the markdown; MyST reads the markdown first, so a
    formula whose second line starts with '+ ' became a list item and its TeX showed as text.
    TeX reads a line break as a space, so the formula is the same."""
    return re.sub(r"\$\$(.+?)\$\$", lambda m: "$$" + " ".join(m[1].splitlines()) + "$$", text, flags=re.S)


def prepare_markdown(text: str, here: Path) -> str:
    return one_line_display_math(unlink_missing(text, here))


def prepare_notebook(nb: dict, here: Path) -> dict:
    cells = [dict(c, source=prepare_markdown("".join(c["source"]), here)) if c["cell_type"] == "markdown" else c
             for c in nb["cells"]]
    return dict(nb, cells=cells)


def write_notebook(nb: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False))


def stage_notebook(source: Path, note_template: str) -> tuple[str, str, str]:
    """Lay out one notebook (its page and its original for download); return (page, title, note)."""
    relative = source.relative_to(ROOT)
    original = SRC / ORIGINALS / relative
    original.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(source, original)
    nb = json.loads(source.read_text())
    page = SRC / relative
    note = note_template.format(name=source.name, path=relative.as_posix(),
                                original=Path("../" * (len(relative.parts) - 1), ORIGINALS, relative).as_posix())
    write_notebook(nb, page)  # first, so that links between pages resolve while the others are staged
    return relative.with_suffix("").as_posix(), first_heading(nb["cells"]), note


def check_student_version(path: Path) -> None:
    """Refuse an exercise notebook that holds the instructor's solution or hidden tests."""
    text = path.read_text()
    found = [marker for marker in MARKERS if marker in text]
    if found:
        sys.exit(f"build_site: {path.relative_to(ROOT)} holds {', '.join(found)}: it is not a student "
                 "version (make exercises makes them)")


def guides() -> list[Path]:
    """docs/*.md in reading order: the known guides first, then the others by name; the glossary last."""
    found = sorted(p for p in (ROOT / "docs").glob("*.md") if p.stem != "glossary")
    rank = {name: i for i, name in enumerate(GUIDE_ORDER)}
    return sorted(found, key=lambda p: rank.get(p.stem, len(rank)))


def home_page(lessons: list[tuple[str, str]], sets: list[tuple[str, str]], docs: list[str]) -> str:
    """The home page: what the course is, the lessons beside their exercise sets, then the guides."""
    rows = "\n".join(f"| [{title}]({page}.ipynb) | [Set {page.split('/')[-1][:2]}]({set_page}.ipynb) |"
                     for (page, title), (set_page, _) in zip(lessons, sets))
    toctree = lambda caption, pages: f"```{{toctree}}\n:caption: {caption}\n:hidden:\n\n" + "\n".join(pages) + "\n```"
    return "\n\n".join([
        "# Transformer Roots",
        "An interactive course on why Transformers work: ten lessons, each a Jupyter notebook that "
        "builds one idea from scratch in PyTorch, checks every claim it makes, and lets you move "
        "its parts with widgets; each lesson has an exercise set. This site shows the lessons with "
        "their committed outputs. To run them, clone the course's repository and run `make lab` in it.",
        "## Lessons and exercise sets\n\nIn order: each lesson, then its exercise set.",
        "| Lesson | Exercises |\n| --- | --- |\n" + rows,
        "## Guides\n\n" + "\n".join(f"- [{title}]({page}.md)" for page, title in docs)
        + "\n- [Glossary](docs/glossary.md): the course's terms, each in a sentence or two"
        + "\n- [The repository's README](README.md): installing, testing and grading",
        "Search the lessons, exercise sets and guides with the search box (top left).",
        toctree("Lessons", [p for p, _ in lessons]),
        toctree("Exercise sets", [p for p, _ in sets]),
        toctree("Guides", [p for p, _ in docs] + ["docs/glossary", "The repository’s README <README>"]),
    ]) + "\n"


def md_title(path: Path) -> str:
    for line in path.read_text().splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return path.stem.capitalize()


def stage(mathjax: Path) -> None:
    """Lay out every page, picture and download in SRC, and MathJax in VENDOR."""
    shutil.rmtree(SRC, ignore_errors=True)
    SRC.mkdir(parents=True)
    # Markdown first: the guides, their pictures (docs/hub/*.png) and the README.
    shutil.copytree(ROOT / "docs", SRC / "docs", ignore=shutil.ignore_patterns("*.ipynb", ".*"))
    shutil.copy(ROOT / "README.md", SRC / "README.md")

    lessons, lesson_notes = [], {}
    for source in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        page, title, note = stage_notebook(source, LESSON_NOTE)
        lessons.append((page, title))
        lesson_notes[page] = note
    sets, set_notes = [], {}
    for folder in sorted(p for p in (ROOT / "exercises").iterdir() if p.is_dir()):
        source = folder / exercise_notebook(folder.name)
        check_student_version(source)
        page, title, note = stage_notebook(source, EXERCISE_NOTE)
        sets.append((page, title))
        set_notes[page] = note

    # Every page is in place: now each one's links to what the site lacks can be unlinked.
    for page, note in {**lesson_notes, **set_notes}.items():
        path = SRC / f"{page}.ipynb"
        nb = prepare_notebook(json.loads(path.read_text()), path.parent)
        write_notebook(with_note(nb, note), path)
    docs = [(p.relative_to(ROOT).with_suffix("").as_posix(), md_title(p)) for p in guides()]
    (SRC / "index.md").write_text(home_page(lessons, sets, docs))
    for path in [SRC / "README.md", *(SRC / "docs").glob("*.md")]:
        path.write_text(prepare_markdown(path.read_text(), path.parent))

    # MathJax's one-file TeX component and the fonts its CHTML output loads.
    shutil.rmtree(VENDOR, ignore_errors=True)
    es5 = mathjax / "es5"
    if not (es5 / "tex-chtml-full.js").is_file():
        sys.exit(f"build_site: no MathJax at {es5} (make site installs it with npm from site/package.json)")
    (VENDOR / "mathjax").mkdir(parents=True)
    shutil.copy(es5 / "tex-chtml-full.js", VENDOR / "mathjax")
    shutil.copytree(es5 / "output" / "chtml" / "fonts", VENDOR / "mathjax" / "output" / "chtml" / "fonts")


def build() -> None:
    """Sphinx, from SRC into HTML; its warnings (a broken link, a missing picture) go to warnings.txt."""
    shutil.rmtree(HTML, ignore_errors=True)
    warnings = BUILD / "warnings.txt"
    command = [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-c", str(SITE), "-d", str(BUILD / "doctrees"),
               "-w", str(warnings), str(SRC), str(HTML)]
    subprocess.run(command, check=True)
    if warnings.read_text().strip():
        print(f"build_site: Sphinx's warnings are in {warnings.relative_to(ROOT)}:\n{warnings.read_text()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mathjax", type=Path, default=ROOT / ".site" / "node_modules" / "mathjax")
    args = parser.parse_args()
    start = time.perf_counter()
    stage(args.mathjax)
    build()
    pages = sum(1 for p in HTML.rglob("*.html") if p.relative_to(HTML).parts[0] != "_static")  # not the theme's
    print(f"build_site: {pages} pages in {HTML.relative_to(ROOT)} ({time.perf_counter() - start:.0f} s); "
          f"open {HTML.relative_to(ROOT)}/index.html")


if __name__ == "__main__":
    main()
