"""Lesson 02 widget: pick the attention use, the scorer and the mask, move a query; the weights follow.

A "score scale" slider multiplies the scores before the softmax: at 0 every allowed key gets the
same weight, and the masked ones still get exactly 0, whatever the scores were.
"""

from __future__ import annotations

from html import escape

import numpy as np
import torch

from ..attention_scores import attention_scores, softmax
from ..masks import (SOURCE, SOURCE_LENGTHS, TARGET, TARGET_LENGTHS, AdditiveScorer, causal_mask, combine_masks,
                     fit_additive_scorer, matching_layer, padding_mask, toy_translation_batch)
from ..plots import svg_bars, svg_heatmap
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
    import ipywidgets as widgets

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
            dot_weights = layer(q, k)[1][:, 0]  # (B, H=1, rows, cols) -> the layer's one head
            fit_additive_scorer(scorers[kind], q, k, dot_weights, steps=60)

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
                    scaled = scales[:, None, None, None] * scores  # (N, B, rows, cols)
                    table[(kind, scorer_name, mask_name)] = (softmax(scaled, mask=mask).numpy(), mask.numpy())

    def render(kind: str, scorer: str, mask: str, pair: int, scale: float, query: int) -> str:
        query_side, key_side = KINDS[kind]
        weights, allowed = table[(kind, scorer, mask)]
        weights, allowed = weights[int(round(scale / SCALE_STEP)), pair], allowed[pair]  # (rows, cols)
        rows, cols = tokens[query_side][pair], tokens[key_side][pair]
        kept = int(allowed[query].sum())
        note = ("<br><i>Cross-attention takes no causal mask: the whole source is encoded before "
                "decoding starts, so only the padding part applies.</i>"
                if kind.startswith("cross") and "causal" in mask else "")
        keys = f"{kept} of {len(cols)} key{'s' if len(cols) != 1 else ''}"
        masked = len(cols) - kept
        largest = weights[query][~allowed[query]].max(initial=0.0)
        masked_note = (f"the {masked} masked key{'s get' if masked != 1 else ' gets'} weight "
                       f"<b>{largest:g}</b>" if masked else "no key is masked")
        readout = (f"<p>query <b>{escape(rows[query])}</b> ({query_side} position {query}) may attend "
                   f"to {keys}; its weights sum to <b>{weights[query].sum():.2f}</b>; {masked_note}. "
                   f"Score matrix: {len(rows)} queries x {len(cols)} keys, scores multiplied by "
                   f"{scale:.2f}.{note}</p>")
        return readout + row(
            svg_heatmap(weights, rows, cols, f"{kind}, {scorer}", cell=36, highlight_row=query, allowed=allowed,
                        row_axis=f"query ({query_side})", col_axis=f"key ({key_side})", limit=1.0),
            svg_bars(weights[query].tolist(), cols, f"weights of '{rows[query]}'", limit=1.0, fmt="{:.2f}"))

    wide = widgets.Layout(width="300px")
    controls = {
        "kind": widgets.Dropdown(options=list(KINDS), value="decoder masked self-attention", description="use",
                                 layout=wide),
        "scorer": widgets.Dropdown(options=SCORERS, value="dot product", description="scorer", layout=wide),
        "mask": widgets.Dropdown(options=MASKS, value="padding + causal", description="mask", layout=wide),
        "pair": widgets.Dropdown(options=[(" ".join(s), i) for i, s in enumerate(SOURCE)], value=1,
                                 description="sentence", layout=wide),
        "scale": widgets.FloatSlider(value=1.0, min=0.0, max=SCALES[-1], step=SCALE_STEP, description="score scale",
                                     layout=wide),
        "query": widgets.IntSlider(value=2, min=0, max=len(TARGET[0]) - 1, description="query position",
                                   layout=wide, style={"description_width": "initial"}),
    }

    def keep_query_in_range(_change: dict | None = None) -> None:
        """The query slider ends at the last word of the side the queries come from."""
        query_side = KINDS[controls["kind"].value][0]
        controls["query"].max = len(tokens[query_side][0]) - 1  # lowering max clamps the value

    # Registered before LiveView's own observer, so the range is right before anything redraws.
    controls["kind"].observe(keep_query_in_range, names="value")
    keep_query_in_range()
    live = LiveView(controls, render)
    live.box.children[0].layout = widgets.Layout(flex_flow="row wrap")  # six controls: wrap onto two lines
    return live
