"""Screenshots of what a learner sees: each cell's output area of a notebook, as JupyterLab in
headless Chromium shows it (the committed outputs; nothing is run).

Usage: python scripts/screenshots.py OUT_DIR notebooks/06_copying.ipynb [...] [--cells 3,10,19]
Writes OUT_DIR/<notebook>-cellNN.png for every code cell with output (or the listed cells),
and prints the path of each, with the widest line of text output in characters, so that a
line that would wrap mid-word is caught without reading every picture.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

from playwright.sync_api import sync_playwright

sys.path.insert(0, str(Path(__file__).parent))
from lab_driver import jupyterlab, launch_options, open_lesson  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def cells_with_output(path: Path) -> list[int]:
    cells = json.loads(path.read_text())["cells"]
    return [i for i, c in enumerate(cells) if c["cell_type"] == "code" and c.get("outputs")]


def widest_line(path: Path, index: int) -> int:
    cell = json.loads(path.read_text())["cells"][index]
    texts = ["".join(o.get("text", "")) for o in cell.get("outputs", [])]
    return max((len(line) for t in texts for line in t.splitlines()), default=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path)
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--cells", default="", help="comma-separated cell indices")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        served = Path(tmp, "course")  # JupyterLab writes checkpoints beside what it opens: serve copies
        for notebook in args.notebooks:
            copy = served / notebook.resolve().relative_to(ROOT)
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(notebook, copy)
        shoot(served, [served / n.resolve().relative_to(ROOT) for n in args.notebooks], args.out, args.cells,
              Path(tmp, "lab.log"))


def shoot(served: Path, paths: list[Path], out: Path, cells_wanted: str, log: Path) -> None:
    """Screenshot the wanted cells' outputs of each notebook in `paths`, served by JupyterLab from `served`."""
    with jupyterlab(served, log) as url, sync_playwright() as p:
        browser = p.chromium.launch(**launch_options())
        page = browser.new_page(viewport={"width": 1366, "height": 2400})
        for path in paths:
            wanted = [int(i) for i in cells_wanted.split(",")] if cells_wanted else cells_with_output(path)
            open_lesson(page, url.format(path=path.relative_to(served).as_posix()))
            cells = page.locator(".jp-NotebookPanel:visible .jp-Cell")
            for index in wanted:
                cell = cells.nth(index).locator(".jp-Cell-outputWrapper")
                cell.scroll_into_view_if_needed()
                page.wait_for_timeout(300)  # lazy-rendered outputs and figures
                shot = out / f"{path.stem}-cell{index:02d}.png"
                cell.screenshot(path=str(shot))
                print(f"{shot}  widest text line {widest_line(path, index)}")
        browser.close()


if __name__ == "__main__":
    main()
