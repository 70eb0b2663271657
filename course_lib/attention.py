"""Lesson 01: queries, keys, values and the score matrix.

Dimension names used across the course:
    B  batch            T  query positions      S  key/value positions
    D  model width      d_k  query/key width    d_v  value width      H  heads
A leading "..." in a shape means any number of batch dimensions (including none).

Masks follow torch's boolean convention: True means "this query may attend to this key".
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ._checks import broadcast_shape, require_dim, require_float, require_positive, require_rank, require_tensor


def softmax(logits: Tensor, dim: int = -1) -> Tensor:
    """Numerically stable softmax along `dim`; any shape in, same shape out.

    Subtracting the maximum first changes nothing mathematically (softmax ignores a
    constant added to a row) but keeps exp() from overflowing at large logits.
    A slice that is entirely -inf (every key masked) returns zeros instead of 0/0 = NaN.
    """
    require_tensor("logits", logits)
    require_float("logits", logits)
    dim = require_dim(logits, dim, "logits")
    # A row that is entirely -inf (every key masked) has maximum -inf, and -inf - (-inf) is NaN;
    # clamping the maximum to the most negative float keeps exp(-inf - max) = 0 there.
    row_max = logits.amax(dim=dim, keepdim=True).clamp_min(torch.finfo(logits.dtype).min)
    exps = torch.exp(logits - row_max)
    total = exps.sum(dim=dim, keepdim=True)
    # total >= 1 for a row with a finite entry (its maximum contributes exp(0) = 1), so the
    # clamp only touches all-masked rows, whose exps are all 0: 0 / tiny = 0, not 0 / 0 = NaN.
    return exps / total.clamp_min(torch.finfo(exps.dtype).tiny)


def naive_softmax(logits: Tensor, dim: int = -1) -> Tensor:
    """exp(x) / sum(exp(x)) with no max subtraction: overflows to inf/inf = NaN near x = 89 (float32)."""
    require_tensor("logits", logits)
    require_float("logits", logits)
    dim = require_dim(logits, dim, "logits")
    exps = torch.exp(logits)
    return exps / exps.sum(dim=dim, keepdim=True)


def check_qkv(q: Tensor, k: Tensor, v: Tensor | None = None) -> None:
    """Raise unless q (..., T, d_k), k (..., S, d_k) and v (..., S, d_v) fit together: names the shapes at fault."""
    for name, x in (("q", q), ("k", k)) + ((("v", v),) if v is not None else ()):
        require_tensor(name, x)
        require_float(name, x)
        require_rank(name, x, 2)
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must share their last dimension d_k: q has shape {tuple(q.shape)} "
            f"(d_k={q.shape[-1]}), k has shape {tuple(k.shape)} (d_k={k.shape[-1]})")
    if v is not None and v.shape[-2] != k.shape[-2]:
        raise ValueError(
            f"k and v must have the same number of positions S: k has shape {tuple(k.shape)} "
            f"(S={k.shape[-2]}), v has shape {tuple(v.shape)} (S={v.shape[-2]})")
    if len({x.dtype for x in (q, k, v) if x is not None}) > 1:
        raise TypeError(f"q, k, v must share one dtype, got {q.dtype}, {k.dtype}"
                        + (f", {v.dtype}" if v is not None else ""))
    if q.shape[:-2] != k.shape[:-2]:  # equal batch shapes (the usual case) need no broadcasting check
        broadcast_shape("q's batch dimensions", tuple(q.shape[:-2]), "k's batch dimensions", tuple(k.shape[:-2]))
    if v is not None and v.shape[:-2] != k.shape[:-2]:
        broadcast_shape("k's batch dimensions", tuple(k.shape[:-2]), "v's batch dimensions", tuple(v.shape[:-2]))


def default_scale(d_k: int) -> float:
    """1/sqrt(d_k): keeps q.k at unit variance when q and k have unit-variance entries."""
    return 1.0 / math.sqrt(d_k)


def attention_scores(q: Tensor, k: Tensor, scale: float | None = None) -> Tensor:
    """Score matrix q k^T * scale.

    q: (..., T, d_k), k: (..., S, d_k) -> scores: (..., T, S); entry [t, s] = scale * q_t . k_s.
    scale=None uses 1/sqrt(d_k); scale=1.0 gives the raw dot products.
    """
    check_qkv(q, k)
    return _scores(q, k, scale)


def _scores(q: Tensor, k: Tensor, scale: float | None) -> Tensor:
    scale = default_scale(q.shape[-1]) if scale is None else float(scale)
    require_positive("scale", scale)
    # Scaling q (T x d_k numbers) is cheaper than scaling the scores (T x S numbers).
    return (q * scale) @ k.transpose(-2, -1)  # (..., T, S)


def check_mask(mask: Tensor, scores_shape: tuple[int, ...]) -> None:
    """Raise unless `mask` is boolean and broadcasts to the score shape (..., T, S)."""
    require_tensor("mask", mask)
    if mask.dtype != torch.bool:
        raise TypeError(
            f"mask must be a boolean tensor (True = may attend), got dtype {mask.dtype}; "
            "to use a float mask, add it to the scores yourself")
    if broadcast_shape("mask", tuple(mask.shape), "scores", scores_shape) != torch.Size(scores_shape):
        raise ValueError(f"mask of shape {tuple(mask.shape)} does not broadcast to the scores' shape "
                         f"{scores_shape} (..., T, S)")


def scaled_dot_product_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, scale: float | None = None
) -> tuple[Tensor, Tensor]:
    """softmax(q k^T * scale) v, written out.

    q: (..., T, d_k), k: (..., S, d_k), v: (..., S, d_v), mask: bool, broadcastable to (..., T, S).
    Returns (output (..., T, d_v), weights (..., T, S)). Output row t is sum_s weights[t, s] * v_s.
    A query whose keys are all masked gets zero weights and a zero output row (not NaN).
    """
    check_qkv(q, k, v)
    scores = _scores(q, k, scale)  # (..., T, S)
    if mask is not None:
        check_mask(mask, tuple(scores.shape))
        scores.masked_fill_(~mask, float("-inf"))
    weights = _softmax_rows_in_place(scores)  # (..., T, S), each row sums to 1
    return weights @ v, weights  # (..., T, d_v)


def _softmax_rows_in_place(scores: Tensor) -> Tensor:
    """softmax(scores) over the last dimension, overwriting `scores` (a fresh tensor we own).

    The same steps as `softmax`, but the (T, S) score matrix is the one large tensor in
    attention: overwriting it instead of allocating three more is what brings this written-out
    attention near torch's fused kernel (see `make bench`). Autograd stays correct: the row
    maximum is a constant (softmax does not depend on it), and the last division is done in
    place only when no gradient needs exp's output.
    """
    row_max = scores.detach().amax(dim=-1, keepdim=True).clamp_min(torch.finfo(scores.dtype).min)
    exps = scores.sub_(row_max).exp_()
    total = exps.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(exps.dtype).tiny)
    return exps / total if exps.requires_grad else exps.div_(total)


def entropy(weights: Tensor, dim: int = -1) -> Tensor:
    """Shannon entropy (nats) of probability rows along `dim`; 0 * log 0 counts as 0.

    weights: (..., S) -> (...). ln(S) for uniform rows, 0 for one-hot rows.
    """
    require_tensor("weights", weights)
    require_float("weights", weights)
    dim = require_dim(weights, dim, "weights")
    logs = torch.where(weights > 0, weights.clamp_min(1e-45).log(), 0.0)
    return 0.0 - (weights * logs).sum(dim=dim)  # 0.0 - x turns -0.0 into 0.0


def project_qkv(x: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Three linear maps of the same token rows.

    x: (..., T, D); w_q, w_k: (D, d_k); w_v: (D, d_v) -> q, k: (..., T, d_k), v: (..., T, d_v).
    """
    require_tensor("x", x)
    require_rank("x", x, 2)
    for name, w in (("w_q", w_q), ("w_k", w_k), ("w_v", w_v)):
        require_tensor(name, w)
        require_rank(name, w, 2, 2)
        if w.shape[0] != x.shape[-1]:
            raise ValueError(f"{name} of shape {tuple(w.shape)} needs {x.shape[-1]} rows to match x's "
                             f"last dimension D: x has shape {tuple(x.shape)}")
    if w_q.shape[1] != w_k.shape[1]:
        raise ValueError(f"w_q {tuple(w_q.shape)} and w_k {tuple(w_k.shape)} must give the same d_k")
    return x @ w_q, x @ w_k, x @ w_v


def dot_product_variance(d_k: int, n_samples: int = 20_000, seed: int = 0) -> float:
    """Sample variance of q . k for q, k with independent N(0, 1) entries; theory says d_k."""
    if d_k < 1 or n_samples < 2:
        raise ValueError(f"need d_k >= 1 and n_samples >= 2, got d_k={d_k}, n_samples={n_samples}")
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(n_samples, d_k, generator=gen, dtype=torch.float64)
    k = torch.randn(n_samples, d_k, generator=gen, dtype=torch.float64)
    return (q * k).sum(-1).var().item()


def softmax_saturation(d_k: int, scaled: bool, n_queries: int = 256, n_keys: int = 16,
                       seed: int = 0) -> tuple[float, float]:
    """Mean entropy of attention rows and mean gradient norm through the softmax.

    Random unit-variance q: (n_queries, d_k), k: (n_keys, d_k). The gradient is that of
    sum(weights * g) for a random upstream g, taken with respect to the logits: it shrinks
    toward 0 as rows become one-hot, which is what stops learning in an unscaled model.
    """
    if d_k < 1:
        raise ValueError(f"d_k must be >= 1, got {d_k}")
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(n_queries, d_k, generator=gen)
    k = torch.randn(n_keys, d_k, generator=gen)
    upstream = torch.randn(n_queries, n_keys, generator=gen)
    logits = attention_scores(q, k, scale=None if scaled else 1.0).requires_grad_(True)
    weights = softmax(logits)
    (weights * upstream).sum().backward()
    return entropy(weights.detach()).mean().item(), logits.grad.norm(dim=-1).mean().item()


def train_alignment(x: Tensor, w_q: Tensor, w_k: Tensor, query: int, key: int,
                    steps: int = 20, lr: float = 0.1) -> tuple[Tensor, Tensor]:
    """Gradient steps on w_q and w_k so token `query` attends to token `key`.

    x: (T, D), w_q, w_k: (D, d_k). The loss is -log weights[query, key] (cross-entropy on one
    attention row). Returns the (T, T) score matrices before and after; inputs are not modified.
    """
    require_rank("x", x, 2, 2)
    n_tokens = x.shape[0]
    for name, index in (("query", query), ("key", key)):
        if not 0 <= index < n_tokens:
            raise ValueError(f"{name}={index} is out of range for {n_tokens} tokens")
    w_q = w_q.detach().clone().requires_grad_(True)
    w_k = w_k.detach().clone().requires_grad_(True)
    before = attention_scores(x @ w_q, x @ w_k).detach()
    for _ in range(steps):
        scores = attention_scores(x @ w_q, x @ w_k)  # (T, T)
        loss = -torch.log_softmax(scores[query], dim=-1)[key]
        grad_q, grad_k = torch.autograd.grad(loss, [w_q, w_k])
        with torch.no_grad():  # plain gradient descent, written out
            w_q -= lr * grad_q
            w_k -= lr * grad_k
    return before, attention_scores(x @ w_q, x @ w_k).detach()
