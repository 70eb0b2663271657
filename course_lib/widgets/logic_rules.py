"""Lesson 07 widget: pick a sentence, a model and a layer; each query's attention and the output."""

from __future__ import annotations

from html import escape
from typing import Sequence

import torch

from ..logic_rules import RELATIONS, TOKEN, VOCAB, encode, rule_targets, strictly_right
from ..model import DecoderOnly
from ..plots import svg_colour_bar, svg_heatmap
from . import LiveView, row


def sentence_widget(models: dict[str, DecoderOnly], sentences: Sequence[Sequence[str]]) -> LiveView:
    """Controls: a sentence X r1 r2 Y, a model (name -> DecoderOnly) and, for a model of
    several layers, one of its layers (the layer slider shows only then: for a one-layer model
    it would have nothing to move).

    Shows that layer's attention (query rows, key columns; one heatmap per head when the layer
    has several) on one 0-1 colour scale with its colour bar, the model's output at each slot
    against the rule table's, and the three most likely relations at r1's slot. Everything is
    computed once here; a redraw only formats it.
    """
    import ipywidgets as widgets

    if (not isinstance(models, dict) or not models
            or not all(isinstance(m, DecoderOnly) for m in models.values())):
        raise TypeError("models must be a non-empty dict of name -> DecoderOnly")
    if not sentences:
        raise ValueError("sentences must hold at least one sentence X r1 r2 Y")
    labels = [" ".join(s) for s in sentences]
    ids = torch.stack([encode(s) for s in sentences])  # (N, 4)
    wanted = rule_targets(ids)  # (N, 4)
    relation_ids = torch.tensor([TOKEN[r] for r in RELATIONS])
    seen = {}
    with torch.no_grad():
        for name, model in models.items():
            logits = model(ids).double()  # (N, 4, V)
            # n_layers x (N, H, 4, 4): one head is H = 1
            weights = [w.double() for w in model.layer_weights]
            # (N, R): the relation slot, relations only
            at_r = logits[:, 1, relation_ids].softmax(-1)
            top = at_r.topk(3, dim=-1)
            right = strictly_right(logits, wanted)  # (N, 4): a tie is not right
            seen[name] = (weights, logits.argmax(-1), top, right)

    def render(sentence: str, model: str, layer: int) -> str:
        n = labels.index(sentence)
        weights, predicted, top, right = seen[model]
        layer = min(layer, len(weights))
        words = sentences[n]
        out = [VOCAB[int(i)] for i in predicted[n, :3]]
        target = [VOCAB[int(i)] for i in wanted[n, :3]]
        marks = "".join(
            f"<td style='padding:2px 8px;color:{'#1a7f37' if ok else '#c62828'}'>{escape(o)}</td>"
            for o, ok in zip(out, right[n, :3].tolist()))
        ranked = ", ".join(f"{escape(RELATIONS[int(i)])} {float(p):.2f}"
                           for p, i in zip(top.values[n], top.indices[n]))
        table = ("<table style='border-collapse:collapse'><tr><td>input</td>"
                 + "".join(f"<td style='padding:2px 8px'>{escape(w)}</td>" for w in words)
                 + "</tr><tr><td>output</td>" + marks + "</tr><tr><td>rule table</td>"
                 + "".join(f"<td style='padding:2px 8px'>{escape(t)}</td>" for t in target)
                 + "</tr></table>")
        readout = (f"<p>{table}Relation slot (query at <b>{escape(words[1])}</b>), most likely "
                   f"relations: {ranked}. Green: the rule table's answer, strictly above "
                   f"every other token; red: not (a tie is red).</p>")
        keys = [f"{i}:{w}" for i, w in enumerate(words)]
        shown = weights[layer - 1][n]  # (H, 4, 4)
        if len(shown) == 1:  # one head: one larger heatmap, titled by its layer alone
            return readout + row(_heatmap(shown[0], keys, f"{model}: layer {layer} attention", 46),
                                 COLOUR_BAR[46])
        return readout + row(*(_heatmap(head, keys, f"{model}: layer {layer}, head {h + 1}", 34)
                               for h, head in enumerate(shown)), COLOUR_BAR[34])

    names = list(models)
    depth = {name: len(seen[name][0]) for name in names}
    model_choice = widgets.Dropdown(options=names, value=names[0], description="model")
    layer = widgets.IntSlider(value=1, min=1, max=depth[names[0]], description="layer")

    def fit_layer_to_model(name: str) -> None:
        layer.max = depth[name]
        layer.layout.display = None if depth[name] > 1 else "none"

    fit_layer_to_model(names[0])
    # registered before LiveView's redraw, so that the redraw sees the layer in range
    model_choice.observe(lambda change: fit_layer_to_model(change["new"]), names="value")
    return LiveView({
        "sentence": widgets.Dropdown(options=labels, value=labels[0], description="sentence",
                                     layout=widgets.Layout(width="330px")),
        "model": model_choice,
        "layer": layer,
    }, render)


# The heatmaps' one 0-1 scale as a bar beside them, as tall as their 4 rows (cell 46 for a
# layer of one head, 34 per head for several).
COLOUR_BAR = {cell: svg_colour_bar(1.0, "weight", length=4 * cell) for cell in (46, 34)}


def _heatmap(weights: torch.Tensor, keys: list[str], title: str, cell: int) -> str:
    """One head's attention (4, 4) as a heatmap: query r1's row framed, one 0-1 scale."""
    return svg_heatmap(weights, keys, keys, title, cell=cell, highlight_row=1, row_axis="query",
                       col_axis="key", limit=1.0)  # one scale: a weight of 1/4 is pale
