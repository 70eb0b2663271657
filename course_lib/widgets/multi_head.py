"""Lesson 08 widget: trained models with 1, 2, 4 ... heads; pick a model and one of its heads."""

from __future__ import annotations

import numpy as np
import torch

from ..masks import causal_mask
from ..multi_head import relation_accuracy, relation_attention, without_heads
from ..plots import svg_bars, svg_heatmap
from . import LiveView, row


def _mean_patterns(model, n_sequences: int = 256, seed: int = 1) -> np.ndarray:
    """(H, T, T) attention of every head, averaged over fresh sequences."""
    from ..multi_head import two_relation_batch

    n_symbols = round(model.config.vocab_size ** 0.5)
    make_batch = two_relation_batch(n_sequences, model.config.max_len, n_symbols)
    ids, _ = make_batch(torch.Generator().manual_seed(seed))
    with torch.no_grad():
        model(ids)
    return model.last_weights.mean(0).numpy()  # (H, T, T)


def heads_widget(models: dict) -> LiveView:
    """models: {n_heads: a trained multi_head_model}. Shows the chosen head's mean pattern,
    its weight on the previous and the first position, and both relations' accuracy when
    this head alone is silenced. Everything is computed here, once; a redraw only formats."""
    import ipywidgets as widgets

    if not isinstance(models, dict) or not models:
        raise TypeError("models must be a non-empty dict {n_heads: trained model}")
    facts = {}
    for n_heads, model in sorted(models.items()):
        roles = relation_attention(model).numpy()  # (H, 2)
        silenced = [relation_accuracy(without_heads(model, [h])) for h in range(n_heads)]
        facts[n_heads] = (_mean_patterns(model), roles, relation_accuracy(model), silenced)
    config = next(iter(models.values())).config
    T, D, n_symbols = config.max_len, config.d_model, round(config.vocab_size ** 0.5)
    labels, allowed = [str(t) for t in range(T)], causal_mask(T).numpy()

    def render(n_heads: int, head: int) -> str:
        patterns, roles, full, silenced = facts[n_heads]
        head = min(head, n_heads - 1)  # the head slider follows the model; never index past it
        quiet = silenced[head]
        text = (f"<p><b>head {head} of {n_heads}</b> (width {D // n_heads} each): mean weight "
                f"on the previous position {roles[head, 0]:.2f}, "
                f"on position 0 {roles[head, 1]:.2f}. "
                f"All heads: previous {full['previous']:.0%}, first {full['first']:.0%} right; "
                f"this head silenced: previous {quiet['previous']:.0%}, first {quiet['first']:.0%} "
                f"(chance {1 / n_symbols:.0%}).</p>")
        return text + row(
            svg_heatmap(patterns[head], labels, labels, f"head {head}: mean attention", cell=30,
                        allowed=allowed, row_axis="query position t", col_axis="key position s",
                        limit=1.0),
            svg_bars([full["previous"], quiet["previous"], full["first"], quiet["first"]],
                     ["previous, all heads", "previous, head silenced", "first, all heads",
                      "first, head silenced"], "accuracy", limit=1.0, fmt="{:.0%}"))

    counts = sorted(models)
    n_heads = widgets.SelectionSlider(options=counts, value=counts[min(1, len(counts) - 1)],
                                      description="heads")
    head = widgets.IntSlider(value=0, min=0, max=n_heads.value - 1, description="show head")

    def follow(change: dict) -> None:  # registered before LiveView's redraw, so it runs first
        head.max = change["new"] - 1

    n_heads.observe(follow, names="value")
    return LiveView({"n_heads": n_heads, "head": head}, render)
