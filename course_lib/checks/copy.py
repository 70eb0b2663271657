"""Visible checks for exercise set 06 (the copy mechanism)."""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import Tensor

from ..copy import gap_needed, ov_copy_scores, position_copy_head
from ..masks import IGNORE
from . import call, compare, exercise_check, passed


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
    got = call("position_query_weights(4, 1, 5.0)", position_query_weights, 4, 1, 5.0)
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
    got = _as_float(label, call(label, ov_lookup_accuracy, W_E, W_V, W_O, W_U))
    ov = W_E @ W_V @ W_O @ W_U  # rows [-4 -10 -8 -6], [2 4 2 2], [-1 -1 1 0], [-3 -7 -5 -4]
    compare(f"{label}  (OV rows: {ov.int().tolist()})", got, torch.tensor(ov_copy_scores(ov)[0], dtype=torch.float64), {
        "the largest entry of each COLUMN: a row is what one source token adds to every logit": torch.tensor(
            0.25, dtype=torch.float64),
        "W_V is used transposed: OV = W_E W_V W_O W_U with rows as vectors": torch.tensor(0.5, dtype=torch.float64),
    })
    gen = torch.Generator().manual_seed(3)
    w_e, w_v, w_o, w_u = (torch.randn(*s, generator=gen) for s in ((6, 3), (3, 2), (2, 3), (3, 6)))
    label = "ov_lookup_accuracy on random (6, 3), (3, 2), (2, 3), (3, 6) matrices"
    got = _as_float(label, call(label, ov_lookup_accuracy, w_e, w_v, w_o, w_u,
                                 hint="W_V is (D, d_v) and W_O is (d_v, D): d_v need not equal D"))
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
    got = call(label, induction_targets, IDS.clone())
    want = reference_induction_targets(IDS)  # [[-100 -100 -100 6 -100 7 5], [-100 3 3 -100 4 3 -100]]
    first = torch.tensor([[IGNORE, IGNORE, IGNORE, 6, IGNORE, 6, 5], [IGNORE, 3, 3, IGNORE, 3, 3, IGNORE]])
    itself = torch.where(want == IGNORE, want, IDS)
    if isinstance(got, Tensor) and got.is_floating_point():
        raise AssertionError(f"{label} must return integer token ids (dtype long), got {got.dtype}")
    compare(label, got.double() if isinstance(got, Tensor) else got, want.double(), {
        "the FIRST earlier occurrence: the induction head copies what followed the most recent one":
            first.double(),
        "the token found, not the token after it: the answer is ids[j + 1]": itself.double(),
    })
    passed("induction_targets")
