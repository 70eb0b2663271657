"""Lesson 05 widgets: one watched token under BatchNorm, LayerNorm and RMSNorm, and the axes figure."""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING

import numpy as np
import torch

from ..normalization import COMPOSITIONS, EMBED_DIM, dependence_mask, normalize_tokens, toy_batch
from ..plots import svg_bars, svg_curve
from . import LiveView, row

if TYPE_CHECKING:
    from matplotlib.figure import Figure

FEATURES = [f"f{i}" for i in range(EMBED_DIM)]
WATCH_FEATURE = 3  # a feature with a large mean (2.0), so zero padding moves its statistics a lot
LENGTHS = range(1, 9)  # the toy sentences have 8 tokens
PADDINGS = range(0, 9)


def _watched_token(others: list[str], length: int, padding: int, masked: bool) -> dict:
    """Normalized values of x[0, 0] ("cat") under each kind, plus how BN's statistics were taken."""
    x, mask, _ = toy_batch(others, length, padding)
    entry: dict = {"B": x.shape[0], "positions": x.shape[1], "real": int(mask.sum()),
                   "pad": int((~mask).sum()), "count": int(mask.sum()) if masked else mask.numel()}
    try:
        entry["batch"] = normalize_tokens("batch", x, mask if masked else None)[0, 0].numpy()
    except ValueError as error:  # batch size 1 with a single token: show the message instead
        entry["batch"], entry["error"] = None, str(error)
    entry["layer"] = normalize_tokens("layer", x)[0, 0].numpy()
    entry["rms"] = normalize_tokens("rms", x)[0, 0].numpy()
    return entry


def plural(n: int, noun: str) -> str:
    """'1 sequence', '3 sequences': a number with its noun, singular or plural as English wants."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _message_box(title: str, text: str, width: int = 260) -> str:
    return (f'<div style="width:{width}px;font-family:sans-serif;font-size:11px">'
            f'<b>{escape(title)}</b><div style="margin-top:6px;padding:6px;border:1px solid #c33;'
            f'color:#900;background:#fee">{escape(text)}</div></div>')


def normalization_widget() -> LiveView:
    """Batch composition, sequence length, padding: the watched token "cat" under BN, LN and RMSNorm."""
    import ipywidgets as widgets

    table = {(name, length, padding, masked): _watched_token(others, length, padding, masked)
             for name, others in COMPOSITIONS.items() for length in LENGTHS
             for padding in PADDINGS for masked in (False, True)}

    def render(composition: str, length: int, padding: int, masked: bool) -> str:
        entry = table[composition, length, padding, masked]
        shape = f"{plural(entry['B'], 'sequence')} x {plural(entry['positions'], 'position')}"
        tokens = f"{plural(entry['real'], 'real token')} + {plural(entry['pad'], 'pad token')}"
        readout = (f"<p>Batch: B = {shape} = {tokens}. BatchNorm's mean and variance of each feature "
                   f"come from <b>{plural(entry['count'], 'token')}</b>"
                   f"{' (padding skipped)' if masked else ' (padding included)'}. "
                   "Watched token: <b>cat</b> (sequence 0, position 0).</p>")
        if entry["batch"] is None:
            bn_panel = _message_box("BatchNorm (training mode)", entry["error"])
        else:
            bn_panel = svg_bars(entry["batch"], FEATURES, "BatchNorm: cat", limit=3.0)
        curve_rows = [table[composition, length, p, masked] for p in PADDINGS]
        usable = [p for p, e in zip(PADDINGS, curve_rows) if e["batch"] is not None]
        curve = ""
        if len(usable) >= 2:
            curve = svg_curve(usable, {
                label: [curve_rows[p][kind][WATCH_FEATURE] for p in usable]
                for kind, label in (("batch", "BatchNorm"), ("layer", "LayerNorm"), ("rms", "RMSNorm"))},
                marker_x=padding if padding in usable else None,
                x_label="padding tokens per sequence", y_label=f"cat, feature {FEATURES[WATCH_FEATURE]}")
        return readout + row(bn_panel, svg_bars(entry["layer"], FEATURES, "LayerNorm: cat", limit=3.0),
                             svg_bars(entry["rms"], FEATURES, "RMSNorm: cat", limit=3.0), curve)

    return LiveView({
        "composition": widgets.Dropdown(options=list(COMPOSITIONS), value="+3 similar sentences",
                                        description="other rows"),
        "length": widgets.IntSlider(value=4, min=min(LENGTHS), max=max(LENGTHS), description="length T"),
        "padding": widgets.IntSlider(value=0, min=min(PADDINGS), max=max(PADDINGS),
                                     description="pad / row"),
        "masked": widgets.Checkbox(value=False, description="BN skips padding"),
    }, render)


def draw_shared_slices(shape: tuple[int, int, int] = (4, 5, 6), entry: tuple[int, int, int] = (1, 2, 3),
                       seed: int = 0) -> tuple[Figure, dict[str, torch.Tensor]]:
    """A (B, T, D) block per normalization, with the entries that share `entry`'s statistics coloured.

    The coloured slice is computed, not drawn by hand: it is where the gradient of the output at
    `entry` with respect to the input is non-zero (dependence_mask). Returns the figure and the masks.
    """
    x = torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    kinds = {"batch": "BatchNorm: one feature,\nevery token of the batch",
             "layer": "LayerNorm: one token,\nevery feature (centred)",
             "rms": "RMSNorm: one token,\nevery feature (not centred)"}
    masks = {kind: dependence_mask(lambda z, k=kind: normalize_tokens(k, z), x, entry) for kind in kinds}
    import matplotlib.pyplot as plt  # here: importing the widget module stays quick

    fig = plt.figure(figsize=(11, 4.2), dpi=72)
    n_b, n_t, n_d = shape
    corners = np.array([[i, j, k] for i in (0, n_t) for j in (0, n_b) for k in (0, n_d)])
    for index, (kind, title) in enumerate(kinds.items()):
        ax = fig.add_subplot(1, 3, index + 1, projection="3d")
        shared = masks[kind].numpy().transpose(1, 0, 2)  # voxel axes: x = position T, y = batch B, z = feature D
        colours = np.zeros(shared.shape + (4,))
        colours[shared] = (0.90, 0.47, 0.16, 0.9)
        b, t, d = entry
        colours[t, b, d] = (0.35, 0.12, 0.0, 1.0)  # the entry whose statistics we follow
        ax.voxels(shared, facecolors=colours, edgecolor=(0.2, 0.2, 0.2, 0.5), linewidth=0.4)
        for a, c in ((a, c) for a in corners for c in corners if np.abs(a - c).astype(bool).sum() == 1):
            ax.plot(*zip(a, c), color="grey", linewidth=0.8)  # the outline of the whole (B, T, D) block
        ax.set_xlabel("seq position T")
        ax.set_ylabel("batch B")
        ax.set_zlabel("feature D")
        ax.set_xticks(np.arange(n_t) + 0.5, range(n_t))
        ax.set_yticks(np.arange(n_b) + 0.5, range(n_b))
        ax.set_zticks(np.arange(n_d) + 0.5, range(n_d))
        ax.set_title(title, fontsize=10)
        ax.view_init(elev=22, azim=-58)
        ax.set_box_aspect(None, zoom=0.82)  # leave room for the axis labels
    fig.subplots_adjust(left=0.0, right=0.96, bottom=0.05, top=0.92, wspace=0.08)
    return fig, masks
