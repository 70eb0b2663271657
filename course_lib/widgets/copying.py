"""Lesson 06 widget: the score gap of the hand-set position-copy head against copy accuracy."""

from __future__ import annotations

import numpy as np
import torch

from ..copying import (coherence, copy_accuracy, every_token_everywhere, gap_needed,
                    hand_set_copy_model, source_weight, token_codes)
from ..plots import svg_bars, svg_curve
from . import LiveView, row

VOCAB, LENGTH, OFFSET = 16, 8, 1
GAPS = [round(0.5 * i, 1) for i in range(25)]  # 0 .. 12
WIDTHS = [2, 4, 8, 16]  # token-code width W, narrow to wide; 16 = one-hot, below it codes overlap
N_SHOWN = 8  # sequences the learner can pick


def gap_widget(seed: int = 0) -> LiveView:
    """Score gap, code width, positions on/off, a sequence and a query.

    Everything is computed at build time with the hand-set model (course_lib.copying), one model
    per width and positions setting, its query weights rescaled for each gap (they are the
    gap times a fixed pattern); a redraw only formats the stored accuracy, weights and
    predictions.
    """
    import ipywidgets as widgets

    # every token at every source position: (N, T) ids and targets
    test_ids, test_targets = every_token_everywhere(VOCAB, LENGTH, OFFSET, seed=seed)
    shown = torch.randint(VOCAB, (N_SHOWN, LENGTH),
                          generator=torch.Generator().manual_seed(seed + 1))
    accuracy, rows, predicted, bound, overlap = {}, {}, {}, {}, {}
    for width in WIDTHS:
        codes = token_codes(VOCAB, width, seed=seed)
        overlap[width] = coherence(codes)
        bound[width] = gap_needed(LENGTH, overlap[width])
        for positions in (True, False):
            model = hand_set_copy_model(codes, LENGTH, OFFSET, gap=1.0, positions=positions)
            query = model.layers[0].attention.query.weight
            pattern = query.clone()  # the query weights at gap 1
            for gap in GAPS if positions else GAPS[:1]:  # no positions: every score is 0
                with torch.no_grad():
                    query.copy_(gap * pattern)  # the same numbers hand_set_copy_model(gap=gap) sets
                key = width, positions, gap
                accuracy[key] = copy_accuracy(model, test_ids, test_targets)
                with torch.no_grad():
                    predicted[key] = model(shown).argmax(-1).numpy()  # (N_SHOWN, T)
                rows[key] = model.last_weights[:, 0].numpy()  # (N_SHOWN, T, T): its one head
            for gap in GAPS[1:] if not positions else ():
                for table in (accuracy, predicted, rows):
                    table[width, False, gap] = table[width, False, GAPS[0]]
    curves = {(w, p): np.array([accuracy[w, p, g] for g in GAPS])
              for w in WIDTHS for p in (True, False)}
    shown = shown.numpy()

    def render(gap: float, width: int, positions: bool, sequence: int, query: int) -> str:
        query = min(query, LENGTH - 1 - OFFSET)
        source = query + OFFSET
        tokens = shown[sequence]
        weights = rows[width, positions, gap][sequence, query]
        guess = predicted[width, positions, gap][sequence]
        copies = " ".join(
            f"<b>{guess[i]}</b>" if guess[i] == tokens[i + OFFSET]
            else f"<span style='color:#c00'>{guess[i]}</span>"
            for i in range(LENGTH - OFFSET))
        readout = (
            f"<p>Task: output at position i the token at i + 1. Codes of width W = {width} for "
            f"{VOCAB} tokens (coherence {overlap[width]:.2f}); "
            f"positions {'on' if positions else '<b>off</b>'}.<br>"
            f"Sequence: {' '.join(str(t) for t in tokens)} &rarr; copies: {copies} "
            "(red = wrong).<br>"
            f"Query {query} attends to source {source} with weight <b>{weights[source]:.3f}</b> "
            f"(formula e<sup>g</sup>/(e<sup>g</sup> + {LENGTH - 1}) = "
            f"{source_weight(gap, LENGTH):.3f} "
            f"with positions). Copy accuracy over every token at every position: "
            f"<b>{100 * accuracy[width, positions, gap]:.1f}%</b>; "
            f"gap above which it is guaranteed 100%: {bound[width]:.2f}.</p>")
        # only curves that differ: a series equal to another would hide under it
        series = {"accuracy (this W)": curves[width, positions]}
        if positions:
            series["positions off"] = curves[width, False]
        if (width, positions) != (16, True):
            series["one-hot codes"] = curves[16, True]
        labels = [f"{j}:{tokens[j]}" for j in range(LENGTH)]
        return readout + row(
            svg_bars(weights, labels, f"attention of query {query}", limit=1.0, fmt="{:.2f}",
                     highlight=source),
            svg_curve(GAPS, series, marker_x=gap, x_label="score gap g", y_label="copy accuracy",
                      width=320, height=200))

    wide = {"description_width": "initial"}  # the whole label, not cut to the default width
    return LiveView({
        "gap": widgets.SelectionSlider(options=GAPS, value=3.0, description="score gap g",
                                       style=wide),
        "width": widgets.SelectionSlider(options=WIDTHS, value=16, description="code width W",
                                         style=wide),
        "positions": widgets.Checkbox(value=True, description="positions"),
        "sequence": widgets.IntSlider(value=0, min=0, max=N_SHOWN - 1, description="sequence",
                                      style=wide),
        "query": widgets.IntSlider(value=2, min=0, max=LENGTH - 1 - OFFSET, description="query i",
                                   style=wide),
    }, render)
