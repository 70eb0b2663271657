"""Visible checks for exercise set 06 (the copy mechanism)."""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import Tensor

from ..copying import (gap_needed, hand_set_induction_model, induction_batch, ov_circuit, ov_copy_scores,
                    position_copy_head)
from ..training import IGNORE
from . import call, compare, exercise_check, passed
from .bug_hints import call_naming, integer_ids
from .hand_in import Case, Exercise


def reference_query_weights(max_len: int, offset: int, gap: float) -> Tensor:
    """The position block of position_copy_head's W_Q, as a (P, P) row-vector map q = p W (float64)."""
    head = position_copy_head(max_len + 1, offset, tokens=slice(0, 1), positions=slice(1, max_len + 1),
                              gap=gap, dtype=torch.float64)
    # nn.Linear stores W^T (out, in) and the head carries sqrt(d_k) = sqrt(D) for the layer's scaling
    return head.query.weight[1:, 1:].T / math.sqrt(max_len + 1)


def _as_float(label: str, got: object) -> Tensor:
    if isinstance(got, Tensor) and got.numel() == 1:
        return got.detach().reshape(()).to(torch.float64)
    if isinstance(got, (int, float)) and not isinstance(got, bool):
        return torch.tensor(float(got), dtype=torch.float64)
    raise AssertionError(f"{label} must return a number, got {type(got).__name__}")


@exercise_check
def check_position_query_weights(position_query_weights: Callable) -> None:
    want = reference_query_weights(4, 1, 5.0)
    got = call_naming("position_query_weights(4, 1, 5.0)", position_query_weights, 4, 1, 5.0, bugs={
        "out of bounds": "a position p whose p + offset is past the last position gets a zero row: skip it"})
    compare("position_query_weights(4, 1, 5.0)  (row p: the query of position p; column: the key position)",
            got, want, {
                "the transpose: row p must put the gap in column p + offset (p asks for p + offset)": want.T,
                "the last row wraps around to position 0: a query with no position p + offset gets a zero row":
                    want + 5.0 * torch.eye(4, dtype=torch.float64).roll(1, 1) * (torch.arange(4) == 3)[:, None],
                "the gap is missing: the entries are 1, not gap": want / 5.0,
            })
    want = reference_query_weights(5, -2, 3.0)
    got = call("position_query_weights(5, -2, 3.0)", position_query_weights, 5, -2, 3.0,
                hint="a negative offset reads back: row p has its gap in column p - 2")
    compare("position_query_weights(5, -2, 3.0)  (copy the token two back)", got, want, {
        "the transpose: row p must put the gap in column p + offset": want.T,
    })
    passed("position_query_weights")


@exercise_check
def check_min_gap(min_gap: Callable) -> None:
    for n_keys, coherence in ((8, 0.0), (8, 0.5), (3, 0.2)):
        label = f"min_gap({n_keys}, {coherence})"
        got = _as_float(label, call(label, min_gap, n_keys, coherence))
        want = torch.tensor(gap_needed(n_keys, coherence), dtype=torch.float64)
        compare(label, got, want, {
            "ln(S), not ln(S - 1): the source itself is one of the S keys": torch.tensor(
                math.log(n_keys) + math.log((1 + coherence) / (1 - coherence)), dtype=torch.float64),
            "the overlap term is ln((1 + c) / (1 - c)), not its inverse": torch.tensor(
                math.log(n_keys - 1) + math.log((1 - coherence) / (1 + coherence)), dtype=torch.float64),
            "the gap must also beat the overlap of the codes: add ln((1 + c) / (1 - c))": torch.tensor(
                math.log(n_keys - 1), dtype=torch.float64),
            "the logarithm is missing: (S - 1)(1 + c) / (1 - c) bounds e^g; the gap g is its ln": torch.tensor(
                (n_keys - 1) * (1 + coherence) / (1 - coherence), dtype=torch.float64),
            "the overlap term is a log too: add ln((1 + c) / (1 - c)), not (1 + c) / (1 - c)": torch.tensor(
                math.log(n_keys - 1) + (1 + coherence) / (1 - coherence), dtype=torch.float64),
        }, atol=1e-6)
    passed("min_gap")


# A tiny OV circuit: 4 tokens, width 2. OV = W_E W_V W_O W_U, rows = source token.
W_E = torch.tensor([[-2.0, -2.0], [2.0, 0.0], [-2.0, 1.0], [-2.0, -1.0]])
W_V = torch.tensor([[1.0, 1.0], [2.0, 1.0]])
W_O = torch.eye(2)
W_U = torch.tensor([[0.0, 1.0, 2.0, 1.0], [1.0, 1.0, -1.0, 0.0]])


@exercise_check
def check_ov_lookup_accuracy(ov_lookup_accuracy: Callable) -> None:
    label = "ov_lookup_accuracy(W_E, W_V, W_O, W_U)"
    got = _as_float(label, call_naming(label, ov_lookup_accuracy, W_E, W_V, W_O, W_U, bugs={
        "could not infer output dtype": "the mean of a bool tensor: convert it first, e.g. .double().mean()"}))
    ov = W_E @ W_V @ W_O @ W_U  # rows [-4 -10 -8 -6], [2 4 2 2], [-1 -1 1 0], [-3 -7 -5 -4]
    compare(f"{label}  (OV rows: {ov.int().tolist()})", got, torch.tensor(ov_copy_scores(ov)[0], dtype=torch.float64), {
        "the largest entry of each COLUMN: a row is what one source token adds to every logit": torch.tensor(
            0.25, dtype=torch.float64),
        "W_V is used transposed: OV = W_E W_V W_O W_U with rows as vectors": torch.tensor(0.5, dtype=torch.float64),
        "the number of tokens that copy (3), not their share: divide by V": torch.tensor(3.0, dtype=torch.float64),
    })
    gen = torch.Generator().manual_seed(3)
    w_e, w_v, w_o, w_u = (torch.randn(*s, generator=gen) for s in ((6, 3), (3, 2), (2, 3), (3, 6)))
    label = "ov_lookup_accuracy on random (6, 3), (3, 2), (2, 3), (3, 6) matrices"
    got = _as_float(label, call_naming(label, ov_lookup_accuracy, w_e, w_v, w_o, w_u, bugs={
        # W_E W_V is (6, 2): straight on to W_U (3, 6) means W_O was left out
        "(6x2 and 3x6)": "W_O is left out: OV = W_E W_V W_O W_U, and W_O (d_v, D) takes W_V's d_v back to D",
        "shapes cannot be multiplied": "W_V is (D, d_v) and W_O is (d_v, D): d_v need not equal D"}))
    want = ov_copy_scores(w_e @ w_v @ w_o @ w_u)[0]
    compare(label, got, torch.tensor(want, dtype=torch.float64))
    passed("ov_lookup_accuracy")


IDS = torch.tensor([[0, 5, 6, 5, 7, 5, 6], [3, 3, 3, 4, 3, 4, 9]])


def reference_induction_targets(ids: Tensor) -> Tensor:
    """Plain loops: the token that followed the most recent earlier occurrence of ids[b, i]."""
    targets = torch.full_like(ids, IGNORE)
    for b in range(ids.shape[0]):
        for i in range(ids.shape[1]):
            for j in range(i - 1, -1, -1):
                if ids[b, j] == ids[b, i]:
                    targets[b, i] = ids[b, j + 1]
                    break
    return targets


@exercise_check
def check_induction_targets(induction_targets: Callable) -> None:
    label = f"induction_targets({IDS.tolist()})"
    got = call_naming(label, induction_targets, IDS.clone(), bugs={
        # j + 1 <= i for every earlier j < i: only a match at j = i = T - 1 reads past the end
        "out of bounds": "the search matched j = i (the token itself): search the earlier positions j < i only"})
    want = reference_induction_targets(IDS)  # [[-100 -100 -100 6 -100 7 5], [-100 3 3 -100 4 3 -100]]
    first = torch.tensor([[IGNORE, IGNORE, IGNORE, 6, IGNORE, 6, 5], [IGNORE, 3, 3, IGNORE, 3, 3, IGNORE]])
    itself = torch.where(want == IGNORE, want, IDS)
    next_token = torch.cat([IDS[:, 1:], torch.full_like(IDS[:, :1], IGNORE)], 1)  # ids[i + 1] everywhere
    integer_ids(label, got)
    compare(label, got.double() if isinstance(got, Tensor) else got, want.double(), {
        "the FIRST earlier occurrence: the induction head copies what followed the most recent one":
            first.double(),
        "the token found, not the token after it: the answer is ids[j + 1]": itself.double(),
        "every position got its own next token ids[i + 1]: find the most recent EARLIER j < i holding the "
        "same token, and copy ids[j + 1]": next_token.double(),
        "a position whose token has not occurred before gets IGNORE (-100), not 0":
            torch.where(want == IGNORE, 0, want).double(),
    })
    passed("induction_targets")


# ---------------------------------------------------------------- hidden tests (see hand_in.py)
# The course's eigenvalue score (ov_copy_scores) runs these; the lookup accuracy needs none of them.
EIGENVALUE_OPS = frozenset({"aten::linalg_eigvals", "aten::_linalg_eigvals"})


def _query_weight_cases(gen: torch.Generator) -> list[Case]:
    cases = []
    for max_len, offset in [(2, 1), (6, -1), (9, 4), (12, -7), (16, 1)]:
        gap = float(torch.rand((), generator=gen, dtype=torch.float64)) * 10 + 0.5
        cases.append(Case(f"max_len={max_len}, offset={offset}, gap={gap:.4f}",
                          lambda p=max_len, o=offset, g=gap: reference_query_weights(p, o, g), (max_len, offset, gap)))
    return cases


def _min_gap_cases(gen: torch.Generator) -> list[Case]:
    # the edges stay fixed (S = 2 has ln(S - 1) = 0; c = 0 and c near 1), a few more are drawn
    grid = [(s, c) for s in (2, 3, 8, 50, 1000) for c in (0.0, 0.1, 0.7, 0.99)]
    drawn = [(int(torch.randint(2, 500, (), generator=gen)), float(torch.rand((), generator=gen)) * 0.98)
             for _ in range(4)]
    return [Case(f"n_keys={s}, coherence={c:.4g}", lambda s=s, c=c: gap_needed(s, c), (s, c)) for s, c in grid + drawn]


def _ov_cases(gen: torch.Generator) -> list[Case]:
    cases = []
    for v, d, d_v in [(5, 3, 2), (16, 8, 8), (40, 6, 3)]:
        w = tuple(torch.randn(*shape, generator=gen, dtype=torch.float64)
                  for shape in ((v, d), (d, d_v), (d_v, d), (d, v)))
        cases.append(Case(f"random W_E {(v, d)}, W_V {(d, d_v)}, W_O {(d_v, d)}, W_U {(d, v)}",
                          lambda w=w: ov_copy_scores(w[0] @ w[1] @ w[2] @ w[3])[0], w))
    codes = torch.linalg.qr(torch.randn(12, 12, generator=gen, dtype=torch.float64)).Q  # orthonormal rows
    eye = torch.eye(12, dtype=torch.float64)
    cases.append(Case("orthonormal codes (12, 12) read out by their transpose, W_V = W_O = I: the identity "
                      "copies every token", lambda: 1.0, (codes, eye, eye, codes.T)))
    # Random matrices rarely copy, so rows and columns often score the same (0 or 1 / V) by chance. Here
    # rows a and c both raise token b's logit most: the rows miss twice, the columns (b's) only once.
    ov = torch.randn(12, 12, generator=gen, dtype=torch.float64) + 8 * eye
    a, b, c = torch.randperm(12, generator=gen)[:3].tolist()
    ov[a, b] = ov[c, b] = 16.0
    cases.append(Case(f"W_E = W_V = W_O = I, W_U = 8 I + noise, except that tokens {a} and {c} both raise "
                      f"token {b}'s logit most", lambda: ov_copy_scores(ov)[0], (eye, eye, eye, ov)))
    return cases


def _induction_cases(gen: torch.Generator) -> list[Case]:
    cases = []
    for b, t, v in [(1, 1, 2), (3, 6, 2), (20, 12, 4), (8, 30, 10)]:
        ids = torch.randint(v, (b, t), generator=gen)
        cases.append(Case(f"ids of shape ({b}, {t}) over {v} tokens", lambda ids=ids: reference_induction_targets(ids),
                          (ids,)))
    # the lesson's data: wherever its targets are known, the rule must agree with them
    ids, targets = induction_batch(50, 16, 16)(gen)
    known = targets != IGNORE
    cases.append(Case("the lesson's repeated blocks induction_batch(50, 16, 16), where their targets are known",
                      lambda: targets[known], (ids,), run=lambda fn: fn(ids)[known]))
    return cases


EXERCISES = {spec.name: spec for spec in [
    # rtol=0: the old tests wanted the gap itself in float64, within 1e-9
    Exercise("position_query_weights", _query_weight_cases, atol=1e-9, rtol=0.0,
             forbidden_names=("position_copy_head", "reference_query_weights"),
             forbidden_objects=(position_copy_head, reference_query_weights)),
    Exercise("min_gap", _min_gap_cases, atol=1e-9, rtol=0.0, forbidden_names=("gap_needed",),
             forbidden_objects=(gap_needed,)),
    # accuracies are multiples of 1 / V: any difference is a wrong argmax
    Exercise("ov_lookup_accuracy", _ov_cases, atol=1e-12, rtol=0.0, forbidden_ops=EIGENVALUE_OPS,
             forbidden_names=("ov_copy_scores", "ov_circuit"), forbidden_objects=(ov_copy_scores, ov_circuit)),
    Exercise("induction_targets", _induction_cases, atol=0.0, rtol=0.0,
             forbidden_names=("reference_induction_targets", "hand_set_induction_model"),
             forbidden_objects=(reference_induction_targets, hand_set_induction_model)),
]}
