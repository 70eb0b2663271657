"""Lesson 05: BatchNorm, LayerNorm and RMSNorm written out.

Every function here takes features LAST: x is (B, T, D) for a batch of sequences, or (N, D)
for a batch of single vectors; a leading "..." means any number of batch dimensions.
(torch's nn.BatchNorm1d wants features SECOND, (B, D, T); the tests transpose to compare.)

Which entries share one mean and one variance:
    BatchNorm  one feature d, every token of every sequence:  x[:, :, d]   (B*T values)
    LayerNorm  one token (b, t), every feature:                 x[b, t, :]   (D values)
    RMSNorm    like LayerNorm, but no mean is subtracted (only the root mean square divides)

Padding masks follow the course convention: True = a real token, False = padding.

Also here: why normalize (a sigmoid layer's saturation and gradient, sigmoid_layer_gradient),
and where the norm goes in a Transformer block (residual_block, post-LN or pre-LN, stacked by
block_stack and measured through depth by depth_profile).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import torch
from torch import Tensor, nn

from .model import Block, ModelConfig  # the course's block, for "where the norm goes"
from .optimizers import SGD
from .guards import (require_bool, require_broadcasts_to, require_choice, require_count, require_float,
                     require_index, require_instance, require_items, require_mask, require_number, require_same_dtype,
                     require_same_shape, require_tensor, require_width)

NORM_KINDS = ("batch", "layer", "rms")
PLACEMENTS = ("post", "pre")


# ---------------------------------------------------------------- input checks shared by the norms

def _check_per_feature(x: Tensor, **vectors: Tensor | None) -> None:
    """gamma, beta and running statistics are float vectors (D,) with x's dtype; None is skipped."""
    for name, v in vectors.items():
        if v is not None:
            require_float(name, v, 1, 1)
            require_width(name, v, x.shape[-1])
    require_same_dtype(x=x, **vectors)


def _check_mask(mask: Tensor | None, x: Tensor) -> None:
    """A padding mask is bool with x's shape minus the feature axis (True = real token)."""
    if mask is not None and require_mask("mask", mask).shape != x.shape[:-1]:
        raise ValueError(f"mask of shape {tuple(mask.shape)} must have x's shape without the feature axis: x has "
                         f"shape {tuple(x.shape)}")


# ---------------------------------------------------------------- BatchNorm

def batch_statistics(x: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor, int]:
    """Per-feature mean and (biased) variance over every token of the batch.

    x: (..., D), at least (N, D); mask: bool (...), True = real token, or None = every token counts.
    Returns mean (D,), var (D,) and the number of tokens the statistics were taken over.
    The variance divides by that count n (not n - 1), as BatchNorm's normalization does.
    """
    require_float("x", x, min_rank=2)
    _check_mask(mask, x)
    flat = x.reshape(-1, x.shape[-1])  # (N, D): every token of every sequence is one row
    if mask is not None:
        flat = flat[mask.reshape(-1)]  # (n, D): padding rows dropped
    count = flat.shape[0]
    if count == 0:
        raise ValueError(f"mask must mark at least one token as real, but marks none in x of shape "
                         f"{tuple(x.shape)}: there are no statistics to take")
    mean = flat.mean(dim=0)  # (D,)
    var = ((flat - mean) ** 2).mean(dim=0)  # (D,)
    return mean, var, count


def normalize(x: Tensor, mean: Tensor, var: Tensor, eps: float) -> Tensor:
    """(x - mean) / sqrt(var + eps); mean and var broadcast against x (any shapes)."""
    for name, t in (("x", x), ("mean", mean), ("var", var)):
        require_float(name, t)
    eps = require_number("eps", eps, non_negative=True)
    for name, t in (("mean", mean), ("var", var)):
        require_broadcasts_to(name, t, tuple(x.shape), "x")
    return (x - mean) / torch.sqrt(var + eps)


def batch_norm(x: Tensor, running_mean: Tensor | None, running_var: Tensor | None,
               weight: Tensor | None = None, bias: Tensor | None = None, training: bool = True,
               momentum: float = 0.1, eps: float = 1e-5, mask: Tensor | None = None) -> Tensor:
    """BatchNorm with features last; like torch.nn.functional.batch_norm.

    x: (..., D) -> (..., D). weight (gamma), bias (beta), running_mean, running_var: (D,).
    training=True: normalize with this batch's statistics and, if running buffers are given,
        update them in place: running = (1 - momentum) * running + momentum * batch value,
        where the variance fed to the running average is the unbiased one (n / (n - 1)).
    training=False: normalize with running_mean and running_var; nothing is updated.
    mask: bool (...), True = real token; padding is left out of the batch statistics.
    """
    require_float("x", x, min_rank=2)
    _check_per_feature(x, running_mean=running_mean, running_var=running_var, weight=weight, bias=bias)
    eps = require_number("eps", eps, non_negative=True)
    momentum = require_number("momentum", momentum, non_negative=True, at_most=1.0)
    require_bool("training", training)
    if (running_mean is None) != (running_var is None):
        raise ValueError("give both running_mean and running_var, or neither")
    if running_var is not None and bool((running_var < 0).any()):
        raise ValueError(f"running_var must be >= 0 (a variance), got smallest value {float(running_var.min()):g}")
    if training:
        mean, var, count = batch_statistics(x, mask)  # checks the mask
        real = "real (mask) " if mask is not None else ""
        if count < 2:  # lesson 05 prints this message
            raise ValueError(f"batch_norm in training mode needs at least 2 tokens to estimate each feature's variance, "
                             f"but x of shape {tuple(x.shape)} gives {count} {real}token per feature. With one token, "
                             "x - mean = 0 and the output would be beta whatever the input. Use a larger batch, "
                             "eval mode (running statistics) or LayerNorm.")
        if running_mean is not None:
            with torch.no_grad():  # the running averages are bookkeeping, not part of the graph
                running_mean.mul_(1 - momentum).add_(momentum * mean)
                running_var.mul_(1 - momentum).add_(momentum * var * count / (count - 1))
    else:
        if running_mean is None:
            raise ValueError("batch_norm in eval mode (training=False) needs running_mean and running_var")
        mean, var = running_mean, running_var
    out = (x - mean) / torch.sqrt(var + eps)  # (..., D)
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out


class BatchNorm(nn.Module):
    """BatchNorm over the last axis with learnable gamma (weight), beta (bias) and running statistics.

    Same buffers and update rule as torch.nn.BatchNorm1d(D): momentum=None means a cumulative
    average over all batches seen (factor 1 / num_batches_tracked). Input (..., D) -> (..., D).
    """

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1):
        super().__init__()
        require_count("num_features", num_features)
        self.eps = require_number("eps", eps, non_negative=True)
        if momentum is not None:  # None = cumulative average, as in torch
            momentum = require_number("momentum", momentum, non_negative=True, at_most=1.0)
        self.momentum = momentum
        self.weight = nn.Parameter(torch.ones(num_features))
        self.bias = nn.Parameter(torch.zeros(num_features))
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))
        self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        require_width("x", require_tensor("x", x, min_rank=1), len(self.weight))  # names x, not weight
        momentum = self.momentum
        if momentum is None:  # cumulative average: this batch weighs 1 / (batches seen, this one included)
            momentum = 1.0 / (int(self.num_batches_tracked) + 1)
        out = batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                         self.training, momentum, self.eps, mask)
        if self.training:  # counted only once batch_norm has accepted the batch
            self.num_batches_tracked += 1
        return out


# ---------------------------------------------------------------- LayerNorm and RMSNorm

def layer_norm(x: Tensor, weight: Tensor | None = None, bias: Tensor | None = None,
               eps: float = 1e-5) -> Tensor:
    """LayerNorm over the last axis; like F.layer_norm(x, (D,), weight, bias, eps).

    x: (..., D) -> (..., D). Each token is centered and scaled by its own mean and (biased)
    variance over its D features; no other token and no running statistic is involved.
    """
    require_float("x", x, min_rank=1)
    _check_per_feature(x, weight=weight, bias=bias)
    eps = require_number("eps", eps, non_negative=True)
    mean = x.mean(dim=-1, keepdim=True)  # (..., 1)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)  # (..., 1)
    out = (x - mean) / torch.sqrt(var + eps)
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out


def rms_norm(x: Tensor, weight: Tensor | None = None, eps: float | None = None) -> Tensor:
    """RMSNorm over the last axis; like torch.nn.RMSNorm(D) / F.rms_norm.

    x: (..., D) -> (..., D): x / sqrt(mean(x^2) + eps) * weight. No mean is subtracted and
    there is no bias. eps=None uses torch.finfo(x.dtype).eps, as torch does.
    """
    require_float("x", x, min_rank=1)
    _check_per_feature(x, weight=weight)
    eps = torch.finfo(x.dtype).eps if eps is None else require_number("eps", eps, non_negative=True)
    mean_square = (x ** 2).mean(dim=-1, keepdim=True)  # (..., 1)
    out = x / torch.sqrt(mean_square + eps)
    return out * weight if weight is not None else out


class LayerNorm(nn.Module):
    """LayerNorm over the last axis with learnable gamma (weight) and beta (bias); no buffers."""

    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        require_count("num_features", num_features)
        self.eps = require_number("eps", eps, non_negative=True)
        self.weight = nn.Parameter(torch.ones(num_features))
        self.bias = nn.Parameter(torch.zeros(num_features))

    def forward(self, x: Tensor) -> Tensor:
        require_width("x", require_tensor("x", x, min_rank=1), len(self.weight))  # names x, not weight
        return layer_norm(x, self.weight, self.bias, self.eps)


class RMSNorm(nn.Module):
    """RMSNorm over the last axis with a learnable gain (weight) and no bias."""

    def __init__(self, num_features: int, eps: float | None = None):
        super().__init__()
        require_count("num_features", num_features)
        self.eps = None if eps is None else require_number("eps", eps, non_negative=True)
        self.weight = nn.Parameter(torch.ones(num_features))

    def forward(self, x: Tensor) -> Tensor:
        require_width("x", require_tensor("x", x, min_rank=1), len(self.weight))  # names x, not weight
        return rms_norm(x, self.weight, self.eps)


def normalize_tokens(kind: str, x: Tensor, mask: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Normalize (..., D) with no gamma/beta by kind = "batch" (training statistics), "layer" or "rms".

    mask (bool (...), True = real) only matters for "batch": it keeps padding out of the statistics.
    """
    require_choice("kind", kind, NORM_KINDS)
    if kind == "batch":
        return batch_norm(x, None, None, training=True, eps=eps, mask=mask)
    if mask is not None:
        raise ValueError(f"mask must be None unless kind='batch': {kind} norm takes no statistics across tokens")
    return layer_norm(x, eps=eps) if kind == "layer" else rms_norm(x, eps=eps)


# ---------------------------------------------------------------- what shares statistics

def dependence_mask(fn: Callable[[Tensor], Tensor], x: Tensor, index: tuple[int, ...]) -> Tensor:
    """Which entries of x the output entry fn(x)[index] depends on, found by autograd.

    x: any shape; fn maps it to the same shape. Returns a bool tensor shaped like x, True where
    d fn(x)[index] / d x is not zero: for a normalization, the slice that shares its statistics.
    """
    require_instance("fn", fn, Callable, "a function of x")
    require_float("x", x)
    entry = isinstance(index, tuple) and len(index) == x.dim()
    if not entry or any(type(i) is not int or not -n <= i < n for i, n in zip(index, x.shape)):
        raise ValueError(f"index {index!r} must be a tuple of {x.dim()} ints addressing one entry of x of shape "
                         f"{tuple(x.shape)}")
    x = x.detach().clone().requires_grad_(True)
    fn(x)[index].backward()
    return x.grad != 0


def expected_slice(kind: str, shape: tuple[int, int, int], b: int, t: int, d: int) -> Tensor:
    """The textbook answer for a (B, T, D) block: True on the entries sharing entry (b, t, d)'s statistics."""
    require_choice("kind", kind, NORM_KINDS)
    if not isinstance(shape, tuple) or len(shape) != 3:
        raise ValueError(f"shape must be (B, T, D), got {shape!r}")
    for name, size in zip(("B", "T", "D"), shape):
        require_count(f"shape's {name}", size)
    for name, i, n in (("b", b, shape[0]), ("t", t, shape[1]), ("d", d, shape[2])):
        require_index(name, i, n, f"entries along {name.upper()} of the block of shape {shape}")
    out = torch.zeros(shape, dtype=torch.bool)
    if kind == "batch":
        out[:, :, d] = True  # one feature, every token of every sequence
    else:
        out[b, t, :] = True  # one token, every feature
    return out


# ---------------------------------------------------------------- why normalize: the sigmoid

def sigmoid_slope(z: Tensor) -> Tensor:
    """d sigmoid(z) / dz, computed by autograd (it equals sigmoid(z) * (1 - sigmoid(z))); same shape as z."""
    require_float("z", z)
    z = z.detach().clone().requires_grad_(True)
    torch.sigmoid(z).sum().backward()
    return z.grad


class SigmoidLayerReading(NamedTuple):
    """What one sigmoid layer measures; see sigmoid_layer_gradient."""
    saturated: float  # share of the sigmoid's inputs with |.| > 4, where its slope is below 0.018
    slope: float  # mean slope of the sigmoid over those inputs
    grad_z: float  # mean norm per token of d loss / dz, z = x W + shift (before any norm)
    grad_w: float  # norm of d loss / dW


def sigmoid_layer_gradient(scale: float, shift: float, normalized: bool, n_tokens: int = 256,
                           d_in: int = 32, d_out: int = 32, seed: int = 0) -> SigmoidLayerReading:
    """A sigmoid layer h = sigmoid(z), or sigmoid(BatchNorm(z)), with z = x W + shift.

    W's entries have std scale / sqrt(d_in). normalized=True puts a BatchNorm (batch statistics,
    gamma = 1, beta = 0) between z and the sigmoid. x: (n_tokens, d_in) standard normal; loss = sum(h * g) for a fixed random upstream
    gradient g (n_tokens, d_out). The gradient is read at z and at W, BEFORE the norm, so the
    norm's division by sigma is counted: that is what reaches the weights and everything below.
    The same seed gives the same x, g and direction of W for every scale and shift.
    """
    scale = require_number("scale", scale, positive=True)
    shift = require_number("shift", shift)
    require_bool("normalized", normalized)
    for name, size in (("n_tokens", n_tokens), ("d_in", d_in), ("d_out", d_out)):
        require_count(name, size, minimum=2 if name == "n_tokens" else 1)
    require_count("seed", seed, minimum=0)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n_tokens, d_in, generator=gen, dtype=torch.float64)
    w = torch.randn(d_in, d_out, generator=gen, dtype=torch.float64) * scale / d_in ** 0.5
    upstream = torch.randn(n_tokens, d_out, generator=gen, dtype=torch.float64)
    w.requires_grad_(True)
    z = x @ w + shift  # (n_tokens, d_out)
    z.retain_grad()
    into_sigmoid = batch_norm(z, None, None, training=True) if normalized else z
    (torch.sigmoid(into_sigmoid) * upstream).sum().backward()
    into_sigmoid = into_sigmoid.detach()
    return SigmoidLayerReading((into_sigmoid.abs() > 4).double().mean().item(),
                               sigmoid_slope(into_sigmoid).mean().item(),
                               z.grad.norm(dim=-1).mean().item(), w.grad.norm().item())


# ---------------------------------------------------------------- where the norm goes: post-LN vs pre-LN

def residual_block(d_model: int, d_ff: int, placement: str) -> Block:
    """The course's Block with one attention head (no biases) and a small ReLU FFN, LayerNorm after or before.

    placement "post" (the 2017 Transformer): x = LN(x + attn(x)), then x = LN(x + ffn(x)).
    placement "pre"  (GPT-2, nanoGPT):       x = x + attn(LN(x)), then x = x + ffn(LN(x)).
    block(x)[0]: (..., T, D) -> (..., T, D). No mask: every token sees every token.
    """
    require_count("d_model", d_model)
    require_count("d_ff", d_ff)
    require_choice("placement", placement, PLACEMENTS)
    config = ModelConfig(d_model=d_model, d_ff=d_ff, norm=placement, bias=False)
    return Block(config)


def block_stack(placement: str, depth: int, d_model: int = 64, d_ff: int = 256,
                seed: int = 0) -> nn.ModuleList:
    """`depth` residual_blocks at torch's default initialisation, float64, drawn from `seed`.

    The same seed gives the same weights for "post" and "pre", so only the norms' place differs.
    The global random state is left as it was.
    """
    require_choice("placement", placement, PLACEMENTS)
    require_count("depth", depth)
    require_count("d_model", d_model)
    require_count("d_ff", d_ff)
    require_count("seed", seed, minimum=0)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return nn.ModuleList(residual_block(d_model, d_ff, placement) for _ in range(depth)).double()


def depth_profile(blocks: nn.ModuleList, x: Tensor, upstream: Tensor) -> tuple[Tensor, Tensor]:
    """Run x through the blocks, then back-propagate loss = sum(out * upstream).

    x, upstream: (..., T, D) float64. A pre-LN stack ends with a final LayerNorm (as GPT-2's ln_f),
    a post-LN stack's output is already normalized. Returns (stream_norms (depth + 1,): mean norm per
    token of the residual stream, the input then after each block; block_grads (depth,): norm of the
    gradient of each block's parameters).
    """
    if (not isinstance(blocks, nn.ModuleList) or len(blocks) == 0
            or not all(isinstance(b, Block) and b.norm in PLACEMENTS for b in blocks)):
        raise TypeError("blocks must be a non-empty nn.ModuleList of post-LN or pre-LN Blocks, as block_stack returns")
    if len({b.norm for b in blocks}) > 1:
        raise ValueError("blocks mix post-LN and pre-LN; build them with one block_stack call")
    require_width("x", require_float("x", x, min_rank=2), blocks[0].attention.d_model)
    require_same_shape("upstream", require_float("upstream", upstream, min_rank=2), "x", x)
    require_same_dtype(x=x, upstream=upstream, blocks_weights=next(blocks.parameters()))
    blocks.zero_grad(set_to_none=True)
    stream, norms = x, [x.norm(dim=-1).mean()]
    for block in blocks:
        stream = block(stream)[0]  # (..., T, D)
        norms.append(stream.norm(dim=-1).mean())
    out = layer_norm(stream) if blocks[0].norm == "pre" else stream
    (out * upstream).sum().backward()
    grads = [torch.cat([p.grad.flatten() for p in block.parameters()]).norm() for block in blocks]
    return torch.stack(norms).detach(), torch.stack(grads)


# ---------------------------------------------------------------- lesson data: a toy batch of sentences

EMBED_DIM = 6
PAD = "<pad>"
# Sequence 0 is the one we watch; its first token "cat" is the fixed token of the lesson.
WATCHED = "cat sat on the mat and slept well"
PROSE = ["dog ran to the park and barked twice", "bird sang in the tree at dawn today",
         "kid read a book on the sofa again", "fish swam under the old boat all day"]
CODE = ["for i in range ( n ) :", "x = y * 2 + z ;", "return f ( x ) if ok ;"]
COMPOSITIONS = {
    "alone (B = 1)": [],
    "+1 similar sentence": PROSE[:1],
    "+3 similar sentences": PROSE[:3],
    "+3 lines of code": CODE,
    "+7 mixed": PROSE + CODE,
}
# Real embeddings have features with non-zero means; the pad vector is all zeros
# (nn.Embedding's padding_idx row), so padding drags every feature's mean toward 0.
_FEATURE_OFFSET = torch.tensor([1.5, -1.0, 0.5, 2.0, -0.5, 1.0])


def _vocabulary() -> dict[str, Tensor]:
    prose = sorted({w for s in [WATCHED, *PROSE] for w in s.split()})
    code = sorted({w for s in CODE for w in s.split()} - set(prose))
    gen = torch.Generator().manual_seed(5)
    table = {w: torch.randn(EMBED_DIM, generator=gen) * 0.7 + _FEATURE_OFFSET for w in prose}
    # Code tokens come from another distribution: shifted and wider.
    table |= {w: torch.randn(EMBED_DIM, generator=gen) * 1.5 + _FEATURE_OFFSET + 2.5 for w in code}
    table[PAD] = torch.zeros(EMBED_DIM)
    return table


VOCABULARY = _vocabulary()


def toy_batch(others: list[str], length: int, padding: int = 0) -> tuple[Tensor, Tensor, list[list[str]]]:
    """The watched sentence plus `others`, each cut to `length` tokens, then `padding` pad tokens each.

    Returns x (B, length + padding, D) with B = 1 + len(others), mask (B, length + padding)
    (True = real token) and the token strings per sequence. x[0, 0] is always "cat".
    """
    if not isinstance(others, (list, tuple)) or not all(isinstance(s, str) for s in others):
        raise TypeError(f"others must be a list of sentences (str), got {others!r}")
    require_count("length", length)
    if length > 8:
        raise ValueError(f"length must be between 1 and 8 (the sentences have 8 tokens), got {length}")
    require_count("padding", padding, minimum=0)
    rows = [s.split()[:length] + [PAD] * padding for s in [WATCHED, *others]]
    unknown = sorted({w for r in rows for w in r} - VOCABULARY.keys())
    if unknown:
        raise ValueError(f"words not in the toy vocabulary: {unknown}")
    x = torch.stack([torch.stack([VOCABULARY[w] for w in r]) for r in rows])  # (B, T, D)
    mask = torch.tensor([[w != PAD for w in r] for r in rows])  # (B, T)
    return x, mask, rows


# ---------------------------------------------------------------- convergence with and without a norm
# Small sigmoid MLPs, one per seed, trained side by side: every parameter has a leading seed axis S,
# so one matrix product trains all seeds at once (each seed's loss only reaches its own weights).

MLP_NORMS = ("none", "batch", "layer", "rms")


def _require_seeds(seeds: object) -> list[int]:
    """seeds: a non-empty list of ints >= 0."""
    seeds = list(require_items("seeds", seeds))
    for seed in seeds:
        require_count("seed", seed, minimum=0)
    return seeds


def _require_model_seeds(model: object, seeds: object) -> list[int]:
    """model: a SeedMLP; seeds: the list it was built with (as many)."""
    require_instance("model", model, SeedMLP)
    seeds = _require_seeds(seeds)
    if len(seeds) != model.weights[0].shape[0]:
        raise ValueError(f"seeds must be the {model.weights[0].shape[0]} seeds the model was built with, "
                         f"got {len(seeds)}: {seeds}")
    return seeds


def labelled_inputs(seeds: list[int], n: int, shift: float = 0.0, test: bool = False, d_in: int = 16,
                    n_classes: int = 4) -> tuple[Tensor, Tensor]:
    """Per seed: n inputs x (S, n, d_in), labels argmax(x W_teacher) (S, n).

    x ~ N(0, 1) moved by `shift` along a unit direction u with W_teacher^T u = 0: the inputs
    leave the training distribution, while the rule and the share of each class stay the same
    (a covariate shift). The teacher W_teacher (d_in, n_classes) depends on the seed only.
    test=True draws other inputs than training.
    """
    seeds, n = _require_seeds(seeds), require_count("n", n)
    shift, test = require_number("shift", shift), require_bool("test", test)
    d_in, n_classes = require_count("d_in", d_in, minimum=2), require_count("n_classes", n_classes, minimum=2)
    if n_classes >= d_in:
        raise ValueError(f"n_classes={n_classes} must be below d_in={d_in}: the shift needs a direction the "
                         "teacher ignores")
    xs, ys = [], []
    for seed in seeds:
        teacher_gen = torch.Generator().manual_seed(seed)
        teacher = torch.randn(d_in, n_classes, generator=teacher_gen)
        data_gen = torch.Generator().manual_seed(seed + (700 if test else 500))  # apart from the teacher
        away = torch.randn(d_in, generator=teacher_gen)
        away = away - teacher @ torch.linalg.lstsq(teacher, away).solution  # W_teacher^T away = 0
        x = torch.randn(n, d_in, generator=data_gen) + shift * away / away.norm()  # (n, d_in)
        xs.append(x), ys.append((x @ teacher).argmax(-1))
    return torch.stack(xs), torch.stack(ys)


class SeedMLP(nn.Module):
    """S independent MLPs d_in -> width -> width -> n_classes, sigmoid after each hidden layer,
    with `norm` ("none", "batch", "layer", "rms") before each sigmoid.

    x: (S, N, d_in) -> logits (S, N, n_classes). "batch" uses the statistics of each seed's own
    batch (training mode), so the seeds never share one. bias=False drops every bias (and
    LayerNorm's beta). Seed s draws its weights from torch.Generator().manual_seed(seeds[s]).
    """

    def __init__(self, seeds: list[int], norm: str, bias: bool = True, d_in: int = 16, width: int = 32,
                 n_classes: int = 4):
        super().__init__()
        seeds, norm, bias = _require_seeds(seeds), require_choice("norm", norm, MLP_NORMS), require_bool("bias", bias)
        d_in, width, n_classes = (require_count(name, value) for name, value in
                                  (("d_in", d_in), ("width", width), ("n_classes", n_classes)))
        self.norm, self.bias, self.d_in = norm, bias, d_in
        sizes = [(d_in, width), (width, width), (width, n_classes)]
        weights = [[] for _ in sizes]
        for seed in seeds:
            gen = torch.Generator().manual_seed(seed + 1000_000)  # apart from labelled_inputs' seeds
            for layer, (fan_in, fan_out) in enumerate(sizes):  # nn.Linear's uniform(+-1/sqrt(fan_in))
                weights[layer].append((torch.rand(fan_in, fan_out, generator=gen) * 2 - 1) / fan_in ** 0.5)
        self.weights = nn.ParameterList([nn.Parameter(torch.stack(w)) for w in weights])  # (S, in, out)
        n_seeds = len(seeds)
        self.biases = nn.ParameterList([nn.Parameter(torch.zeros(n_seeds, 1, out)) for _, out in sizes]
                                       if bias else [])
        self.gammas = nn.ParameterList([nn.Parameter(torch.ones(n_seeds, 1, width)) for _ in range(2)])
        self.betas = nn.ParameterList([nn.Parameter(torch.zeros(n_seeds, 1, width)) for _ in range(2)]
                                      if bias and norm in ("batch", "layer") else [])

    def _normalized(self, h: Tensor, layer: int) -> Tensor:
        """h: (S, N, width), normalized as self.norm says, then gamma (and beta)."""
        if self.norm == "none":
            return h
        if self.norm == "batch":  # one mean and variance per seed and feature, over that seed's N
            h = normalize(h, h.mean(1, keepdim=True), h.var(1, unbiased=False, keepdim=True), 1e-5)
        else:
            h = normalize_tokens(self.norm, h)
        h = h * self.gammas[layer]
        return h + self.betas[layer] if self.betas else h

    def forward(self, x: Tensor) -> Tensor:
        require_float("x", x)
        n_seeds = self.weights[0].shape[0]
        if x.dim() != 3 or x.shape[0] != n_seeds or x.shape[2] != self.d_in:
            raise ValueError(f"x must be (S={n_seeds}, N, d_in={self.d_in}), got shape {tuple(x.shape)}")
        if self.norm == "batch" and x.shape[1] < 2:
            raise ValueError(f"x must hold at least 2 inputs per seed for BatchNorm's statistics, got {x.shape[1]}")
        for layer, weight in enumerate(self.weights):
            x = x @ weight  # (S, N, out)
            if self.biases:
                x = x + self.biases[layer]
            if layer < 2:
                x = torch.sigmoid(self._normalized(x, layer))
        return x


def _mlp_loss(model: SeedMLP, x: Tensor, y: Tensor) -> Tensor:
    """Cross-entropy per seed: x (S, N, d_in), y (S, N) -> (S,)."""
    logits = model(x)  # (S, N, C)
    return nn.functional.cross_entropy(logits.transpose(1, 2), y, reduction="none").mean(-1)


def train_seed_mlps(seeds: list[int], norm: str, steps: int, lr: float = 0.5, batch: int = 64,
                    bias: bool = True) -> tuple[SeedMLP, Tensor]:
    """Train SeedMLP(seeds, norm, bias) with plain SGD on labelled_inputs(seeds, steps * batch).

    Returns the model and the training losses (S, steps): entry [s, i] is seed s's loss on its
    batch at step i, before that step's update.
    """
    seeds = _require_seeds(seeds)
    require_choice("norm", norm, MLP_NORMS)
    steps, batch = require_count("steps", steps), require_count("batch", batch, minimum=2)
    lr, bias = require_number("lr", lr, positive=True), require_bool("bias", bias)
    model = SeedMLP(seeds, norm, bias)
    return model, _sgd(model, *labelled_inputs(seeds, steps * batch), lr, batch)


def train_shifted(model: SeedMLP, seeds: list[int], steps: int, trained: int, shift: float, lr: float = 0.5,
                  batch: int = 64) -> Tensor:
    """Train `model` `steps` more SGD steps on the next inputs of its training stream, moved by
    `shift` (labelled_inputs): a covariate shift in the middle of training. The labels stay.

    model: trained `trained` steps by train_seed_mlps(seeds, ..., batch=batch), whose stream of
    inputs this continues (plain SGD keeps no state, so nothing else is needed). Returns the
    losses (S, steps), each before its step's update. The model is changed in place.
    """
    seeds = _require_model_seeds(model, seeds)
    steps, trained = require_count("steps", steps), require_count("trained", trained, minimum=0)
    batch, lr = require_count("batch", batch, minimum=2), require_number("lr", lr, positive=True)
    x, y = labelled_inputs(seeds, (trained + steps) * batch, require_number("shift", shift))
    return _sgd(model, x[:, trained * batch:], y[:, trained * batch:], lr, batch)


def _sgd(model: SeedMLP, x: Tensor, y: Tensor, lr: float, batch: int) -> Tensor:
    """Plain SGD on x (S, steps * batch, d_in), y (S, steps * batch), one batch per step, in order:
    the losses (S, steps), each before its step's update. Summing the seeds' losses gives each
    seed exactly its own gradient (their parameters are disjoint). The step is the course's SGD:
    torch.optim's imports torch's compiler on first use, some 1.5 s in a notebook."""
    parameters = list(model.parameters())
    optimizer = SGD(parameters, lr)
    losses = []
    for start in range(0, x.shape[1], batch):
        loss = _mlp_loss(model, x[:, start:start + batch], y[:, start:start + batch])  # (S,)
        for p in parameters:
            p.grad = None
        loss.sum().backward()
        optimizer.step()
        losses.append(loss.detach())
    return torch.stack(losses, 1)


def steps_to_reach(losses: Tensor, level: float, window: int = 10) -> Tensor:
    """losses (S, steps) -> (S,): the first step at which the mean of the next `window` losses is
    below `level` (steps - window + 1 if it never is)."""
    require_float("losses", losses, min_rank=2)
    level, window = require_number("level", level), require_count("window", window)
    if losses.dim() != 2 or window > losses.shape[1]:
        raise ValueError(f"losses must be (S, steps) with at least window={window} steps, got shape "
                         f"{tuple(losses.shape)}")
    smooth = losses.unfold(-1, window, 1).mean(-1)  # (S, steps - window + 1)
    below = smooth < level
    never = torch.full(below.shape[:-1], smooth.shape[-1])
    first = below.double().argmax(-1)
    return torch.where(below.any(-1), first, never)


@torch.no_grad()
def shifted_accuracy(model: SeedMLP, seeds: list[int], shift: float, n: int = 2048) -> Tensor:
    """(S,): each seed's accuracy on n fresh test inputs moved by `shift` (labelled_inputs).

    seeds must be the ones the model was trained with. A "batch" model normalizes with the
    statistics of this test batch (it keeps no running ones), which re-centres a shifted batch.
    """
    seeds = _require_model_seeds(model, seeds)
    x, y = labelled_inputs(seeds, require_count("n", n, minimum=2), require_number("shift", shift), test=True)
    return (model(x).argmax(-1) == y).double().mean(-1)
