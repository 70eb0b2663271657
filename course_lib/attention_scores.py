"""Lesson 01: queries, keys, values, the score matrix, softmax, and attention as a function.

`softmax` writes softmax out (the max subtraction that keeps exp from overflowing, and masks);
the attention path uses torch's, which gives the same weights (tests/test_attention_scores.py).
`scaled_dot_product_attention` checks its arguments and runs the course's one attention path,
course_lib.attention's `attend`: the Attention layer, with its projections and heads, runs the
same lines. Later lessons build their variants (masked, biased, rotated, cross, deliberately
broken) by passing arguments to these, never by writing attention again.

Dimension names: see course_lib/__init__.py. Boolean masks: True = "may attend".
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import torch
from torch import Tensor

from .attention import attend, check_mask_and_bias, default_scale
from .guards import (broadcast_shape, require_bool, require_count, require_dim, require_float, require_index,
                     require_number, require_same_dtype)
from .training import train


def softmax(logits: Tensor, dim: int = -1, mask: Tensor | None = None, stable: bool = True) -> Tensor:
    """softmax along `dim`, optionally masked; any shape in, same shape out.

    mask: bool, broadcastable to logits, True = keep; False entries get weight exactly 0.
    A slice with no finite logit left (every key masked) gives zeros and zero gradient, never NaN.
    stable=False drops the max subtraction: the naive exp(x) / sum exp(x) that overflows.
    """
    require_float("logits", logits)
    require_bool("stable", stable)
    dim = require_dim("logits", logits, dim)
    if logits.dim() > 0 and logits.shape[dim] == 0:
        raise ValueError(f"logits has no entries along dim={dim} (shape {tuple(logits.shape)}): "
                         "there is nothing to share the weight 1 among")
    check_mask_and_bias(mask, None, tuple(logits.shape))
    return _written_out_softmax(logits, dim, mask, stable)


def naive_softmax(logits: Tensor, dim: int = -1) -> Tensor:
    """exp(x) / sum(exp(x)) with no max subtraction: overflows to inf/inf = NaN near x = 89 (float32)."""
    return softmax(logits, dim, stable=False)


def _written_out_softmax(logits: Tensor, dim: int, mask: Tensor | None, stable: bool) -> Tensor:
    """softmax along `dim` with mask (True = keep), on checked input, one step per line: what
    torch.softmax computes in one kernel. Every step makes a new tensor (so torch.func.vmap works)."""
    if mask is not None:
        logits = logits.masked_fill(~mask, -math.inf)
    if stable:
        # Subtracting each slice's maximum changes no weight but keeps exp() from overflowing; an
        # all -inf slice gets the most negative float as maximum, so exp gives 0, not NaN.
        row_max = logits.detach().amax(dim=dim, keepdim=True).clamp_min(torch.finfo(logits.dtype).min)
        exps = (logits - row_max).exp_()  # in place on a new tensor: one scores-sized buffer less
    else:
        exps = logits.exp()
    total = exps.sum(dim=dim, keepdim=True)
    # A slice with no finite logit sums to 0 (stable: any other sums to >= 1): dividing it by 1
    # gives zero weights and a zero gradient instead of NaN.
    total = total.clamp_min(1.0) if stable else torch.where(total > 0, total, torch.ones_like(total))
    return exps / total


def check_qkv(q: Tensor, k: Tensor, v: Tensor | None = None) -> torch.Size:
    """Raise unless q (..., T, d_k), k (..., S, d_k) and v (..., S, d_v) fit together, naming every
    shape. Returns the scores' batch dimensions: q's and k's, broadcast."""
    require_float("q", q, min_rank=2)
    require_float("k", k, min_rank=2)
    if v is not None:
        require_float("v", v, min_rank=2)
    require_same_dtype(q=q, k=k, v=v)
    if q.shape[-1] != k.shape[-1]:  # lesson 02 prints this message
        raise ValueError(f"q and k must share their last dimension d_k: q has shape {tuple(q.shape)} "
                         f"(d_k={q.shape[-1]}), k has shape {tuple(k.shape)} (d_k={k.shape[-1]})")
    if q.shape[-1] == 0:
        raise ValueError(f"d_k must be at least 1: q has shape {tuple(q.shape)}")
    if k.shape[-2] == 0 or (v is not None and v.shape[-2] != k.shape[-2]):
        raise ValueError(f"k and v must hold the same S >= 1 positions: k has shape {tuple(k.shape)}"
                         + ("" if v is None else f", v has shape {tuple(v.shape)}"))
    batch = broadcast_shape("q's batch dimensions", q.shape[:-2], "k's batch dimensions", k.shape[:-2])
    if v is not None:
        broadcast_shape("q's and k's batch dimensions", batch, "v's batch dimensions", v.shape[:-2])
    return batch


def attention_scores(q: Tensor, k: Tensor, scale: float | None = None) -> Tensor:
    """Score matrix q k^T * scale.

    q: (..., T, d_k), k: (..., S, d_k) -> scores: (..., T, S); entry [t, s] = scale * q_t . k_s.
    scale=None uses 1/sqrt(d_k); scale=1.0 gives the raw dot products.
    """
    check_qkv(q, k)
    scale = default_scale(q.shape[-1]) if scale is None else require_number("scale", scale, positive=True)
    return _scores(q, k, scale)


def _scores(q: Tensor, k: Tensor, scale: float) -> Tensor:
    # Scaling q (T x d_k numbers) is cheaper than scaling the scores (T x S numbers).
    return (q * scale) @ k.transpose(-2, -1)  # (..., T, S)


def scaled_dot_product_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None,
                                 scale: float | None = None, bias: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """softmax(q k^T * scale + bias, masked) v, written out: the course's one attention.

    q: (..., T, d_k), k: (..., S, d_k), v: (..., S, d_v). mask: bool, broadcastable to (..., T, S),
    True = may attend. bias: float, broadcastable to (..., T, S), added to the scores (an additive
    mask of 0 / -inf, ALiBi's distance penalty, ...). Returns (output (..., T, d_v), weights
    (..., T, S)); output row t is sum_s weights[t, s] v_s. A query with no allowed key gets zero
    weights and a zero output row (not NaN).
    """
    batch = check_qkv(q, k, require_float("v", v, min_rank=2))
    scale = default_scale(q.shape[-1]) if scale is None else require_number("scale", scale, positive=True)
    check_mask_and_bias(mask, bias, tuple(batch) + (q.shape[-2], k.shape[-2]))
    return attend(q, k, v, mask, bias, scale)


def entropy(weights: Tensor, dim: int = -1) -> Tensor:
    """Shannon entropy (nats) of probability rows along `dim`; 0 * log 0 counts as 0.

    weights: (..., S) -> (...). ln(S) for uniform rows, 0 for one-hot rows.
    """
    require_float("weights", weights)
    dim = require_dim("weights", weights, dim)
    logs = torch.where(weights > 0, weights.clamp_min(1e-45).log(), 0.0)
    return 0.0 - (weights * logs).sum(dim=dim)  # 0.0 - x turns -0.0 into 0.0


def check_projections(x: Tensor, **weights: Tensor) -> None:
    """Raise unless x (..., T, D) and every weight (D, width) fit, and query/key widths agree."""
    require_float("x", x, min_rank=2)
    for name, w in weights.items():
        if require_float(name, w, 2, 2).shape[0] != x.shape[-1] or w.shape[1] == 0:
            raise ValueError(f"{name} of shape {tuple(w.shape)} needs {x.shape[-1]} rows (x's last dimension D) "
                             f"and a column or more: x has shape {tuple(x.shape)}, so {name} must be "
                             f"({x.shape[-1]}, width)")
    require_same_dtype(x=x, **weights)
    if weights["w_q"].shape[1] != weights["w_k"].shape[1]:
        raise ValueError(f"w_q {tuple(weights['w_q'].shape)} and w_k {tuple(weights['w_k'].shape)} must give the "
                         "same d_k (their number of columns)")


def project_qkv(x: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Three linear maps of the same token rows.

    x: (..., T, D); w_q, w_k: (D, d_k); w_v: (D, d_v) -> q, k: (..., T, d_k), v: (..., T, d_v).
    """
    check_projections(x, w_q=w_q, w_k=w_k, w_v=w_v)
    return x @ w_q, x @ w_k, x @ w_v


def dot_product_moments(d_k: int, n_samples: int = 20_000, seed: int = 0) -> tuple[float, float]:
    """Sample mean and variance of q . k for q, k with independent N(0, 1) entries.

    Theory: mean 0 and variance d_k (each q_c k_c has mean 0 and variance 1; d_k independent
    terms add their variances). This is the situation at initialisation, not after training.
    """
    require_count("d_k", d_k)
    require_count("n_samples", n_samples, minimum=2)
    require_count("seed", seed, minimum=0)
    return _moments(d_k, n_samples, seed)


@functools.lru_cache(maxsize=16)
def _moments(d_k: int, n_samples: int, seed: int) -> tuple[float, float]:
    """dot_product_moments on checked input, kept per (d_k, n_samples, seed): lesson 01 asks for
    the same widths twice, a width of 256 draws 10 million numbers (0.2 s), and the answer is two
    floats, which no caller can change."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(n_samples, d_k, generator=gen, dtype=torch.float64)
    k = torch.randn(n_samples, d_k, generator=gen, dtype=torch.float64)
    dots = (q * k).sum(-1)  # (n_samples,): one dot product per pair, not the n x n table
    return dots.mean().item(), dots.var().item()


class Saturation(NamedTuple):
    """How saturated random attention rows are, and the gradient that reaches the queries."""
    entropy: float          # mean entropy of the weight rows (nats); ln(n_keys) = uniform, 0 = one-hot
    median_gradient: float  # median over queries of |d loss / d q_t|
    mean_gradient: float    # mean of the same norms (a few huge rows can hide many dead ones)
    dead_share: float       # share of queries whose gradient norm is below DEAD_GRADIENT


DEAD_GRADIENT = 1e-3


def softmax_saturation(d_k: int, scaled: bool, n_queries: int = 256, n_keys: int = 16,
                       seed: int = 0) -> Saturation:
    """Entropy of random attention rows and the gradient that flows back to the queries.

    q: (n_queries, d_k), k: (n_keys, d_k) with independent N(0, 1) entries (float64). The loss is
    sum(weights * g) for a random upstream g: (n_queries, n_keys); its gradient with respect to
    q is what a query projection learns from. A one-hot row passes back (almost) nothing.
    """
    require_count("d_k", d_k)
    require_bool("scaled", scaled)
    require_count("n_queries", n_queries)
    require_count("n_keys", n_keys)
    require_count("seed", seed, minimum=0)
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(n_queries, d_k, generator=gen, dtype=torch.float64).requires_grad_(True)
    k = torch.randn(n_keys, d_k, generator=gen, dtype=torch.float64)
    upstream = torch.randn(n_queries, n_keys, generator=gen, dtype=torch.float64)
    weights = softmax(attention_scores(q, k, scale=None if scaled else 1.0))  # (n_queries, n_keys)
    (weights * upstream).sum().backward()
    norms = q.grad.norm(dim=-1)  # (n_queries,)
    return Saturation(entropy(weights.detach()).mean().item(), norms.median().item(), norms.mean().item(),
                      (norms < DEAD_GRADIENT).double().mean().item())


def train_alignment(x: Tensor, w_q: Tensor, w_k: Tensor, query: int, key: int,
                    steps: int = 20, lr: float = 0.1) -> tuple[Tensor, Tensor]:
    """Gradient steps on copies of w_q and w_k so token `query` attends to token `key`.

    x: (T, D), w_q, w_k: (D, d_k). The loss is -log weights[query, key] (cross-entropy on one
    attention row). Returns the trained copies (w_q, w_k); the inputs are not modified.
    """
    require_float("x", x, 2, 2)
    check_projections(x, w_q=w_q, w_k=w_k)
    require_index("query", query, x.shape[0], "tokens")  # rows of x
    require_index("key", key, x.shape[0], "tokens")
    w_q = w_q.detach().clone().requires_grad_(True)
    w_k = w_k.detach().clone().requires_grad_(True)

    def loss_of_step(_: int) -> Tensor:
        scores = attention_scores(x @ w_q, x @ w_k)  # (T, T)
        return -torch.log(softmax(scores[query])[key])

    train(loss_of_step, [w_q, w_k], steps, lr, optimizer="sgd")
    return w_q.detach(), w_k.detach()
