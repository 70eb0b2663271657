"""Figures for the lessons.

Static figures use matplotlib. Live widgets draw small SVG strings instead: building an
SVG takes well under a millisecond and the browser renders it, so a slider answers at
once (a matplotlib redraw costs tens of milliseconds per frame).

Importing this module sets the notebook's inline figure format to retina PNG (see
`use_sharp_inline_figures`). matplotlib.pyplot itself is imported where a figure is drawn
(`heatmap`): the SVG functions, used by every widget, need no matplotlib.
"""

from __future__ import annotations

import math
import numbers
from html import escape
from typing import TYPE_CHECKING, Sequence

import numpy as np
from torch import Tensor

from .guards import require_count, require_index, require_number

if TYPE_CHECKING:
    from matplotlib.axes import Axes

# One palette for the whole course: positive = orange, negative = blue.
POSITIVE = (230, 120, 40)
NEGATIVE = (50, 110, 200)
MASKED_FILL = "#d8d8d8"  # masked cells, static and live: grey with a cross
MASKED_INK = "#888888"
CELL_FONT_PT = 9  # numbers written inside heatmap cells, never smaller than this
INLINE_DPI = 100  # every inline figure is shown at this many CSS pixels per inch


def use_sharp_inline_figures() -> bool:
    """Draw inline figures as retina PNG: 2 x INLINE_DPI pixels per inch, shown at
    INLINE_DPI, whatever dpi a figure was made with (a figure made at dpi=72 would
    otherwise come out small and blurred; one wider than the column is scaled to fit).

    Why PNG and not SVG: JupyterLab renders image/svg+xml only in trusted notebooks, and a
    freshly cloned lesson is untrusted, so SVG figures would show as "<Figure size ...>".
    PNG is always shown, Agg's bytes depend only on the drawn data (no date, no random
    ids), and nbval leaves PNGs out of its comparison. Returns False outside IPython.
    """
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    if get_ipython() is None:  # a script or a test: no inline figures, and no matplotlib
        return False
    from matplotlib_inline.backend_inline import set_matplotlib_formats

    set_matplotlib_formats("retina", dpi=2 * INLINE_DPI)
    return True


use_sharp_inline_figures()


def _as_numpy(matrix: Tensor | np.ndarray) -> np.ndarray:
    if isinstance(matrix, Tensor):
        return matrix.detach().cpu().numpy()
    return np.asarray(matrix)


def _require_matrix(matrix: object, row_labels: object, col_labels: object) -> np.ndarray:
    """matrix: a (rows, cols) tensor or array of numbers, one label per row and per column;
    returns its values as a float array."""
    if not isinstance(matrix, (Tensor, np.ndarray)):
        raise TypeError(f"matrix must be a tensor or a numpy array, got {type(matrix).__name__}")
    values = _as_numpy(matrix)
    if values.ndim != 2 or not (np.issubdtype(values.dtype, np.number) or values.dtype == bool):
        raise ValueError(f"matrix must be a 2-D array of numbers (rows, cols), got shape {values.shape} "
                         f"and dtype {values.dtype}")
    for name, labels, n in (("row_labels", row_labels, values.shape[0]), ("col_labels", col_labels, values.shape[1])):
        _require_labels(name, labels, n)
    return values.astype(float)


def _require_labels(name: str, labels: object, n: int) -> None:
    if isinstance(labels, (str, bytes)) or not isinstance(labels, Sequence):
        raise TypeError(f"{name} must be a list of {n} labels, got {type(labels).__name__}")
    if len(labels) != n:
        raise ValueError(f"{name} must have {n} labels (one per {'row' if name.startswith('row') else 'column'} of "
                         f"the matrix), got {len(labels)}")


def _require_finite(name: str, value: object) -> float:
    """A finite real number (Python's, numpy's or a one-element tensor's) as a float."""
    if isinstance(value, Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must hold numbers, got {type(value).__name__} {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must hold finite numbers, got {value}")
    return float(value)


def _require_text(**texts: object) -> None:
    for name, text in texts.items():
        if not isinstance(text, str):
            raise TypeError(f"{name} must be a string, got {type(text).__name__} {text!r}")


def _allowed_mask(values: np.ndarray, allowed: Tensor | np.ndarray | None) -> np.ndarray:
    """Boolean (rows, cols): True where a cell is shown, False where it is masked."""
    if allowed is None:
        return np.ones(values.shape, dtype=bool)
    return np.broadcast_to(_as_numpy(allowed).astype(bool), values.shape)


def heatmap(matrix: Tensor | np.ndarray, row_labels: Sequence[str],
            col_labels: Sequence[str], title: str = "", ax: Axes | None = None,
            fmt: str = "{:.2f}", cmap: str = "RdBu_r", row_axis: str = "query",
            col_axis: str = "key", allowed: Tensor | np.ndarray | None = None,
            limit: float | None = None, colorbar: bool = True) -> Axes:
    """Labelled heatmap of a (rows, cols) matrix with each value written in its cell.

    `allowed` (same shape, boolean) draws the False cells as masked: grey with a cross and
    no number, left out of the colour scale (a masked weight is "not there", not 0.0).
    `limit` fixes the top of the colour scale (default: the largest |value| shown), so several
    panels can share one scale; colorbar=False leaves the bar out (draw one for all panels with
    fig.colorbar(ax.images[0], ax=axes)).
    """
    import matplotlib.pyplot as plt

    values = _require_matrix(matrix, row_labels, col_labels)
    _require_text(title=title, fmt=fmt, row_axis=row_axis, col_axis=col_axis)
    shown = _allowed_mask(values, allowed) & np.isfinite(values)
    if ax is None:
        # About 0.6 inch per cell at 100 dpi: a 6-token matrix fills half the column,
        # a 12-token one most of it.
        size = (0.6 * len(col_labels) + 2.0, 0.5 * len(row_labels) + 1.3)
        _, ax = plt.subplots(figsize=size)
    visible = values[shown]
    if limit is None:
        limit = float(np.abs(visible).max()) if visible.size else 1.0
    limit = limit or 1.0
    vmin = 0.0 if (visible >= 0).all() else -limit
    colours = plt.get_cmap(cmap if vmin < 0 else "Oranges").with_extremes(bad=MASKED_FILL)
    image = ax.imshow(np.ma.masked_where(~shown, values), cmap=colours,
                      vmin=vmin, vmax=limit)
    ax.set_xticks(range(len(col_labels)), col_labels, rotation=45, ha="right")
    ax.set_yticks(range(len(row_labels)), row_labels)
    ax.set_xlabel(col_axis)
    ax.set_ylabel(row_axis)
    ax.set_title(title)
    for (i, j), value in np.ndenumerate(values):
        if not shown[i, j]:
            ax.text(j, i, "×", ha="center", va="center", fontsize=CELL_FONT_PT + 2,
                    color=MASKED_INK)
            continue
        strong = abs(value) > 0.6 * limit
        ax.text(j, i, fmt.format(value), ha="center", va="center", fontsize=CELL_FONT_PT,
                color="white" if strong else "black")
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    return ax


# ---------------------------------------------------------------- SVG for live widgets

FONT = 'font-family="sans-serif" font-size="12"'
SERIES_COLOURS = ["#d9661f", "#2f6fc6", "#3a9a4a", "#8a3ab9"]
CHAR_PX = 7.0  # rough width of one character at 12 px, to keep labels apart


def _svg_open(width: float, height: float) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:g}" '
            f'height="{height:g}" {FONT}>')


def _colour(value: float, limit: float) -> str:
    share = min(abs(value) / limit, 1.0) if limit > 0 else 0.0
    base = POSITIVE if value >= 0 else NEGATIVE
    r, g, b = (round(255 + (c - 255) * share) for c in base)
    return f"rgb({r},{g},{b})"


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About `count` round-number ticks (steps of 1, 2 or 5 times a power of ten) that lie
    within [low, high]; always at least two. A degenerate range (high <= low, or not finite) gives [low]."""
    for name, value in (("low", low), ("high", high)):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
            raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    require_count("count", count, minimum=0)
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        return [low]
    raw = (high - low) / max(count, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(low / step - 1e-9)
    last = math.floor(high / step + 1e-9)
    ticks = [round(k * step, 12) for k in range(first, last + 1)]
    return ticks if len(ticks) >= 2 else [low, high]


def _tick_text(value: float) -> str:
    return f"{value:.6g}" if value != 0 else "0"


def _text_box(x: float, y: float, text: str, anchor: str = "start") -> tuple[float, ...]:
    """Approximate (x0, y0, x1, y1) box of a 12 px label with its baseline at (x, y)."""
    width = CHAR_PX * len(text)
    x0 = {"start": x, "middle": x - width / 2, "end": x - width}[anchor]
    return (x0, y - 11, x0 + width, y + 3)


def _overlaps(box: tuple[float, ...], others: list[tuple[float, ...]]) -> bool:
    return any(box[0] < o[2] and o[0] < box[2] and box[1] < o[3] and o[1] < box[3]
               for o in others)


def _grid_top(title: str) -> int:
    """y of a heatmap's first row: room for the column axis name and labels, and the title."""
    return 40 + (18 if title else 0)


def svg_colour_bar(limit: float, title: str, length: int, signed: bool = False) -> str:
    """The colour scale of `svg_heatmap(..., limit=limit)` as a vertical bar with ticks.

    White at 0, full orange at +limit (and, when `signed`, full blue at -limit); beyond the
    limit the heatmap keeps the full colour. `length`: the bar's height in px; a heatmap of R
    rows of `cell` px beside it lines up with length = R * cell (the bar starts where a titled
    heatmap's first row does). Heatmaps drawn with one limit share one bar.
    """
    limit = require_number("limit", limit, positive=True)
    _require_text(title=title)
    require_count("length", length)
    low = -limit if signed else 0.0
    top, bar_w, stripes = _grid_top(title), 16, 48
    ticks = nice_ticks(low, limit, count=4)
    tick_w = CHAR_PX * max(len(_tick_text(t)) for t in ticks)
    width = max(4 + bar_w + 6 + tick_w + 4, 8 + CHAR_PX * len(title))
    parts = [_svg_open(width, top + length + 10),
             f'<text x="4" y="14" font-weight="bold">{escape(title)}</text>']
    # Stripes coloured as the heatmap colours their middle value: the bar is the same
    # function, not a gradient that might interpolate otherwise. High values at the top.
    step = length / stripes
    for k in range(stripes):
        value = limit - (k + 0.5) * (limit - low) / stripes
        parts.append(f'<rect x="4" y="{top + k * step:.2f}" width="{bar_w}" height="{step + 0.5:.2f}" '
                     f'fill="{_colour(value, limit)}"/>')
    parts.append(f'<rect x="4" y="{top}" width="{bar_w}" height="{length}" fill="none" stroke="#888"/>')
    for tick in ticks:
        y = top + (limit - tick) / (limit - low) * length
        parts.append(f'<line x1="{4 + bar_w}" y1="{y:.2f}" x2="{8 + bar_w}" y2="{y:.2f}" stroke="#444"/>'
                     f'<text x="{10 + bar_w}" y="{y + 4:.2f}">{_tick_text(tick)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def svg_heatmap(matrix: Tensor | np.ndarray, row_labels: Sequence[str],
                col_labels: Sequence[str], title: str = "", cell: int = 34,
                fmt: str = "{:.2f}", highlight_row: int | None = None,
                allowed: Tensor | np.ndarray | None = None, row_axis: str = "query",
                col_axis: str = "key", limit: float | None = None) -> str:
    """SVG heatmap with token labels and axis names, values written in the cells.

    matrix: (rows, cols). `allowed` (same shape, boolean) greys out and crosses the cells
    that are False (masked). Colours run from white to orange (positive) or blue
    (negative) at |value| = limit (default: the largest |value|). `highlight_row` is
    framed and bold.
    """
    values = _require_matrix(matrix, row_labels, col_labels)
    _require_text(title=title, fmt=fmt, row_axis=row_axis, col_axis=col_axis)
    require_count("cell", cell)
    if highlight_row is not None:
        require_index("highlight_row", highlight_row, values.shape[0], "rows")
    allowed = _allowed_mask(values, allowed)
    n_rows, n_cols = values.shape
    label_w = CHAR_PX * max((len(str(label)) for label in row_labels), default=1)
    left, top = int(30 + label_w), _grid_top(title)
    width = max(left + n_cols * cell + 10, 12 + CHAR_PX * len(title))
    height = top + n_rows * cell + 10
    shown = np.abs(values[allowed & np.isfinite(values)])
    limit = limit or (float(shown.max()) if shown.size else 1.0) or 1.0
    middle_x, middle_y = left + n_cols * cell / 2, top + n_rows * cell / 2
    parts = [_svg_open(width, height),
             f'<text x="{middle_x}" y="{top - 24}" text-anchor="middle" '
             f'font-style="italic">{escape(col_axis)}</text>',
             f'<text x="12" y="{middle_y}" transform="rotate(-90 12 {middle_y})" '
             f'text-anchor="middle" font-style="italic">{escape(row_axis)}</text>']
    if title:
        parts.append(f'<text x="4" y="14" font-weight="bold">{escape(title)}</text>')
    # Column labels wider than a cell would run into each other: shrink them to fit.
    col_size = min(12, max(8, cell / (0.6 * max(len(str(c)) for c in col_labels) or 1)))
    for j, label in enumerate(col_labels):
        parts.append(f'<text x="{left + j * cell + cell / 2}" y="{top - 6}" '
                     f'text-anchor="middle" font-size="{col_size:.0f}">'
                     f'{escape(label)}</text>')
    value_size = 10 if cell >= 32 else 9
    for i, label in enumerate(row_labels):
        y = top + i * cell
        weight = ' font-weight="bold"' if i == highlight_row else ""
        parts.append(f'<text x="{left - 6}" y="{y + cell / 2 + 4}" text-anchor="end"'
                     f'{weight}>{escape(label)}</text>')
        for j in range(n_cols):
            x, value = left + j * cell, float(values[i, j])
            if not allowed[i, j]:
                parts.append(
                    f'<rect x="{x}" y="{y}" width="{cell}" height="{cell}" '
                    f'fill="{MASKED_FILL}" stroke="white"/><text x="{x + cell / 2}" '
                    f'y="{y + cell / 2 + 4}" text-anchor="middle" '
                    f'fill="{MASKED_INK}">×</text>')
                continue
            parts.append(f'<rect x="{x}" y="{y}" width="{cell}" height="{cell}" '
                         f'fill="{_colour(value, limit)}" stroke="white"/>')
            if np.isfinite(value):
                ink = "white" if abs(value) > 0.75 * limit else "black"
                parts.append(f'<text x="{x + cell / 2}" y="{y + cell / 2 + 4}" '
                             f'fill="{ink}" '
                             f'text-anchor="middle" font-size="{value_size}">'
                             f'{fmt.format(value)}</text>')
        if i == highlight_row:
            parts.append(f'<rect x="{left}" y="{y}" width="{n_cols * cell}" '
                         f'height="{cell}" '
                         'fill="none" stroke="black" stroke-width="2"/>')
    parts.append("</svg>")
    return "".join(parts)


def svg_bars(values: Sequence[float], labels: Sequence[str], title: str = "",
             limit: float | None = None, width: int = 260, fmt: str = "{:+.2f}",
             highlight: int | None = None) -> str:
    """Horizontal bar chart, one labelled bar per token; bars grow right (positive) or
    left (negative). `highlight` (an index) draws that bar and its label in bold."""
    if isinstance(values, (str, bytes)) or not isinstance(values, (Sequence, np.ndarray, Tensor)):
        raise TypeError(f"values must be a list of numbers, got {type(values).__name__}")
    values = [_require_finite("values", v) for v in values]
    _require_labels("labels", labels, len(values))
    _require_text(title=title, fmt=fmt)
    if highlight is not None:
        require_index("highlight", highlight, len(values), "bars")
    limit = limit or max((abs(v) for v in values), default=1.0) or 1.0
    label_w = CHAR_PX * max((len(str(label)) for label in labels), default=1)
    number_w = CHAR_PX * max((len(fmt.format(v)) for v in values), default=4)
    row, left, top = 22, int(10 + label_w), 24 if title else 6
    width = max(width, int(left + 80 + number_w))
    plot_w = width - left - number_w - 8
    two_sided = min(values, default=0) < 0
    middle = left + plot_w / 2 if two_sided else left
    span = plot_w / 2 if two_sided else plot_w
    bottom = top + row * len(values)
    parts = [_svg_open(width, bottom + 20)]
    if title:
        parts.append(f'<text x="4" y="15" font-weight="bold">{escape(title)}</text>')
    # Round-number gridlines with their values below the bars, so lengths can be read.
    low = -limit if two_sided else 0.0
    for tick in nice_ticks(low, limit, 5 if two_sided else 3):
        x = middle + span * tick / limit
        parts.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{bottom}" '
                     'stroke="#e4e4e4"/>')
        parts.append(f'<text x="{x:.1f}" y="{bottom + 14}" text-anchor="middle" '
                     f'font-size="10" fill="#666">{_tick_text(tick)}</text>')
    for i, (value, label) in enumerate(zip(values, labels)):
        y = top + i * row
        length = span * min(abs(value) / limit, 1.0)
        x = middle if value >= 0 else middle - length
        chosen = i == highlight
        weight = ' font-weight="bold"' if chosen else ""
        outline = ('stroke="black" stroke-width="2"' if chosen
                   else 'stroke="#555" stroke-width="0.5"')
        parts.append(f'<text x="{left - 6}" y="{y + 15}" text-anchor="end"{weight}>'
                     f'{escape(label)}</text>')
        parts.append(f'<rect x="{x:.1f}" y="{y + 3}" width="{length:.1f}" '
                     f'height="{row - 6}" '
                     f'fill="{_colour(value, limit)}" {outline}/>')
        parts.append(f'<text x="{width - 4}" y="{y + 15}" text-anchor="end"{weight}>'
                     f'{fmt.format(value)}</text>')
    parts.append(f'<line x1="{middle}" y1="{top}" x2="{middle}" y2="{bottom}" '
                 'stroke="#333"/>')
    parts.append("</svg>")
    return "".join(parts)


def svg_vectors(vectors: np.ndarray, labels: Sequence[str],
                highlight: np.ndarray | None = None, highlight_label: str = "query",
                size: int = 220) -> str:
    """2-D arrows from the origin, one per token, plus one highlighted arrow (the query).

    Labels sit beyond each arrow's tip; a label that would cover one already placed is
    moved further out, then sideways, so no two labels overlap.
    """
    vectors = np.asarray(vectors, dtype=float).reshape(-1, 2)
    every = vectors if highlight is None else np.vstack([vectors, highlight])
    reach = float(np.abs(every).max()) * 1.05 or 1.0
    half = size / 2

    def to_px(point: np.ndarray) -> tuple[float, float]:
        # a margin of 30 px keeps room for the labels beyond the tips
        scale = (half - 30) / reach
        return half + point[0] * scale, half - point[1] * scale

    parts = [_svg_open(size, size),
             f'<line x1="0" y1="{half}" x2="{size}" y2="{half}" stroke="#ccc"/>',
             f'<line x1="{half}" y1="0" x2="{half}" y2="{size}" stroke="#ccc"/>']
    for tick in nice_ticks(-reach, reach, 5):  # round ticks on both axes, 0 left out
        if tick == 0:
            continue
        at = to_px(np.array([tick, tick]))
        parts.append(f'<line x1="{at[0]:.1f}" y1="{half - 3}" x2="{at[0]:.1f}" '
                     f'y2="{half + 3}" stroke="#aaa"/><text x="{at[0]:.1f}" '
                     f'y="{half + 14}" text-anchor="middle" font-size="9" fill="#888">'
                     f'{_tick_text(tick)}</text>')
        parts.append(f'<line x1="{half - 3}" y1="{at[1]:.1f}" x2="{half + 3}" '
                     f'y2="{at[1]:.1f}" stroke="#aaa"/><text x="{half - 5}" '
                     f'y="{at[1] + 3:.1f}" text-anchor="end" font-size="9" fill="#888">'
                     f'{_tick_text(tick)}</text>')
    arrows = [(v, str(lab), "#777", "") for v, lab in zip(vectors, labels)]
    # The highlighted arrow is drawn last, on top; its label is placed first.
    if highlight is not None:
        arrows.append((np.asarray(highlight, dtype=float), highlight_label, "black",
                       ' font-weight="bold"'))
    labels_svg, placed = [], []
    for vector, label, colour, weight in reversed(arrows):
        labels_svg.append(_vector_label(to_px(vector), (half, half), label, colour,
                                        weight, placed, size))
    for vector, label, colour, weight in arrows:
        x, y = to_px(vector)
        parts.append(f'<line x1="{half}" y1="{half}" x2="{x:.1f}" y2="{y:.1f}" '
                     f'stroke="{colour}" stroke-width="2"/>'
                     f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}"/>')
    parts += labels_svg
    parts.append("</svg>")
    return "".join(parts)


def _vector_label(tip: tuple[float, float], origin: tuple[float, float], label: str,
                  colour: str, weight: str, placed: list[tuple[float, ...]],
                  size: int) -> str:
    """One arrow label near its tip: the first spot, from beyond the tip outwards then
    around it, where it stays inside the picture and covers no label in `placed`."""
    dx, dy = tip[0] - origin[0], tip[1] - origin[1]
    norm = math.hypot(dx, dy) or 1.0
    ux, uy = dx / norm, dy / norm
    start = math.atan2(uy, ux)
    candidates = []
    for distance in (8, 16, 26):
        for turn in (0, 0.6, -0.6, 1.3, -1.3, 2.0, -2.0, math.pi):
            cx = tip[0] + distance * math.cos(start + turn)
            cy = tip[1] + distance * math.sin(start + turn)
            anchor = ("start" if cx > tip[0] + 3 else
                      "end" if cx < tip[0] - 3 else "middle")
            candidates.append((cx, cy + 4, anchor))
    best, best_cost = candidates[0], math.inf
    for x, y, anchor in candidates:
        box = _text_box(x, y, label, anchor)
        spill = (-box[0], box[2] - size, -box[1], box[3] - size)
        outside = sum(max(0.0, m) for m in spill)
        cost = 1000 * _overlaps(box, placed) + outside
        if cost < best_cost:
            best, best_cost = (x, y, anchor), cost
        if cost == 0:
            break
    x, y, anchor = best
    placed.append(_text_box(x, y, label, anchor))
    return (f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" fill="{colour}"'
            f'{weight} stroke="white" stroke-width="3" paint-order="stroke">'
            f'{escape(label)}</text>')


def svg_curve(xs: Sequence[float], series: dict[str, Sequence[float]],
              marker_x: float | None = None, x_label: str = "", y_label: str = "",
              width: int = 300, height: int = 180, dashed: Sequence[str] = ()) -> str:
    """Line chart of named series over shared xs, with round-number ticks, a legend above
    the plot area and an optional marker: a dashed line at `marker_x` with a dot on each
    series and its value there. Series named in `dashed` are drawn dashed (in the legend
    too), so one drawn over another with the same values leaves both visible."""
    if isinstance(xs, (str, bytes)) or not isinstance(xs, (Sequence, np.ndarray, Tensor)) or not len(xs):
        raise TypeError(f"xs must be a non-empty list of numbers, got {xs!r}")
    if not isinstance(series, dict) or not series:
        raise TypeError(f"series must be a non-empty dict of name -> values, got {type(series).__name__}")
    for name, ys in series.items():
        if isinstance(ys, (str, bytes)) or not isinstance(ys, (Sequence, np.ndarray, Tensor)) or len(ys) != len(xs):
            raise ValueError(f"series must give one value per x ({len(xs)}): series[{name!r}] is {ys!r}")
    _require_text(x_label=x_label, y_label=y_label)
    xs = np.asarray(xs, dtype=float)
    every = np.concatenate([np.asarray(v, dtype=float) for v in series.values()])
    y_low, y_high = float(every.min()), float(every.max())
    pad = 0.05 * (y_high - y_low) if y_high > y_low else 0.5
    y_low, y_high = y_low - pad, y_high + pad
    y_ticks = nice_ticks(y_low, y_high, 5)
    x_ticks = nice_ticks(float(xs.min()), float(xs.max()), 5)
    tick_w = CHAR_PX * max(len(_tick_text(t)) for t in y_ticks)
    legend_rows = _legend_rows(list(series), width - 8)
    right, bottom = 12, 36
    top = 8 + 16 * len(legend_rows)
    plot_h = height - top - bottom
    label_lines, label_size = _y_label_lines(y_label, plot_h)
    left = int(24 + tick_w + (label_size + 2) * (len(label_lines) - 1))
    plot_w = width - left - right
    x_span = (xs.max() - xs.min()) or 1.0

    def px(x: float, y: float) -> tuple[float, float]:
        return (left + (x - xs.min()) / x_span * plot_w,
                top + (1 - (y - y_low) / (y_high - y_low)) * plot_h)

    parts = [_svg_open(width, height)]
    for tick in y_ticks:
        _, y = px(xs.min(), tick)
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" '
                     f'stroke="#e4e4e4"/><text x="{left - 4}" y="{y + 4:.1f}" '
                     f'text-anchor="end" font-size="10">{_tick_text(tick)}</text>')
    for tick in x_ticks:
        x, _ = px(tick, y_low)
        parts.append(f'<line x1="{x:.1f}" y1="{top + plot_h}" x2="{x:.1f}" '
                     f'y2="{top + plot_h + 4}" stroke="#999"/><text x="{x:.1f}" '
                     f'y="{top + plot_h + 15}" text-anchor="middle" font-size="10">'
                     f'{_tick_text(tick)}</text>')
    parts += [f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" '
              'fill="none" stroke="#999"/>',
              f'<text x="{left + plot_w / 2}" y="{height - 4}" text-anchor="middle">'
              f'{escape(x_label)}</text>',
              _y_label(label_lines, label_size, top + plot_h / 2)]
    for index, (name, ys) in enumerate(series.items()):
        colour = SERIES_COLOURS[index % len(SERIES_COLOURS)]
        pixels = (px(x, y) for x, y in zip(xs, ys))
        points = " ".join(f"{a:.1f},{b:.1f}" for a, b in pixels)
        dash = ' stroke-dasharray="6,4"' if name in dashed else ""
        parts.append(f'<polyline points="{points}" fill="none" stroke="{colour}" '
                     f'stroke-width="2"{dash}/>')
    parts += _legend(legend_rows, list(series), dashed)
    if marker_x is not None:
        parts += _marker(xs, series, marker_x, px, top, plot_h)
    parts.append("</svg>")
    return "".join(parts)


def _y_label_lines(label: str, plot_h: float) -> tuple[list[str], float]:
    """The y axis name as one line, or two when it is too long for the plot's height (it
    would run into the legend), and the font size that fits."""
    lines = [label]
    if 6.5 * len(label) > plot_h and " " in label:
        cut = min((i for i, c in enumerate(label) if c == " "),
                  key=lambda i: abs(i - len(label) / 2))
        lines = [label[:cut], label[cut + 1:]]
    return lines, max(9.0, min(12.0, plot_h / (0.6 * max(1, *map(len, lines)))))


def _y_label(lines: list[str], size: float, middle: float) -> str:
    """Upright axis name centred at height `middle` (rotate(-90) maps (u, v) to
    (v, -u))."""
    spans = "".join(f'<tspan x="{-middle:.1f}" y="{12 + (size + 2) * i:.1f}">'
                    f'{escape(line)}</tspan>' for i, line in enumerate(lines))
    return (f'<text transform="rotate(-90)" text-anchor="middle" '
            f'font-size="{size:.0f}">{spans}</text>')


def _legend_rows(names: list[str], width: float) -> list[list[int]]:
    """Series indices grouped into legend lines that fit `width` px."""
    rows: list[list[int]] = [[]]
    used = 0.0
    for index, name in enumerate(names):
        need = 22 + CHAR_PX * len(name) + 10
        if rows[-1] and used + need > width:
            rows.append([])
            used = 0.0
        rows[-1].append(index)
        used += need
    return rows


def _legend(rows: list[list[int]], names: list[str], dashed: Sequence[str] = ()) -> list[str]:
    """Legend lines above the plot area: a short coloured stroke (dashed for the series in
    `dashed`), then the series name."""
    parts = []
    for line, indices in enumerate(rows):
        x, y = 6.0, 14 + 16 * line
        for index in indices:
            colour = SERIES_COLOURS[index % len(SERIES_COLOURS)]
            dash = ' stroke-dasharray="5,3"' if names[index] in dashed else ""
            parts.append(f'<line x1="{x}" y1="{y - 4}" x2="{x + 16}" y2="{y - 4}" '
                         f'stroke="{colour}" stroke-width="3"{dash}/>'
                         f'<text x="{x + 20}" y="{y}" '
                         f'fill="{colour}">{escape(names[index])}</text>')
            x += 22 + CHAR_PX * len(names[index]) + 10
    return parts


def _marker(xs: np.ndarray, series: dict[str, Sequence[float]], marker_x: float,
            px, top: float, plot_h: float) -> list[str]:
    """The selected x: a dashed line and a dot on each series where it crosses it."""
    x, _ = px(marker_x, 0.0)
    parts = [f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + plot_h}" '
             'stroke="black" stroke-dasharray="3,2"/>']
    for index, ys in enumerate(series.values()):
        colour = SERIES_COLOURS[index % len(SERIES_COLOURS)]
        _, y = px(marker_x, float(np.interp(marker_x, xs, np.asarray(ys, dtype=float))))
        parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{colour}" '
                     'stroke="white" stroke-width="1.5"/>')
    return parts
