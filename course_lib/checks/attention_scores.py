"""Visible checks for exercise set 01 (attention scores)."""

from __future__ import annotations

import math
from typing import Callable

import torch

from ..attention_scores import attention_scores, entropy, naive_softmax, scaled_dot_product_attention, softmax
from . import compare, earlier_answers, exercise_check, passed
from .bug_hints import BROADCAST_ERROR, call_naming, name_shape_bug, results_in_order
from .hand_in import ATTENTION_OPS, SOFTMAX_OPS, Case, Exercise

# Tiny inputs the learner can work out by hand.
LOGITS = torch.tensor([[1.0, 2.0, 3.0], [1000.0, 1000.0, 0.0]])
Q = torch.tensor([[1.0, 0.0, 1.0, 0.0], [0.0, 2.0, 0.0, 2.0]])
K = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 3.0]])
V = torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]])
MASK = torch.tensor([[True, True, False], [False, False, False]])
WEIGHTS = torch.tensor([[0.25, 0.25, 0.25, 0.25], [1.0, 0.0, 0.0, 0.0], [0.5, 0.5, 0.0, 0.0]])
@exercise_check
def check_softmax_rows(softmax_rows: Callable) -> None:
    got = call_naming("softmax_rows(LOGITS)", softmax_rows, LOGITS.clone(), bugs={
        BROADCAST_ERROR: "a row's max or sum lost its axis: x.amax(-1) and .sum(-1) of the (2, 3) LOGITS have "
                         "shape (2,), which does not broadcast against the rows; keep it (2, 1) with keepdim=True"})
    shifted_by_all = torch.exp(LOGITS - LOGITS.max())  # the first row's exps, exp(-999) and less, are all 0
    compare("softmax_rows(LOGITS)", got, softmax(LOGITS), {
        "softmax over the wrong axis? Each row (last dimension) must sum to 1": softmax(LOGITS, dim=0),
        "no max subtraction? exp(1000) overflows to inf, and inf/inf is NaN": naive_softmax(LOGITS),
        "subtracted the max of the whole tensor (x.max() with no dim)? The first row's exps, exp(1 - 1000) and "
        "less, all underflow to 0, and 0/0 is NaN: subtract each row's own max, x.amax(-1, keepdim=True)":
            shifted_by_all / shifted_by_all.sum(-1, keepdim=True),
        "did you forget to divide by the row sum?": torch.exp(LOGITS - LOGITS.amax(-1, keepdim=True)),
    })
    passed("softmax_rows")


@exercise_check
def check_score_matrix(score_matrix: Callable) -> None:
    got = call_naming("score_matrix(Q, K)", score_matrix, Q.clone(), K.clone(), bugs={
        "cannot be multiplied": "k must be transposed: q (T, d_k) @ k.transpose(-2, -1) (d_k, S) pairs every query "
                                "with every key"})
    expected = attention_scores(Q, K)
    name_shape_bug("score_matrix(Q, K)", got, expected.shape, {
        (3, 2): "rows and columns swapped: k @ q^T is (S, T); the scores are q @ k^T, row t for query t"})
    compare("score_matrix(Q, K)", got, expected, {
        "did you divide by sqrt(d_k)? d_k = 4 here, so every score should be half the dot product":
            attention_scores(Q, K, scale=1.0),
        "divided by d_k instead of sqrt(d_k)?": attention_scores(Q, K, scale=1 / 4),
        "multiplied by sqrt(d_k)? Divide by it": attention_scores(Q, K, scale=2.0),
        "divided by the square root of the number of keys (S = 3)? d_k is the width of q and k, q.shape[-1] = 4":
            attention_scores(Q, K, scale=1 / math.sqrt(3)),
    })
    passed("score_matrix")


@exercise_check
def check_attend(attend: Callable) -> None:
    # One mistake costs once: the earlier exercises\' answers are the references here.
    with earlier_answers(attend, score_matrix=attention_scores, softmax_rows=softmax):
        got = attend(Q.clone(), K.clone(), V.clone())
        ref_out, ref_weights = scaled_dot_product_attention(Q, K, V)
        results_in_order("attend(Q, K, V)", got, ref_out, ref_weights)
        out, weights = got
        unscaled_out, unscaled_weights = scaled_dot_product_attention(Q, K, V, scale=1.0)
        compare("weights of attend(Q, K, V)", weights, ref_weights, {
            "did you divide by sqrt(d_k)?": unscaled_weights,
            "softmax over the wrong axis? Each row of weights must sum to 1": softmax(attention_scores(Q, K), dim=0),
        })
        compare("output of attend(Q, K, V)", out, ref_out, {
            "output should be weights @ V (rows of weights mix rows of V)": ref_weights @ V.flip(0),
            "did you divide by sqrt(d_k)?": unscaled_out,
        })
        out, weights = attend(Q.clone(), K.clone(), V.clone(), MASK)
        ref_out, ref_weights = scaled_dot_product_attention(Q, K, V, MASK)
        after_softmax = softmax(attention_scores(Q, K)) * MASK
        nan_row, uniform_row = ref_weights.clone(), ref_weights.clone()
        nan_row[1], uniform_row[1] = math.nan, 1 / 3  # query 2: every key masked
        compare("weights of attend(Q, K, V, MASK)", weights, ref_weights, {
            "query 2 has every key masked: softmax of a row of -inf is 0/0 = NaN; its weights (and output) must be "
            "zeros": nan_row,
            "filled with a large finite number (-1e9) instead of -inf? Query 2, whose keys are all masked, then "
            "spreads its weight evenly instead of getting zeros": uniform_row,
            "mask applied after the softmax? Masked scores must become -inf before it, so the rest renormalize":
                after_softmax,
            "mask inverted? True means 'may attend'": softmax(attention_scores(Q, K).masked_fill(MASK, -math.inf)).nan_to_num(0),
        })
        compare("output of attend(Q, K, V, MASK) (row 2 has every key masked: expect zeros)", out, ref_out)
        passed("attend")


@exercise_check
def check_row_entropy(row_entropy: Callable) -> None:
    got = row_entropy(WEIGHTS.clone())
    expected = entropy(WEIGHTS)
    name_shape_bug("row_entropy(WEIGHTS)", got, expected.shape, {
        (4,): "summed over the wrong axis: WEIGHTS is (3, 4), one row of 4 weights per query; sum over the last "
              "axis, .sum(-1)",
        (3, 1): "keepdim=True: the entropy of each row is one number, shape (...) without the last axis"})
    compare("row_entropy(WEIGHTS)", got, expected, {
        "a zero weight must contribute 0 (0 * log 0 = 0), not NaN": -(WEIGHTS * WEIGHTS.log()).sum(-1),
        "forgot the minus sign? Entropy is never negative": -entropy(WEIGHTS),
        "used log2 instead of the natural log?": entropy(WEIGHTS) / math.log(2),
        "took the mean over the weights instead of the sum? Here that divides by S = 4": entropy(WEIGHTS) / 4,
    })
    passed("row_entropy")


# ---------------------------------------------------------------- hidden tests (see hand_in.py)
def _softmax_cases(gen: torch.Generator) -> list[Case]:
    cases = []
    for shape in [(5,), (3, 7), (2, 4, 6)]:
        x = torch.randn(*shape, generator=gen) * 30
        cases.append(Case(f"scores of shape {shape}", lambda x=x: torch.softmax(x, -1), (x,)))
    big = torch.tensor([[500.0, 499.0, -500.0]]) + torch.randn(1, 1, generator=gen) * 100
    cases.append(Case("logits near 500 (exp would overflow)", lambda: torch.softmax(big, -1), (big,)))
    apart = torch.randn(2, 4, generator=gen) * 3 + torch.tensor([[0.0], [1000.0]])
    cases.append(Case("two rows 1000 apart (the max must be each row's own)", lambda: torch.softmax(apart, -1),
                      (apart,)))
    return cases


def _score_cases(gen: torch.Generator) -> list[Case]:
    cases = []
    for batch, t, s, d in [((), 3, 5, 16), ((2,), 4, 4, 9), ((2, 3), 1, 6, 64)]:
        q, k = torch.randn(*batch, t, d, generator=gen), torch.randn(*batch, s, d, generator=gen)
        cases.append(Case(f"T={t}, S={s}, d_k={d}, batch {batch}",
                          lambda q=q, k=k: torch.einsum("...td,...sd->...ts", q, k) / math.sqrt(q.shape[-1]), (q, k)))
    return cases


def _attend_cases(gen: torch.Generator) -> list[Case]:
    cases = []
    for t, s, d in [(3, 5, 8), (6, 6, 4), (1, 7, 32)]:
        q, k, v = (torch.randn(2, n, d, generator=gen) for n in (t, s, s))
        mask = torch.rand(2, t, s, generator=gen) > 0.4
        mask[0, 0] = False  # one query with every key masked: zero weights, zero output
        for m, label in ((None, "no mask"), (mask, "a random mask")):
            cases.append(Case(f"T={t}, S={s}, d_k={d}, {label}",
                              lambda q=q, k=k, v=v, m=m: scaled_dot_product_attention(q, k, v, m), (q, k, v, m)))
    return cases


def _entropy_cases(gen: torch.Generator) -> list[Case]:
    w = torch.softmax(torch.randn(3, 5, 9, generator=gen) * 3, -1)
    w[0, 0] = torch.nn.functional.one_hot(torch.randint(9, (), generator=gen), 9).float()
    uniform = torch.full((2, 8), 1 / 8)
    return [Case("random rows of shape (3, 5, 9), one of them one-hot",
                 lambda: torch.distributions.Categorical(probs=w).entropy(), (w,)),
            Case("uniform rows over 8 keys", lambda: torch.full((2,), math.log(8)), (uniform,))]


EXERCISES = {spec.name: spec for spec in [
    Exercise("softmax_rows", _softmax_cases, atol=1e-6, forbidden_ops=SOFTMAX_OPS,
             forbidden_names=("softmax", "log_softmax", "Softmax"), forbidden_objects=(softmax, naive_softmax)),
    Exercise("score_matrix", _score_cases, forbidden_objects=(attention_scores,)),
    # torch.softmax is allowed here (softmax_rows is the exercise that asks for it by hand).
    Exercise("attend", _attend_cases, forbidden_ops=ATTENTION_OPS,
             forbidden_names=("scaled_dot_product_attention", "MultiheadAttention", "multi_head_attention_forward"),
             forbidden_objects=(scaled_dot_product_attention,),
             uses={"score_matrix": attention_scores, "softmax_rows": softmax}),
    Exercise("row_entropy", _entropy_cases, forbidden_names=("entropy", "Categorical"), forbidden_objects=(entropy,)),
]}
