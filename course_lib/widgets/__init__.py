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
        # Controls wrap onto a second line rather than squeezing every slider to a stub.
        bar = widgets.HBox(list(controls.values()), layout=widgets.Layout(flex_flow="row wrap"))
        self.box = widgets.VBox([bar, self.view, self.errors])
        self.box.add_class("tr-live")  # the browser test finds live widgets by this class
        self.refresh()

    def values(self) -> dict[str, object]:
        return {name: control.value for name, control in self.controls.items()}

    def refresh(self) -> None:
        start = time.perf_counter()
        try:
            # Plain line spacing and wrapping text: the widget's own CSS is meant for one-line labels.
            self.view.value = f'<div style="line-height:1.4;white-space:normal">{self.render(**self.values())}</div>'
        except Exception:  # show the learner what went wrong, keep the widget alive
            with self.errors:
                traceback.print_exc()
        self.timings_ms.append((time.perf_counter() - start) * 1000)

    def _on_change(self, _change: dict) -> None:
        self.refresh()

    def _repr_mimebundle_(self, **kwargs):
        return self.box._repr_mimebundle_(**kwargs)


def row(*svgs: str) -> str:
    """Lay SVG panels side by side, wrapping onto the next line when the notebook is narrow."""
    return '<div style="display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start">' + "".join(svgs) + "</div>"
