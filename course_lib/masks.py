"""Lesson 02: masks, and the three places a Transformer uses attention.

Dimension names as in course_lib.attention_scores: B batch, T query positions, S key/value
positions, D model width, d_k, d_v. In a translation model the source has n tokens and
the target m tokens; cross-attention's score matrix is (m, n).

Boolean masks: True = this query may attend to this key (torch.nn.functional's
scaled_dot_product_attention uses the same convention). torch.nn.MultiheadAttention's
boolean `attn_mask` and `key_padding_mask` use the opposite one, True = NOT allowed:
`to_torch_mha_mask` converts. Additive masks are float: 0 where allowed, -inf where not,
added to the scores before the softmax.

A query whose every key is masked gets zero weights and a zero output row, never NaN
(course_lib.attention_scores.softmax returns zeros for an all -inf row).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode

from .attention_scores import Attention, scaled_dot_product_attention, softmax
from .guards import (broadcast_shape, require_choice, require_count, require_float, require_integer,
                     require_number, require_tensor, require_width)
from .training import train

# ------------------------------------------------------------------ building masks


def causal_mask(T: int, S: int | None = None) -> Tensor:
    """(T, S) boolean, True on and below the diagonal: query t may attend to keys 0..t.

    S defaults to T. For S != T the diagonal starts at the top-left corner, as torch's
    scaled_dot_product_attention(is_causal=True) does.
    """
    T = require_count("T", T, minimum=0)
    S = T if S is None else require_count("S", S, minimum=0)
    return torch.ones(T, S, dtype=torch.bool).tril()  # (T, S)


def padding_mask(lengths: Sequence[int] | Tensor, S: int, side: str = "right") -> Tensor:
    """(B, 1, S) boolean, True where key s of sequence b is a real token, False on padding.

    lengths: B real-token counts, each in 0..S. side="right" pads at the end (real tokens
    first), side="left" pads at the start. The middle axis of size 1 broadcasts over the T
    query positions, so the result combines with a (T, S) causal mask into (B, T, S).
    """
    S = require_count("S", S, minimum=0)
    if isinstance(lengths, Tensor):
        if lengths.dim() != 1 or lengths.is_floating_point() or lengths.dtype == torch.bool:
            raise TypeError(f"lengths must be a 1-D integer tensor, got dtype {lengths.dtype} "
                            f"and shape {tuple(lengths.shape)}")
        lengths = lengths.tolist()
    lengths = [require_count("each length", n, minimum=0) for n in lengths]
    if any(n > S for n in lengths):
        raise ValueError(f"lengths {lengths} must each be at most S={S}")
    require_choice("side", side, ("right", "left"))
    positions = torch.arange(S)  # (S,)
    counts = torch.tensor(lengths, dtype=torch.long).reshape(-1, 1)  # (B, 1)
    real = positions < counts if side == "right" else positions >= S - counts  # (B, S)
    return real[:, None, :]  # (B, 1, S)


def combine_masks(*masks: Tensor) -> Tensor:
    """Logical AND of boolean masks, broadcast together: a key is allowed only if every mask allows it."""
    if not masks:
        raise ValueError("combine_masks needs at least one mask")
    combined = None
    for index, mask in enumerate(masks):
        require_tensor(f"masks[{index}]", mask)
        if mask.dtype != torch.bool:
            raise TypeError(f"masks[{index}] must be boolean (True = may attend), got dtype {mask.dtype}")
        if combined is not None:
            broadcast_shape(f"masks[0..{index - 1}] combined", tuple(combined.shape), f"masks[{index}]", tuple(mask.shape))
        combined = mask if combined is None else combined & mask
    return combined


def additive_mask(mask: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """Boolean mask -> float mask of the same shape: 0.0 where True, -inf where False.

    Adding it to the scores and taking the softmax gives exactly the weights of the boolean
    form; two additive masks combine by addition (-inf + anything finite = -inf).
    """
    require_tensor("mask", mask)
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be a boolean tensor (True = may attend), got dtype {mask.dtype}")
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating-point torch.dtype (it holds -inf), got {dtype!r}")
    return torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, float("-inf"))


def to_torch_mha_mask(mask: Tensor) -> Tensor:
    """Our convention (True = may attend) -> nn.MultiheadAttention's (True = may NOT attend).

    Use it for both `attn_mask` (T, S) and `key_padding_mask` (B, S); a padding_mask of shape
    (B, 1, S) becomes a key_padding_mask with `to_torch_mha_mask(mask[:, 0])`.
    """
    require_tensor("mask", mask)
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be a boolean tensor, got dtype {mask.dtype}")
    return ~mask


# ------------------------------------------------------------------ one attention layer, three uses
# The layer is lesson 01's `Attention`; a float (additive) mask goes in as its `bias=`.


def to_multihead_attention(layer: Attention, batch_first: bool = True) -> nn.MultiheadAttention:
    """An nn.MultiheadAttention holding `layer`'s weights, for comparison (lesson 08's layers too).

    One head for an Attention layer, n_heads for a MultiHeadAttention. Needs d_k = d_v =
    d_model (torch projects to embed_dim); a d_memory != d_model becomes torch's kdim = vdim =
    d_memory, with separate q/k/v projection weights. batch_first=False: torch then takes and
    returns (T, B, D).
    """
    require_layer("layer", layer)
    if not isinstance(batch_first, bool):
        raise TypeError(f"batch_first must be True or False, got {batch_first!r}")
    widths = (layer.query.out_features, layer.value.out_features)
    if any(w != layer.d_model for w in widths):
        raise ValueError(f"nn.MultiheadAttention needs d_k = d_v = d_model = {layer.d_model}, "
                         f"got d_k, d_v = {widths}")
    has_bias = layer.query.bias is not None
    dtype = layer.query.weight.dtype
    mha = nn.MultiheadAttention(layer.d_model, num_heads=getattr(layer, "n_heads", 1), bias=has_bias,
                                batch_first=batch_first, dtype=dtype, kdim=layer.d_memory, vdim=layer.d_memory)
    with torch.no_grad():
        if mha._qkv_same_embed_dim:  # one stacked (3D, D) weight
            mha.in_proj_weight.copy_(torch.cat([layer.query.weight, layer.key.weight, layer.value.weight]))
        else:  # kdim != embed_dim: three separate weights
            mha.q_proj_weight.copy_(layer.query.weight)
            mha.k_proj_weight.copy_(layer.key.weight)
            mha.v_proj_weight.copy_(layer.value.weight)
        mha.out_proj.weight.copy_(layer.out.weight)
        if has_bias:
            mha.in_proj_bias.copy_(torch.cat([layer.query.bias, layer.key.bias, layer.value.bias]))
            mha.out_proj.bias.copy_(layer.out.bias)
    return mha


def require_layer(name: str, layer: object) -> Attention:
    if not isinstance(layer, Attention):
        raise TypeError(f"{name} must be a course_lib.attention_scores.Attention layer, got {type(layer).__name__}")
    return layer


def _lengths_mask(name: str, lengths: Sequence[int] | Tensor | None, x: Tensor) -> Tensor | None:
    """padding_mask for x: (B, S, D) from B lengths, or None; the count of lengths must be B."""
    if lengths is None:
        return None
    mask = padding_mask(lengths, x.shape[1])  # (B', 1, S)
    if mask.shape[0] != x.shape[0]:
        raise ValueError(f"{name} has {mask.shape[0]} lengths but the batch has B={x.shape[0]} sequences")
    return mask


def encoder_self_attention(layer: Attention, source: Tensor,
                           source_lengths: Sequence[int] | None = None) -> tuple[Tensor, Tensor]:
    """Source attends to itself; only padding keys are hidden.

    source: (B, n, D) -> output (B, n, D), weights (B, n, n).
    """
    require_layer("layer", layer)
    require_float("source", source, 3, 3)
    mask = _lengths_mask("source_lengths", source_lengths, source)  # (B, 1, n) or None
    return layer(source, mask=mask)


def decoder_self_attention(layer: Attention, target: Tensor,
                           target_lengths: Sequence[int] | None = None) -> tuple[Tensor, Tensor]:
    """Target attends to its own past: causal mask AND padding mask.

    target: (B, m, D) -> output (B, m, D), weights (B, m, m), zero above the diagonal.
    """
    require_layer("layer", layer)
    require_float("target", target, 3, 3)
    mask = causal_mask(target.shape[1])  # (m, m)
    if target_lengths is not None:
        mask = combine_masks(mask, _lengths_mask("target_lengths", target_lengths, target))  # (B, m, m)
    return layer(target, mask=mask)


def cross_attention(layer: Attention, target: Tensor, source: Tensor,
                    source_lengths: Sequence[int] | None = None) -> tuple[Tensor, Tensor]:
    """Queries from the target, keys and values from the (encoded) source; no causal mask.

    target: (B, m, D), source: (B, n, d_memory) -> output (B, m, D), weights (B, m, n).
    """
    require_layer("layer", layer)
    require_float("target", target, 3, 3)
    require_float("source", source, 3, 3)
    if target.shape[0] != source.shape[0]:
        raise ValueError(f"target {tuple(target.shape)} and source {tuple(source.shape)} need the same batch size B")
    mask = _lengths_mask("source_lengths", source_lengths, source)  # (B, 1, n) or None
    return layer(target, source, mask=mask)


# ------------------------------------------------------------------ additive (Bahdanau) attention


class AdditiveScorer(nn.Module):
    """Bahdanau's score: a one-hidden-layer MLP of each (query, key) pair.

    score(q_t, k_s) = w . tanh(W_q q_t + W_k k_s). q: (..., T, d_q), k: (..., S, d_k) ->
    scores (..., T, S). W_q and W_k map both sides to d_hidden, so d_q and d_k may differ
    (a dot-product layer's W_Q and W_K do the same; only the raw q . k needs equal widths).
    """

    def __init__(self, d_q: int, d_k: int, d_hidden: int):
        super().__init__()
        self.d_q, self.d_k, self.d_hidden = (require_count(n, w) for n, w in
                                             (("d_q", d_q), ("d_k", d_k), ("d_hidden", d_hidden)))
        self.query = nn.Linear(d_q, d_hidden, bias=False)
        self.key = nn.Linear(d_k, d_hidden, bias=True)
        self.w = nn.Linear(d_hidden, 1, bias=False)

    def forward(self, q: Tensor, k: Tensor) -> Tensor:
        for name, t, width in (("q", q, self.d_q), ("k", k, self.d_k)):
            require_float(name, t, min_rank=2)
            require_width(name, t, width)
        broadcast_shape("q's batch dimensions", tuple(q.shape[:-2]), "k's batch dimensions", tuple(k.shape[:-2]))
        return self.pair_scores(self.query(q), self.key(k))  # (..., T, S)

    def pair_scores(self, hq: Tensor, hk: Tensor) -> Tensor:
        """The per-pair part, on projected rows hq: (..., T, h), hk: (..., S, h) -> (..., T, S)."""
        # Pair every query with every key by broadcasting: (..., T, 1, h) + (..., 1, S, h).
        hidden = torch.tanh(hq[..., :, None, :] + hk[..., None, :, :])  # (..., T, S, h)
        return self.w(hidden).squeeze(-1)  # (..., T, S)


def additive_attention(scorer: AdditiveScorer, q: Tensor, k: Tensor, v: Tensor,
                       mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """softmax(scorer(q, k)) v, masked like dot-product attention.

    q: (..., T, d_q), k: (..., S, d_k), v: (..., S, d_v), mask: bool broadcastable to (..., T, S).
    Returns (output (..., T, d_v), weights (..., T, S)).
    """
    if not isinstance(scorer, AdditiveScorer):
        raise TypeError(f"scorer must be an AdditiveScorer, got {type(scorer).__name__}")
    require_float("k", k, min_rank=2)
    require_float("v", v, min_rank=2)
    if v.shape[-2] != k.shape[-2]:
        raise ValueError(f"k and v must have the same number of positions S: k has shape {tuple(k.shape)}, "
                         f"v has shape {tuple(v.shape)}")
    scores = scorer(q, k)  # (..., T, S)
    weights = softmax(scores, mask=mask)  # (..., T, S)
    return weights @ v, weights  # (..., T, d_v)


class OperationCounter(TorchDispatchMode):
    """Counts the arithmetic torch actually runs inside a `with` block, by kind of operation.

    Matrix products count m*n*k multiply-adds; add/sub, mul/div and tanh count one per output
    element; shape-only operations (views, transposes) count nothing; anything else is listed
    under its own name so that no work goes uncounted.
    """

    MATMULS = ("mm", "bmm", "addmm")
    KINDS = {"add": "additions", "sub": "additions", "mul": "multiplications", "div": "multiplications",
             "tanh": "tanh"}
    SHAPE_ONLY = ("view", "_unsafe_view", "t", "transpose", "unsqueeze", "squeeze", "expand", "slice",
                  "permute", "reshape", "alias", "detach", "clone", "_to_copy")

    def __init__(self):
        super().__init__()
        self.counts: Counter[str] = Counter()

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # Nothing here is compiled: without this, torch imports its compiler on the first count
        # (seconds of a lesson's run time) only to switch it off inside this mode.
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if name in self.MATMULS:
            a, b = args[-2], args[-1]  # addmm(bias, a, b): the product is of the last two
            self.counts["multiply-adds"] += a.numel() * b.shape[-1]  # (.., m, k) @ (.., k, n): m*k*n
            if name == "addmm":
                self.counts["additions"] += out.numel()
        elif name in self.KINDS:
            self.counts[self.KINDS[name]] += out.numel()
        elif name not in self.SHAPE_ONLY:  # some return a tuple (max) or a number (item)
            results = out if isinstance(out, (tuple, list)) else (out,)
            self.counts[name] += sum(r.numel() for r in results if isinstance(r, torch.Tensor))
        return out


def operations_per_score(kind: str, d_k: int, d_hidden: int | None = None, T: int = 6, S: int = 5
                         ) -> dict[str, float]:
    """Arithmetic per (query, key) pair, COUNTED while a (T, S) score matrix is computed.

    Only the part that grows with T*S is run: the projections of queries and keys happen
    once per token for both kinds and are done before counting. "dot": q @ k^T on
    projected rows of width d_k. "additive": AdditiveScorer.pair_scores on projected rows of
    width d_hidden (default d_k). Returns {kind of operation: count / (T*S)}.
    """
    require_choice("kind", kind, ("dot", "additive"))
    d_k = require_count("d_k", d_k)
    d_hidden = d_k if d_hidden is None else require_count("d_hidden", d_hidden)
    T, S = require_count("T", T), require_count("S", S)
    gen = torch.Generator().manual_seed(0)
    width = d_k if kind == "dot" else d_hidden
    hq, hk = torch.randn(T, width, generator=gen), torch.randn(S, width, generator=gen)  # projected rows
    scorer = AdditiveScorer(d_k, d_k, d_hidden) if kind == "additive" else None
    counter = OperationCounter()
    with torch.no_grad(), counter:
        scores = hq @ hk.T if scorer is None else scorer.pair_scores(hq, hk)  # (T, S)
    assert scores.shape == (T, S)
    return {name: count / (T * S) for name, count in sorted(counter.counts.items())}


def seconds_per_score(score_fn: Callable[[Tensor, Tensor], Tensor], q: Tensor, k: Tensor, repeats: int = 20) -> float:
    """Best-of-`repeats` wall-clock seconds of score_fn(q, k), divided by the number of scores.

    Timing varies from machine to machine and run to run: show it, assert only wide margins.
    """
    if not callable(score_fn):
        raise TypeError(f"score_fn must be callable, got {type(score_fn).__name__}")
    require_float("q", q, min_rank=2)
    require_float("k", k, min_rank=2)
    require_count("repeats", repeats)
    best = float("inf")
    with torch.no_grad():
        for _ in range(repeats):
            start = time.perf_counter()
            scores = score_fn(q, k)
            best = min(best, time.perf_counter() - start)
    return best / scores.numel()


# ------------------------------------------------------------------ is a layer causal?


def _require_sequence_fn_input(fn: object, x: Tensor) -> None:
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    require_float("x", x, 2, 2)


def future_perturbation(fn: Callable[[Tensor], Tensor], x: Tensor, seed: int = 0) -> Tensor:
    """How much the past outputs move when the future inputs change.

    fn maps x: (T, D) to (T, d_out). Entry t of the result (shape (T,)) is the largest
    |change| of any output row 0..t when every input row after t is replaced by fresh
    random values. A causal fn gives exactly zeros.
    """
    _require_sequence_fn_input(fn, x)
    require_count("seed", seed, minimum=0)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        reference = fn(x)
        changes = []
        for t in range(x.shape[0]):
            perturbed = x.clone()
            perturbed[t + 1:] = torch.randn(perturbed[t + 1:].shape, generator=gen, dtype=x.dtype)
            changes.append((fn(perturbed)[: t + 1] - reference[: t + 1]).abs().max())
    return torch.stack(changes)  # (T,)


def influence_matrix(fn: Callable[[Tensor], Tensor], x: Tensor) -> Tensor:
    """(T, T) gradient norms: entry [t, s] = || d fn(x)[t] / d x[s] || (Frobenius).

    fn maps x: (T, D) to (T, d_out). A causal fn has exact zeros above the diagonal.
    """
    _require_sequence_fn_input(fn, x)
    jacobian = torch.autograd.functional.jacobian(fn, x)  # (T, d_out, T, D)
    return jacobian.pow(2).sum(dim=(1, 3)).sqrt()  # (T, T)


def prefix_outputs(fn: Callable[[Tensor], Tensor], x: Tensor) -> Tensor:
    """Row t = the last output row of fn run on the prefix x[:t+1] alone.

    x: (T, D) -> (T, d_out). With a causal fn this equals fn(x): one forward pass gives
    every prefix's answer, which is why a decoder trains on all positions in parallel.
    """
    _require_sequence_fn_input(fn, x)
    return torch.stack([fn(x[: t + 1])[-1] for t in range(x.shape[0])])  # (T, d_out)


# ------------------------------------------------------------------ break it: a decoder without its mask


class Positions(nn.Module):
    """Where a position scheme acts on an attention layer. This base class adds nothing.

    add(x):         added to the token rows before attention (a table, learned or sinusoidal)
    rotate(q, k):   turns queries and keys by their position (RoPE, lesson 04)
    score_bias(T):  a (T, T) bias added to the scores (ALiBi, lesson 04), or None
    With none of them, attention sees a set of tokens, not a sequence (lesson 03).
    """

    def add(self, x: Tensor) -> Tensor:
        return x

    def rotate(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        return q, k

    def score_bias(self, T: int) -> Tensor | None:
        return None


class LearnedPositions(Positions):
    """x + P[:T] with a learned (max_len, D) table (GPT-2 style); x: (..., T, D) -> (..., T, D).

    Row p is trained only by sequences that reach position p; there is no row past max_len.
    """

    def __init__(self, max_len: int, d_model: int):
        super().__init__()
        self.max_len, self.d_model = require_count("max_len", max_len), require_count("d_model", d_model)
        self.table = nn.Embedding(max_len, d_model)

    def add(self, x: Tensor) -> Tensor:
        require_float("x", x, min_rank=2)
        require_width("x", x, self.d_model)
        require_length_fits(x.shape[-2], self.max_len, "learned position table")
        return x + self.table.weight[: x.shape[-2]]  # (..., T, D)

    forward = add


def require_length_fits(T: int, max_len: int, table: str) -> None:
    if T > max_len:
        raise ValueError(
            f"sequence length T={T} is longer than max_len={max_len} of this {table}: it has rows for "
            f"positions 0..{max_len - 1} only, so positions {max_len}..{T - 1} have no encoding")


@dataclass
class TinyConfig:
    """Everything that defines a TinyModel, flat, so one line of a notebook can change one thing."""

    vocab_size: int = 8
    max_len: int = 8
    d_model: int = 32
    causal: bool = True
    positions: str = "learned"  # TinyModel builds "none" and "learned"; other schemes are passed in
    residual: bool = True
    n_layers: int = 1  # attention layers, one after another (two make an induction head, lesson 06)
    d_ff: int = 0  # width of the MLP after each attention layer; 0 = attention only (lesson 07)
    seed: int = 0  # the initial weights

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise, naming the field, unless every field has a usable value."""
        require_count("config.vocab_size", self.vocab_size, minimum=2)
        require_count("config.max_len", self.max_len)
        require_count("config.d_model", self.d_model)
        require_count("config.n_layers", self.n_layers)
        require_count("config.d_ff", self.d_ff, minimum=0)
        require_count("config.seed", self.seed, minimum=0)
        for name in ("causal", "residual"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"config.{name} must be True or False, got {getattr(self, name)!r}")
        if not isinstance(self.positions, str):
            raise TypeError(f"config.positions must be a string, got {type(self.positions).__name__}")


class TinyLayer(nn.Module):
    """One layer of the tiny model: an attention head, then (if d_ff > 0) a ReLU MLP on each token.

    x: (B, T, D) -> (B, T, D), weights (B, T, T). With `residual`, each part adds to x.
    """

    def __init__(self, d_model: int, d_ff: int, residual: bool):
        super().__init__()
        self.residual = residual
        self.attention = Attention(d_model, bias=True)
        self.mlp = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)) if d_ff else None

    def forward(self, x: Tensor, positions: Positions, mask: Tensor | None) -> tuple[Tensor, Tensor]:
        attended, weights = self.attention(x, mask=mask, bias=positions.score_bias(x.shape[-2]),
                                           rotate=positions.rotate)  # (B, T, D), (B, T, T)
        x = x + attended if self.residual else attended
        if self.mlp is not None:
            x = x + self.mlp(x) if self.residual else self.mlp(x)
        return x, weights


class TinyModel(nn.Module):
    """The course's tiny model: token embedding, a position scheme, attention layers, a read-out.

    ids: (B, T) integer tokens -> logits (B, T, vocab_size). Every head is causal when
    config.causal; `positions` (default: built from config.positions) says where position
    information enters. config.n_layers layers, each an attention head and, if config.d_ff > 0,
    an MLP. The last forward's attention weights are kept: `layer_weights` (one (B, T, T) per
    layer) and `last_weights` (the first layer's, the only one when n_layers = 1).
    """

    def __init__(self, config: TinyConfig, positions: Positions | None = None):
        super().__init__()
        if not isinstance(config, TinyConfig):
            raise TypeError(f"config must be a TinyConfig, got {type(config).__name__}")
        config.validate()  # fields may have been changed since the config was made
        if positions is not None and not isinstance(positions, Positions):
            raise TypeError(f"positions must be a Positions scheme, got {type(positions).__name__}")
        self.config = config
        with torch.random.fork_rng():  # seeded initial weights; the caller's generator is left alone
            torch.manual_seed(config.seed)
            self.tokens = nn.Embedding(config.vocab_size, config.d_model)
            if positions is None:
                kind = require_choice("config.positions", config.positions, ("none", "learned"))
                positions = LearnedPositions(config.max_len, config.d_model) if kind == "learned" else Positions()
            self.positions = positions
            self.layers = nn.ModuleList(TinyLayer(config.d_model, config.d_ff, config.residual)
                                        for _ in range(config.n_layers))
            self.readout = nn.Linear(config.d_model, config.vocab_size)
        self.layer_weights: list[Tensor] = []

    @property
    def attention(self) -> Attention:
        """The first layer's attention head (the only one when n_layers = 1)."""
        return self.layers[0].attention

    @property
    def last_weights(self) -> Tensor | None:
        return self.layer_weights[0] if self.layer_weights else None

    def forward(self, ids: Tensor) -> Tensor:
        require_token_ids("ids", ids, self.config.vocab_size)
        T = ids.shape[-1]
        require_length_fits(T, self.config.max_len, "model")
        x = self.positions.add(self.tokens(ids))  # (B, T, D)
        mask = causal_mask(T) if self.config.causal else None
        self.layer_weights = []
        for layer in self.layers:
            x, weights = layer(x, self.positions, mask)  # (B, T, D), (B, T, T)
            self.layer_weights.append(weights.detach())
        return self.readout(x)  # (B, T, vocab_size)


def require_token_ids(name: str, ids: Tensor, vocab_size: int) -> None:
    require_integer(name, ids, 2, 2)
    if ids.numel() and not (0 <= int(ids.min()) and int(ids.max()) < vocab_size):
        raise ValueError(f"{name} must be token ids in 0..{vocab_size - 1}, got values from {int(ids.min())} "
                         f"to {int(ids.max())} in {name} of shape {tuple(ids.shape)}")


IGNORE = -100  # a target that no loss is taken on (F.cross_entropy's ignore_index)


def train_tiny_model(model: TinyModel, make_batch: Callable[[torch.Generator], tuple[Tensor, Tensor]],
                     steps: int, lr: float = 3e-2, seed: int = 0, progress: bool | str = False) -> list[float]:
    """Train `model` in place on batches from make_batch(generator) -> (ids (B, T), targets (B, T)).

    The loss is the cross-entropy of the model's logits at every position whose target is not
    IGNORE. The data generator is seeded by `seed`. Returns every step's loss. progress: as
    in `train` (True, or the task's name for the bar).
    """
    if not isinstance(model, TinyModel):
        raise TypeError(f"model must be a TinyModel, got {type(model).__name__}")
    if not callable(make_batch):
        raise TypeError(f"make_batch must be callable, got {type(make_batch).__name__}")
    generator = torch.Generator().manual_seed(require_count("seed", seed, minimum=0))
    vocab_size = model.config.vocab_size

    def loss_of_step(_: int) -> Tensor:
        ids, targets = make_batch(generator)
        logits = model(ids)  # (B, T, vocab_size)
        return nn.functional.cross_entropy(logits.reshape(-1, vocab_size), targets.reshape(-1), ignore_index=IGNORE)

    return train(loss_of_step, model.parameters(), steps, lr, progress=progress)


def train_next_token(causal: bool, steps: int = 100, vocab: int = 8, T: int = 8, d_model: int = 32,
                     batch: int = 64, seed: int = 0) -> dict[str, float]:
    """Train a TinyModel to predict the next token of uniformly random sequences.

    No model can beat a loss of ln(vocab) on such data when it only sees the past. Returns
    the last training loss and, on fresh sequences, two accuracies: teacher forcing (the
    whole sequence in view at once, as in training) and generation (position t predicted
    from the prefix of t+1 tokens alone: the future is not written yet).
    """
    require_count("T", T, minimum=2)
    require_count("batch", batch)
    # float64: the demo's figures then hardly depend on the CPU's kernels or the thread count.
    model = TinyModel(TinyConfig(vocab_size=vocab, max_len=T, d_model=d_model, causal=causal, seed=seed))
    model = model.to(torch.float64)

    def next_token_batch(generator: torch.Generator) -> tuple[Tensor, Tensor]:
        ids = torch.randint(vocab, (batch, T + 1), generator=generator)
        return ids[:, :-1], ids[:, 1:]  # inputs, and the token after each of them

    losses = train_tiny_model(model, next_token_batch, steps, seed=seed)
    with torch.no_grad():
        ids = torch.randint(vocab, (256, T + 1), generator=torch.Generator().manual_seed(seed + 1))
        seen_whole = (model(ids[:, :-1]).argmax(-1) == ids[:, 1:]).float().mean().item()
        generated = torch.stack([model(ids[:, : t + 1])[:, -1].argmax(-1) for t in range(T)], dim=1)  # (256, T)
        generation = (generated == ids[:, 1:]).float().mean().item()
    return {"train_loss": losses[-1], "teacher_forcing_accuracy": seen_whole, "generation_accuracy": generation}


# ------------------------------------------------------------------ a toy translation pair

# English -> French. "black cat" becomes "chat noir": the adjective moves behind the noun, so
# the alignment that cross-attention finds crosses over. The second pair is one word shorter
# and padded, to give the padding mask something to hide.
SOURCE = [["the", "black", "cat", "sleeps"], ["the", "dog", "runs", "<pad>"]]
TARGET = [["<bos>", "le", "chat", "noir", "dort"], ["<bos>", "le", "chien", "court", "<pad>"]]
SOURCE_LENGTHS, TARGET_LENGTHS = [4, 3], [5, 4]
MEANING = {"the": "DET", "le": "DET", "black": "BLACK", "noir": "BLACK", "cat": "CAT", "chat": "CAT",
           "sleeps": "SLEEP", "dort": "SLEEP", "dog": "DOG", "chien": "DOG", "runs": "RUN", "court": "RUN",
           "<bos>": "BOS", "<pad>": "PAD"}
CONCEPTS = sorted(set(MEANING.values()))


def toy_embedding(word: str, language: str) -> Tensor:
    """Hand-set embedding: one coordinate per meaning plus one per language (EN, FR).

    A word and its translation share their meaning coordinate, so their dot product is 1;
    two words of one language share the language coordinate; width D = len(CONCEPTS) + 2.
    """
    if word not in MEANING or language not in ("EN", "FR"):
        raise ValueError(f"unknown word {word!r} or language {language!r} (languages: 'EN', 'FR')")
    x = torch.zeros(len(CONCEPTS) + 2)
    x[CONCEPTS.index(MEANING[word])] = 1.0
    x[len(CONCEPTS) + ("EN", "FR").index(language)] = 1.0
    return x


def toy_translation_batch() -> tuple[Tensor, Tensor]:
    """Embedded SOURCE (B=2, n=4, D) and TARGET (B=2, m=5, D) sentences."""
    source = torch.stack([torch.stack([toy_embedding(w, "EN") for w in s]) for s in SOURCE])  # (B, n, D)
    target = torch.stack([torch.stack([toy_embedding(w, "FR") for w in s]) for s in TARGET])  # (B, m, D)
    return source, target


def matching_layer(d_model: int, sharpness: float = 4.0) -> Attention:
    """An Attention layer whose score is sharpness * x_t . x_s (W_Q = W_K = c*I, W_V = W_O = I).

    With toy embeddings, a target word scores `sharpness` more on its translation than on
    a word of unrelated meaning: a hand-set stand-in for what training would learn.
    Its parameters are frozen (requires_grad=False).
    """
    require_count("d_model", d_model)
    require_number("sharpness", sharpness, positive=True)
    layer = Attention(d_model)
    factor = (sharpness * d_model ** 0.5) ** 0.5  # the layer divides by sqrt(d_k) = sqrt(d_model)
    with torch.no_grad():
        for linear, value in ((layer.query, factor), (layer.key, factor), (layer.value, 1.0), (layer.out, 1.0)):
            linear.weight.copy_(torch.eye(d_model) * value)
    return layer.requires_grad_(False)  # hand-set, not for training


def fit_additive_scorer(scorer: AdditiveScorer, q: Tensor, k: Tensor, target_weights: Tensor,
                        mask: Tensor | None = None, steps: int = 200, lr: float = 0.05) -> float:
    """Train `scorer` (in place) so additive_attention's weights match target_weights.

    q: (..., T, d_q), k: (..., S, d_k), target_weights: (..., T, S). The loss is the mean
    cross-entropy of the rows that have an allowed key; returns the last loss.
    """
    if not isinstance(scorer, AdditiveScorer):
        raise TypeError(f"scorer must be an AdditiveScorer, got {type(scorer).__name__}")
    require_float("q", q, min_rank=2)
    require_float("k", k, min_rank=2)
    require_float("target_weights", target_weights, min_rank=2)
    expected = broadcast_shape("q's batch dimensions", tuple(q.shape[:-2]), "k's batch dimensions",
                               tuple(k.shape[:-2])) + (q.shape[-2], k.shape[-2])
    if target_weights.shape != expected:
        raise ValueError(f"target_weights must have the scores' shape {tuple(expected)}, "
                         f"got {tuple(target_weights.shape)}")
    if mask is not None and mask.dtype != torch.bool:
        raise TypeError(f"mask must be a boolean tensor (True = may attend), got dtype {mask.dtype}")
    target_weights = target_weights.detach()
    live = target_weights.sum(-1) > 0  # (..., T): rows with at least one allowed key

    def loss_of_step(_: int) -> Tensor:
        scores = scorer(q, k)  # (..., T, S)
        if mask is not None:
            scores = scores.masked_fill(~mask, -1e9)  # finite, so log_softmax has no 0 * -inf terms
        return -(target_weights * torch.log_softmax(scores, -1)).sum(-1)[live].mean()

    return train(loss_of_step, scorer.parameters(), steps, lr)[-1]
