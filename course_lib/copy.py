"""Lesson 06: the copy mechanism. Hand-set heads that copy a token from another position.

Residual layout of the hand-set heads (rows are vectors, as in lesson 01): a row x of width D
is cut into contiguous slices, each holding one kind of information,
    x[tokens]     the token's code (one-hot, or any unit vectors when V > width)
    x[positions]  the position, one-hot: coordinate positions.start + p is 1 at position p
and, for the induction head, slices the heads write into. Every head here is an `Attention`
layer of lesson 01 with d_k = d_v = D (so its weights load into a TinyModel layer) and
weights copied in; its layer divides the scores by sqrt(d_k), so the query weights carry a
factor sqrt(d_k) to give scores of exactly `gap`.
Shapes use the course's names (course_lib/__init__.py): B, T, S, D, d_k, d_v, V.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .attention_scores import Attention
from .guards import require_count, require_number


def _require_slice(name: str, part: object, d_model: int) -> range:
    """A slice with explicit start and stop inside 0..d_model, step 1; returns its range."""
    if not isinstance(part, slice):
        raise TypeError(f"{name} must be a slice of the residual coordinates such as slice(0, 8), "
                        f"got {type(part).__name__} {part!r}")
    if part.step not in (None, 1) or not all(isinstance(v, int) and not isinstance(v, bool)
                                             for v in (part.start, part.stop)):
        raise ValueError(f"{name} must be slice(start, stop) with int start and stop and no step, got {part!r}")
    if not 0 <= part.start < part.stop <= d_model:
        raise ValueError(f"{name}={part!r} must satisfy 0 <= start < stop <= d_model={d_model}")
    return range(part.start, part.stop)


def _overlap(a: range, b: range) -> bool:
    return a.start < b.stop and b.start < a.stop


def position_copy_head(d_model: int, offset: int, tokens: slice, positions: slice,
                       write: slice | None = None, gap: float = 20.0, bias: bool = False) -> Attention:
    """A hand-set head whose query at position i attends to position i + offset and copies its token.

    x: (..., T, D) laid out as the module docstring says: x[..., tokens] the token code (width W),
    x[..., positions] the one-hot position (width P = the longest sequence, T <= P).
    Scores: query i, key j -> gap if j == i + offset, else 0 (exactly: one-hot codes). So the
    source gets weight e^gap / (e^gap + S - 1) among S keys. A query whose i + offset lies
    outside 0..P-1 scores 0 everywhere (uniform weights): its output means nothing.
    Output row i = sum_j w_ij x_j[tokens], written into the coordinates `write` (width W;
    default: the token slice itself), zero elsewhere: (..., T, D).
    offset > 0 reads ahead (use without a causal mask); offset < 0 reads back (causal is fine).
    Returns Attention(d_model, bias=bias) (d_k = d_v = D; biases zero), frozen (requires_grad
    False), float32: call .double() for float64. Its weights copy into a TinyModel layer with
    `model.layers[k].attention.load_state_dict(head.state_dict())` (pass bias=True there).
    """
    require_count("d_model", d_model)
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise TypeError(f"offset must be an int (i + offset is the source position), got "
                        f"{type(offset).__name__} {offset!r}")
    token_range = _require_slice("tokens", tokens, d_model)
    position_range = _require_slice("positions", positions, d_model)
    write_range = token_range if write is None else _require_slice("write", write, d_model)
    gap = require_number("gap", gap, non_negative=True)
    if _overlap(token_range, position_range) or _overlap(write_range, position_range):
        raise ValueError(f"tokens={tokens!r} and write={write!r} must not overlap positions={positions!r}: "
                         "the head reads positions and tokens from separate coordinates")
    if len(write_range) != len(token_range):
        raise ValueError(f"write={write!r} must be as wide as tokens={tokens!r} ({len(token_range)} coordinates): "
                         "it receives the copied token code")
    if offset == 0 or abs(offset) >= len(position_range):
        raise ValueError(f"offset={offset} must be nonzero and shorter than the {len(position_range)} "
                         "positions (0 would copy the query's own token)")
    head = Attention(d_model, bias=bias)
    with torch.no_grad():
        for linear in (head.query, head.key, head.value, head.out):
            linear.weight.zero_()
            if linear.bias is not None:
                linear.bias.zero_()
        # rows are outputs, columns inputs (nn.Linear): q = W x, so W[a, b] sends x_b into q_a.
        sharp = gap * math.sqrt(d_model)  # the layer divides by sqrt(d_k) = sqrt(D)
        P, p0 = len(position_range), position_range.start
        for p in range(max(0, -offset), min(P, P - offset)):
            head.query.weight[p0 + p + offset, p0 + p] = sharp  # query i asks for position i + offset
        for p in range(P):
            head.key.weight[p0 + p, p0 + p] = 1.0  # key j says "I am position j"
        for a, b in zip(token_range, token_range):
            head.value.weight[a, b] = 1.0  # the value is the token code
        for a, b in zip(write_range, token_range):
            head.out.weight[a, b] = 1.0  # and lands in the `write` coordinates
    return head.requires_grad_(False)  # hand-set, not for training
