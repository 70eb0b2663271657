"""Input checks shared by every course_lib module.

Each helper raises a ValueError or TypeError whose message names the argument and the
shapes or values at fault, so a learner never has to read a trace from inside torch.
"""

from __future__ import annotations

import torch
from torch import Tensor


def require_tensor(name: str, x: object) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    return x


def require_float(name: str, x: Tensor) -> None:
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")


def require_rank(name: str, x: Tensor, at_least: int, at_most: int | None = None) -> None:
    if x.dim() < at_least or (at_most is not None and x.dim() > at_most):
        wanted = f"{at_least}" if at_most == at_least else (
            f"at least {at_least}" if at_most is None else f"{at_least} to {at_most}")
        raise ValueError(f"{name} must have {wanted} dimensions, got shape {tuple(x.shape)}")


def require_dim(x: Tensor, dim: int, name: str = "input") -> int:
    """Return `dim` as a non-negative index, or raise if `x` has no such dimension."""
    if not -x.dim() <= dim < max(x.dim(), 1):
        raise ValueError(f"dim={dim} is out of range for {name} of shape {tuple(x.shape)}")
    return dim % max(x.dim(), 1)


def require_positive(name: str, value: float) -> None:
    if not value > 0:
        raise ValueError(f"{name} must be positive, got {value}")


def broadcast_shape(a_name: str, a: tuple[int, ...], b_name: str, b: tuple[int, ...]) -> torch.Size:
    try:
        return torch.broadcast_shapes(a, b)
    except RuntimeError:
        raise ValueError(f"{a_name} of shape {a} does not broadcast with {b_name} of shape {b}") from None
