"""Input guards: the one place where course_lib turns bad input into a clear error.

Every guard takes the argument's NAME first, then its value, and raises a TypeError (wrong
kind of thing) or ValueError (right kind, wrong shape or value) whose message names the
argument and what is wrong with it, so a learner never reads a trace from inside torch.
A public function calls the guards it needs in its first lines; inner helpers trust them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor


def require_tensor(name: str, x: object, min_rank: int = 0, max_rank: int | None = None) -> Tensor:
    """x must be a torch.Tensor with min_rank..max_rank dimensions; returns it."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() < min_rank or (max_rank is not None and x.dim() > max_rank):
        wanted = f"{min_rank}" if max_rank == min_rank else (
            f"at least {min_rank}" if max_rank is None else f"{min_rank} to {max_rank}")
        raise ValueError(f"{name} must have {wanted} dimensions, got shape {tuple(x.shape)}")
    return x


def require_float(name: str, x: object, min_rank: int = 0, max_rank: int | None = None) -> Tensor:
    """x must be a floating-point tensor (float32 or float64 ...) with min_rank..max_rank dimensions."""
    require_tensor(name, x, min_rank, max_rank)
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    return x


def require_integer(name: str, x: object, min_rank: int = 0, max_rank: int | None = None) -> Tensor:
    """x must be a tensor of integer ids or indices (not float, not bool)."""
    require_tensor(name, x, min_rank, max_rank)
    if x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
        raise TypeError(f"{name} must hold integers, got dtype {x.dtype}")
    return x


def require_same_dtype(**tensors: Tensor | None) -> None:
    """Every given tensor (None skipped) has the same dtype."""
    if len({t.dtype for t in tensors.values() if t is not None}) > 1:  # the message only when it raises
        given = {name: t.dtype for name, t in tensors.items() if t is not None}
        listed = ", ".join(f"{name} {dtype}" for name, dtype in given.items())
        raise TypeError(f"{', '.join(given)} must share one dtype, got {listed}")


def require_dim(name: str, x: Tensor, dim: int) -> int:
    """Return `dim` as a non-negative index, or raise if `x` has no such dimension."""
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f"dim must be an int, got {type(dim).__name__}")
    if not -x.dim() <= dim < max(x.dim(), 1):
        raise ValueError(f"dim={dim} is out of range for {name} of shape {tuple(x.shape)}: it must be in "
                         f"{-max(x.dim(), 1)}..{max(x.dim(), 1) - 1}")
    return dim % max(x.dim(), 1)


def require_count(name: str, value: object, minimum: int = 1) -> int:
    """value must be a plain int >= minimum (a size, a length, a number of steps)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {name}={value}")
    return value


def require_number(name: str, value: object, positive: bool = False, non_negative: bool = False,
                   at_most: float | None = None) -> float:
    """value must be a finite real number (optionally > 0, >= 0, <= at_most); returns it as float."""
    if isinstance(value, Tensor) and value.numel() == 1 and not value.dtype == torch.bool:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    if positive and not value > 0:
        raise ValueError(f"{name} must be positive, got {value}")
    if non_negative and not value >= 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    if at_most is not None and value > at_most:
        raise ValueError(f"{name} must be at most {at_most}, got {value}")
    return value


def require_choice(name: str, value: object, choices: tuple[str, ...]) -> str:
    """value must be one of `choices` (a kind, a placement, a task)."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    return value


def require_instance(name: str, value: object, kind: type | tuple[type, ...], described: str = "") -> object:
    """value must be an instance of `kind` (a model, a layer, a list, a function); returns it."""
    if not isinstance(value, kind):
        raise TypeError(f"{name} must be {described or 'a ' + kind.__name__}, got {type(value).__name__}")
    return value


def require_bool(name: str, value: object) -> bool:
    """value must be True or False (not 0, 1 or a string): a switch."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")
    return value


def require_float_dtype(name: str, dtype: object) -> torch.dtype:
    """dtype must be a floating-point torch.dtype (torch.float32, torch.float64 ...)."""
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"{name} must be a floating-point torch.dtype, got {dtype!r}")
    return dtype


def require_mask(name: str, mask: object, min_rank: int = 0, max_rank: int | None = None, hint: str = "") -> Tensor:
    """mask must be a boolean tensor (True = may attend, or = real token) with min_rank..max_rank dimensions.
    hint: what to do instead, added to the message (e.g. where a float mask goes)."""
    require_tensor(name, mask, min_rank, max_rank)
    if mask.dtype != torch.bool:
        raise TypeError(f"{name} must be a boolean tensor (True = keep), got dtype {mask.dtype}{hint}")
    return mask


def require_index(name: str, value: object, size: int, of: str) -> int:
    """value must be an int in 0..size-1: one of `of`'s `size` positions, layers or heads."""
    if require_count(name, value, minimum=0) >= size:
        raise ValueError(f"{name}={value} is out of range for {size} {of} (0..{size - 1}): it must be one of them")
    return value


def require_items(name: str, items: object) -> Sequence:
    """items must be a non-empty list, tuple or range (of seeds, widths ...), not a string."""
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
        raise TypeError(f"{name} must be a list, got {type(items).__name__} {items!r}")
    if not items:
        raise ValueError(f"{name} must not be empty: there is nothing to run")
    return items


def require_same_shape(name: str, x: Tensor, other_name: str, other: Tensor) -> None:
    """x must have other's shape (a target and its prediction, a gradient and its input)."""
    if x.shape != other.shape:
        raise ValueError(f"{name} of shape {tuple(x.shape)} must have the shape of {other_name}, {tuple(other.shape)}")


def require_width(name: str, x: Tensor, width: int) -> None:
    """x's last dimension must be `width` (a model or feature width)."""
    if x.shape[-1] != width:
        raise ValueError(f"{name} must have last dimension {width}, got shape {tuple(x.shape)}")


def require_length_fits(T: int, max_len: int, table: str, name: str = "sequence length") -> None:
    """T positions (of `name`) fit a table (or model) with rows for positions 0..max_len-1."""
    if isinstance(max_len, bool) or not isinstance(max_len, int):  # no call: this runs at every forward
        raise TypeError(f"max_len must be an int, got {type(max_len).__name__} {max_len!r}")
    if T > max_len:  # lesson 04 prints this message
        raise ValueError(f"{name} T={T} must be at most max_len={max_len} of this {table}: it has rows for "
                         f"positions 0..{max_len - 1} only, so positions {max_len}..{T - 1} have no encoding")


def broadcast_shape(a_name: str, a: tuple[int, ...], b_name: str, b: tuple[int, ...]) -> torch.Size:
    """NumPy's rule, written out: torch.broadcast_shapes imports sympy (half a second) on first use."""
    if a == b:  # the usual case (q and k with the same batch), at every attention call: nothing to pad
        return torch.Size(a)
    n = max(len(a), len(b))
    padded_a, padded_b = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    if any(x != y and 1 not in (x, y) for x, y in zip(padded_a, padded_b)):
        raise ValueError(f"{a_name} of shape {tuple(a)} does not broadcast with {b_name} of shape {tuple(b)}: each "
                         "dimension, counted from the last, must be equal or 1 in one of them")
    return torch.Size(y if x == 1 else x for x, y in zip(padded_a, padded_b))


def require_broadcasts_to(name: str, x: Tensor, shape: tuple[int, ...], shape_name: str) -> None:
    """x must broadcast to `shape` without growing it (a mask or bias over the scores)."""
    if broadcast_shape(name, tuple(x.shape), shape_name, shape) != torch.Size(shape):
        raise ValueError(f"{name} of shape {tuple(x.shape)} does not broadcast to the {shape_name}' "
                         f"shape {tuple(shape)}: it must not grow them")


def require_token_ids(name: str, ids: object, vocab_size: int) -> Tensor:
    """ids must be a (B, T) integer tensor of token ids in 0..vocab_size-1."""
    require_integer(name, ids, 2, 2)
    if ids.numel():
        low, high = torch.aminmax(ids)  # one pass over the ids, at every forward
        if not (0 <= int(low) and int(high) < vocab_size):
            raise ValueError(f"{name} must be token ids in 0..{vocab_size - 1}, got values from {int(low)} "
                             f"to {int(high)} in {name} of shape {tuple(ids.shape)}")
    return ids
