"""Lesson 02 widget: pick the attention use, the scorer and the mask, move a query; the weights follow.

A "score scale" slider multiplies the scores before the softmax: at 0 every allowed key gets the
same weight, and the masked ones still get exactly 0, whatever the scores were.
"""

from __future__ import annotations

from html import escape
from typing import Sequence

import ipywidgets as widgets
import numpy as np
import torch

from ..attention import attention_scores, softmax
from ..masks import (SOURCE, SOURCE_LENGTHS, TARGET, TARGET_LENGTHS, AdditiveScorer, causal_mask, combine_masks,
                     fit_additive_scorer, matching_layer, padding_mask, toy_translation_batch)
from ..plots import POSITIVE, svg_bars
from . import LiveView, row

KINDS = {
    "encoder self-attention": ("source", "source"),
    "decoder masked self-attention": ("target", "target"),
    "cross-attention (encoder-decoder)": ("target", "source"),
}
SCORERS = ["dot product", "additive (MLP)"]
MASKS = ["none", "padding", "causal", "padding + causal"]
# Scores are multiplied by a factor from 0 (every allowed key weighs the same) to 4 (nearly one-hot).
SCALE_STEP = 0.05
SCALES = [round(i * SCALE_STEP, 2) for i in range(81)]


def svg_masked_heatmap(weights: np.ndarray, allowed: np.ndarray, row_labels: Sequence[str],
                       col_labels: Sequence[str], title: str = "", cell: int = 36,
                       highlight_row: int | None = None, row_axis: str = "query", col_axis: str = "key") -> str:
    """SVG heatmap of weights in [0, 1]; masked cells (allowed False) are grey with a cross.

    weights, allowed: (rows, cols). Token labels on both axes, axis names on the margins.
    (A generic helper: it could move to course_lib.plots.)
    """
    n_rows, n_cols = weights.shape
    left, top = 84, 40 + (18 if title else 0)
    width, height = max(left + n_cols * cell + 10, 12 + 7 * len(title)), top + n_rows * cell + 10
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             'font-family="sans-serif" font-size="11">']
    if title:
        parts.append(f'<text x="4" y="14" font-weight="bold">{escape(title)}</text>')
    parts.append(f'<text x="{left + n_cols * cell / 2}" y="{top - 24}" text-anchor="middle" '
                 f'font-style="italic">{escape(col_axis)}</text>')
    parts.append(f'<text x="12" y="{top + n_rows * cell / 2}" transform="rotate(-90 12 {top + n_rows * cell / 2})" '
                 f'text-anchor="middle" font-style="italic">{escape(row_axis)}</text>')
    for j, label in enumerate(col_labels):
        parts.append(f'<text x="{left + j * cell + cell / 2}" y="{top - 6}" text-anchor="middle">{escape(label)}</text>')
    for i, label in enumerate(row_labels):
        y = top + i * cell
        weight = ' font-weight="bold"' if i == highlight_row else ""
        parts.append(f'<text x="{left - 6}" y="{y + cell / 2 + 4}" text-anchor="end"{weight}>{escape(label)}</text>')
        for j in range(n_cols):
            x = left + j * cell
            if not allowed[i, j]:
                parts.append(f'<rect x="{x}" y="{y}" width="{cell}" height="{cell}" fill="#d8d8d8" stroke="white"/>'
                             f'<text x="{x + cell / 2}" y="{y + cell / 2 + 4}" text-anchor="middle" '
                             'fill="#888">×</text>')
                continue
            share = min(max(float(weights[i, j]), 0.0), 1.0)
            r, g, b = (round(255 + (c - 255) * share) for c in POSITIVE)
            parts.append(f'<rect x="{x}" y="{y}" width="{cell}" height="{cell}" fill="rgb({r},{g},{b})" stroke="white"/>'
                         f'<text x="{x + cell / 2}" y="{y + cell / 2 + 4}" text-anchor="middle" font-size="9">'
                         f'{weights[i, j]:.2f}</text>')
        if i == highlight_row:
            parts.append(f'<rect x="{left}" y="{y}" width="{n_cols * cell}" height="{cell}" '
                         'fill="none" stroke="black" stroke-width="2"/>')
    parts.append("</svg>")
    return "".join(parts)


def _mask_for(kind: str, mask_name: str, rows: int, cols: int, lengths: list[int]) -> torch.Tensor:
    """(B, rows, cols) boolean mask for one choice; cross-attention never takes a causal mask."""
    parts = [torch.ones(rows, cols, dtype=torch.bool)]
    if "padding" in mask_name:
        parts.append(padding_mask(lengths, cols))  # (B, 1, cols): the keys' padding
    if "causal" in mask_name and not kind.startswith("cross"):
        parts.append(causal_mask(rows, cols))
    return combine_masks(*parts).expand(len(lengths), rows, cols)


def mask_explorer_widget() -> LiveView:
    """Choose the attention use, scorer, sentence pair, mask and score scale; move the query; weights update."""
    source, target = toy_translation_batch()  # (B, n, D), (B, m, D)
    embedded = {"source": source, "target": target}
    tokens = {"source": SOURCE, "target": TARGET}
    lengths = {"source": SOURCE_LENGTHS, "target": TARGET_LENGTHS}
    layer = matching_layer(source.shape[-1])
    # One MLP scorer per use, fitted to the dot-product weights of that use (no mask), so the two
    # scorers can be compared on the same sentences; the masks are applied afterwards, the same way.
    scorers = {}
    with torch.random.fork_rng():  # seed the scorers' initial weights without touching the caller's generator
        torch.manual_seed(0)
        for kind, (query_side, key_side) in KINDS.items():
            q, k = embedded[query_side], embedded[key_side]
            scorers[kind] = AdditiveScorer(q.shape[-1], k.shape[-1], d_hidden=16)
            fit_additive_scorer(scorers[kind], q, k, layer(q, k)[1], steps=60)

    # Every weight matrix the controls can ask for, computed now: for each use, scorer and mask, the
    # softmax of (score scale) x scores at each scale on the slider. render() only looks them up.
    scales = torch.arange(len(SCALES), dtype=torch.float32) * SCALE_STEP  # (N,)
    table: dict[tuple[str, str, str], tuple[np.ndarray, np.ndarray]] = {}
    with torch.no_grad():
        for kind, (query_side, key_side) in KINDS.items():
            q, k = embedded[query_side], embedded[key_side]
            raw = {"dot product": attention_scores(layer.query(q), layer.key(k)),  # (B, rows, cols)
                   "additive (MLP)": scorers[kind](q, k)}
            for mask_name in MASKS:
                mask = _mask_for(kind, mask_name, q.shape[1], k.shape[1], lengths[key_side])  # (B, rows, cols)
                for scorer_name, scores in raw.items():
                    scaled = (scales[:, None, None, None] * scores).masked_fill(~mask, float("-inf"))  # (N, B, rows, cols)
                    table[(kind, scorer_name, mask_name)] = (softmax(scaled).numpy(), mask.numpy())

    def render(kind: str, scorer: str, mask: str, pair: int, scale: float, query: int) -> str:
        query_side, key_side = KINDS[kind]
        weights, allowed = table[(kind, scorer, mask)]
        weights, allowed = weights[int(round(scale / SCALE_STEP)), pair], allowed[pair]  # (rows, cols)
        query = min(query, weights.shape[0] - 1)  # the source has one position fewer than the target
        rows, cols = tokens[query_side][pair], tokens[key_side][pair]
        kept = int(allowed[query].sum())
        note = ("<br><i>Cross-attention takes no causal mask: the whole source is encoded before "
                "decoding starts, so only the padding part applies.</i>"
                if kind.startswith("cross") and "causal" in mask else "")
        readout = (f"<p>query <b>{escape(rows[query])}</b> (position {query}) may attend to {kept} of {len(cols)} keys; "
                   f"its weights sum to <b>{weights[query].sum():.2f}</b>; the largest masked weight is "
                   f"<b>{weights[query][~allowed[query]].max(initial=0.0):g}</b>. Score matrix: "
                   f"{len(rows)} x {len(cols)}, scores multiplied by {scale:.2f}.{note}</p>")
        return readout + row(
            svg_masked_heatmap(weights, allowed, rows, cols, f"{kind}, {scorer}", highlight_row=query,
                               row_axis=f"query ({query_side})", col_axis=f"key ({key_side})"),
            svg_bars(weights[query].tolist(), cols, f"weights of '{rows[query]}'", limit=1.0, fmt="{:.2f}"))

    wide = widgets.Layout(width="300px")
    live = LiveView({
        "kind": widgets.Dropdown(options=list(KINDS), value="decoder masked self-attention", description="use",
                                 layout=wide),
        "scorer": widgets.Dropdown(options=SCORERS, value="dot product", description="scorer", layout=wide),
        "mask": widgets.Dropdown(options=MASKS, value="padding + causal", description="mask", layout=wide),
        "pair": widgets.Dropdown(options=[(" ".join(s), i) for i, s in enumerate(SOURCE)], value=1,
                                 description="sentence", layout=wide),
        "scale": widgets.FloatSlider(value=1.0, min=0.0, max=SCALES[-1], step=SCALE_STEP, description="score scale",
                                     layout=wide),
        "query": widgets.IntSlider(value=2, min=0, max=len(TARGET[0]) - 1, description="query pos.", layout=wide),
    }, render)
    live.box.children[0].layout = widgets.Layout(flex_flow="row wrap")  # six controls: wrap onto two lines
    return live
