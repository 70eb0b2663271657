"""Lesson 10 widgets: the induction model's attention as a layered graph, and Hopfield retrieval.

Both precompute everything when built (graph edges and rollouts; every Hopfield run on a grid
of beta and noise); a redraw only filters edges and formats numbers into SVG.
"""

from __future__ import annotations

from html import escape

import numpy as np
import torch
from torch import Tensor

from ..attention_graph import (RETRIEVAL_TRIALS, attention_rollout, hopfield_run, hopfield_update,
                               noisy_queries, random_patterns, retrieved, token_ablation,
                               with_residual)
from ..copying import hand_set_induction_model
from ..model import DecoderOnly
from ..plots import _svg_open, svg_bars, svg_curve
from . import LiveView, row

SEQUENCE = [0, 1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1]  # BOS A B C D E A B C D E A: predicts B
NAMES = ["BOS", "A", "B", "C", "D", "E", "F", "G"]
THRESHOLDS = [round(0.05 * i, 2) for i in range(19)]  # 0 .. 0.9
RESIDUALS = [("0 (attention only)", 0.0), ("0.5 (Abnar & Zuidema)", 0.5)]  # (label, share)


def induction_model() -> tuple[DecoderOnly, Tensor, list[str]]:
    """Lesson 06's hand-set induction model, SEQUENCE as ids (1, T), and its token labels."""
    model = hand_set_induction_model(torch.eye(len(NAMES), dtype=torch.float64), len(SEQUENCE))
    return model, torch.tensor([SEQUENCE]), [NAMES[t] for t in SEQUENCE]


def induction_layers() -> tuple[list[Tensor], list[str]]:
    """The hand-set induction model's two (T, T) weight matrices on SEQUENCE, and token labels."""
    model, ids, labels = induction_model()
    with torch.no_grad():
        model(ids)
    return [w[0, 0] for w in model.layer_weights], labels  # (B, H, T, T) each: example 0, its one head


def _layered_svg(mixed: list[np.ndarray], labels: list[str], threshold: float, query: int) -> str:
    """Rows of nodes (top: after layer 2, bottom: the tokens); an edge per weight above threshold.
    Edges on a path from the chosen query are dark, the others faint."""
    T, L = len(labels), len(mixed)
    step, left, top, gap = 34, 70, 20, 80
    width, height = left + T * step + 10, top + L * gap + 40
    y = {layer: top + (L - layer) * gap for layer in range(L + 1)}
    reach = {L: {query}}
    for layer in range(L, 0, -1):
        above = mixed[layer - 1] > threshold
        reach[layer - 1] = {j for i in reach[layer] for j in np.nonzero(above[i])[0]}
    parts = [_svg_open(width, height)]
    for layer in range(L, 0, -1):
        w = mixed[layer - 1]
        for i, j in zip(*np.nonzero(w > threshold)):
            on_path = i in reach[layer] and j in reach[layer - 1]
            colour, opacity = ("#d9661f", 1.0) if on_path else ("#888", 0.25)
            parts.append(f'<line x1="{left + i * step}" y1="{y[layer]}" x2="{left + j * step}" '
                         f'y2="{y[layer - 1]}" stroke="{colour}" stroke-opacity="{opacity}" '
                         f'stroke-width="{0.5 + 4 * w[i, j]:.2f}"/>')
    for layer in range(L + 1):
        name = "tokens" if layer == 0 else f"layer {layer}"
        parts.append(f'<text x="4" y="{y[layer] + 4}" font-style="italic">{name}</text>')
        for i in range(T):
            fill = "#d9661f" if i in reach[layer] else "white"
            parts.append(f'<circle cx="{left + i * step}" cy="{y[layer]}" r="6" fill="{fill}" '
                         'stroke="#333"/>')
    for i, label in enumerate(labels):
        parts.append(f'<text x="{left + i * step}" y="{y[0] + 22}" text-anchor="middle" '
                     f'font-size="10">{i}:{escape(label)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def graph_widget() -> LiveView:
    """Threshold, residual share and a query: the paths through the induction model's two
    layers, that query's rollout row (the sum over those paths), and beside it the positions
    whose token, replaced, moves that query's prediction (an ablation, as in the lesson)."""
    import ipywidgets as widgets

    layers, labels = induction_layers()
    mixed = {r: [with_residual(w, r).numpy() for w in layers] for _, r in RESIDUALS}
    rollouts = {r: attention_rollout(layers, r).numpy() for _, r in RESIDUALS}
    T = len(labels)
    model, ids, _ = induction_model()
    unused = NAMES.index("F")  # a token the sequence does not hold
    matters = {q: [j for j, moved in enumerate(token_ablation(model, ids, unused, q).tolist())
                   if moved > 1e-6] for q in range(T)}

    def render(threshold: float, residual: float, query: int) -> str:
        edges = sum(int((m > threshold).sum()) for m in mixed[residual])
        roll = rollouts[residual][query]
        top = int(roll.argmax())
        loop = " (vertical edges: the residual self-loop)" if residual else ""
        used = ", ".join(f"{j} ({escape(labels[j])})" for j in matters[query]) or "none"
        text = (f"<p>Edges above {threshold:.2f}: <b>{edges}</b>. Query {query} "
                f"({escape(labels[query])}): rollout puts {roll[top]:.2f} on position {top} "
                f"({escape(labels[top])}); each rollout entry is the sum, over the paths from the "
                f"query (orange), of the products of their weights{loop}; the rollout uses every "
                f"edge, the threshold only thins the drawing. Ablation: replacing the token at "
                f"<b>{used}</b> moves this query's prediction; no other position does.</p>")
        return text + row(_layered_svg(mixed[residual], labels, threshold, query),
                          svg_bars(roll, [f"{i}:{t}" for i, t in enumerate(labels)],
                                   "rollout row", limit=1.0, fmt="{:.3f}", highlight=top,
                                   width=220))

    return LiveView({
        "threshold": widgets.SelectionSlider(options=THRESHOLDS, value=0.1,
                                             description="threshold"),
        "residual": widgets.Dropdown(options=RESIDUALS, value=0.5, description="residual share",
                                     style={"description_width": "initial"}),
        "query": widgets.IntSlider(value=T - 1, min=0, max=T - 1, description="query"),
    }, render)


BETAS = [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]
NOISES = [round(0.1 * i, 1) for i in range(16)]  # 0 .. 1.5
STEPS = 6
N_PATTERNS, WIDTH, TRIALS = 16, 16, RETRIEVAL_TRIALS


def hopfield_widget(seed: int = 0) -> LiveView:
    """beta and noise: one noisy query's run (energy per step, final weights on the patterns)
    and the retrieval rate over TRIALS random pattern sets at that beta and noise."""
    import ipywidgets as widgets

    patterns = random_patterns(N_PATTERNS, WIDTH, TRIALS, seed)  # (TRIALS, S, D)
    clean_queries = [noisy_queries(patterns, noise, seed + 1) for noise in NOISES]
    targets = clean_queries[0][1]  # the same targets for every noise level (same seed)
    queries = torch.stack([q for q, _ in clean_queries])  # (noise levels N, TRIALS, D)
    runs, rates = {}, {}
    for beta in BETAS:
        # every noise level at once: patterns (TRIALS, S, D) broadcast against (N, TRIALS, D);
        # states (STEPS + 1, N, TRIALS, D), energies (STEPS + 1, N, TRIALS)
        states, energies = hopfield_run(queries, patterns, beta, STEPS)
        final = states[-1]  # (N, TRIALS, D)
        weights = hopfield_update(final[:, 0], patterns[0], beta)[1]  # (N, S): the example shown
        target = patterns[0, targets[0]]
        for n, noise in enumerate(NOISES):
            rates[beta, noise] = float(retrieved(final[n], patterns, targets).double().mean())
            runs[beta, noise] = (energies[:, n, 0].numpy(), weights[n].numpy(),
                                 float((final[n, 0] - target).norm()),
                                 float((final[n, 0] - patterns[0].mean(0)).norm()))
    target = int(targets[0])
    curve = {beta: [rates[beta, n] for n in NOISES] for beta in BETAS}

    def render(beta: float, noise: float) -> str:
        energies, weights, to_target, to_mean = runs[beta, noise]
        chosen = f"chosen beta {beta:g}"
        verdict = "retrieved" if to_target < 0.1 else (
            "nearer the mean of all patterns (the global fixed point) than its own" if
            to_mean < to_target else "stuck elsewhere")
        rising = float(np.diff(energies).max())
        rise = "none above 1e-12" if rising < 1e-12 else f"{rising:.1e}"
        text = (f"<p>&beta; = {beta:g}, noise {noise:.1f}: after {STEPS} updates the state is "
                f"<b>{verdict}</b> (distance to its pattern {to_target:.2f}, to the patterns' "
                f"mean {to_mean:.2f}; patterns have norm 1). Energy rise over the steps: {rise}. "
                f"Retrieval rate over {TRIALS} random sets of {N_PATTERNS} patterns: "
                f"<b>{rates[beta, noise]:.0%}</b>.</p>")
        labels = [f"x{s}{'*' if s == target else ''}" for s in range(N_PATTERNS)]
        return text + row(
            svg_curve(list(range(STEPS + 1)), {"energy E": energies}, x_label="update step",
                      y_label="E", width=260, height=180),
            svg_bars(weights, labels, "weights on the patterns (* = target)", limit=1.0,
                     fmt="{:.2f}", highlight=target, width=240),
            # the chosen beta is drawn last and dashed: it stays visible where it equals beta 64
            svg_curve(NOISES, {"beta 0.5": curve[0.5], "beta 64": curve[64.0], chosen: curve[beta]},
                      marker_x=noise, x_label="noise", y_label="retrieval rate", width=260,
                      height=196, dashed=[chosen]))

    return LiveView({
        "beta": widgets.SelectionSlider(options=BETAS, value=8.0, description="β"),
        "noise": widgets.SelectionSlider(options=NOISES, value=0.5, description="noise"),
    }, render)
