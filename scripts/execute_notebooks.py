"""Re-execute notebooks in place, top to bottom, so their committed outputs reproduce.

Usage: python scripts/execute_notebooks.py [notebook or folder ...]
(default: notebooks/ solutions/)
Each notebook runs in a fresh kernel with its own folder as working directory. Timings are
not recorded, and widgets are saved as their static snapshot only (no widget state, no
widget-view outputs, whose model ids are random), so re-running an unchanged notebook
leaves the file byte-identical.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def notebooks(args: list[str]) -> list[Path]:
    found: list[Path] = []
    for arg in args or ["notebooks", "solutions"]:
        path = (ROOT / arg) if not Path(arg).is_absolute() else Path(arg)
        found += [path] if path.suffix == ".ipynb" else sorted(
            p for p in path.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
    return found


def merge_streams(outputs: list) -> list:
    merged: list = []
    for output in outputs:
        previous = merged[-1] if merged else None
        if (output.output_type == "stream" and previous is not None
                and previous.output_type == "stream" and previous.name == output.name):
            previous.text += output.text
        else:
            merged.append(output)
    return merged


def without_widget_state(nb: nbformat.NotebookNode) -> None:
    """Drop the widget state and the widget-view entries of outputs, keeping their
    text/html snapshot: with no state saved, a widget-view entry shows "Error displaying
    widget: model not found" in a trusted notebook; the snapshot shows in any notebook."""
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if WIDGET_VIEW in data and len(data) > 1:
                del data[WIDGET_VIEW]


def execute(path: Path, timeout: int = 120) -> float:
    """Run one notebook in place and return its wall-clock seconds."""
    nb = nbformat.read(path, as_version=4)
    os.environ.setdefault("PYTHONHASHSEED", "0")
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            record_timing=False,
                            resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    client.execute()
    seconds = time.perf_counter() - start
    # one stdout block per cell, however the kernel happened to flush it
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = merge_streams(cell.outputs)
    without_widget_state(nb)
    nbformat.write(nb, path)
    return seconds


if __name__ == "__main__":
    for notebook in notebooks(sys.argv[1:]):
        shown = notebook.relative_to(ROOT) if notebook.is_relative_to(ROOT) else notebook
        print(f"{execute(notebook):6.1f} s  {shown}", flush=True)
