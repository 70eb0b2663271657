"""Figures for the lessons.

Static figures use matplotlib. Live widgets draw small SVG strings instead: building an
SVG takes well under a millisecond and the browser renders it, so a slider answers at
once (a matplotlib redraw costs tens of milliseconds per frame).
"""

from __future__ import annotations

from html import escape
from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from torch import Tensor

# One palette for the whole course: positive = orange, negative = blue.
POSITIVE = (230, 120, 40)
NEGATIVE = (50, 110, 200)


def _as_numpy(matrix: Tensor | np.ndarray) -> np.ndarray:
    return matrix.detach().cpu().numpy() if isinstance(matrix, Tensor) else np.asarray(matrix)


def heatmap(matrix: Tensor | np.ndarray, row_labels: Sequence[str], col_labels: Sequence[str],
            title: str = "", ax: Axes | None = None, fmt: str = "{:.2f}", cmap: str = "RdBu_r",
            row_axis: str = "query", col_axis: str = "key") -> Axes:
    """Labelled heatmap of a (rows, cols) matrix with each value written in its cell."""
    values = _as_numpy(matrix)
    if values.shape != (len(row_labels), len(col_labels)):
        raise ValueError(f"matrix of shape {values.shape} needs {values.shape[0]} row labels and "
                         f"{values.shape[1]} column labels, got {len(row_labels)} and {len(col_labels)}")
    if ax is None:
        _, ax = plt.subplots(figsize=(0.55 * len(col_labels) + 1.6, 0.45 * len(row_labels) + 1.0), dpi=72)
    limit = float(np.abs(values).max()) or 1.0
    vmin = 0.0 if values.min() >= 0 else -limit
    image = ax.imshow(values, cmap=cmap if vmin < 0 else "Oranges", vmin=vmin, vmax=limit)
    ax.set_xticks(range(len(col_labels)), col_labels, rotation=45, ha="right")
    ax.set_yticks(range(len(row_labels)), row_labels)
    ax.set_xlabel(col_axis)
    ax.set_ylabel(row_axis)
    ax.set_title(title)
    for (i, j), value in np.ndenumerate(values):
        strong = abs(value) > 0.6 * limit
        ax.text(j, i, fmt.format(value), ha="center", va="center", fontsize=7,
                color="white" if strong else "black")
    ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    return ax


# ---------------------------------------------------------------- SVG for live widgets

def _colour(value: float, limit: float) -> str:
    share = min(abs(value) / limit, 1.0) if limit > 0 else 0.0
    base = POSITIVE if value >= 0 else NEGATIVE
    r, g, b = (round(255 + (c - 255) * share) for c in base)
    return f"rgb({r},{g},{b})"


def svg_heatmap(matrix: Tensor | np.ndarray, row_labels: Sequence[str], col_labels: Sequence[str],
                title: str = "", cell: int = 34, fmt: str = "{:.2f}", highlight_row: int | None = None,
                allowed: Tensor | np.ndarray | None = None, row_axis: str = "query", col_axis: str = "key",
                limit: float | None = None) -> str:
    """SVG heatmap with token labels and axis names, values written in the cells.

    matrix: (rows, cols). `allowed` (same shape, boolean) greys out and crosses the cells that are
    False (masked). Colours run from white to orange (positive) or blue (negative) at |value| = limit
    (default: the largest |value|).
    """
    values = _as_numpy(matrix)
    allowed = np.ones(values.shape, dtype=bool) if allowed is None else _as_numpy(allowed).astype(bool)
    n_rows, n_cols = values.shape
    left, top = 84, 40 + (18 if title else 0)
    width = max(left + n_cols * cell + 10, 12 + 7 * len(title))
    height = top + n_rows * cell + 10
    shown = np.abs(values[allowed & np.isfinite(values)])
    limit = limit or (float(shown.max()) if shown.size else 1.0) or 1.0
    middle_x, middle_y = left + n_cols * cell / 2, top + n_rows * cell / 2
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             'font-family="sans-serif" font-size="11">',
             f'<text x="{middle_x}" y="{top - 24}" text-anchor="middle" font-style="italic">{escape(col_axis)}</text>',
             f'<text x="12" y="{middle_y}" transform="rotate(-90 12 {middle_y})" text-anchor="middle" '
             f'font-style="italic">{escape(row_axis)}</text>']
    if title:
        parts.append(f'<text x="4" y="14" font-weight="bold">{escape(title)}</text>')
    for j, label in enumerate(col_labels):
        parts.append(f'<text x="{left + j * cell + cell / 2}" y="{top - 6}" text-anchor="middle">{escape(label)}</text>')
    for i, label in enumerate(row_labels):
        y = top + i * cell
        weight = ' font-weight="bold"' if i == highlight_row else ""
        parts.append(f'<text x="{left - 6}" y="{y + cell / 2 + 4}" text-anchor="end"{weight}>{escape(label)}</text>')
        for j in range(n_cols):
            x, value = left + j * cell, float(values[i, j])
            if not allowed[i, j]:
                parts.append(f'<rect x="{x}" y="{y}" width="{cell}" height="{cell}" fill="#d8d8d8" stroke="white"/>'
                             f'<text x="{x + cell / 2}" y="{y + cell / 2 + 4}" text-anchor="middle" fill="#888">×</text>')
                continue
            parts.append(f'<rect x="{x}" y="{y}" width="{cell}" height="{cell}" '
                         f'fill="{_colour(value, limit)}" stroke="white"/>')
            if np.isfinite(value):
                parts.append(f'<text x="{x + cell / 2}" y="{y + cell / 2 + 4}" '
                             f'text-anchor="middle" font-size="9">{fmt.format(value)}</text>')
        if i == highlight_row:
            parts.append(f'<rect x="{left}" y="{y}" width="{n_cols * cell}" height="{cell}" '
                         'fill="none" stroke="black" stroke-width="2"/>')
    parts.append("</svg>")
    return "".join(parts)


def svg_bars(values: Sequence[float], labels: Sequence[str], title: str = "",
             limit: float | None = None, width: int = 260, fmt: str = "{:+.2f}") -> str:
    """Horizontal bar chart, one labelled bar per token; bars grow right (positive) or left."""
    values = [float(v) for v in values]
    limit = limit or max((abs(v) for v in values), default=1.0) or 1.0
    row, left, top = 20, 60, 22 if title else 4
    middle = left + (width - left - 50) / 2 if min(values, default=0) < 0 else left
    span = (width - left - 50) / 2 if middle > left else width - left - 50
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{top + row * len(values) + 4}" '
             'font-family="sans-serif" font-size="11">']
    if title:
        parts.append(f'<text x="4" y="14" font-weight="bold">{escape(title)}</text>')
    for i, (value, label) in enumerate(zip(values, labels)):
        y = top + i * row
        length = span * min(abs(value) / limit, 1.0)
        x = middle if value >= 0 else middle - length
        parts.append(f'<text x="{left - 6}" y="{y + 14}" text-anchor="end">{escape(label)}</text>')
        parts.append(f'<rect x="{x:.1f}" y="{y + 3}" width="{length:.1f}" height="{row - 6}" '
                     f'fill="{_colour(value, limit)}" stroke="#555" stroke-width="0.5"/>')
        parts.append(f'<text x="{width - 4}" y="{y + 14}" text-anchor="end">{fmt.format(value)}</text>')
    parts.append(f'<line x1="{middle}" y1="{top}" x2="{middle}" y2="{top + row * len(values)}" stroke="#333"/>')
    parts.append("</svg>")
    return "".join(parts)


def svg_vectors(vectors: np.ndarray, labels: Sequence[str], highlight: np.ndarray | None = None,
                highlight_label: str = "query", size: int = 220) -> str:
    """2-D arrows from the origin, one per token, plus one highlighted arrow (the query)."""
    vectors = np.asarray(vectors, dtype=float)
    every = vectors if highlight is None else np.vstack([vectors, highlight])
    reach = float(np.abs(every).max()) * 1.15 or 1.0
    half = size / 2

    def to_px(point: np.ndarray) -> tuple[float, float]:
        return half + point[0] / reach * (half - 14), half - point[1] / reach * (half - 14)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{size}" height="{size}" '
             'font-family="sans-serif" font-size="11">',
             f'<line x1="0" y1="{half}" x2="{size}" y2="{half}" stroke="#ccc"/>',
             f'<line x1="{half}" y1="0" x2="{half}" y2="{size}" stroke="#ccc"/>']
    arrows = [(v, lab, "#777") for v, lab in zip(vectors, labels)]
    if highlight is not None:
        arrows.append((highlight, highlight_label, "black"))
    for vector, label, colour in arrows:
        x, y = to_px(vector)
        parts.append(f'<line x1="{half}" y1="{half}" x2="{x:.1f}" y2="{y:.1f}" stroke="{colour}" stroke-width="2"/>')
        parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}"/>')
        parts.append(f'<text x="{x + 4:.1f}" y="{y - 4:.1f}" fill="{colour}">{escape(label)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def svg_curve(xs: Sequence[float], series: dict[str, Sequence[float]], marker_x: float | None = None,
              x_label: str = "", y_label: str = "", width: int = 300, height: int = 180) -> str:
    """Line chart of one or more named series over shared xs, with an optional vertical marker."""
    xs = np.asarray(xs, dtype=float)
    every = np.concatenate([np.asarray(v, dtype=float) for v in series.values()])
    y_low, y_high = float(every.min()), float(every.max())
    y_high = y_high if y_high > y_low else y_low + 1.0
    left, right, top, bottom = 44, 10, 10, 32
    plot_w, plot_h = width - left - right, height - top - bottom

    def px(x: float, y: float) -> tuple[float, float]:
        return (left + (x - xs.min()) / ((xs.max() - xs.min()) or 1.0) * plot_w,
                top + (1 - (y - y_low) / (y_high - y_low)) * plot_h)

    colours = ["#d9661f", "#2f6fc6", "#3a9a4a", "#8a3ab9"]
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             'font-family="sans-serif" font-size="10">',
             f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#999"/>',
             f'<text x="{left - 4}" y="{top + 8}" text-anchor="end">{y_high:.3g}</text>',
             f'<text x="{left - 4}" y="{top + plot_h}" text-anchor="end">{y_low:.3g}</text>',
             f'<text x="{left}" y="{height - 18}">{xs.min():g}</text>',
             f'<text x="{left + plot_w}" y="{height - 18}" text-anchor="end">{xs.max():g}</text>',
             f'<text x="{left + plot_w / 2}" y="{height - 4}" text-anchor="middle">{escape(x_label)}</text>',
             f'<text x="10" y="{top + plot_h / 2}" transform="rotate(-90 10 {top + plot_h / 2})" '
             f'text-anchor="middle">{escape(y_label)}</text>']
    for index, (name, ys) in enumerate(series.items()):
        colour = colours[index % len(colours)]
        points = " ".join(f"{a:.1f},{b:.1f}" for a, b in (px(x, y) for x, y in zip(xs, ys)))
        parts.append(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="2"/>')
        parts.append(f'<text x="{left + 6}" y="{top + 14 + 12 * index}" fill="{colour}">{escape(name)}</text>')
    if marker_x is not None:
        x, _ = px(marker_x, y_low)
        parts.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + plot_h}" stroke="black" '
                     'stroke-dasharray="3,2"/>')
    parts.append("</svg>")
    return "".join(parts)
