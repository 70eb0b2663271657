"""Lesson 03: permutation symmetry, and what each bias does.

Without position information, self-attention treats its input as a *set* of token rows:
permuting the rows permutes the outputs the same way (equivariance). This module holds
the pieces the lesson permutes and measures:

    permute_tokens / inverse_permutation / random_permutation    reorder token rows
    linear, self_attention                                       projections with optional biases
    encoder_block, EncoderBlockParams                            a small single-head post-LN block
    norm_over_tokens                                             a norm that mixes tokens (still equivariant)
    equivariance_gap, match_rows, describe_gap                   the measurements
    bias_after_norm                                              what is left of a bias after BatchNorm / LayerNorm

Shapes use the course's names: B batch, T positions, D model width, d_k, d_v, d_ff the FFN width;
a leading "..." means any batch dimensions. The encoder block here is only as much of a block
as this lesson needs (one head, post-LN, ReLU FFN); lesson 09 builds the full one.
What breaks the symmetry comes from the lessons that own it: masks.causal_mask (02) and
positional_encoding.sinusoidal_encoding (04); the block's norm is normalization.layer_norm (05).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Callable

import torch
from torch import Tensor, nn

from .guards import require_float, require_rank, require_tensor
from .attention import scaled_dot_product_attention
# The pieces other lessons own, used here as they are:
from .masks import causal_mask  # lesson 02
from .normalization import layer_norm  # lesson 05
from .positional_encoding import sinusoidal_encoding  # lesson 04

# ---------------------------------------------------------------- permutations


def check_permutation(perm: object, n: int | None = None, name: str = "perm") -> Tensor:
    """Return `perm` as a 1-D int64 tensor, or raise unless it lists 0..n-1 each exactly once.

    n=None takes n from perm's length.
    """
    if isinstance(perm, (list, tuple)):
        perm = torch.tensor(perm, dtype=torch.long)
    require_tensor(name, perm)
    if perm.dtype.is_floating_point or perm.dtype.is_complex or perm.dtype == torch.bool:
        raise TypeError(f"{name} must hold integer indices, got dtype {perm.dtype}")
    if perm.dim() != 1:
        raise ValueError(f"{name} must be 1-D, got shape {tuple(perm.shape)}")
    n = perm.numel() if n is None else n
    if perm.numel() != n:
        raise ValueError(f"{name} must be a permutation of the {n} token positions, got shape {tuple(perm.shape)}")
    if not torch.equal(torch.sort(perm.long()).values, torch.arange(n)):
        raise ValueError(f"{name} must contain each of 0..{n - 1} exactly once, got {perm.tolist()}")
    return perm.long()


def random_permutation(n: int, generator: torch.Generator | None = None) -> Tensor:
    """A uniformly random permutation of 0..n-1, shape (n,)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    return torch.randperm(n, generator=generator)


def inverse_permutation(perm: Tensor) -> Tensor:
    """inv with inv[perm[i]] = i, so permute_tokens(permute_tokens(x, perm), inv) == x. Shape (n,)."""
    perm = check_permutation(perm)
    inverse = torch.empty_like(perm)
    inverse[perm] = torch.arange(len(perm))
    return inverse


def permute_tokens(x: Tensor, perm: Tensor) -> Tensor:
    """Reorder the token rows: out[..., i, :] = x[..., perm[i], :].

    x: (..., T, D), perm: (T,) -> (..., T, D). Only the position axis moves; features stay put.
    """
    require_tensor("x", x)
    require_rank("x", x, 2)
    perm = check_permutation(perm, x.shape[-2])
    return x[..., perm, :]  # (..., T, D)


def permutation_matrix(perm: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """The (T, T) 0/1 matrix P with P @ x == permute_tokens(x, perm); P @ P.T = I."""
    perm = check_permutation(perm)
    return torch.eye(len(perm), dtype=dtype)[perm]  # (T, T)


# ---------------------------------------------------------------- projections and attention


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None, name: str = "weight") -> Tensor:
    """x @ weight + bias, the same bias added to every token row.

    x: (..., T, D_in), weight: (D_in, D_out), bias: (D_out,) or None -> (..., T, D_out).
    """
    require_tensor("x", x)
    require_float("x", x)
    require_rank("x", x, 1)
    require_tensor(name, weight)
    require_rank(name, weight, 2, 2)
    if weight.shape[0] != x.shape[-1]:
        raise ValueError(f"{name} of shape {tuple(weight.shape)} needs {x.shape[-1]} rows to match x's last "
                         f"dimension: x has shape {tuple(x.shape)}")
    if weight.dtype != x.dtype:
        raise TypeError(f"{name} has dtype {weight.dtype} but x has dtype {x.dtype}")
    out = x @ weight  # (..., T, D_out)
    if bias is None:
        return out
    bias_name = name.replace("w_", "b_") if name.startswith("w_") else "bias"
    require_tensor(bias_name, bias)
    if bias.dtype != x.dtype:
        raise TypeError(f"{bias_name} has dtype {bias.dtype} but x has dtype {x.dtype}")
    if bias.shape != (weight.shape[1],):
        raise ValueError(f"{bias_name} must have shape ({weight.shape[1]},) to match {name} of shape "
                         f"{tuple(weight.shape)}, got {tuple(bias.shape)}")
    return out + bias


def self_attention(x: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor, b_q: Tensor | None = None,
                   b_k: Tensor | None = None, b_v: Tensor | None = None,
                   mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """One head of self-attention with optional projection biases.

    x: (..., T, D); w_q, w_k: (D, d_k); w_v: (D, d_v); b_q, b_k: (d_k,); b_v: (d_v,);
    mask: bool (T, T), True = may attend. Returns (output (..., T, d_v), weights (..., T, T)).
    """
    q = linear(x, w_q, b_q, "w_q")  # (..., T, d_k)
    k = linear(x, w_k, b_k, "w_k")  # (..., T, d_k)
    v = linear(x, w_v, b_v, "w_v")  # (..., T, d_v)
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"w_q {tuple(w_q.shape)} and w_k {tuple(w_k.shape)} must give the same d_k")
    return scaled_dot_product_attention(q, k, v, mask=mask)


# ---------------------------------------------------------------- a small encoder block


@dataclass
class EncoderBlockParams:
    """Weights of a single-head post-LN encoder block; matrices act on rows (x @ W).

    w_q, w_k, w_v, w_o: (D, D); w_1: (D, d_ff); w_2: (d_ff, D); b_*: matching vectors or None;
    ln1_*, ln2_*: (D,) LayerNorm gain (weight) and shift (bias).
    """

    w_q: Tensor
    w_k: Tensor
    w_v: Tensor
    w_o: Tensor
    w_1: Tensor
    w_2: Tensor
    ln1_weight: Tensor
    ln1_bias: Tensor
    ln2_weight: Tensor
    ln2_bias: Tensor
    b_q: Tensor | None = None
    b_k: Tensor | None = None
    b_v: Tensor | None = None
    b_o: Tensor | None = None
    b_1: Tensor | None = None
    b_2: Tensor | None = None
    eps: float = 1e-5

    @classmethod
    def random(cls, D: int, d_ff: int, generator: torch.Generator | None = None,
               dtype: torch.dtype = torch.float32, bias: bool = True) -> "EncoderBlockParams":
        """Random weights at the scale nn.Linear uses (so activations stay near unit size)."""
        if D < 1 or d_ff < 1:
            raise ValueError(f"need D >= 1 and d_ff >= 1, got D={D}, d_ff={d_ff}")

        def mat(rows: int, cols: int) -> Tensor:
            return torch.randn(rows, cols, generator=generator, dtype=dtype) / math.sqrt(rows)

        def vec(n: int, scale: float = 0.5) -> Tensor:
            return torch.randn(n, generator=generator, dtype=dtype) * scale

        return cls(w_q=mat(D, D), w_k=mat(D, D), w_v=mat(D, D), w_o=mat(D, D), w_1=mat(D, d_ff), w_2=mat(d_ff, D),
                   ln1_weight=1 + vec(D, 0.1), ln1_bias=vec(D, 0.1), ln2_weight=1 + vec(D, 0.1), ln2_bias=vec(D, 0.1),
                   **({"b_q": vec(D), "b_k": vec(D), "b_v": vec(D), "b_o": vec(D), "b_1": vec(d_ff), "b_2": vec(D)}
                      if bias else {}))

    @classmethod
    def from_torch(cls, layer: nn.TransformerEncoderLayer) -> "EncoderBlockParams":
        """Copy the weights of a one-head, post-LN, ReLU nn.TransformerEncoderLayer."""
        attn = layer.self_attn
        if attn.num_heads != 1 or layer.norm_first or layer.activation_relu_or_gelu != 1:
            raise ValueError("from_torch copies only nhead=1, norm_first=False, activation='relu' layers, got "
                             f"nhead={attn.num_heads}, norm_first={layer.norm_first}")
        D = attn.embed_dim
        w, b = attn.in_proj_weight.detach(), attn.in_proj_bias
        b = b.detach() if b is not None else None
        pick = (lambda i: b[i * D:(i + 1) * D]) if b is not None else (lambda i: None)
        opt = (lambda t: None if t is None else t.detach())
        return cls(w_q=w[:D].T, w_k=w[D:2 * D].T, w_v=w[2 * D:].T, w_o=attn.out_proj.weight.detach().T,
                   w_1=layer.linear1.weight.detach().T, w_2=layer.linear2.weight.detach().T,
                   ln1_weight=layer.norm1.weight.detach(), ln1_bias=opt(layer.norm1.bias),
                   ln2_weight=layer.norm2.weight.detach(), ln2_bias=opt(layer.norm2.bias),
                   b_q=pick(0), b_k=pick(1), b_v=pick(2), b_o=opt(attn.out_proj.bias),
                   b_1=opt(layer.linear1.bias), b_2=opt(layer.linear2.bias), eps=layer.norm1.eps)

    def replace(self, **changes: Tensor | None) -> "EncoderBlockParams":
        """A copy with some fields changed (e.g. b_k=None to drop the key bias)."""
        unknown = set(changes) - {f.name for f in fields(self)}
        if unknown:
            raise ValueError(f"EncoderBlockParams has no field(s) {sorted(unknown)}")
        return EncoderBlockParams(**{f.name: changes.get(f.name, getattr(self, f.name)) for f in fields(self)})


def norm_over_tokens(x: Tensor, weight: Tensor, bias: Tensor | None, eps: float = 1e-5) -> Tensor:
    """Normalize each feature over the token axis (and batch): statistics mix all tokens. (..., T, D) -> (..., T, D).

    Not a norm any Transformer uses; the lesson uses it to show that even a norm that mixes
    tokens keeps equivariance, because a mean or variance over tokens ignores their order.
    """
    dims = tuple(range(x.dim() - 1))
    mean = x.mean(dim=dims, keepdim=True)  # (1, ..., 1, D)
    var = x.var(dim=dims, unbiased=False, keepdim=True)
    out = (x - mean) / torch.sqrt(var + eps) * weight
    return out if bias is None else out + bias


Norm = Callable[[Tensor, Tensor, "Tensor | None", float], Tensor]


def encoder_block(x: Tensor, p: EncoderBlockParams, mask: Tensor | None = None,
                  norm: Norm = layer_norm) -> Tensor:
    """Post-LN encoder block: x = norm(x + Attn(x) W_o); x = norm(x + FFN(x)).

    x: (..., T, D), mask: bool (T, T) or None (True = may attend) -> (..., T, D).
    `norm(x, weight, bias, eps)` defaults to LayerNorm; the lesson swaps it to test claims.
    """
    require_tensor("x", x)
    require_rank("x", x, 2)
    if x.shape[-1] != p.w_q.shape[0]:
        raise ValueError(f"x has shape {tuple(x.shape)} but the block's weights expect D={p.w_q.shape[0]} features")
    attended, _ = self_attention(x, p.w_q, p.w_k, p.w_v, p.b_q, p.b_k, p.b_v, mask)  # (..., T, D)
    x = norm(x + linear(attended, p.w_o, p.b_o, "w_o"), p.ln1_weight, p.ln1_bias, p.eps)
    hidden = torch.relu(linear(x, p.w_1, p.b_1, "w_1"))  # (..., T, d_ff)
    return norm(x + linear(hidden, p.w_2, p.b_2, "w_2"), p.ln2_weight, p.ln2_bias, p.eps)  # (..., T, D)


# ---------------------------------------------------------------- measurements


def equivariance_gap(f: Callable[[Tensor], Tensor], x: Tensor, perm: Tensor) -> float:
    """max |f(permute(x)) - permute(f(x))| over every entry; 0 (up to rounding) means f is equivariant.

    x: (..., T, D); f maps (..., T, D) -> (..., T, D_out); perm: (T,).
    """
    if not callable(f):
        raise TypeError(f"f must be a function of x, got {type(f).__name__}")
    require_tensor("x", x)
    require_rank("x", x, 2)
    perm = check_permutation(perm, x.shape[-2])
    plain, permuted = f(x), f(permute_tokens(x, perm))
    if not isinstance(plain, Tensor) or plain.dim() < 2 or plain.shape[-2] != x.shape[-2]:
        got = tuple(plain.shape) if isinstance(plain, Tensor) else type(plain).__name__
        raise ValueError(f"f must return one row per token: x has shape {tuple(x.shape)}, f(x) has {got}")
    return float((permuted - permute_tokens(plain, perm)).abs().max())


def match_rows(a: Tensor, b: Tensor, atol: float = 1e-5) -> Tensor | None:
    """Pair every row of `a` with an equal row of `b` (within atol): the multisets of rows agree.

    a, b: (T, D). Returns perm with b[perm] ~= a, or None when no such pairing exists. Greedy,
    which is exact when the rows of `b` are pairwise farther apart than 2 * atol.
    """
    for name, t in (("a", a), ("b", b)):
        require_tensor(name, t)
        require_rank(name, t, 2, 2)
    if a.shape != b.shape:
        raise ValueError(f"a and b must have the same shape (T, D), got {tuple(a.shape)} and {tuple(b.shape)}")
    free = list(range(b.shape[0]))
    perm = []
    for row in a:
        hit = next((j for j in free if torch.allclose(b[j], row, atol=atol, rtol=0)), None)
        if hit is None:
            return None
        free.remove(hit)
        perm.append(hit)
    return torch.tensor(perm, dtype=torch.long)


def bias_after_norm(bias: Tensor, norm: str) -> Tensor:
    """The part of a linear layer's bias that a following norm lets through. (D,) -> (D,).

    "batch": BatchNorm subtracts each feature's mean over the batch, and a bias is the same for
    every example, so all of it goes: zeros. "layer": LayerNorm subtracts each row's mean over the
    features, which removes only mean(bias): bias - mean(bias) is left (and it changes the output).
    """
    require_tensor("bias", bias)
    require_float("bias", bias)
    require_rank("bias", bias, 1, 1)
    if norm == "batch":
        return torch.zeros_like(bias)
    if norm == "layer":
        return bias - bias.mean()
    raise ValueError(f"norm must be 'batch' or 'layer', got {norm!r}")


def describe_gap(gap: float, tiny: float = 1e-5) -> str:
    """A float-noise-proof label for a measured gap: '0 (float noise)' or the value to 3 decimals."""
    return "0 (float noise)" if gap < tiny else f"{gap:.3f}"
