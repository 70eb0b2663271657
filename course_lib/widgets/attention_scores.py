"""Lesson 01 widgets: a query turning among keys, and what the sqrt(d_k) scale does."""

from __future__ import annotations

import math

import numpy as np
import torch

from ..attention_scores import DEAD_GRADIENT, attention_scores, softmax, softmax_saturation
from ..plots import svg_bars, svg_curve, svg_vectors
from . import LiveView, row

KEY_TOKENS = ["cat", "dog", "sat", "mat", "ran"]
# Hand-placed 2-D keys: two animals close together, two verbs, one object.
KEYS_2D = np.array([[1.0, 0.3], [0.9, 0.6], [-0.8, 0.5], [0.1, -1.0], [-0.6, -0.7]])
D_K_CHOICES = [2 ** p for p in range(0, 10)]  # 1 ... 512


def query_alignment_widget() -> LiveView:
    """Rotate and stretch one 2-D query; its scores q.k and softmax weights follow."""
    import ipywidgets as widgets

    keys = torch.tensor(KEYS_2D, dtype=torch.float32)

    def render(angle: float, length: float) -> str:
        radians = math.radians(angle)
        query = torch.tensor([[length * math.cos(radians), length * math.sin(radians)]])
        scores = attention_scores(query, keys, scale=1.0)[0]  # (S,)
        weights = softmax(scores)
        return row(svg_vectors(KEYS_2D, KEY_TOKENS, query[0].numpy()),
                   svg_bars(scores.tolist(), KEY_TOKENS, "scores q.k", limit=3.5),
                   svg_bars(weights.tolist(), KEY_TOKENS, "weights softmax(q.k)", limit=1.0, fmt="{:.2f}"))

    return LiveView({
        "angle": widgets.FloatSlider(value=20, min=-180, max=180, step=5, description="angle (deg)"),
        "length": widgets.FloatSlider(value=1.0, min=0.1, max=3.0, step=0.1, description="|q|"),
    }, render)


def scale_widget() -> LiveView:
    """Pick d_k and scale on/off; read the entropy of attention rows and the gradient reaching q."""
    import ipywidgets as widgets

    runs = {scaled: [softmax_saturation(d, scaled) for d in D_K_CHOICES] for scaled in (True, False)}
    log_d = np.log2(D_K_CHOICES)

    def series(field: str, transform=lambda y: y) -> dict[str, np.ndarray]:
        return {("scaled" if scaled else "unscaled"): np.array([transform(getattr(r, field)) for r in rs])
                for scaled, rs in runs.items()}

    entropy_curves = series("entropy")
    gradient_curves = series("median_gradient", math.log10)
    dead_curves = series("dead_share", lambda y: 100 * y)

    def render(d_k: int, scaled: bool) -> str:
        r = runs[scaled][D_K_CHOICES.index(d_k)]
        readout = (f"<p>d_k = {d_k}, {'scaled by 1/sqrt(d_k)' if scaled else 'unscaled'}: "
                   f"mean entropy <b>{r.entropy:.2f}</b> nats (uniform over 16 keys: {math.log(16):.2f}); "
                   f"gradient reaching a query: median <b>{r.median_gradient:.2g}</b>, "
                   f"mean {r.mean_gradient:.2g}; queries with a gradient below {DEAD_GRADIENT:g}: "
                   f"<b>{r.dead_share:.0%}</b></p>")
        marker = math.log2(d_k)
        return readout + row(
            svg_curve(log_d, entropy_curves, marker_x=marker, x_label="log2 d_k", y_label="entropy (nats)"),
            svg_curve(log_d, gradient_curves, marker_x=marker, x_label="log2 d_k",
                      y_label="log10 median |dL/dq|"),
            svg_curve(log_d, dead_curves, marker_x=marker, x_label="log2 d_k",
                      y_label=f"% queries, gradient < {DEAD_GRADIENT:g}"))

    return LiveView({
        "d_k": widgets.SelectionSlider(options=D_K_CHOICES, value=64, description="d_k"),
        "scaled": widgets.Checkbox(value=True, description="divide by sqrt(d_k)"),
    }, render)
