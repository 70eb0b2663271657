"""Lesson 04 widgets: the sinusoidal dot product against the offset k, and RoPE's score table."""

from __future__ import annotations

import math

import numpy as np
import torch

from ..attention_scores import attention_scores
from ..plots import svg_curve, svg_heatmap, svg_vectors
from ..positional_encoding import apply_rope, frequencies, rotate_pairs
from . import LiveView, row

D_CHOICES = [8, 16, 32, 64, 128, 256, 512]
BANDS = ["all pairs", "fastest quarter", "2nd quarter", "3rd quarter", "slowest quarter"]
MAX_OFFSET = 64
ANCHOR = 10  # the position t the rotation panel starts from; any t gives the same picture


def _band_pairs(d_model: int, band: str) -> range:
    """Indices j of the sin/cos pairs in a band (pairs ordered from fast to slow)."""
    n_pairs = d_model // 2
    if band == BANDS[0]:
        return range(n_pairs)
    quarter = BANDS.index(band) - 1
    return range(quarter * n_pairs // 4, max((quarter + 1) * n_pairs // 4, quarter * n_pairs // 4 + 1))


def offset_widget() -> LiveView:
    """Offset k, width d and frequency band: the curve PE_t . PE_{t+k} and one pair turning by c_j k."""
    import ipywidgets as widgets

    offsets = np.arange(-MAX_OFFSET, MAX_OFFSET + 1)
    # per d: cos(c_j k) for every offset and pair, (2 * MAX_OFFSET + 1, d/2)
    terms = {d: np.cos(offsets[:, None] * frequencies(d).numpy()) for d in D_CHOICES}
    curves = {(d, band): terms[d][:, list(_band_pairs(d, band))].sum(1) for d in D_CHOICES for band in BANDS}
    freqs = {d: frequencies(d).numpy() for d in D_CHOICES}

    def render(k: int, d: int, band: str) -> str:
        pairs = _band_pairs(d, band)
        j = pairs[0]  # the fastest pair of the band is the one drawn turning
        c = freqs[d][j]
        total, part = curves[(d, BANDS[0])], curves[(d, band)]
        at = k + MAX_OFFSET
        # drawn as (x, y) = (cos, sin) = (PE[2j+1], PE[2j]) so a growing angle turns counter-clockwise
        points = np.array([[math.cos(c * (ANCHOR + s)), math.sin(c * (ANCHOR + s))] for s in (-k, k)])
        start = np.array([math.cos(c * ANCHOR), math.sin(c * ANCHOR)])
        turn = math.degrees(c * k)
        readout = (
            f"<p>d = {d}: {d // 2} sin/cos pairs; band <b>{band}</b> = pairs {pairs.start}..{pairs.stop - 1}. "
            f"PE<sub>t</sub>&middot;PE<sub>t+k</sub> at k = {k:+d}: <b>{total[at]:.2f}</b> "
            f"(at k = {-k:+d}: {total[2 * MAX_OFFSET - at]:.2f}; at k = 0: |PE|&sup2; = d/2 = {d / 2:g}); "
            f"this band adds {part[at]:.2f}.<br>"
            f"Pair j = {j}: c<sub>j</sub> = {c:.4g} rad per position, wavelength {2 * math.pi / c:.4g} positions; "
            f"over k = {k:+d} it turns by {turn:+.1f}&deg; ({turn % 360:.0f}&deg; mod 360). "
            f"Arrows: pair j at t = {ANCHOR} and {ANCHOR}&plusmn;k, "
            f"drawn with x = PE[2j+1] = cos, y = PE[2j] = sin.</p>")
        # the band gets its own panel: on the shared axis a slow band is a flat line
        return readout + row(
            svg_curve(offsets, {"all pairs": total}, marker_x=k, x_label="offset k",
                      y_label="PE_t . PE_t+k", width=300, height=200),
            svg_curve(offsets, {band: part, f"bound: {len(pairs)} pairs": np.full_like(part, len(pairs)),
                                "zero": np.zeros_like(part)}, marker_x=k, x_label="offset k",
                      y_label="sum of cos(c_j k) over the band", width=300, height=200),
            svg_vectors(points, [f"t{-k:+d}", f"t{k:+d}"], start, highlight_label="t", size=200))

    return LiveView({
        "k": widgets.IntSlider(value=5, min=-MAX_OFFSET, max=MAX_OFFSET, description="offset k"),
        "d": widgets.SelectionSlider(options=D_CHOICES, value=64, description="width d"),
        "band": widgets.Dropdown(options=BANDS, value=BANDS[1], description="band"),
    }, render)


ROPE_TOKENS = ["the", "dog", "saw", "the", "cat", "on", "a", "mat"]
ROPE_ANGLES = list(range(-180, 181, 15))
NOISE = 1e-12  # float64 rounding in a score table of this size stays far below it (about 1e-14)


def _without_noise(table: np.ndarray) -> np.ndarray:
    """The table with entries within NOISE of 0 set to 0: a score that is 0 in exact arithmetic
    (q . k at 90 degrees) then prints as +0.000 on every CPU, never as -0.000."""
    return np.where(np.abs(table) < NOISE, 0.0, table)


def _below_noise(value: float) -> str:
    """A spread that is 0 in exact arithmetic, as a bound: its digits are rounding noise, which
    differs between CPUs, so only the bound is printed (or the value, if it ever exceeds it)."""
    return f"below {NOISE:.0e}" if value < NOISE else f"{value:.1e}"


def rope_widget(d_head: int = 8, seed: int = 0) -> LiveView:
    """RoPE score table q_m . k_n for one query and one key content placed at every position.

    Controls: the angle between the key's and the query's content in every pair (0 = same
    direction), and a query and key position whose first pair is drawn. Equal colours run
    along the diagonals (the score depends on n - m only); the table is symmetric only at 0 or 180 deg.
    """
    import ipywidgets as widgets

    gen = torch.Generator().manual_seed(seed)
    query = torch.randn(d_head, generator=gen, dtype=torch.float64)
    length = len(ROPE_TOKENS)
    tables, pairs, spreads = {}, {}, {}
    for angle in ROPE_ANGLES:
        turn = torch.full((d_head // 2,), math.radians(angle), dtype=torch.float64)
        key = rotate_pairs(query, turn)  # (d,): the query's content, every pair turned by `angle`
        q_rot = apply_rope(query.expand(length, d_head))  # (T, d): the same content at every position
        k_rot = apply_rope(key.expand(length, d_head))
        tables[angle] = attention_scores(q_rot, k_rot, scale=1.0).numpy()  # (T, T): [m, n] = q_m . k_n
        spreads[angle] = max(float(np.ptp(np.diagonal(tables[angle], offset=o)))
                             for o in range(-length + 1, length))  # 0 in exact arithmetic
        pairs[angle] = (q_rot[:, :2].numpy(), k_rot[:, :2].numpy())
    labels = [f"{i}:{t}" for i, t in enumerate(ROPE_TOKENS)]

    def render(angle: int, m: int, n: int) -> str:
        table = _without_noise(tables[angle])
        asym = float(np.abs(table - table.T).max())
        q_pair, k_pair = pairs[angle]
        readout = (f"<p>score q<sub>{m}</sub>&middot;k<sub>{n}</sub> = <b>{table[m, n]:+.3f}</b>, "
                   f"q<sub>{n}</sub>&middot;k<sub>{m}</sub> = {table[n, m]:+.3f} (offset n-m = {n - m:+d}). "
                   f"Largest spread along any diagonal: {_below_noise(spreads[angle])}; "
                   f"largest |score(m,n) - score(n,m)|: {asym:.3f}. "
                   f"Arrows: the first pair of q<sub>{m}</sub> and k<sub>{n}</sub>.</p>")
        return readout + row(
            svg_heatmap(table, labels, labels, f"q_m . k_n, key content turned {angle:+d} deg",
                        cell=38, highlight_row=m, row_axis="query position m", col_axis="key position n"),
            svg_vectors(np.stack([k_pair[n]]), [f"k{n}"], q_pair[m], highlight_label=f"q{m}", size=200))

    return LiveView({
        "angle": widgets.SelectionSlider(options=ROPE_ANGLES, value=45, description="k vs q (deg)"),
        "m": widgets.IntSlider(value=2, min=0, max=length - 1, description="query m"),
        "n": widgets.IntSlider(value=5, min=0, max=length - 1, description="key n"),
    }, render)
