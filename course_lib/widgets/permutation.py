"""Lesson 03 widget: permute a sentence, toggle biases / causal mask / positions, see which outputs move."""

from __future__ import annotations

from itertools import product

import numpy as np
import torch

from ..masks import causal_mask
from ..model import Block
from ..permutation import describe_gap, permute_tokens, random_block, without_biases
from ..plots import svg_bars, svg_heatmap
from . import LiveView, row

TOKENS = ["the", "dog", "bites", "the", "man"]
D, D_FF = 4, 8
PERMUTATIONS = {
    "identity": [0, 1, 2, 3, 4],
    "swap dog and man": [0, 4, 2, 3, 1],
    "reverse": [4, 3, 2, 1, 0],
    "rotate by one": [1, 2, 3, 4, 0],
    "shuffle": [3, 2, 4, 0, 1],
}
SCOPES = ["attention", "encoder block"]
TOGGLES = ["b_q", "b_k", "b_v", "mask", "positions"]
GAP_TINY = 1e-5  # float32 rounding stays far below this


def _model(seed: int = 3) -> tuple[torch.Tensor, Block, torch.Tensor]:
    """The sentence's rows x (T, D), the block, and a fixed position table (T, D)."""
    gen = torch.Generator().manual_seed(seed)
    vocab = sorted(set(TOKENS))
    embedding = torch.randn(len(vocab), D, generator=gen)
    x = embedding[torch.tensor([vocab.index(t) for t in TOKENS])]  # (T, D)
    block = random_block(D, D_FF, generator=gen)
    # Any fixed vector per slot breaks the symmetry; lesson 04 builds the real position encodings.
    positions = torch.randn(len(TOKENS), D, generator=gen)  # (T, D)
    for name in ("query", "key", "value"):  # larger Q/K/V biases than random_block's, so their effect is easy to see
        getattr(block.attention, name).bias.mul_(3)
    return x, block, positions


def _variants(block: Block) -> dict[tuple[bool, bool, bool], Block]:
    """The block with each choice of Q/K/V biases on (True) or off: (b_q, b_k, b_v) -> a copy."""
    names = ("query", "key", "value")
    return {on: without_biases(block, *(name for name, kept in zip(names, on) if not kept))
            for on in product([False, True], repeat=3)}


def _run(x: torch.Tensor, variant: Block, positions: torch.Tensor, scope: str,
         on: dict[str, bool]) -> tuple[np.ndarray, np.ndarray]:
    """Output rows (..., T, D) and the one head's attention weights (..., T, T) for one setting of
    the toggles (`variant`: the block with the Q/K/V biases they ask for)."""
    T = x.shape[-2]
    mask = causal_mask(T) if on["mask"] else None
    if on["positions"]:
        x = x + positions  # positions belong to slots, not to tokens
    out, weights = variant.attention(x, mask=mask)  # (..., T, D), (..., H, T, T) with H = 1
    if scope == "encoder block":
        out = variant(x, mask)[0]  # (..., T, D)
    return out.numpy(), weights[..., 0, :, :].numpy()  # (..., T, D), (..., T, T): the block's one head


def permutation_widget() -> LiveView:
    """Pick a permutation of 'the dog bites the man' and toggle Q/K/V biases, a causal mask and
    position vectors, for one attention layer or a whole post-LN encoder block. Shows the
    attention weights on the permuted sentence, how far each output row moved away from the
    permuted original output (0 everywhere = equivariant), and what the biases changed."""
    import ipywidgets as widgets

    x, block, positions = _model()
    variants = _variants(block)
    names = list(PERMUTATIONS)
    # Row 0 of the batch is the sentence itself, rows 1.. its permutations: one forward pass each setting.
    batch = torch.stack([x] + [permute_tokens(x, torch.tensor(PERMUTATIONS[n])) for n in names])  # (1+P, T, D)
    runs, table = {}, {}
    with torch.no_grad():
        for scope, flags in product(SCOPES, product([False, True], repeat=len(TOGGLES))):
            runs[scope, flags] = _run(batch, variants[flags[:3]], positions, scope, dict(zip(TOGGLES, flags)))
    for (scope, flags), (out, weights) in runs.items():
        out0, weights0 = runs[scope, (False, False, False) + flags[3:]]  # the same setting without Q/K/V biases
        for index, name in enumerate(names, start=1):
            gaps = np.linalg.norm(out[index] - out[0][PERMUTATIONS[name]], axis=1)  # (T,)
            table[scope, flags, name] = (weights[index], gaps, out[index] - out0[index],
                                         float(np.abs(weights[index] - weights0[index]).max()))
    # One bar scale per scope, so the bars of the two scopes are each readable.
    gap_limit = {scope: max(float(entry[1].max()) for key, entry in table.items() if key[0] == scope)
                 for scope in SCOPES}

    def render(permutation: str, scope: str, b_q: bool, b_k: bool, b_v: bool, mask: bool, positions: bool) -> str:
        flags = (b_q, b_k, b_v, mask, positions)
        weights, gaps, bias_shift, weight_change = table[scope, flags, permutation]
        labels = [TOKENS[i] for i in PERMUTATIONS[permutation]]
        slots = [f"{t}:{label}" for t, label in enumerate(labels)]
        worst = float(gaps.max())
        verdict = ("<b>equivariant</b>: every output moved with its token" if worst < GAP_TINY else
                   "<b>not equivariant</b>: some outputs changed, not just their order")
        readout = (f"<p>{scope}, input: <i>{' '.join(labels)}</i>. Largest move "
                   f"{describe_gap(worst, GAP_TINY)}: {verdict}. "
                   f"(bars: |f(Px)<sub>i</sub> - (P f(x))<sub>i</sub>|, the change of output i beyond reordering.) Biases changed the weights by at most {weight_change:.3f} and the outputs by at most "
                   f"{float(np.abs(bias_shift).max()):.3f}.</p>")
        return readout + row(
            svg_heatmap(weights, slots, labels, "attention weights", cell=30, row_axis="query (slot)",
                        col_axis="key (token)"),
            svg_bars([0.0 if g < GAP_TINY else float(g) for g in gaps], slots,
                     "how far output i moved", limit=gap_limit[scope], fmt="{:.3f}"),
            svg_heatmap(bias_shift, slots, [f"f{j}" for j in range(D)], "what the biases changed", cell=34,
                        row_axis="output slot", col_axis="feature"))

    checkbox = {"layout": widgets.Layout(width="auto"), "indent": False}
    return LiveView({
        "permutation": widgets.Dropdown(options=list(PERMUTATIONS), value="swap dog and man", description="permute"),
        "scope": widgets.ToggleButtons(options=SCOPES, value="attention"),
        "b_q": widgets.Checkbox(value=False, description="query bias", **checkbox),
        "b_k": widgets.Checkbox(value=False, description="key bias", **checkbox),
        "b_v": widgets.Checkbox(value=False, description="value bias", **checkbox),
        "mask": widgets.Checkbox(value=False, description="causal mask", **checkbox),
        "positions": widgets.Checkbox(value=False, description="positions", **checkbox),
    }, render)
