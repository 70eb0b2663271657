"""Visible checks for exercise set 02 (masks and the three uses of attention)."""

from __future__ import annotations

import math
from typing import Callable, Mapping, Sequence

import torch
from torch import Tensor

from ..attention import Attention
from ..attention_scores import scaled_dot_product_attention, softmax
from ..masks import AdditiveScorer, additive_attention, causal_mask, combine_masks, cross_attention, padding_mask
from . import compare, earlier_answers, exercise_check, passed
from .bug_hints import BROADCAST_ERROR, call_naming, results_in_order
from .hand_in import ATTENTION_OPS, Case, Exercise


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
    """Stop early, naming expected vs got shapes and the likely bug, if the shape is wrong."""
    if not isinstance(got, Tensor):
        raise AssertionError(f"{name}: expected a torch.Tensor, got {type(got).__name__}")
    if got.shape != expected.shape:
        hint = shape_hints.get(tuple(got.shape), "compare the shape asked for in the text")
        raise AssertionError(f"{name}: expected shape {tuple(expected.shape)}, got {tuple(got.shape)}. Likely bug: {hint}")


def _compare_mask(name: str, got: object, expected: Tensor, likely_bugs: Mapping[str, Tensor],
                  shape_hints: Mapping[tuple, str] = {}) -> None:
    """compare() for boolean masks: the values as 0/1, then the dtype."""
    _shape_first(name, got, expected, shape_hints)
    compare(name, got.to(torch.float32), expected.float(), {hint: m.float() for hint, m in likely_bugs.items()})
    if got.dtype != torch.bool:
        raise AssertionError(f"{name}: the values are right but the dtype is {got.dtype}, not torch.bool (True = "
                             "may attend). Likely bug: 0/1 numbers where a boolean tensor belongs; a comparison such "
                             "as `<=` gives one")


@exercise_check
def check_causal(causal: Callable) -> None:
    expected = causal_mask(4)
    _compare_mask("causal(4)", causal(4), expected, {
        "the diagonal is excluded: a token must be allowed to attend to itself (s <= t, not s < t)":
            causal_mask(4).tril(-1),
        "upper triangle: that shows each query the future and hides the past": causal_mask(4).T,
        "inverted: True must mean 'may attend'": ~causal_mask(4),
        "one future key allowed: tril(diagonal=1) lets query t see key t + 1; the mask is s <= t (diagonal=0)":
            torch.ones(4, 4, dtype=torch.bool).tril(1),
        "an additive mask (0 = may attend, -inf = masked): this exercise asks for the boolean one, True = may attend":
            torch.zeros(4, 4).masked_fill(~expected, -math.inf),
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
                                       "the queries (use [:, None, :])",
                    (3, 4, 1): "the axis of size 1 is in the wrong place: (B, 1, S), [:, None, :], broadcasts over the "
                               "queries; (B, S, 1) puts each sentence's flags on the query axis",
                    (1, 3, 4): "the axis of size 1 is in the wrong place: (B, 1, S), [:, None, :], broadcasts over the "
                               "queries; (1, B, S) puts the sentences where the queries go"})
    passed("padding")


@exercise_check
def check_masked_softmax(masked_softmax: Callable) -> None:
    got = masked_softmax(SCORES.clone(), SCORE_MASK.clone())
    expected = softmax(SCORES.masked_fill(~SCORE_MASK, -math.inf))
    uniform_last, nan_last = expected.clone(), expected.clone()
    uniform_last[2], nan_last[2] = 0.25, math.nan
    compare("masked_softmax(SCORES, SCORE_MASK) (row 3 has every key masked: expect zeros)", got, expected, {
        "row 3 has every key masked: softmax of a row of -inf is 0/0 = NaN; such a row must come out as zeros":
            nan_last,
        "multiplied the scores by the mask? A masked score becomes 0, which still gets weight; fill it with -inf":
            softmax(SCORES * SCORE_MASK),
        "softmax over the wrong axis? Each row (one query, all its keys) must sum to 1, not each column":
            softmax(SCORES.masked_fill(~SCORE_MASK, -math.inf), dim=-2),
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
    got = call_naming("additive_scores(q, k, w_q, w_k, w)", additive_scores, *(a.clone() for a in args), bugs={
        BROADCAST_ERROR: "q @ w_q is (T, h) and k @ w_k is (S, h): add them as (..., T, 1, h) + (..., 1, S, h), "
                         "(q @ w_q)[..., :, None, :] + (k @ w_k)[..., None, :, :], to pair every query with every key"})
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
        got = cross_attend(*(a.clone() if isinstance(a, Tensor) else list(a) for a in args))
        ref_out, ref_weights = reference_cross_attend(*args)
        results_in_order("cross_attend(...)", got, ref_out, ref_weights)
        out, weights = got
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




# ---------------------------------------------------------------- hidden tests (see hand_in.py)
def _is_bool_tensor(result: object) -> bool:
    """The judge compares a mask's values as booleans, so a float 0/1 mask would pass: its dtype is a case."""
    return isinstance(result, Tensor) and result.dtype == torch.bool


def _nonzero_where_masked(weights: object, keep: Tensor) -> object:
    """True where a masked-out weight is not exactly 0; all False is right. A tolerance would let 1e-13 through."""
    return (weights != 0) & ~keep if isinstance(weights, Tensor) else weights


def _causal_cases(gen: torch.Generator) -> list[Case]:
    sizes = [1, 2, 5, 9, int(torch.randint(3, 17, (), generator=gen))]
    cases = [Case(f"T={T}", lambda T=T: causal_mask(T), (T,)) for T in sizes]
    cases.append(Case("causal(4) is a bool tensor (True = may attend)", lambda: True, (4,),
                      run=lambda fn: _is_bool_tensor(fn(4))))
    return cases


def _padding_cases(gen: torch.Generator) -> list[Case]:
    cases = []
    for B, S in [(1, 1), (3, 5), (6, 9)]:
        lengths = torch.randint(0, S + 1, (B,), generator=gen).tolist()
        if B > 2:
            lengths[:2] = [0, S]  # an empty sequence and one without padding
        cases.append(Case(f"lengths {lengths}, S={S}", lambda lengths=lengths, S=S: padding_mask(lengths, S),
                          (list(lengths), S)))
    cases.append(Case("padding([2, 0], 3) is a bool tensor (True = real token)", lambda: True, ([2, 0], 3),
                      run=lambda fn: _is_bool_tensor(fn([2, 0], 3))))
    return cases


def _masked_softmax_cases(gen: torch.Generator) -> list[Case]:
    cases = []
    for shape in [(4, 4), (2, 3, 5), (2, 2, 6, 7)]:
        scores = torch.randn(*shape, generator=gen) * 5
        mask = torch.rand(*shape, generator=gen) > 0.5
        mask[..., 0, :] = False  # one fully masked row per matrix: zeros, not NaN
        cases.append(Case(f"scores of shape {shape}, a random mask, row 0 fully masked",
                          lambda s=scores, m=mask: reference_masked_softmax(s, m), (scores, mask)))
        cases.append(Case(f"scores of shape {shape}: masked weights are exactly 0",
                          lambda shape=shape: torch.zeros(shape, dtype=torch.bool), (scores, mask),
                          run=lambda fn, s=scores, m=mask: _nonzero_where_masked(fn(s, m), m)))
    causal, scores = causal_mask(5), torch.randn(3, 5, 5, generator=gen)
    cases.append(Case("scores of shape (3, 5, 5), a (5, 5) causal mask (it broadcasts over the batch)",
                      lambda: reference_masked_softmax(scores, causal), (scores, causal)))
    return cases


def _additive_cases(gen: torch.Generator) -> list[Case]:
    cases = []
    for batch, T, S, d_q, d_k, h in [((), 3, 5, 4, 2, 6), ((2,), 4, 4, 3, 3, 8), ((2, 3), 1, 6, 5, 7, 2)]:
        q, k = torch.randn(*batch, T, d_q, generator=gen), torch.randn(*batch, S, d_k, generator=gen)
        w_q, w_k = torch.randn(d_q, h, generator=gen), torch.randn(d_k, h, generator=gen)
        args = (q, k, w_q, w_k, torch.randn(h, generator=gen))
        cases.append(Case(f"T={T}, S={S}, d_q={d_q}, d_k={d_k}, h={h}, batch {batch}",
                          lambda args=args: reference_additive_scores(*args), args))
    return cases


def _cross_attend_cases(gen: torch.Generator) -> list[Case]:
    cases = []
    for B, m, n, D, d_k, d_v in [(1, 3, 3, 4, 4, 2), (3, 5, 2, 6, 3, 4), (2, 1, 7, 8, 5, 5)]:
        target, source = torch.randn(B, m, D, generator=gen), torch.randn(B, n, D, generator=gen)
        w_q, w_k, w_v = (torch.randn(D, d, generator=gen) for d in (d_k, d_k, d_v))
        lengths = torch.randint(1, n, (B,), generator=gen).tolist()  # padded sources...
        lengths[0] = n  # ...but the first: a causal mask shows there
        args = (target, source, w_q, w_k, w_v, lengths)
        label = f"B={B}, m={m}, n={n}, D={D}, d_k={d_k}, d_v={d_v}, source lengths {lengths}"
        cases.append(Case(label, lambda args=args: reference_cross_attend(*args), args))
        keep = padding_mask(lengths, n)  # (B, 1, n)
        cases.append(Case(f"{label}: padded source keys get weight exactly 0",
                          lambda B=B, m=m, n=n: torch.zeros(B, m, n, dtype=torch.bool), args,
                          run=lambda fn, args=args, keep=keep: _nonzero_where_masked(fn(*args)[1], keep)))
    return cases


EXERCISES = {spec.name: spec for spec in [
    Exercise("causal", _causal_cases, forbidden_names=("causal_mask",), forbidden_objects=(causal_mask,)),
    Exercise("padding", _padding_cases, forbidden_names=("padding_mask",),
             forbidden_objects=(padding_mask, reference_padding)),
    Exercise("masked_softmax", _masked_softmax_cases, atol=1e-6, rtol=1e-5, forbidden_ops=ATTENTION_OPS,
             forbidden_names=("scaled_dot_product_attention", "MultiheadAttention"),
             forbidden_objects=(softmax, scaled_dot_product_attention, additive_attention, reference_masked_softmax)),
    Exercise("additive_scores", _additive_cases, rtol=1e-5, forbidden_names=("AdditiveScorer",),
             forbidden_objects=(AdditiveScorer, additive_attention, reference_additive_scores)),
    Exercise("cross_attend", _cross_attend_cases, rtol=1e-5, forbidden_ops=ATTENTION_OPS,
             forbidden_names=("scaled_dot_product_attention", "MultiheadAttention"),
             forbidden_objects=(scaled_dot_product_attention, cross_attention, Attention, reference_cross_attend),
             uses={"padding": reference_padding, "masked_softmax": reference_masked_softmax}),
]}
