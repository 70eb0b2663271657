"""Live widgets for the lessons: one module per lesson, built on `LiveView`.

A LiveView holds some ipywidgets controls and one HTML view. Every change of a control
calls `render(**values)`, which returns an HTML/SVG string; the view shows it. Arrays are
precomputed when the widget is built, so a redraw is string formatting, not model work.
Errors inside a callback are printed into an Output below the view instead of vanishing.

ipywidgets is imported inside the functions that build widgets, not at the top of a module:
a lesson imports its widget module in its first cells, and builds the widget later.
"""

from __future__ import annotations

import base64
import re
import time
import traceback
from html import escape
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    import ipywidgets as widgets


class LiveView:
    """Controls + an HTML view redrawn on every change; `timings_ms` times each redraw."""

    def __init__(self, controls: dict[str, widgets.ValueWidget],
                 render: Callable[..., str]):
        import ipywidgets as widgets

        self.controls = controls
        self.render = render
        self.view = widgets.HTML()
        self.view.add_class("tr-view")
        self.errors = widgets.Output()
        self.timings_ms: list[float] = []
        self.first_view = ""  # the first rendering, kept for the static snapshot
        for control in controls.values():
            control.observe(self._on_change, names="value")
        # Controls wrap onto a second line rather than squeezing every slider to a stub.
        bar = widgets.HBox(list(controls.values()),
                           layout=widgets.Layout(flex_flow="row wrap"))
        self.box = widgets.VBox([bar, self.view, self.errors])
        self.box.add_class("tr-live")  # the browser test finds live widgets by this class
        self.refresh()

    def values(self) -> dict[str, object]:
        return {name: control.value for name, control in self.controls.items()}

    def refresh(self) -> None:
        start = time.perf_counter()
        try:
            # Plain line spacing and wrapping text: the widget's own CSS is meant for
            # one-line labels.
            self.view.value = ('<div style="line-height:1.4;white-space:normal">'
                               f'{self.render(**self.values())}</div>')
            self.first_view = self.first_view or self.view.value
        except Exception:  # show the learner what went wrong, keep the widget alive
            with self.errors:
                traceback.print_exc()
        self.timings_ms.append((time.perf_counter() - start) * 1000)

    def _on_change(self, _change: dict) -> None:
        self.refresh()

    def _repr_mimebundle_(self, **kwargs) -> dict:
        """The widget view, plus a static snapshot for where no live widget can show.

        A notebook opened before its cells run (or saved without widget state) cannot draw
        the widget; JupyterLab then shows the text/html snapshot, or text/plain instead of
        the raw `VBox(children=...)` repr.
        """
        bundle = self.box._repr_mimebundle_(**kwargs)
        bundle["text/html"] = snapshot_html(self.first_view)
        bundle["text/plain"] = f"Live widget: {SNAPSHOT_NOTE}"
        return bundle


SNAPSHOT_NOTE = "run the cell to make it live"
_SVG = re.compile(r"<svg\b.*?</svg>", re.DOTALL)


def _svg_as_img(match: re.Match) -> str:
    """An inline <svg> as <img src="data:image/svg+xml;base64,...">: JupyterLab's HTML
    sanitizer strips <svg> tags in untrusted notebooks but keeps data-URI images."""
    data = base64.b64encode(match.group(0).encode()).decode()
    return f'<img src="data:image/svg+xml;base64,{data}" alt="figure">'


def snapshot_html(view_html: str) -> str:
    """Static picture of a widget's view plus a line saying how to make it live.

    Deterministic: the same view gives the same text (nbval compares it)."""
    note = ('<p style="color:#666;font-style:italic">'
            f'Static picture: {escape(SNAPSHOT_NOTE)}'
            ' (Run All) to move the controls.</p>')
    return f'<div class="tr-snapshot">{note}{_SVG.sub(_svg_as_img, view_html)}</div>'


def row(*svgs: str) -> str:
    """Lay SVG panels side by side, wrapping onto the next line in a narrow notebook."""
    return ('<div style="display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start">'
            + "".join(svgs) + "</div>")
