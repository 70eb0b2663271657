"""Lesson 06 widget: the score gap of the hand-set position-copy head against copy accuracy."""

from __future__ import annotations

import ipywidgets as widgets
import numpy as np
import torch

from ..copy import (coherence, copy_accuracy, every_token_everywhere, gap_needed, hand_set_copy_model,
                    source_weight, token_codes)
from ..plots import svg_bars, svg_curve
from . import LiveView, row

VOCAB, LENGTH, OFFSET = 16, 8, 1
GAPS = [round(0.5 * i, 1) for i in range(25)]  # 0 .. 12
WIDTHS = [16, 8, 4, 2]  # token-code width W; 16 = one-hot, below 16 the codes overlap
N_SHOWN = 8  # sequences the learner can pick


def gap_widget(seed: int = 0) -> LiveView:
    """Score gap, code width, positions on/off, a sequence and a query.

    Everything is computed at build time with the hand-set model (course_lib.copy), one model per
    setting; a redraw only formats the stored accuracy, weights and predictions.
    """
    test_ids, test_targets = every_token_everywhere(VOCAB, LENGTH, OFFSET, seed=seed)  # every token, every source
    shown = torch.randint(VOCAB, (N_SHOWN, LENGTH), generator=torch.Generator().manual_seed(seed + 1))
    accuracy, rows, predicted, bound = {}, {}, {}, {}
    for width in WIDTHS:
        codes = token_codes(VOCAB, width, seed=seed)
        bound[width] = gap_needed(LENGTH, coherence(codes))
        for positions in (True, False):
            for gap in GAPS if positions else GAPS[:1]:  # no positions: every score is 0, whatever the gap
                model = hand_set_copy_model(codes, LENGTH, OFFSET, gap=gap, positions=positions)
                accuracy[width, positions, gap] = copy_accuracy(model, test_ids, test_targets)
                with torch.no_grad():
                    predicted[width, positions, gap] = model(shown).argmax(-1).numpy()  # (N_SHOWN, T)
                rows[width, positions, gap] = model.last_weights.numpy()  # (N_SHOWN, T, T)
            for gap in GAPS[1:] if not positions else ():
                for table in (accuracy, predicted, rows):
                    table[width, False, gap] = table[width, False, GAPS[0]]
    curves = {(w, p): np.array([accuracy[w, p, g] for g in GAPS]) for w in WIDTHS for p in (True, False)}
    shown = shown.numpy()

    def render(gap: float, width: int, positions: bool, sequence: int, query: int) -> str:
        query = min(query, LENGTH - 1 - OFFSET)
        source = query + OFFSET
        tokens = shown[sequence]
        weights = rows[width, positions, gap][sequence, query]
        guess = predicted[width, positions, gap][sequence]
        copies = " ".join(
            f"<b>{guess[i]}</b>" if guess[i] == tokens[i + OFFSET] else f"<span style='color:#c00'>{guess[i]}</span>"
            for i in range(LENGTH - OFFSET))
        readout = (
            f"<p>Task: output at position i the token at i + 1. Codes of width W = {width} for "
            f"{VOCAB} tokens (coherence {coherence(token_codes(VOCAB, width, seed=seed)):.2f}); "
            f"positions {'on' if positions else '<b>off</b>'}.<br>"
            f"Sequence: {' '.join(str(t) for t in tokens)} &rarr; copies: {copies} (red = wrong).<br>"
            f"Query {query} attends to source {source} with weight <b>{weights[source]:.3f}</b> "
            f"(formula e<sup>g</sup>/(e<sup>g</sup> + {LENGTH - 1}) = {source_weight(gap, LENGTH):.3f} with positions). "
            f"Copy accuracy over every token at every position: <b>{100 * accuracy[width, positions, gap]:.1f}%</b>; "
            f"gap above which it is guaranteed 100%: {bound[width]:.2f}.</p>")
        series = {"accuracy (this W)": curves[width, positions], "positions off": curves[width, False],
                  "one-hot codes": curves[16, True]}
        labels = [f"{j}:{tokens[j]}" for j in range(LENGTH)]
        return readout + row(
            svg_bars(weights, labels, f"attention of query {query}", limit=1.0, fmt="{:.2f}", highlight=source),
            svg_curve(GAPS, series, marker_x=gap, x_label="score gap g", y_label="copy accuracy",
                      width=320, height=200))

    return LiveView({
        "gap": widgets.SelectionSlider(options=GAPS, value=3.0, description="score gap g"),
        "width": widgets.SelectionSlider(options=WIDTHS, value=16, description="code width W"),
        "positions": widgets.Checkbox(value=True, description="positions"),
        "sequence": widgets.IntSlider(value=0, min=0, max=N_SHOWN - 1, description="sequence"),
        "query": widgets.IntSlider(value=2, min=0, max=LENGTH - 1 - OFFSET, description="query i"),
    }, render)
