"""Lesson 03: permutation symmetry, and what each bias does.

Without position information, self-attention treats its input as a *set* of token rows:
permuting the rows permutes the outputs the same way (equivariance). This module holds
the pieces the lesson permutes and measures:

    check_permutation / permute_tokens / inverse_permutation / random_permutation   reorder token rows
    linear, self_attention                          projections with optional biases, then lesson 01's attention
    random_block                                    the course's Block (lesson 02), one head, post-LN, random weights
    without_biases, res_post, with_token_norms      copies of it with biases dropped, norms moved, norms over tokens
    norm_over_tokens                                a norm that mixes tokens
    equivariance_gap, match_rows, describe_gap      the measurements
    bias_after_norm                                 what is left of a bias after BatchNorm / LayerNorm
    who_bites_task, train_order_classifier          a mean-pooling classifier trained on a word-order task

Shapes use the course's names: B batch, T positions, D model width, d_k, d_v, d_ff the FFN width;
a leading "..." means any batch dimensions. The block is the course's one Block, from the model
file lesson 02 introduces; the lesson's variants are copies of it with a piece changed.
The layers follow the lessons: attention comes from lesson 01 (the one attention path), the
causal mask from lesson 02; the block's LayerNorm is torch's nn.LayerNorm (lesson 05 writes it
out), and position vectors are whatever the caller adds to the tokens (lesson 04 builds them).
"""

from __future__ import annotations

import copy
import math
from typing import Callable, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention_scores import project_qkv, scaled_dot_product_attention
from .guards import (require_bool, require_choice, require_count, require_float, require_float_dtype, require_instance,
                     require_integer, require_number, require_same_dtype, require_tensor, require_width)
from .model import Block, ModelConfig

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


def _require_generator(generator: object) -> None:
    if generator is not None:
        require_instance("generator", generator, torch.Generator, "a torch.Generator or None")


def random_permutation(n: int, generator: torch.Generator | None = None) -> Tensor:
    """A uniformly random permutation of 0..n-1, shape (n,)."""
    require_count("n", n)
    _require_generator(generator)
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
    require_float_dtype("dtype", dtype)
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
        raise TypeError(f"{name} must have x's dtype {like.dtype}, got {bias.dtype}")


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None, name: str = "weight") -> Tensor:
    """x @ weight + bias, the same bias added to every token row.

    x: (..., T, D_in), weight: (D_in, D_out), bias: (D_out,) or None -> (..., T, D_out).
    `name` is the weight's name in error messages (its bias is named b_... for w_...).
    """
    require_float("x", x, min_rank=1)
    require_float(name, weight, 2, 2)
    if weight.shape[0] != x.shape[-1]:
        raise ValueError(f"{name} of shape {tuple(weight.shape)} must have {x.shape[-1]} rows to match x's last "
                         f"dimension: x has shape {tuple(x.shape)}")
    if weight.dtype != x.dtype:
        raise TypeError(f"{name} must have x's dtype {x.dtype}, got {weight.dtype}")
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


# ---------------------------------------------------------------- the block, and variants of it

PROJECTIONS = ("query", "key", "value", "out")


def random_block(D: int, d_ff: int, generator: torch.Generator | None = None,
                 dtype: torch.dtype = torch.float32) -> Block:
    """The course's one Block (course_lib/model.py): one head, post-LN, a ReLU FFN of width d_ff,
    every bias on, with random weights drawn from `generator`. x: (..., T, D) -> block(x)[0]: (..., T, D).

    Matrices are N(0, 1/fan_in), so activations stay near unit size as with nn.Linear's own
    initialisation; biases are N(0, 0.25), larger than nn.Linear's, so that dropping one changes
    the output visibly; LayerNorm gains are 1 + N(0, 0.01) and shifts N(0, 0.01). The lesson
    trains nothing, so the weights take no gradient.
    """
    config = ModelConfig(d_model=require_count("D", D), d_ff=require_count("d_ff", d_ff), norm="post")
    _require_generator(generator)
    require_float_dtype("dtype", dtype)
    with torch.random.fork_rng():  # the Block's own initial draw must not move the caller's global seed
        block = Block(config).to(dtype).requires_grad_(False)
    for name, p in block.named_parameters():
        noise = torch.randn(p.shape, generator=generator, dtype=dtype)
        if name.split(".")[0].endswith("_norm"):  # attention_norm, ffn_norm
            p.copy_(noise * 0.1 + (1.0 if name.endswith("weight") else 0.0))
        elif name.endswith("bias"):
            p.copy_(noise * 0.5)
        else:  # an nn.Linear weight, (out, in): each output sums `in` terms
            p.copy_(noise / math.sqrt(p.shape[1]))
    return block


def without_biases(block: Block, *projections: str) -> Block:
    """A copy of `block` whose attention has no bias in the named projections ("query", "key",
    "value", "out"); `block` is left as it is."""
    require_instance("block", block, Block)
    for name in projections:
        require_choice("projections", name, PROJECTIONS)
    variant = copy.deepcopy(block)
    for name in projections:
        getattr(variant.attention, name).bias = None  # nn.Linear then adds nothing
    return variant


class ResPostBlock(Block):
    """x = x + LN(f(x)): each sublayer's output is normalized, the residual stream never is. The
    layout the lesson's source post gives (Swin v2 calls it res-post-norm); made by res_post."""

    def add_to_stream(self, norm: nn.Module, x: Tensor, out: Tensor) -> Tensor:
        return x + norm(out)


class TokenNorm(nn.LayerNorm):
    """LayerNorm's gain and shift, with norm_over_tokens' statistics: each feature over all tokens."""

    def forward(self, x: Tensor) -> Tensor:
        return norm_over_tokens(x, self.weight, self.bias, self.eps)


def res_post(block: Block) -> ResPostBlock:
    """A copy of the post-LN `block` in the res-post layout: the same weights, the norms moved."""
    require_instance("block", block, Block)
    variant = copy.deepcopy(block)
    variant.__class__ = ResPostBlock  # same modules and weights; only `add_to_stream` differs
    return variant


def with_token_norms(block: Block) -> Block:
    """A copy of `block` whose norms take their statistics over every token (TokenNorm)."""
    require_instance("block", block, Block)
    variant = copy.deepcopy(block)
    for norm in (variant.attention_norm, variant.cross_norm, variant.ffn_norm):
        if norm is not None:
            norm.__class__ = TokenNorm  # same gain and shift; only the statistics differ
    return variant


def norm_over_tokens(x: Tensor, weight: Tensor | None, bias: Tensor | None, eps: float = 1e-5) -> Tensor:
    """Normalize each feature over the token axis (and batch): statistics mix all tokens.

    x: (..., T, D), weight, bias: (D,) -> (..., T, D). Not a norm any Transformer uses; the lesson
    uses it to show that even a norm that mixes tokens keeps equivariance, because a mean or a
    variance over tokens ignores their order.
    """
    require_float("x", x, min_rank=2)
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None:
            require_float(name, t, 1, 1)
            require_width(name, t, x.shape[-1])
    require_same_dtype(x=x, weight=weight, bias=bias)
    require_number("eps", eps, positive=True)
    if x.shape[-2] == 0:
        raise ValueError(f"x has no tokens (T = 0) to take statistics over: x has shape {tuple(x.shape)}")
    dims = tuple(range(x.dim() - 1))  # every axis but the features
    mean = x.mean(dim=dims, keepdim=True)  # (1, ..., 1, D)
    var = x.var(dim=dims, unbiased=False, keepdim=True)  # (1, ..., 1, D)
    out = (x - mean) / torch.sqrt(var + eps)  # (..., T, D)
    out = out if weight is None else out * weight
    return out if bias is None else out + bias

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


# ---------------------------------------------------------------- a classifier on the mean-pooled outputs

ANIMALS = ("dog", "cat", "fox", "owl", "bee", "rat")
PEOPLE = ("man", "boy", "girl", "nun", "cook", "king")


class OrderTask(NamedTuple):
    """Every sentence "<animal> bites <person>" and "<person> bites <animal>", N = 2 x 6 x 6 = 72.

    ids: (N, 3) token ids into vocab; labels: (N,) 1 when the animal bites (it comes first);
    pair: (N,) which (animal, person) pair, shared by the sentence's two orders. Both orders of a
    pair hold the same three words, so only word order tells the labels apart.
    """

    ids: Tensor
    labels: Tensor
    pair: Tensor
    vocab: tuple[str, ...]


def who_bites_task() -> OrderTask:
    """The task's 72 sentences, each pair's two orders next to each other (see OrderTask)."""
    vocab = ANIMALS + PEOPLE + ("bites",)
    verb, rows, labels, pairs = len(vocab) - 1, [], [], []
    for a in range(len(ANIMALS)):
        for p in range(len(PEOPLE)):
            person = len(ANIMALS) + p
            rows += [[a, verb, person], [person, verb, a]]
            labels += [1, 0]
            pairs += [a * len(PEOPLE) + p] * 2
    return OrderTask(torch.tensor(rows), torch.tensor(labels), torch.tensor(pairs), vocab)


class OrderResult(NamedTuple):
    """A trained classifier's share of right answers on its training sentences and on the held-out
    pairs' sentences; and order_gap, the largest difference between the logits of a pair's two
    orders (over all 36 pairs): 0 up to rounding means the classifier cannot see the order."""

    train_accuracy: float
    held_out_accuracy: float
    held_out_sentences: int
    order_gap: float


def train_order_classifier(seed: int, positions: bool, steps: int = 40, d_model: int = 8,
                           held_out_pairs: int = 12, lr: float = 0.05) -> OrderResult:
    """Train embeddings, one post-LN Block and a linear head on the mean of the block's output rows
    to say whether the animal bites (who_bites_task), and test it on pairs it never saw.

    `seed` draws the held-out pairs, the initial weights and the position table (one random
    (d_model,) vector per slot, added to the embeddings and not trained) when `positions` is
    True; without positions nothing says where a word sits. Full-batch Adam, float64.
    Embeddings (N, 3, D) -> block (N, 3, D) -> mean over the 3 rows (N, D) -> head (N,) logits.
    """
    require_count("seed", seed, minimum=0)
    require_bool("positions", positions)
    require_count("steps", steps)
    require_count("d_model", d_model)
    require_number("lr", lr, positive=True)
    task = who_bites_task()
    n_pairs = int(task.pair.max()) + 1
    require_count("held_out_pairs", held_out_pairs)
    if held_out_pairs >= n_pairs:
        raise ValueError(f"held_out_pairs must leave some of the {n_pairs} pairs to train on, got {held_out_pairs}")
    dt = torch.float64
    g = torch.Generator().manual_seed(seed)
    test = torch.isin(task.pair, torch.randperm(n_pairs, generator=g)[:held_out_pairs])  # (N,)
    table = (torch.randn(3, d_model, generator=g, dtype=dt) if positions
             else torch.zeros(3, d_model, dtype=dt))  # (T, D): one vector per slot, or none
    with torch.random.fork_rng():  # seeded initial weights; the caller's global seed is left alone
        torch.manual_seed(seed)
        embed = nn.Embedding(len(task.vocab), d_model).to(dt)
        block = Block(ModelConfig(d_model=d_model, d_ff=4 * d_model, norm="post")).to(dt)
        head = nn.Linear(d_model, 1).to(dt)
    params = [*embed.parameters(), *block.parameters(), *head.parameters()]
    optimizer = torch.optim.Adam(params, lr=lr)

    def logits(rows: Tensor) -> Tensor:
        x = embed(task.ids[rows]) + table  # (n, 3, D)
        return head(block.run(x)[0].mean(-2))[:, 0]  # mean-pool the rows: (n, D) -> (n,)

    train = ~test
    for _ in range(steps):
        loss = F.binary_cross_entropy_with_logits(logits(train), task.labels[train].to(dt))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        every = logits(torch.ones_like(test))  # (N,): each pair's two orders side by side
    right = (every > 0).long() == task.labels  # (N,)
    return OrderResult(right[train].double().mean().item(), right[test].double().mean().item(),
                       int(test.sum()), (every[0::2] - every[1::2]).abs().max().item())
