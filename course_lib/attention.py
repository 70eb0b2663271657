"""The course's one attention path and its layer. `attend` is softmax(q k^T * scale + bias, masked) v
on checked input, with torch's softmax: every attention of the course runs it (lesson 01's
scaled_dot_product_attention checks its arguments and calls it; lesson 01's `softmax` writes the
same softmax out). `Attention` adds the four projections, n_heads heads and the KV cache; every
model of the course is built from it. `causal_mask` is what a decoder's layer reads.
Dimension names: see course_lib/__init__.py. Boolean masks: True = "may attend".
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import Tensor, nn

from .guards import (broadcast_shape, require_bool, require_broadcasts_to, require_count, require_float, require_mask,
                     require_same_dtype, require_width)

Rotation = Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]  # (q, k) -> (q, k), turned by position
# A KV cache: one layer's kept keys and values {"k": ..., "v": ...}, empty before the first call.
Cache = dict[str, Tensor]


# ---------------------------------------------------------------- the one attention path, on checked input

def default_scale(d_k: int) -> float:
    """1/sqrt(d_k): keeps q.k at unit variance when q and k have independent unit-variance entries."""
    return 1.0 / math.sqrt(d_k)


def attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, bias: Tensor | None,
           scale: float) -> tuple[Tensor, Tensor]:
    """softmax(q k^T * scale + bias, masked) v on checked input: the lines every attention of the course
    runs (lesson 01's scaled_dot_product_attention checks its arguments and calls it). Returns (output
    (..., T, d_v), weights (..., T, S))."""
    scores = _product(q * scale, k.mT)  # (..., T, S); scaling q is cheaper than the scores
    if bias is not None:
        scores = scores + bias.to(scores.dtype)
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    weights = torch.softmax(scores, -1) if mask is None and bias is None else _softmax_or_zero(scores)
    return _product(weights, v), weights  # (..., T, d_v); weights (..., T, S), rows sum to 1 (or are all 0)


def _softmax_or_zero(scores: Tensor) -> Tensor:
    """softmax over the last axis, where a row with no finite score (a query with every key masked)
    gets zero weights and a zero gradient: torch.softmax alone gives it 0/0 = NaN, which a masked
    padding query would spread into every gradient."""
    empty = scores.detach().amax(-1, keepdim=True) == -math.inf  # (..., T, 1)
    # Any finite row gives a finite softmax and gradient; the second fill zeros both. No `if
    # empty.any()`: torch.func.vmap (lesson 08's heads) cannot branch on a tensor's values.
    return torch.softmax(scores.masked_fill(empty, 0.0), -1).masked_fill(empty, 0.0)


def _product(a: Tensor, b: Tensor) -> Tensor:
    """a @ b. Two (B, n, m) and (B, m, p) go straight to torch.bmm, which @ would call after
    checking, expanding and reshaping them: at a sentence's size those steps cost more than the
    product itself, and the numbers are the same."""
    if a.dim() == 3 and b.dim() == 3 and a.shape[0] == b.shape[0]:
        return torch.bmm(a, b)
    return a @ b


def check_mask_and_bias(mask: Tensor | None, bias: Tensor | None, scores_shape: tuple[int, ...],
                        hint: str = "") -> None:
    """Raise unless mask (bool; a float mask is a bias) and bias (float), where given, broadcast to the
    scores. hint: what the scores' axes are, added to a message about shapes."""
    if mask is not None:
        require_mask("mask", mask, hint="; for a float (additive) mask, pass it as bias=")
    if bias is not None:
        require_float("bias", bias)
    try:
        for name, t in (("mask", mask), ("bias", bias)):
            if t is not None:
                require_broadcasts_to(name, t, scores_shape, "scores")
    except ValueError as error:
        raise ValueError(f"{error}{hint}") from None


def causal_mask(T: int, S: int | None = None) -> Tensor:
    """(T, S) boolean, True on and below the diagonal: query t may attend to keys 0..t.

    S defaults to T. For S != T the diagonal starts at the top-left corner, as torch's
    scaled_dot_product_attention(is_causal=True) does.
    """
    T = require_count("T", T, minimum=0)
    S = T if S is None else require_count("S", S, minimum=0)
    return torch.ones(T, S, dtype=torch.bool).tril()  # (T, S)


def causal_rows(start: int, T: int) -> Tensor:
    """(T, start + T): rows start..start+T-1 of causal_mask(start + T), what T new positions read after
    `start` kept ones (a decoder's cache). On checked input: the models' entry checked the lengths."""
    return torch.ones(T, start + T, dtype=torch.bool).tril(start)  # (T, start + T)


# ---------------------------------------------------------------- the layer

def _split_heads(x: Tensor, n_heads: int) -> Tensor:
    """(..., T, H * d_head) -> (..., H, T, d_head): columns h*d_head .. (h+1)*d_head - 1 are head h.
    The layer's own, on checked input; lesson 08's multi_head.split_heads checks and calls it."""
    heads = x.unflatten(-1, (n_heads, x.shape[-1] // n_heads))  # (..., T, H, d_head)
    return heads.transpose(-3, -2)  # (..., H, T, d_head)


def _merge_heads(x: Tensor) -> Tensor:
    """(..., H, T, d_head) -> (..., T, H * d_head): the heads side by side, head 0 first."""
    return x.transpose(-3, -2).flatten(-2)  # (..., T, H * d_head)


class Attention(nn.Module):
    """Attention with its four projections and n_heads heads (nanoGPT style, no dropout). Self-attention:
    layer(x), x: (..., T, D); cross-attention: layer(x, memory), memory (..., S, d_memory) giving the keys
    and values. d_k, d_v: the total query/key and value widths (default D). Head h takes the h-th share
    of the columns, scale 1/sqrt(d_k/H); one head is n_heads=1, and the weights always have the head
    axis: (..., H, T, S). rotate(q, k) turns queries and keys by position (RoPE); bias is added to the
    scores (ALiBi). mask and bias broadcast to the weights by torch's rule: (T, S) for every sequence
    and head, (B, 1, 1, S) one per sequence's keys (padding_mask(...)[:, None]), (B, 1, T, S) one per
    sequence, (H, T, S) one per head. Returns (output (..., T, D), weights (..., H, T, S))."""

    def __init__(self, d_model: int, d_k: int | None = None, d_v: int | None = None,
                 d_memory: int | None = None, bias: bool = False, n_heads: int = 1):
        super().__init__()
        require_count("d_model", d_model)
        H = require_count("n_heads", n_heads)
        d_k, d_v, d_memory = (d_model if w is None else require_count(name, w) for name, w in
                              (("d_k", d_k), ("d_v", d_v), ("d_memory", d_memory)))
        for name, width in (("d_k", d_k), ("d_v", d_v)):
            if width % H:
                raise ValueError(f"{name}={width} does not split into n_heads={H} equal heads: n_heads must divide it")
        require_bool("bias", bias)
        self.d_model, self.d_memory, self.n_heads = d_model, d_memory, n_heads
        self.d_head, self.d_value_head = d_k // H, d_v // H
        self.query = nn.Linear(d_model, d_k, bias=bias)
        self.key = nn.Linear(d_memory, d_k, bias=bias)
        self.value = nn.Linear(d_memory, d_v, bias=bias)
        self.out = nn.Linear(d_v, d_model, bias=bias)

    def forward(self, x: Tensor, memory: Tensor | None = None, mask: Tensor | None = None,
                bias: Tensor | None = None, rotate: Rotation | None = None) -> tuple[Tensor, Tensor]:
        self.check_input(x, memory, mask, bias, rotate)
        return self.run(x, memory, mask, bias, rotate)

    def run(self, x: Tensor, memory: Tensor | None = None, mask: Tensor | None = None,
               bias: Tensor | None = None, rotate: Rotation | None = None,
               cache: Cache | None = None) -> tuple[Tensor, Tensor]:
        """forward on checked input (Block.run calls it: its model or its forward checked). cache: self-attention
        appends the new positions' keys and values to the kept ones; cross-attention projects
        memory once, at the first call."""
        if cache is not None and memory is not None and "k" in cache:
            q, k, v = self.query(x), cache["k"], cache["v"]  # (..., T, d_k), (..., S, d_k), (..., S, d_v)
        else:
            source = x if memory is None else memory
            q, k, v = self.query(x), self.key(source), self.value(source)  # (..., T|S, d_k|d_v)
            if cache is not None:  # the kept positions first, then the new ones
                k = cache["k"] = torch.cat([cache["k"], k], -2) if "k" in cache else k  # (..., S, d_k)
                v = cache["v"] = torch.cat([cache["v"], v], -2) if "v" in cache else v  # (..., S, d_v)
        q, k, v = (_split_heads(t, self.n_heads) for t in (q, k, v))  # (..., H, T|S, d_head)
        if rotate is not None:
            q, k = rotate(q, k)
        out, weights = attend(q, k, v, mask, bias, default_scale(self.d_head))  # (..., H, T, d_v/H)
        return self.out(_merge_heads(out)), weights  # (..., T, D), (..., H, T, S)

    def check_input(self, x: Tensor, memory: Tensor | None, mask: Tensor | None, bias: Tensor | None,
                    rotate: Rotation | None = None) -> None:
        """Raise, naming what the caller passed, unless x, memory, mask, bias and rotate fit this layer."""
        require_float("x", x, min_rank=2)
        require_width("x", x, self.d_model)
        source, source_name = x, "x"
        if memory is not None:
            require_float("memory", memory, min_rank=2)
            require_width("memory", memory, self.d_memory)
            source, source_name = memory, "memory"
        elif self.d_memory != self.d_model:
            raise ValueError(f"memory must be given: this layer's keys and values read rows of width d_memory="
                             f"{self.d_memory}, not x's d_model={self.d_model}")
        require_same_dtype(x=x, memory=memory, weights=self.query.weight)  # torch computes in one dtype
        if rotate is not None and not callable(rotate):
            raise TypeError(f"rotate must be a function (q, k) -> (q, k), got {type(rotate).__name__}")
        if source.shape[-2] == 0:
            raise ValueError(f"{source_name} of shape {tuple(source.shape)} has no positions to attend to (S = 0)")
        batch = broadcast_shape("x's batch dimensions", tuple(x.shape[:-2]), "memory's batch dimensions",
                                tuple(source.shape[:-2]))
        shape = tuple(batch) + (self.n_heads, x.shape[-2], source.shape[-2])  # the weights'
        check_mask_and_bias(mask, bias, shape, hint=f". The scores are (..., H, T, S) with H = {self.n_heads}: a "
                            "mask or bias for each sequence's keys is (B, 1, 1, S), e.g. padding_mask(lengths, S)[:, None]")
