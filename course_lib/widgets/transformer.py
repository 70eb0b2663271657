"""Lesson 09 widget: a trained Transformer decodes a held-out input step by step."""

from __future__ import annotations

import numpy as np
import torch

from ..plots import svg_heatmap
from ..model import EncoderDecoder
from ..transformer import greedy_decode, toy_batch
from . import LiveView, row


def decoding_widget(model: EncoderDecoder, task: str, length: int = 8, n_examples: int = 8,
                    seed: int = 5) -> LiveView:
    """Pick a held-out input, a decoding step and a head: the output written so far, and each
    step's cross-attention over the source (rows: steps, columns: source positions).

    Every decoding is done once at build time (greedy_decode); a redraw only formats arrays.
    """
    import ipywidgets as widgets

    if not isinstance(model, EncoderDecoder):
        raise TypeError(f"model must be an EncoderDecoder, got {type(model).__name__}")
    batch = toy_batch(task, n_examples, length, model.config.vocab_size - 1,
                      torch.Generator().manual_seed(seed), held_out=True)
    decoded = greedy_decode(model, batch.src, length)
    sources, answers = batch.src.numpy(), batch.tgt_out.numpy()
    tokens = decoded.tokens.numpy()  # (n, T)
    chosen = torch.softmax(decoded.logits, -1).max(-1).values.numpy()  # (n, T): probability of each choice
    cross = decoded.cross_weights.numpy()  # (n, H, T, S)
    n_heads = cross.shape[1]

    def render(example: int, step: int, head: str) -> str:
        t = step - 1
        weights = cross[example].mean(0) if head == "mean" else cross[example, int(head)]  # (T, S)
        written = " ".join(
            (f"<b>{tokens[example, i]}</b>" if tokens[example, i] == answers[example, i]
             else f"<b style='color:#c00'>{tokens[example, i]}</b>") if i == t else str(tokens[example, i])
            for i in range(step))
        src = sources[example]
        text = (f"<p>Task: <b>{task}</b>. Held-out input: {' '.join(map(str, src))}<br>"
                f"Decoder input at step {step}: &lt;bos&gt; {' '.join(map(str, tokens[example, :t]))}<br>"
                f"Written so far: {written} (the newest in bold, red if wrong); it chose "
                f"{tokens[example, t]} with probability {chosen[example, t]:.2f}. "
                f"Right answer: {' '.join(map(str, answers[example]))}.</p>")
        allowed = np.arange(length)[:, None] < step  # steps not taken yet are greyed out
        labels = [f"{j}:{s}" for j, s in enumerate(src)]
        steps = [f"step {i + 1}" for i in range(length)]
        return text + row(svg_heatmap(weights, steps, labels, f"cross-attention, head {head}", cell=30,
                                      highlight_row=t, allowed=allowed, row_axis="decoding step",
                                      col_axis="source position:symbol", limit=1.0))

    return LiveView({
        "example": widgets.IntSlider(value=0, min=0, max=n_examples - 1, description="input"),
        "step": widgets.IntSlider(value=length, min=1, max=length, description="step"),
        "head": widgets.Dropdown(options=["mean"] + [str(h) for h in range(n_heads)], value="mean",
                                 description="head"),
    }, render)
