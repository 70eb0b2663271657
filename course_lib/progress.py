"""Progress bars: what a cell that runs for seconds shows while it runs.

This module imports neither torch nor the rest of the course, so that a lesson's first cell
can show a bar (`loading`) while PyTorch itself loads. The training loop's bars
(`training.progress_bar`) are the same `Progress`.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from html import escape
from typing import Iterator


class Progress:
    """A progress bar with a line of text beside it that says what is running.

    `update(done, text)` moves the bar to `done` of `total` and replaces the text (e.g.
    "step 80 of 160, loss 0.412"), at most ten times a second: enough to read, and each
    redraw is a message to the browser. The notebook saves what a cell displayed when the bar
    appeared, before the first step: the saved text (`summary`) holds the label and the
    total only, so it is the same on every run and every CPU (nbval compares it), and the
    steps and losses are seen live only.
    """

    def __init__(self, total: int, label: str, unit: str = "steps"):
        import ipywidgets  # here, not at the top: importing the course library stays quick

        self.total = total
        self.summary = f"{label}: {total} {unit} (a live progress bar while the cell runs)"
        self.bar = ipywidgets.FloatProgress(value=0, min=0, max=total, description=label,
                                            style={"description_width": "initial"})
        self.text = ipywidgets.HTML("starting")
        self.box = ipywidgets.HBox([self.bar, self.text])
        self.shown_at = -1.0  # time.monotonic() of the last redraw

    def update(self, done: float, text: str) -> None:
        if done < self.total and time.monotonic() - self.shown_at < 0.1:
            return  # the last update (done == total) always shows
        self.shown_at = time.monotonic()
        self.bar.value = min(done, self.total)
        self.text.value = escape(text)

    def _repr_mimebundle_(self, **kwargs) -> dict:
        bundle = self.box._repr_mimebundle_(**kwargs)
        bundle["text/plain"] = self.summary
        return bundle

    def __repr__(self) -> str:  # what display() prints outside a notebook
        return self.summary


@contextlib.contextmanager
def loading(*modules: str) -> Iterator[Progress]:
    """Show a bar while the block imports `modules` (names as `import` spells them), in that order.

    A thread looks every 50 ms which of them has begun to load (a module is in sys.modules
    from the moment its import starts); those begun before the latest have finished, since
    the block imports one at a time. The first cell of every lesson uses it for PyTorch and
    Matplotlib, which take one to three seconds to load on a laptop.
    """
    if not modules or not all(isinstance(m, str) and m for m in modules):
        raise TypeError(f"loading needs the names of the modules the block imports, "
                        f"such as loading('torch'), got {modules!r}")
    from IPython.display import display

    bar = Progress(len(modules), "loading " + ", ".join(modules), unit="modules")
    display(bar)
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(0.05):
            begun = [m for m in modules if m in sys.modules]
            if begun:
                bar.update(len(begun) - 1, f"loading {begun[-1]}")

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield bar
    finally:
        stop.set()
        watcher.join()
    bar.update(len(modules), "loaded")
