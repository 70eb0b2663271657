"""Lesson 08: many heads. Split the width into H heads, attend in each, concatenate, project.

Every head goes through lesson 01's one attention path, `scaled_dot_product_attention`, which
already treats leading dimensions as batch dimensions: the heads are one more of them,
(B, H, T, d_head). Masks are lesson 02's (True = may attend).

Dimension names: see course_lib/__init__.py. H heads; d_head = d_k / H (queries and keys),
d_v / H (values) per head.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .attention_scores import Rotation, scaled_dot_product_attention
from .guards import require_count, require_float, require_tensor, require_width


def split_heads(x: Tensor, n_heads: int) -> Tensor:
    """(..., T, H * d_head) -> (..., H, T, d_head): columns h*d_head .. (h+1)*d_head - 1 are head h."""
    require_float("x", x, min_rank=2)
    n_heads = require_count("n_heads", n_heads)
    if x.shape[-1] % n_heads:
        raise ValueError(f"x's last dimension {x.shape[-1]} does not split into n_heads={n_heads} "
                         f"equal heads: x has shape {tuple(x.shape)}")
    return x.unflatten(-1, (n_heads, x.shape[-1] // n_heads)).transpose(-3, -2)  # (..., H, T, d_head)


def merge_heads(x: Tensor) -> Tensor:
    """(..., H, T, d_head) -> (..., T, H * d_head): the heads side by side, head 0 first."""
    require_float("x", x, min_rank=3)
    return x.transpose(-3, -2).flatten(-2)  # (..., T, H * d_head)


class MultiHeadAttention(nn.Module):
    """H attention heads side by side (nanoGPT style, no dropout); torch's nn.MultiheadAttention.

    MultiHeadAttention(d_model, n_heads, d_k=None, d_v=None, d_memory=None, bias=False):
    d_k, d_v are the TOTAL query/key and value widths (default d_model), split evenly into
    n_heads heads; d_memory is the width of cross-attention's memory (torch's kdim = vdim,
    default d_model). Four projections as in lesson 01's Attention: query (D -> d_k),
    key (d_memory -> d_k), value (d_memory -> d_v), out (d_v -> D); head h owns rows
    h*d_head .. (h+1)*d_head - 1 of query/key/value and the same columns of out.

    forward(x, memory=None, mask=None, bias=None, rotate=None) -> (out, weights)
      x: (..., T, D); memory: (..., S, d_memory) or None (self-attention: S = T, memory = x).
      mask: bool broadcastable to (..., T, S), True = may attend, the same for every head
      (a causal (T, S) mask, a padding (B, 1, S) mask); bias: float, broadcastable to
      (..., T, S), added to every head's scores; rotate(q, k): turns each head's q and k
      (RoPE). Returns out: (..., T, D) and weights: (..., H, T, S), one pattern per head.
    With n_heads = 1 this is exactly lesson 01's Attention.
    """

    def __init__(self, d_model: int, n_heads: int, d_k: int | None = None, d_v: int | None = None,
                 d_memory: int | None = None, bias: bool = False):
        super().__init__()
        require_count("d_model", d_model)
        self.n_heads = require_count("n_heads", n_heads)
        d_k, d_v, d_memory = (d_model if w is None else require_count(name, w) for name, w in
                              (("d_k", d_k), ("d_v", d_v), ("d_memory", d_memory)))
        for name, width in (("d_k", d_k), ("d_v", d_v)):
            if width % n_heads:
                raise ValueError(f"{name}={width} does not split into n_heads={n_heads} equal heads")
        if not isinstance(bias, bool):
            raise TypeError(f"bias must be True or False, got {bias!r}")
        self.d_model, self.d_memory = d_model, d_memory
        self.d_head, self.d_value_head = d_k // n_heads, d_v // n_heads
        self.query = nn.Linear(d_model, d_k, bias=bias)
        self.key = nn.Linear(d_memory, d_k, bias=bias)
        self.value = nn.Linear(d_memory, d_v, bias=bias)
        self.out = nn.Linear(d_v, d_model, bias=bias)

    def forward(self, x: Tensor, memory: Tensor | None = None, mask: Tensor | None = None,
                bias: Tensor | None = None, rotate: Rotation | None = None) -> tuple[Tensor, Tensor]:
        require_float("x", x, min_rank=2)
        require_width("x", x, self.d_model)
        if memory is not None:
            require_float("memory", memory, min_rank=2)
            require_width("memory", memory, self.d_memory)
        source = x if memory is None else memory  # self-attention reads its own input
        H = self.n_heads
        q = split_heads(self.query(x), H)  # (..., H, T, d_head)
        k = split_heads(self.key(source), H)  # (..., H, S, d_head)
        v = split_heads(self.value(source), H)  # (..., H, S, d_v / H)
        if rotate is not None:
            q, k = rotate(q, k)
        # A mask or bias for (..., T, S) gets a head axis of size 1: every head obeys it.
        mask, bias = (_for_every_head(name, t) for name, t in (("mask", mask), ("bias", bias)))
        out, weights = scaled_dot_product_attention(q, k, v, mask, bias=bias)  # (..., H, T, d_v/H), (..., H, T, S)
        return self.out(merge_heads(out)), weights  # (..., T, D)


def _for_every_head(name: str, t: Tensor | None) -> Tensor | None:
    """(..., T, S) -> (..., 1, T, S) so it broadcasts over the head axis; (T, S) needs nothing."""
    if t is None:
        return None
    require_tensor(name, t)
    return t.unsqueeze(-3) if t.dim() >= 3 else t
