"""Lesson 03: permutation symmetry, and what each bias does.

Without position information, self-attention treats its input as a *set* of token rows:
permuting the rows permutes the outputs the same way (equivariance). This module holds
the pieces the lesson permutes and measures:

    check_permutation / permute_tokens / inverse_permutation / random_permutation   reorder token rows
    linear, self_attention                          projections with optional biases, then lesson 01's attention
    encoder_block, EncoderBlockParams               a small single-head post-LN block: LN(x + Attn(x))
    torch_layer_norm, norm_over_tokens              the block's norm, and a norm that mixes tokens
    equivariance_gap, match_rows, describe_gap      the measurements
    bias_after_norm                                 what is left of a bias after BatchNorm / LayerNorm

Shapes use the course's names: B batch, T positions, D model width, d_k, d_v, d_ff the FFN width;
a leading "..." means any batch dimensions. The encoder block here is only as much of a block
as this lesson needs (one head, post-LN, ReLU FFN); lesson 09 builds the full one.
The layers follow the lessons: attention comes from lesson 01 (the one attention path), the
causal mask from lesson 02; the block's LayerNorm is torch's own F.layer_norm (lesson 05 writes
it out), and position vectors are whatever the caller adds to the tokens (lesson 04 builds them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention_scores import project_qkv, scaled_dot_product_attention
from .guards import require_count, require_float, require_integer, require_number, require_same_dtype, require_tensor
from .model import Block, ModelConfig, from_torch

# ---------------------------------------------------------------- permutations


def check_permutation(perm: object, n: int | None = None, name: str = "perm") -> Tensor:
    """Return `perm` as a 1-D int64 tensor, or raise unless it lists 0..n-1 each exactly once.

    perm: a list / tuple of ints or an integer tensor (not float, not bool). n=None takes n from
    perm's length.
    """
    if isinstance(perm, (list, tuple)):
        # torch.tensor([0.0, 1.0], dtype=long) would silently truncate floats: check each entry first.
        bad = [p for p in perm if isinstance(p, bool) or not isinstance(p, int)]
        if bad:
            raise TypeError(f"{name} must hold integer indices, got {bad[0]!r} ({type(bad[0]).__name__}) "
                            f"in {list(perm)}")
        perm = torch.tensor(perm, dtype=torch.long)
    require_integer(name, perm, 1, 1)
    if n is not None:
        require_count("n", n, minimum=0)
        if perm.numel() != n:
            raise ValueError(f"{name} must be a permutation of the {n} token positions, "
                             f"got shape {tuple(perm.shape)}")
    n = perm.numel()
    if not torch.equal(torch.sort(perm.long()).values, torch.arange(n)):
        raise ValueError(f"{name} must contain each of 0..{n - 1} exactly once, got {perm.tolist()}")
    return perm.long()


def random_permutation(n: int, generator: torch.Generator | None = None) -> Tensor:
    """A uniformly random permutation of 0..n-1, shape (n,)."""
    require_count("n", n)
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
    require_tensor("x", x, min_rank=2)
    perm = check_permutation(perm, x.shape[-2])
    return x[..., perm, :]  # (..., T, D)


def permutation_matrix(perm: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """The (T, T) 0/1 matrix P with P @ x == permute_tokens(x, perm); P @ P.T = I."""
    perm = check_permutation(perm)
    return torch.eye(len(perm), dtype=dtype)[perm]  # (T, T)


# ---------------------------------------------------------------- projections and attention


def _require_bias(name: str, bias: Tensor | None, width: int, like: Tensor, weight_name: str) -> None:
    """bias is None, or a float vector of `width` entries with like's dtype."""
    if bias is None:
        return
    require_float(name, bias, 1, 1)
    if bias.shape[0] != width:
        raise ValueError(f"{name} must have shape ({width},) to match {weight_name}'s {width} columns, "
                         f"got shape {tuple(bias.shape)}")
    if bias.dtype != like.dtype:
        raise TypeError(f"{name} has dtype {bias.dtype} but x has dtype {like.dtype}")


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None, name: str = "weight") -> Tensor:
    """x @ weight + bias, the same bias added to every token row.

    x: (..., T, D_in), weight: (D_in, D_out), bias: (D_out,) or None -> (..., T, D_out).
    `name` is the weight's name in error messages (its bias is named b_... for w_...).
    """
    require_float("x", x, min_rank=1)
    require_float(name, weight, 2, 2)
    if weight.shape[0] != x.shape[-1]:
        raise ValueError(f"{name} of shape {tuple(weight.shape)} needs {x.shape[-1]} rows to match x's last "
                         f"dimension: x has shape {tuple(x.shape)}")
    if weight.dtype != x.dtype:
        raise TypeError(f"{name} has dtype {weight.dtype} but x has dtype {x.dtype}")
    bias_name = "b_" + name[2:] if name.startswith("w_") else "bias"
    _require_bias(bias_name, bias, weight.shape[1], x, name)
    out = x @ weight  # (..., T, D_out)
    return out if bias is None else out + bias


def self_attention(x: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor, b_q: Tensor | None = None,
                   b_k: Tensor | None = None, b_v: Tensor | None = None,
                   mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """One head of self-attention with optional projection biases: project, then lesson 01's attention.

    x: (..., T, D); w_q, w_k: (D, d_k); w_v: (D, d_v); b_q, b_k: (d_k,); b_v: (d_v,);
    mask: bool (T, T), True = may attend. Returns (output (..., T, d_v), weights (..., T, T)).
    """
    q, k, v = project_qkv(x, w_q, w_k, w_v)  # (..., T, d_k), (..., T, d_k), (..., T, d_v)
    for name, bias, w in (("b_q", b_q, w_q), ("b_k", b_k, w_k), ("b_v", b_v, w_v)):
        _require_bias(name, bias, w.shape[1], x, "w" + name[1:])
    # A bias is one vector added to every token's row: the same for every position.
    q, k, v = (t if b is None else t + b for t, b in ((q, b_q), (k, b_k), (v, b_v)))
    return scaled_dot_product_attention(q, k, v, mask=mask)


# ---------------------------------------------------------------- a small encoder block


@dataclass
class EncoderBlockParams:
    """Weights of a single-head encoder block; matrices act on rows (x @ W).

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
        require_count("D", D)
        require_count("d_ff", d_ff)

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
        """Copy the weights of a one-head, ReLU nn.TransformerEncoderLayer, through the course's one
        copy from torch (course_lib.model.from_torch into a Block), then into rows-times-matrix form.

        Run a norm_first=True layer with encoder_block(..., layout="pre").
        """
        if not isinstance(layer, nn.TransformerEncoderLayer):
            raise TypeError(f"layer must be an nn.TransformerEncoderLayer, got {type(layer).__name__}")
        attn = layer.self_attn
        if attn.num_heads != 1 or layer.activation_relu_or_gelu != 1:
            raise ValueError("from_torch copies only nhead=1, activation='relu' layers, got "
                             f"nhead={attn.num_heads}, activation={layer.activation}")
        config = ModelConfig(d_model=attn.embed_dim, d_ff=layer.linear1.out_features, eps=layer.norm1.eps,
                             norm="pre" if layer.norm_first else "post", bias=attn.in_proj_bias is not None)
        block = Block(config).to(attn.in_proj_weight.dtype)
        from_torch(block, layer)
        a, f = block.attention, block.ffn
        bias = (lambda linear: None if linear.bias is None else linear.bias.detach())
        return cls(w_q=a.query.weight.detach().T, w_k=a.key.weight.detach().T, w_v=a.value.weight.detach().T,
                   w_o=a.out.weight.detach().T, w_1=f.linear1.weight.detach().T, w_2=f.linear2.weight.detach().T,
                   ln1_weight=block.norms[0].weight.detach(), ln1_bias=block.norms[0].bias.detach(),
                   ln2_weight=block.norms[1].weight.detach(), ln2_bias=block.norms[1].bias.detach(),
                   b_q=bias(a.query), b_k=bias(a.key), b_v=bias(a.value), b_o=bias(a.out),
                   b_1=f.linear1.bias.detach(), b_2=f.linear2.bias.detach(), eps=config.eps)

    def replace(self, **changes: Tensor | None) -> "EncoderBlockParams":
        """A copy with some fields changed (e.g. b_k=None to drop the key bias)."""
        unknown = set(changes) - {f.name for f in fields(self)}
        if unknown:
            raise ValueError(f"EncoderBlockParams has no field(s) {sorted(unknown)}")
        return EncoderBlockParams(**{f.name: changes.get(f.name, getattr(self, f.name)) for f in fields(self)})


Norm = Callable[[Tensor, "Tensor | None", "Tensor | None", float], Tensor]  # norm(x, weight, bias, eps)


def _require_norm_inputs(x: Tensor, weight: Tensor | None, bias: Tensor | None, eps: float, min_rank: int) -> None:
    require_float("x", x, min_rank=min_rank)
    D = x.shape[-1]
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None:
            require_float(name, t, 1, 1)
            if t.shape[0] != D:
                raise ValueError(f"{name} must have shape ({D},) to match x's last dimension D, "
                                 f"got shape {tuple(t.shape)}")
    require_same_dtype(x=x, weight=weight, bias=bias)
    require_number("eps", eps, positive=True)


def torch_layer_norm(x: Tensor, weight: Tensor | None, bias: Tensor | None, eps: float = 1e-5) -> Tensor:
    """LayerNorm of each token row on its own (torch's F.layer_norm; lesson 05 writes it out).

    x: (..., T, D), weight, bias: (D,) -> (..., T, D).
    """
    _require_norm_inputs(x, weight, bias, eps, min_rank=1)
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def norm_over_tokens(x: Tensor, weight: Tensor | None, bias: Tensor | None, eps: float = 1e-5) -> Tensor:
    """Normalize each feature over the token axis (and batch): statistics mix all tokens.

    x: (..., T, D), weight, bias: (D,) -> (..., T, D). Not a norm any Transformer uses; the lesson
    uses it to show that even a norm that mixes tokens keeps equivariance, because a mean or a
    variance over tokens ignores their order.
    """
    _require_norm_inputs(x, weight, bias, eps, min_rank=2)
    if x.shape[-2] == 0:
        raise ValueError(f"x has no tokens (T = 0) to take statistics over: x has shape {tuple(x.shape)}")
    dims = tuple(range(x.dim() - 1))  # every axis but the features
    mean = x.mean(dim=dims, keepdim=True)  # (1, ..., 1, D)
    var = x.var(dim=dims, unbiased=False, keepdim=True)  # (1, ..., 1, D)
    out = (x - mean) / torch.sqrt(var + eps)  # (..., T, D)
    out = out if weight is None else out * weight
    return out if bias is None else out + bias


LAYOUTS = ("post", "pre", "res-post")


def encoder_block(x: Tensor, p: EncoderBlockParams, mask: Tensor | None = None,
                  norm: Norm = torch_layer_norm, layout: str = "post") -> Tensor:
    """A single-head encoder block built on self_attention. x: (..., T, D) -> (..., T, D).

    Each sublayer f (attention with W_o, then the ReLU FFN) is wrapped with a residual and a norm:
        "post"      x = LN(x + f(x))     the original Transformer, nn.TransformerEncoderLayer's default
        "pre"       x = x + f(LN(x))     norm_first=True
        "res-post"  x = x + LN(f(x))     the norm on the sublayer's output only (Swin v2)
    mask: bool (T, T) or None (True = may attend). `norm(x, weight, bias, eps)` defaults to
    LayerNorm; the lesson swaps it to test claims.
    """
    require_float("x", x, min_rank=2)
    if not isinstance(p, EncoderBlockParams):
        raise TypeError(f"p must be EncoderBlockParams, got {type(p).__name__}")
    if x.shape[-1] != p.w_q.shape[0]:
        raise ValueError(f"x has shape {tuple(x.shape)} but the block's weights expect D={p.w_q.shape[0]} features")
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if not callable(norm):
        raise TypeError(f"norm must be a function norm(x, weight, bias, eps), got {type(norm).__name__}")

    def attend(rows: Tensor) -> Tensor:
        attended, _ = self_attention(rows, p.w_q, p.w_k, p.w_v, p.b_q, p.b_k, p.b_v, mask)  # (..., T, D)
        return linear(attended, p.w_o, p.b_o, "w_o")

    def feed_forward(rows: Tensor) -> Tensor:
        hidden = torch.relu(linear(rows, p.w_1, p.b_1, "w_1"))  # (..., T, d_ff)
        return linear(hidden, p.w_2, p.b_2, "w_2")  # (..., T, D)

    for f, gain, shift in ((attend, p.ln1_weight, p.ln1_bias), (feed_forward, p.ln2_weight, p.ln2_bias)):
        if layout == "post":
            x = norm(x + f(x), gain, shift, p.eps)
        elif layout == "pre":
            x = x + f(norm(x, gain, shift, p.eps))
        else:
            x = x + norm(f(x), gain, shift, p.eps)
    return x


# ---------------------------------------------------------------- measurements


def equivariance_gap(f: Callable[[Tensor], Tensor], x: Tensor, perm: Tensor) -> float:
    """max |f(permute(x)) - permute(f(x))| over every entry; 0 (up to rounding) means f is equivariant.

    x: (..., T, D); f maps (..., T, D) -> (..., T, D_out); perm: (T,).
    """
    if not callable(f):
        raise TypeError(f"f must be a function of x, got {type(f).__name__}")
    require_float("x", x, min_rank=2)
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
    require_float("a", a, 2, 2)
    require_float("b", b, 2, 2)
    atol = require_number("atol", atol, non_negative=True)
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
    The lesson measures both through real BatchNorm and LayerNorm layers.
    """
    require_float("bias", bias, 1, 1)
    if bias.numel() == 0:
        raise ValueError("bias must have at least one feature, got shape (0,)")
    if norm == "batch":
        return torch.zeros_like(bias)
    if norm == "layer":
        return bias - bias.mean()
    raise ValueError(f"norm must be 'batch' or 'layer', got {norm!r}")


def format_bound(bound: float) -> str:
    """1e-05 -> '1e-5', 0.05 -> '0.05': a bound as a person writes it."""
    bound = require_number("bound", bound, positive=True)
    mantissa, exponent = f"{bound:.0e}".split("e")
    return f"{bound:g}" if 1e-3 <= bound < 1e3 else f"{mantissa}e{int(exponent)}"


def describe_gap(gap: float, bound: float = 1e-5) -> str:
    """A label that is the same on every machine: 'below 1e-5' when gap < bound, else the value.

    A gap below the bound is rounding (its digits vary with the CPU); above it, 3 decimals.
    """
    gap = require_number("gap", gap, non_negative=True)
    bound = require_number("bound", bound, positive=True)
    if gap < bound:
        return f"below {format_bound(bound)}"
    return f"{gap:.3f}" if gap >= 1e-3 else f"{gap:.1e}"
