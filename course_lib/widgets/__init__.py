"""Live widgets for the lessons: one module per lesson, built on `LiveView`.

A LiveView holds some ipywidgets controls and one HTML view. Every change of a control
calls `render(**values)`, which returns an HTML/SVG string; the view shows it. Arrays are
precomputed when the widget is built, so a redraw is string formatting, not model work.
Errors inside a callback are printed into an Output below the view instead of vanishing.
"""

from __future__ import annotations

import time
import traceback
from typing import Callable

import ipywidgets as widgets


class LiveView:
    """Controls + an HTML view redrawn on every change; `timings_ms` records each redraw."""

    def __init__(self, controls: dict[str, widgets.ValueWidget], render: Callable[..., str]):
        self.controls = controls
        self.render = render
        self.view = widgets.HTML()
        self.view.add_class("tr-view")
        self.errors = widgets.Output()
        self.timings_ms: list[float] = []
        for control in controls.values():
            control.observe(self._on_change, names="value")
        self.box = widgets.VBox([widgets.HBox(list(controls.values())), self.view, self.errors])
        self.box.add_class("tr-live")  # the browser test finds live widgets by this class
        self.refresh()

    def values(self) -> dict[str, object]:
        return {name: control.value for name, control in self.controls.items()}

    def refresh(self) -> None:
        start = time.perf_counter()
        try:
            self.view.value = self.render(**self.values())
        except Exception:  # show the learner what went wrong, keep the widget alive
            with self.errors:
                traceback.print_exc()
        self.timings_ms.append((time.perf_counter() - start) * 1000)

    def _on_change(self, _change: dict) -> None:
        self.refresh()

    def _repr_mimebundle_(self, **kwargs):
        return self.box._repr_mimebundle_(**kwargs)


def row(*svgs: str) -> str:
    """Lay SVG panels side by side."""
    return '<div style="display:flex;gap:16px;align-items:flex-start">' + "".join(svgs) + "</div>"
