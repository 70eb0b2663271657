"""Visible checks for exercise set 02 (masks and the three uses of attention)."""

from __future__ import annotations

import math
from typing import Callable, Mapping, Sequence

import torch
from torch import Tensor

from ..attention_scores import attention_scores, scaled_dot_product_attention, softmax
from ..masks import causal_mask, combine_masks, padding_mask
from . import compare, earlier_answers, exercise_check, passed


def reference_padding(lengths: Sequence[int], S: int) -> Tensor:
    """What exercise 2's padding returns: (B, 1, S), True for the real tokens. Like a learner's,
    it does not check its input, so a wrong call reaches the check that names the mistake."""
    return (torch.arange(S)[None, :] < torch.as_tensor(list(lengths))[:, None])[:, None, :]


def reference_masked_softmax(scores: Tensor, mask: Tensor) -> Tensor:
    """What exercise 3's masked_softmax returns: weights (..., T, S); a fully masked row is zeros."""
    return softmax(scores, mask=mask)

# Tiny inputs the learner can follow by hand.
SCORES = torch.tensor([[1.0, 2.0, 3.0, 4.0], [0.0, 0.0, 0.0, 0.0], [5.0, 1.0, 2.0, 0.0]])  # (T=3, S=4)
SCORE_MASK = torch.tensor([[True, True, False, False],    # two keys allowed
                           [True, True, True, True],      # all allowed
                           [False, False, False, False]])  # none allowed: expect a row of zeros
LENGTHS, S_PAD = [2, 4, 0], 4
# Additive scores: T=2 queries of width 3, S=3 keys of width 2, hidden width 4.
Q_ADD = torch.tensor([[1.0, 0.0, -1.0], [0.5, 2.0, 0.0]])
K_ADD = torch.tensor([[1.0, 1.0], [0.0, -1.0], [2.0, 0.5]])
W_Q_ADD = torch.tensor([[0.5, -1.0, 0.0, 1.0], [1.0, 0.5, -0.5, 0.0], [0.0, 1.0, 1.0, -1.0]])  # (d_q=3, h=4)
W_K_ADD = torch.tensor([[1.0, 0.0, 0.5, -0.5], [-1.0, 1.0, 0.0, 0.5]])  # (d_k=2, h=4)
W_ADD = torch.tensor([1.0, -2.0, 0.5, 1.5])  # (h=4,)
# Cross-attention: B=2 pairs, m=3 target tokens, n=4 source tokens (the second pair's source has
# only 2 real tokens), D=3, d_k=2, d_v=2.
TARGET = torch.tensor([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]],
                       [[1.0, 1.0, 0.0], [0.0, 1.0, 1.0], [1.0, 0.0, 1.0]]])
SOURCE = torch.tensor([[[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 2.0], [1.0, 1.0, 1.0]],
                       [[2.0, 0.0, 0.0], [0.0, 0.0, 1.0], [5.0, 5.0, 5.0], [5.0, 5.0, 5.0]]])
SOURCE_LENGTHS = [4, 2]
W_Q = torch.tensor([[2.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
W_K = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]])
W_V = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])


def _shape_first(name: str, got: object, expected: Tensor, shape_hints: Mapping[tuple, str]) -> None:
    """Print expected vs got shapes and stop early, naming the likely bug, if the shape is wrong."""
    if not isinstance(got, Tensor):
        print(f"{name}\n  expected: a tensor of shape {tuple(expected.shape)}\n  got:      {type(got).__name__}")
        raise AssertionError(f"{name}: expected a torch.Tensor, got {type(got).__name__}")
    if got.shape != expected.shape:
        print(f"{name}\n  expected shape: {tuple(expected.shape)}\n  got shape:      {tuple(got.shape)}")
        hint = shape_hints.get(tuple(got.shape), "compare the shape asked for in the text")
        raise AssertionError(f"{name}: expected shape {tuple(expected.shape)}, got {tuple(got.shape)}. Likely bug: {hint}")


def _compare_mask(name: str, got: object, expected: Tensor, likely_bugs: Mapping[str, Tensor],
                  shape_hints: Mapping[tuple, str] = {}) -> None:
    """compare() for boolean masks: the values as 0/1, then the dtype."""
    _shape_first(name, got, expected, shape_hints)
    compare(name, got.to(torch.float32), expected.float(), {hint: m.float() for hint, m in likely_bugs.items()})
    if got.dtype != torch.bool:
        raise AssertionError(f"{name}: the values are right but the dtype is {got.dtype}; return a boolean tensor "
                             "(True = may attend), e.g. with a comparison such as `<=`")


@exercise_check
def check_causal(causal: Callable) -> None:
    expected = causal_mask(4)
    _compare_mask("causal(4)", causal(4), expected, {
        "the diagonal is excluded: a token must be allowed to attend to itself (s <= t, not s < t)":
            causal_mask(4).tril(-1),
        "upper triangle: that shows each query the future and hides the past": causal_mask(4).T,
        "inverted: True must mean 'may attend'": ~causal_mask(4),
    })
    _compare_mask("causal(1)", causal(1), causal_mask(1), {})
    passed("causal")


@exercise_check
def check_padding(padding: Callable) -> None:
    expected = padding_mask(LENGTHS, S_PAD)
    real = expected[:, 0]  # (B, S)
    _compare_mask(f"padding({LENGTHS}, {S_PAD})", padding(list(LENGTHS), S_PAD), expected, {
        "inverted: True must mark the real tokens (keys that may be attended to)": ~expected,
        "off by one: positions 0 .. length-1 are real, position `length` is the first pad":
            padding_mask([min(n + 1, S_PAD) for n in LENGTHS], S_PAD),
        "padding at the start: pad at the end (real tokens first)": padding_mask(LENGTHS, S_PAD, side="left"),
    }, shape_hints={tuple(real.shape): "the query axis is missing: return (B, 1, S) so the mask broadcasts over "
                                       "the queries (use [:, None, :])"})
    passed("padding")


@exercise_check
def check_masked_softmax(masked_softmax: Callable) -> None:
    got = masked_softmax(SCORES.clone(), SCORE_MASK.clone())
    expected = softmax(SCORES.masked_fill(~SCORE_MASK, -math.inf))
    uniform_last = expected.clone()
    uniform_last[2] = 0.25
    compare("masked_softmax(SCORES, SCORE_MASK) (row 3 has every key masked: expect zeros)", got, expected, {
        "mask applied after the softmax? Masked scores must become -inf before it, so the rest sum to 1":
            softmax(SCORES) * SCORE_MASK,
        "mask inverted? True means 'may attend'": softmax(SCORES.masked_fill(SCORE_MASK, -math.inf)),
        "filled with a large finite number (-1e9) instead of -inf? A row with every key masked then becomes "
        "uniform instead of zeros": uniform_last,
    })
    if not (got[~SCORE_MASK] == 0).all():
        raise AssertionError("masked_softmax: masked weights must be exactly 0")
    passed("masked_softmax")


def reference_additive_scores(q: Tensor, k: Tensor, w_q: Tensor, w_k: Tensor, w: Tensor) -> Tensor:
    """w . tanh(q_t W_q + k_s W_k) for every pair: (..., T, d_q), (..., S, d_k) -> (..., T, S)."""
    return torch.tanh((q @ w_q)[..., :, None, :] + (k @ w_k)[..., None, :, :]) @ w


@exercise_check
def check_additive_scores(additive_scores: Callable) -> None:
    args = (Q_ADD, K_ADD, W_Q_ADD, W_K_ADD, W_ADD)
    expected = reference_additive_scores(*args)
    got = additive_scores(*(a.clone() for a in args))
    _shape_first("additive_scores(q, k, w_q, w_k, w)", got, expected, {
        (3, 2): "rows and columns swapped: row t must hold query t's scores over the S keys, shape (T, S)",
        (2, 3, 4): "the hidden axis is still there: take the dot product with w (the last step of the MLP)",
    })
    hidden = (Q_ADD @ W_Q_ADD)[:, None, :] + (K_ADD @ W_K_ADD)[None, :, :]  # (T, S, h)
    compare("additive_scores(q, k, w_q, w_k, w)", got, expected, {
        "no tanh? The score is w . tanh(q W_q + k W_k)": hidden @ W_ADD,
        "tanh applied after the dot product with w? It goes inside, on the hidden layer": torch.tanh(hidden @ W_ADD),
        "multiplied the two projections instead of adding them?":
            torch.tanh((Q_ADD @ W_Q_ADD)[:, None, :] * (K_ADD @ W_K_ADD)[None, :, :]) @ W_ADD,
    })
    passed("additive_scores")


def reference_cross_attend(target: Tensor, source: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor,
                           source_lengths: list[int], mask: Tensor | None = None, queries_from_source: bool = False,
                           scale: float | None = None) -> tuple[Tensor, Tensor]:
    """Cross-attention written with course_lib; the keyword arguments build the known-wrong variants."""
    queries, keys = (source, target) if queries_from_source else (target, source)
    if mask is None:
        mask = padding_mask(source_lengths, keys.shape[-2])
    q, k, v = queries @ w_q, keys @ w_k, keys @ w_v
    return scaled_dot_product_attention(q, k, v, mask, scale=scale)


@exercise_check
def check_cross_attend(cross_attend: Callable) -> None:
    # One mistake costs once: the earlier exercises' answers are the references here.
    with earlier_answers(cross_attend, padding=reference_padding, masked_softmax=reference_masked_softmax):
        args = (TARGET, SOURCE, W_Q, W_K, W_V, SOURCE_LENGTHS)
        out, weights = cross_attend(*(a.clone() if isinstance(a, Tensor) else list(a) for a in args))
        ref_out, ref_weights = reference_cross_attend(*args)
        m, n = TARGET.shape[1], SOURCE.shape[1]
        _shape_first("weights of cross_attend(...)", weights, ref_weights, {
            (2, n, m): "queries and keys swapped: queries come from the target, keys and values from the source "
                       "(weights are (B, m, n))",
        })
        no_pad = torch.ones(1, 1, n, dtype=torch.bool)
        causal = combine_masks(causal_mask(m, n), padding_mask(SOURCE_LENGTHS, n))
        compare("weights of cross_attend(...) (pair 2: source keys 3 and 4 are padding)", weights, ref_weights, {
            "no padding mask? The padded source keys must get weight 0": reference_cross_attend(*args, mask=no_pad)[1],
            "a causal mask in cross-attention? The whole source is known: only its padding is masked":
                reference_cross_attend(*args, mask=causal)[1],
            "did you divide by sqrt(d_k)?": reference_cross_attend(*args, scale=1.0)[1],
        })
        compare("output of cross_attend(...)", out, ref_out, {
            "values made with w_k? The output is weights @ (source @ w_v)":
                ref_weights @ (SOURCE @ W_K),
        })
        passed("cross_attend")


