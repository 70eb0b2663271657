"""Visible checks for exercise set 01 (attention scores)."""

from __future__ import annotations

import math
from typing import Callable

import torch

from ..attention_scores import attention_scores, entropy, naive_softmax, scaled_dot_product_attention, softmax
from . import compare, earlier_answers, exercise_check, passed

# Tiny inputs the learner can work out by hand.
LOGITS = torch.tensor([[1.0, 2.0, 3.0], [1000.0, 1000.0, 0.0]])
Q = torch.tensor([[1.0, 0.0, 1.0, 0.0], [0.0, 2.0, 0.0, 2.0]])
K = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 3.0]])
V = torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]])
MASK = torch.tensor([[True, True, False], [False, False, False]])
WEIGHTS = torch.tensor([[0.25, 0.25, 0.25, 0.25], [1.0, 0.0, 0.0, 0.0], [0.5, 0.5, 0.0, 0.0]])


@exercise_check
def check_softmax_rows(softmax_rows: Callable) -> None:
    got = softmax_rows(LOGITS.clone())
    compare("softmax_rows(LOGITS)", got, softmax(LOGITS), {
        "softmax over the wrong axis? Each row (last dimension) must sum to 1": softmax(LOGITS, dim=0),
        "no max subtraction? exp(1000) overflows to inf, and inf/inf is NaN": naive_softmax(LOGITS),
        "did you forget to divide by the row sum?": torch.exp(LOGITS - LOGITS.amax(-1, keepdim=True)),
    })
    passed("softmax_rows")


@exercise_check
def check_score_matrix(score_matrix: Callable) -> None:
    got = score_matrix(Q.clone(), K.clone())
    compare("score_matrix(Q, K)", got, attention_scores(Q, K), {
        "did you divide by sqrt(d_k)? d_k = 4 here, so every score should be half the dot product":
            attention_scores(Q, K, scale=1.0),
        "divided by d_k instead of sqrt(d_k)?": attention_scores(Q, K, scale=1 / 4),
    })
    passed("score_matrix")


@exercise_check
def check_attend(attend: Callable) -> None:
    # One mistake costs once: the earlier exercises\' answers are the references here.
    with earlier_answers(attend, score_matrix=attention_scores, softmax_rows=softmax):
        out, weights = attend(Q.clone(), K.clone(), V.clone())
        ref_out, ref_weights = scaled_dot_product_attention(Q, K, V)
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
        compare("weights of attend(Q, K, V, MASK)", weights, ref_weights, {
            "mask applied after the softmax? Masked scores must become -inf before it, so the rest renormalize":
                after_softmax,
            "mask inverted? True means 'may attend'": softmax(attention_scores(Q, K).masked_fill(MASK, -math.inf)).nan_to_num(0),
        })
        compare("output of attend(Q, K, V, MASK) (row 2 has every key masked: expect zeros)", out, ref_out)
        passed("attend")


@exercise_check
def check_row_entropy(row_entropy: Callable) -> None:
    got = row_entropy(WEIGHTS.clone())
    compare("row_entropy(WEIGHTS)", got, entropy(WEIGHTS), {
        "a zero weight must contribute 0 (0 * log 0 = 0), not NaN": -(WEIGHTS * WEIGHTS.log()).sum(-1),
        "forgot the minus sign? Entropy is never negative": -entropy(WEIGHTS),
        "used log2 instead of the natural log?": entropy(WEIGHTS) / math.log(2),
    })
    passed("row_entropy")
