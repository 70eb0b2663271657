"""Visible checks for exercise set 08 (many heads)."""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from ..attention import Attention, _merge_heads, _split_heads
from ..attention_scores import scaled_dot_product_attention
from ..multi_head import merge_heads, qk_matrix, split_heads, without_heads
from . import call, compare, earlier_answers, exercise_check, passed
from .bug_hints import name_shape_bug
from .hand_in import ATTENTION_OPS, Case, Exercise

# Tiny inputs the learner can follow by hand.
X = torch.arange(8, dtype=torch.float32).reshape(1, 2, 4)  # (B=1, T=2, D=4): rows 0 1 2 3 and 4 5 6 7
Q = torch.tensor([[[1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 1.0, 0.0]]])  # (B=1, T=2, D=4)
K = torch.tensor([[[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0], [1.0, 1.0, 0.0, 0.0]]])  # (B=1, S=3, D=4)
V = torch.tensor([[[1.0, 0.0, 2.0, 0.0], [0.0, 1.0, 0.0, 2.0], [3.0, 3.0, 3.0, 3.0]]])  # (B=1, S=3, D=4)
MASK = torch.tensor([[True, False, True], [True, True, False]])  # (T=2, S=3), True = may attend
W_Q = torch.arange(16, dtype=torch.float64).reshape(4, 4) / 4  # (d_k=4, D=4), nn.Linear layout (out, in)
W_K = torch.eye(4, dtype=torch.float64).flip(0) + 0.5 * torch.ones(4, 4, dtype=torch.float64)
# B, T, H and d_head all differ here (2, 5, 3, 2), so each wrong order of the axes has a shape of its own
SPLIT_PROBE = torch.arange(2 * 5 * 6, dtype=torch.float32).reshape(2, 5, 6)


def _strided(x: Tensor, n_heads: int) -> Tensor:
    """The usual wrong split: head h takes columns h, h + H, h + 2H, ... (B, T, D) -> (B, H, T, d_head)."""
    B, T, D = x.shape
    return x.reshape(B, T, D // n_heads, n_heads).permute(0, 3, 1, 2)


@exercise_check
def check_split_into_heads(split_into_heads: Callable) -> None:
    label = "split_into_heads(x, 3) with x of shape (2, 5, 6)"
    name_shape_bug(label, call(label, split_into_heads, SPLIT_PROBE.clone(), 3), (2, 3, 5, 2), {
        (2, 5, 3, 2): "the T and H axes were not swapped: after splitting the last axis into (H, d_head), "
                      "transpose(1, 2) gives (B, H, T, d_head)",
        (2, 15, 2): "the heads were joined along T (cat): stack them on a new axis 1 instead, (B, H, T, d_head)",
        (5, 2, 3, 2): "transpose(0, 1) swaps B and T: the axes to swap are T and H, transpose(1, 2)",
    })
    got = call("split_into_heads(X, 2)", split_into_heads, X.clone(), 2)
    B, T, D = X.shape
    compare("split_into_heads(X, 2)  (X: (1, 2, 4), rows [0 1 2 3] and [4 5 6 7]; want (1, 2, 2, 2))",
            got, split_heads(X, 2), {
                "reshaped straight to (B, H, T, d_head): split the last axis into (H, d_head) first, "
                "then swap the T and H axes": X.reshape(B, 2, T, D // 2),
                "head h must take the consecutive columns h*d_head .. (h+1)*d_head - 1, not every H-th":
                    _strided(X, 2),
            })
    wide = torch.arange(2 * 3 * 6, dtype=torch.float32).reshape(2, 3, 6)
    got = call("split_into_heads(x, 3) with x of shape (2, 3, 6)", split_into_heads, wide.clone(), 3)
    compare("split_into_heads(x, 3) for x of shape (2, 3, 6)", got, split_heads(wide, 3), {
        "reshaped straight to (B, H, T, d_head) instead of splitting the last axis":
            wide.reshape(2, 3, 3, 2),
        "head h takes every H-th column; it must take consecutive columns": _strided(wide, 3),
    })
    passed("split_into_heads")


def reference_multi_head_attend(q: Tensor, k: Tensor, v: Tensor, n_heads: int,
                                mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """The exercise's answer: split, attend in every head (a (B, T, S) mask reaches each), merge."""
    head_mask = None if mask is None else mask.unsqueeze(-3)  # (B, 1, T, S) or (1, T, S): every head
    out, weights = scaled_dot_product_attention(split_heads(q, n_heads), split_heads(k, n_heads),
                                                split_heads(v, n_heads), head_mask)
    return merge_heads(out), weights


def _wrong_attend(q: Tensor, k: Tensor, v: Tensor, n_heads: int, mask: Tensor | None,
                  full_scale: bool = False, flat_merge: bool = False, unscaled: bool = False) -> tuple[Tensor, Tensor]:
    """Known mistakes: the scale of the full width, no scale, or merging the heads without swapping axes back."""
    B, T, D = q.shape
    scale = (D ** -0.5) / ((D // n_heads) ** -0.5) if full_scale else 1.0  # the reference divides by sqrt(d_head)
    scale = (D // n_heads) ** 0.5 if unscaled else scale
    out, weights = reference_multi_head_attend(q * scale, k, v, n_heads, mask)
    if flat_merge:  # the heads' outputs (B, H, T, d_head) flattened without swapping H and T back
        out = split_heads(out, n_heads).reshape(B, T, D)
    return out, weights


@exercise_check
def check_multi_head_attend(multi_head_attend: Callable) -> None:
    with earlier_answers(multi_head_attend, split_into_heads=split_heads):  # one mistake costs once
        got = call("multi_head_attend(Q, K, V, 2)", multi_head_attend, Q.clone(), K.clone(), V.clone(), 2)
        if not isinstance(got, tuple) or len(got) != 2:
            raise AssertionError("multi_head_attend must return two tensors: (output, weights)")
        out, weights = got
        want_out, want_weights = reference_multi_head_attend(Q, K, V, 2)
        compare("weights of multi_head_attend(Q, K, V, 2)  (want shape (1, 2, 2, 3): B, H, T, S)", weights,
                want_weights, {
                    "each head's scores are divided by sqrt(d_head) = sqrt(D / H), not sqrt(D)":
                        _wrong_attend(Q, K, V, 2, None, full_scale=True)[1],
                    "softmax over the wrong axis: each row (one query, all keys) must sum to 1":
                        torch.softmax(split_heads(Q, 2) @ split_heads(K, 2).transpose(-2, -1) / 2 ** 0.5, -2),
                    "the scores are not scaled: divide each head's scores by sqrt(d_head) = sqrt(D / H)":
                        _wrong_attend(Q, K, V, 2, None, unscaled=True)[1],
                })
        name_shape_bug("output of multi_head_attend(Q, K, V, 2)", out, (1, 2, 4), {
            (1, 2, 2, 2): "the heads were not merged: swap H and T back, then flatten (B, H, T, d) -> (B, T, H * d)"})
        compare("output of multi_head_attend(Q, K, V, 2)  (want shape (1, 2, 4): B, T, D)", out, want_out, {
            "merging: swap the H and T axes back before flattening (B, H, T, d) -> (B, T, H * d)":
                _wrong_attend(Q, K, V, 2, None, flat_merge=True)[0],
            "each head's scores are divided by sqrt(d_head) = sqrt(D / H), not sqrt(D)":
                _wrong_attend(Q, K, V, 2, None, full_scale=True)[0],
        })
        out, weights = call("multi_head_attend(Q, K, V, 2, MASK)", multi_head_attend, Q.clone(), K.clone(),
                             V.clone(), 2, MASK.clone())
        want_out, want_weights = reference_multi_head_attend(Q, K, V, 2, MASK)
        scores = split_heads(Q, 2) @ split_heads(K, 2).transpose(-2, -1) / 2 ** 0.5  # (1, H, T, S), d_head = 2
        compare("weights with MASK (False = may not attend; the same mask for every head)", weights,
                want_weights, {"the mask must hide keys: weight exactly 0 where MASK is False":
                               reference_multi_head_attend(Q, K, V, 2)[1],
                               "the mask is inverted: True means may attend, so hide the keys where MASK is False "
                               "(~mask)": reference_multi_head_attend(Q, K, V, 2, ~MASK)[1],
                               "the masked scores were set to 0, which still gets weight e^0: set them to -inf":
                                   torch.softmax(scores.masked_fill(~MASK, 0.0), -1)})
        compare("output with MASK", out, want_out)
    passed("multi_head_attend")


def reference_qk_form(w_q: Tensor, w_k: Tensor, head: int, n_heads: int) -> Tensor:
    layer = _layer_with(w_q.shape[1], n_heads, query=w_q, key=w_k)
    return qk_matrix(layer, head)


def _layer_with(d_model: int, n_heads: int, **weights: Tensor) -> Attention:
    """An Attention layer with n_heads heads (float64, no biases) holding the given projection weights."""
    layer = Attention(d_model, n_heads=n_heads).double()
    with torch.no_grad():
        for name, w in weights.items():
            getattr(layer, name).weight.copy_(w)
    return layer


@exercise_check
def check_qk_form(qk_form: Callable) -> None:
    got = call("qk_form(W_Q, W_K, 1, 2)", qk_form, W_Q.clone(), W_K.clone(), 1, 2)
    want = reference_qk_form(W_Q, W_K, 1, 2)
    rows = slice(2, 4)
    compare("qk_form(W_Q, W_K, head=1, n_heads=2)  (a (4, 4) matrix)", got, want, {
        "the order: the score is x W_Q^h^T W_K^h y^T, so the form is W_Q^h^T @ W_K^h, not W_K^h^T @ W_Q^h":
            W_K[rows].T @ W_Q[rows],
        "head h owns ROWS h*d_head .. (h+1)*d_head - 1 of W_Q and W_K (nn.Linear stores (out, in))":
            W_Q[:, rows] @ W_K[:, rows].T,
        "take only head h's rows: W_Q^T @ W_K of the full matrices mixes every head": W_Q.T @ W_K,
        "head 1 is the second slice: rows 2 and 3 here": W_Q[0:2].T @ W_K[0:2],
        "head h starts at row h * d_head, not at row h: rows 2 and 3 here": W_Q[1:3].T @ W_K[1:3],
        "W_QK has no 1/sqrt(d_head): the scale divides the score, it is not part of the form": want / 2 ** 0.5,
    })
    passed("qk_form")


def reference_silence_head(w_out: Tensor, head: int, n_heads: int) -> Tensor:
    layer = _layer_with(w_out.shape[0], n_heads, out=w_out)
    return without_heads(layer, [head]).out.weight.detach()


@exercise_check
def check_silence_head(silence_head: Callable) -> None:
    w_out = torch.arange(1.0, 17.0, dtype=torch.float64).reshape(4, 4)  # (D=4, d_v=4)
    given = w_out.clone()
    got = call("silence_head(w_out, 0, 2)", silence_head, given, 0, 2)
    rows_zeroed = w_out.clone()
    rows_zeroed[0:2] = 0
    strided = w_out.clone()
    strided[:, 0::2] = 0
    one_column = w_out.clone()
    one_column[:, 0] = 0
    compare("silence_head(w_out, head=0, n_heads=2)  (w_out = 1..16 in a (4, 4) matrix)", got,
            reference_silence_head(w_out, 0, 2), {
                "zero head h's COLUMNS h*d_head .. (h+1)*d_head - 1: out maps the concatenated heads "
                "(columns) to D (rows)": rows_zeroed,
                "head h owns consecutive columns, not every H-th": strided,
                "head h owns d_head columns, h*d_head .. (h+1)*d_head - 1, not the single column h": one_column,
            })
    if not torch.equal(given, w_out):
        raise AssertionError("silence_head changed the matrix it was given: return a changed copy "
                             "(w_out.clone()), so the trained layer stays as it was. Likely bug: zeroed in place")
    got = call("silence_head(w_out, 1, 4)", silence_head, w_out.clone(), 1, 4)
    compare("silence_head(w_out, head=1, n_heads=4)", got, reference_silence_head(w_out, 1, 4))
    from_h = w_out.clone()
    from_h[:, 1:3] = 0
    got = call("silence_head(w_out, 1, 2)", silence_head, w_out.clone(), 1, 2)
    compare("silence_head(w_out, head=1, n_heads=2)", got, reference_silence_head(w_out, 1, 2), {
        "head h starts at column h * d_head, not at column h: columns 2 and 3 here": from_h})
    passed("silence_head")


# ---------------------------------------------------------------- hidden tests (see hand_in.py)
# Widths and head counts: one head, one column per head (d_head = 1), and in between.
SPLITS = [(1, 1, 4, 4), (3, 5, 12, 3), (2, 7, 16, 8), (4, 2, 6, 1)]  # (B, T, D, H)
WIDTHS = [(4, 1), (8, 2), (12, 3), (16, 8)]  # (D, H)


def _split_cases(gen: torch.Generator) -> list[Case]:
    cases = []
    for b, t, d, h in SPLITS:
        x = torch.randn(b, t, d, generator=gen)
        # head i is the consecutive slice of columns, position by position: stacked on a new axis 1
        heads = lambda x=x, h=h: torch.stack(x.chunk(h, dim=-1), dim=1)
        cases.append(Case(f"x of shape {(b, t, d)}, H={h}", heads, (x, h)))
    return cases


def _torch_heads(q: Tensor, k: Tensor, v: Tensor, n_heads: int, mask: Tensor | None) -> tuple[Tensor, Tensor]:
    """torch's attention on heads split and merged here independently; the weights are the course's."""
    B, T, D = q.shape
    split = lambda x: x.reshape(B, -1, n_heads, D // n_heads).transpose(1, 2)  # (B, H, T|S, d_head)
    head_mask = None if mask is None else mask.unsqueeze(-3)  # (B, 1, T, S) or (1, T, S): every head
    out = F.scaled_dot_product_attention(split(q), split(k), split(v), attn_mask=head_mask)
    return out.transpose(1, 2).reshape(B, T, D), reference_multi_head_attend(q, k, v, n_heads, mask)[1]


def _multi_head_cases(gen: torch.Generator) -> list[Case]:
    cases = []
    for t, s, d, h in [(3, 5, 8, 2), (6, 6, 12, 4), (1, 7, 16, 8), (4, 3, 6, 1)]:
        q, k, v = (torch.randn(2, n, d, generator=gen) for n in (t, s, s))
        mask = torch.rand(2, t, s, generator=gen) > 0.4
        mask[..., 0] = True  # every query keeps at least one key, where torch's own answer is defined
        for m in (None, mask, mask[0]):
            label = f"T={t}, S={s}, D={d}, H={h}, mask {'none' if m is None else tuple(m.shape)}"
            cases.append(Case(label, lambda q=q, k=k, v=v, h=h, m=m: _torch_heads(q, k, v, h, m), (q, k, v, h, m)))
            if m is not None:  # a hidden key gets no weight at all, not a tiny one: compared exactly
                hidden = (~m).expand(2, t, s)[:, None].expand(2, h, t, s)
                cases.append(Case(f"{label}: masked weights must be exactly 0", lambda hidden=hidden: hidden,
                                  run=lambda fn, q=q, k=k, v=v, h=h, m=m: fn(q, k, v, h, m)[1] == 0))
    return cases


def _qk_form_cases(gen: torch.Generator) -> list[Case]:
    cases = []
    for d, h in WIDTHS:
        w_q, w_k = (torch.randn(d, d, generator=gen, dtype=torch.float64) for _ in range(2))
        for i in range(h):
            cases.append(Case(f"head {i} of {h}, D={d}", lambda w_q=w_q, w_k=w_k, i=i, h=h:
                              reference_qk_form(w_q, w_k, i, h), (w_q, w_k, i, h)))
    return cases


def _silence_cases(gen: torch.Generator) -> list[Case]:
    cases = []
    for d, h in WIDTHS:
        w_out = torch.randn(d, d, generator=gen, dtype=torch.float64)
        for i in range(h):
            cases.append(Case(f"head {i} of {h}, D={d}", lambda w_out=w_out, i=i, h=h:
                              reference_silence_head(w_out, i, h), (w_out, i, h)))
    return cases


EXERCISES = {spec.name: spec for spec in [
    # A split only moves numbers: compared exactly.
    Exercise("split_into_heads", _split_cases, atol=0.0, rtol=0.0,
             forbidden_names=("split_heads",), forbidden_objects=(split_heads, _split_heads)),
    Exercise("multi_head_attend", _multi_head_cases, forbidden_ops=ATTENTION_OPS,
             forbidden_names=("scaled_dot_product_attention", "MultiheadAttention", "merge_heads"),
             forbidden_objects=(scaled_dot_product_attention, reference_multi_head_attend, merge_heads,
                                _merge_heads, Attention),
             uses={"split_into_heads": split_heads}),
    Exercise("qk_form", _qk_form_cases, atol=1e-9, rtol=1e-5,
             forbidden_names=("qk_matrix", "reference_qk_form"), forbidden_objects=(qk_matrix, reference_qk_form)),
    # Zeroing copies numbers or writes exact zeros: compared exactly.
    Exercise("silence_head", _silence_cases, atol=0.0, rtol=0.0,
             forbidden_names=("without_heads", "reference_silence_head"),
             forbidden_objects=(without_heads, reference_silence_head)),
]}
