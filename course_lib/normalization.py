"""Lesson 05: BatchNorm, LayerNorm and RMSNorm written out.

Every function here takes features LAST: x is (B, T, D) for a batch of sequences, or (N, D)
for a batch of single vectors; a leading "..." means any number of batch dimensions.
(torch's nn.BatchNorm1d wants features SECOND, (B, D, T); the tests transpose to compare.)

Which entries share one mean and one variance:
    BatchNorm  one feature d, every token of every sequence:  x[:, :, d]   (B*T values)
    LayerNorm  one token (b, t), every feature:                 x[b, t, :]   (D values)
    RMSNorm    like LayerNorm, but no mean is subtracted (only the root mean square divides)

Padding masks follow the course convention: True = a real token, False = padding.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor, nn

from .guards import require_float, require_number, require_rank, require_tensor

NORM_KINDS = ("batch", "layer", "rms")


# ---------------------------------------------------------------- input checks

def _check_x(x: Tensor, name: str = "x", min_rank: int = 2) -> None:
    """BatchNorm needs at least (N, D) (an axis of tokens to average over); Layer/RMSNorm accept (D,)."""
    require_tensor(name, x)
    require_float(name, x)
    require_rank(name, x, min_rank)


def _check_vector(name: str, v: Tensor | None, x: Tensor) -> None:
    """A per-feature vector (gamma, beta, running statistics) must be (D,) and share x's dtype."""
    if v is None:
        return
    require_tensor(name, v)
    if v.shape != (x.shape[-1],):
        raise ValueError(f"{name} must have shape (D,) = ({x.shape[-1]},) to match x's last dimension: "
                         f"{name} has shape {tuple(v.shape)}, x has shape {tuple(x.shape)}")
    if v.dtype != x.dtype:
        raise TypeError(f"{name} has dtype {v.dtype} but x has dtype {x.dtype}; they must match")


def _check_mask(mask: Tensor | None, x: Tensor) -> None:
    if mask is None:
        return
    require_tensor("mask", mask)
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be a boolean tensor (True = real token), got dtype {mask.dtype}")
    if mask.shape != x.shape[:-1]:
        raise ValueError(f"mask must have x's shape without the feature axis, {tuple(x.shape[:-1])}: "
                         f"mask has shape {tuple(mask.shape)}, x has shape {tuple(x.shape)}")


def _check_eps(eps: float) -> float:
    eps = float(eps)
    if not eps >= 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    return eps


# ---------------------------------------------------------------- BatchNorm

def batch_statistics(x: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor, int]:
    """Per-feature mean and (biased) variance over every token of the batch.

    x: (..., D); mask: bool (...), True = real token, or None = every token counts.
    Returns mean (D,), var (D,) and the number of tokens the statistics were taken over.
    The variance divides by that count n (not n - 1), as BatchNorm's normalization does.
    """
    _check_x(x)
    _check_mask(mask, x)
    flat = x.reshape(-1, x.shape[-1])  # (N, D): every token of every sequence is one row
    if mask is not None:
        flat = flat[mask.reshape(-1)]  # (n, D): padding rows dropped
    count = flat.shape[0]
    if count == 0:
        raise ValueError(f"mask marks no token as real, so there are no statistics to take: "
                         f"x has shape {tuple(x.shape)}")
    mean = flat.mean(dim=0)  # (D,)
    var = ((flat - mean) ** 2).mean(dim=0)  # (D,)
    return mean, var, count


def normalize(x: Tensor, mean: Tensor, var: Tensor, eps: float) -> Tensor:
    """(x - mean) / sqrt(var + eps); mean and var broadcast against x."""
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
    _check_x(x)
    for name, v in (("running_mean", running_mean), ("running_var", running_var),
                    ("weight", weight), ("bias", bias)):
        _check_vector(name, v, x)
    _check_mask(mask, x)
    eps = _check_eps(eps)
    if (running_mean is None) != (running_var is None):
        raise ValueError("give both running_mean and running_var, or neither")
    if not 0.0 <= momentum <= 1.0:
        raise ValueError(f"momentum must be in [0, 1], got {momentum}")
    if training:
        mean, var, count = batch_statistics(x, mask)
        if count < 2:
            real = "real (mask) " if mask is not None else ""
            raise ValueError(
                f"batch_norm in training mode needs at least 2 tokens to estimate each feature's variance, "
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
    out = normalize(x, mean, var, eps)  # (..., D)
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
        if num_features < 1:
            raise ValueError(f"num_features must be >= 1, got {num_features}")
        self.eps, self.momentum = _check_eps(eps), momentum
        self.weight = nn.Parameter(torch.ones(num_features))
        self.bias = nn.Parameter(torch.zeros(num_features))
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))
        self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        momentum = self.momentum
        if momentum is None:  # cumulative average: this batch gets weight 1 / (batches seen, this one included)
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
    _check_x(x, min_rank=1)
    for name, v in (("weight", weight), ("bias", bias)):
        _check_vector(name, v, x)
    eps = _check_eps(eps)
    mean = x.mean(dim=-1, keepdim=True)  # (..., 1)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)  # (..., 1)
    out = normalize(x, mean, var, eps)
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
    _check_x(x, min_rank=1)
    _check_vector("weight", weight, x)
    eps = torch.finfo(x.dtype).eps if eps is None else _check_eps(eps)
    mean_square = (x ** 2).mean(dim=-1, keepdim=True)  # (..., 1)
    out = x / torch.sqrt(mean_square + eps)
    return out * weight if weight is not None else out


class LayerNorm(nn.Module):
    """LayerNorm over the last axis with learnable gamma (weight) and beta (bias); no buffers."""

    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.eps = _check_eps(eps)
        self.weight = nn.Parameter(torch.ones(num_features))
        self.bias = nn.Parameter(torch.zeros(num_features))

    def forward(self, x: Tensor) -> Tensor:
        return layer_norm(x, self.weight, self.bias, self.eps)


class RMSNorm(nn.Module):
    """RMSNorm over the last axis with a learnable gain (weight) and no bias."""

    def __init__(self, num_features: int, eps: float | None = None):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(num_features))

    def forward(self, x: Tensor) -> Tensor:
        return rms_norm(x, self.weight, self.eps)


def normalize_tokens(kind: str, x: Tensor, mask: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Normalize (..., D) with no gamma/beta by kind = "batch" (training statistics), "layer" or "rms".

    mask (bool (...), True = real) only matters for "batch": it keeps padding out of the statistics.
    """
    if kind == "batch":
        return batch_norm(x, None, None, training=True, eps=eps, mask=mask)
    if kind == "layer":
        return layer_norm(x, eps=eps)
    if kind == "rms":
        return rms_norm(x, eps=eps)
    raise ValueError(f"kind must be one of {NORM_KINDS}, got {kind!r}")


# ---------------------------------------------------------------- what shares statistics

def dependence_mask(fn: Callable[[Tensor], Tensor], x: Tensor, index: tuple[int, ...]) -> Tensor:
    """Which entries of x the output entry fn(x)[index] depends on, found by autograd.

    x: any shape; fn maps it to the same shape. Returns a bool tensor shaped like x, True where
    d fn(x)[index] / d x is not zero: for a normalization, the slice that shares its statistics.
    """
    require_tensor("x", x)
    require_float("x", x)
    if len(index) != x.dim() or any(not -n <= i < n for i, n in zip(index, x.shape)):
        raise ValueError(f"index {index} does not address one entry of x with shape {tuple(x.shape)}")
    x = x.detach().clone().requires_grad_(True)
    fn(x)[index].backward()
    return x.grad != 0


def expected_slice(kind: str, shape: tuple[int, int, int], b: int, t: int, d: int) -> Tensor:
    """The textbook answer for a (B, T, D) block: True on the entries sharing entry (b, t, d)'s statistics."""
    if kind not in NORM_KINDS:
        raise ValueError(f"kind must be one of {NORM_KINDS}, got {kind!r}")
    if len(shape) != 3:
        raise ValueError(f"shape must be (B, T, D), got {shape}")
    out = torch.zeros(shape, dtype=torch.bool)
    if kind == "batch":
        out[:, :, d] = True  # one feature, every token of every sequence
    else:
        out[b, t, :] = True  # one token, every feature
    return out


# ---------------------------------------------------------------- why normalize: the sigmoid

def sigmoid_slope(z: Tensor) -> Tensor:
    """d sigmoid(z) / dz, computed by autograd (it equals sigmoid(z) * (1 - sigmoid(z))); same shape as z."""
    require_tensor("z", z)
    require_float("z", z)
    z = z.detach().clone().requires_grad_(True)
    torch.sigmoid(z).sum().backward()
    return z.grad


def sigmoid_layer_gradient(scale: float, shift: float, normalized: bool, n_tokens: int = 256,
                           d_in: int = 32, d_out: int = 32, seed: int = 0) -> tuple[float, float, float]:
    """A sigmoid layer h = sigmoid(z), z = x W + shift, with W's entries of std scale / sqrt(d_in).

    normalized=True puts a BatchNorm (batch statistics, gamma = 1, beta = 0) between z and the
    sigmoid. x: (n_tokens, d_in) standard normal. Returns (share of sigmoid inputs with |.| > 4,
    their mean sigmoid slope, mean norm per token of d loss / d(sigmoid input)), where
    loss = sum(h * g) for a fixed random upstream gradient g: the gradient that gets back
    through the sigmoid to everything below it, and that vanishes where the sigmoid is flat.
    """
    require_number("scale", scale, positive=True)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n_tokens, d_in, generator=gen, dtype=torch.float64)
    w = torch.randn(d_in, d_out, generator=gen, dtype=torch.float64) * scale / d_in ** 0.5
    upstream = torch.randn(n_tokens, d_out, generator=gen, dtype=torch.float64)
    z = x @ w + shift  # (n_tokens, d_out)
    if normalized:
        z = batch_norm(z, None, None, training=True)
    z = z.requires_grad_(True)
    (torch.sigmoid(z) * upstream).sum().backward()
    return ((z.detach().abs() > 4).double().mean().item(), sigmoid_slope(z).mean().item(),
            z.grad.norm(dim=-1).mean().item())


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
    if not 1 <= length <= 8:
        raise ValueError(f"length must be between 1 and 8 (the sentences have 8 tokens), got {length}")
    if padding < 0:
        raise ValueError(f"padding must be >= 0, got {padding}")
    rows = [s.split()[:length] + [PAD] * padding for s in [WATCHED, *others]]
    unknown = sorted({w for r in rows for w in r} - VOCABULARY.keys())
    if unknown:
        raise ValueError(f"words not in the toy vocabulary: {unknown}")
    x = torch.stack([torch.stack([VOCABULARY[w] for w in r]) for r in rows])  # (B, T, D)
    mask = torch.tensor([[w != PAD for w in r] for r in rows])  # (B, T)
    return x, mask, rows
