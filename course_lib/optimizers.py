"""The two optimisers the course trains with, written out (used from lesson 01 on): `SGD` and `Adam`.

They give torch.optim's numbers (tests/test_training.py holds them to it) without its first-use
import of torch's compiler, which costs seconds in every notebook. The training loop is
course_lib.training's `train`; it picks one by name.
"""

from __future__ import annotations

from typing import Iterable

import torch
from torch import Tensor

from .guards import require_number


def require_parameters(name: str, parameters: object) -> list[Tensor]:
    """parameters must be a non-empty list (or iterable) of floating-point tensors."""
    if isinstance(parameters, Tensor) or not isinstance(parameters, Iterable):
        raise TypeError(f"{name} must be a list of tensors (e.g. model.parameters()), got "
                        f"{type(parameters).__name__}")
    parameters = list(parameters)
    if not parameters:
        raise ValueError(f"{name} must not be empty: there is nothing to train")
    for i, p in enumerate(parameters):
        if not isinstance(p, Tensor) or not p.is_floating_point():
            got = f"dtype {p.dtype}" if isinstance(p, Tensor) else type(p).__name__
            raise TypeError(f"{name} must hold floating-point tensors, got {got} at position {i}")
    return parameters


class SGD:
    """p <- p - lr * grad."""

    def __init__(self, parameters: list[Tensor], lr: float):
        self.parameters = require_parameters("parameters", parameters)
        self.lr = require_number("lr", lr, positive=True)

    @torch.no_grad()
    def step(self) -> None:
        for p in self.parameters:
            if p.grad is not None:
                p.sub_(self.lr * p.grad)


class Adam:
    """Adam (Kingma & Ba): a step of lr along the gradient's running mean over its running RMS.

    m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2;  p <- p - lr * m_hat / (sqrt(v_hat) + eps),
    with m_hat = m / (1 - b1^t) and v_hat = v / (1 - b2^t) undoing the zero start.

    t counts the steps of each parameter apart, as torch.optim.Adam does: a parameter that got
    no gradient on a step (it took no part in that step's loss) is not moved, and its m, v and t
    wait for its next gradient. With one t for all, its zero start would be undone by a
    1 - b^t that has grown with steps it never took.

    A tiny model's step is per-call overhead, not arithmetic, so m and v are each kept as one
    flat vector (when the parameters share one dtype, as in every model of the course) and a
    step is one call per operation on all parameters at once, when every parameter has a
    gradient and the same t. The operations are element-wise, so each number is the same as
    one parameter at a time.
    """

    def __init__(self, parameters: list[Tensor], lr: float, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8):
        self.parameters = parameters = require_parameters("parameters", parameters)
        self.lr = require_number("lr", lr, positive=True)
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise TypeError(f"betas must be a pair (b1, b2), got {betas!r}")
        self.betas = tuple(require_number("betas", b, non_negative=True) for b in betas)
        if not all(b < 1 for b in self.betas):
            raise ValueError(f"betas must each be in [0, 1), got {betas!r}")
        self.eps = require_number("eps", eps, positive=True)
        self.steps = [0] * len(parameters)  # parameter i's t: the steps on which it had a gradient
        self.sizes = [p.numel() for p in parameters]
        if len({p.dtype for p in parameters}) == 1:
            self.flat_m = torch.zeros(sum(self.sizes), dtype=parameters[0].dtype)
            self.flat_v = torch.zeros_like(self.flat_m)
            # parameter i's m and v are its stretch of the flat vectors (views, shaped like it)
            self.m = [part.view_as(p) for part, p in zip(self.flat_m.split(self.sizes), parameters)]
            self.v = [part.view_as(p) for part, p in zip(self.flat_v.split(self.sizes), parameters)]
        else:
            self.flat_m = self.flat_v = None
            self.m = [torch.zeros_like(p) for p in parameters]
            self.v = [torch.zeros_like(p) for p in parameters]

    @torch.no_grad()
    def step(self) -> None:
        live = [i for i, p in enumerate(self.parameters) if p.grad is not None]
        for i in live:
            self.steps[i] += 1
        if (self.flat_m is not None and len(live) == len(self.parameters)
                and min(self.steps) == max(self.steps)):
            grads = torch.cat([p.grad.reshape(-1) for p in self.parameters])  # one vector, like m and v
            updates = self._updates(self.flat_m, self.flat_v, grads, self.steps[0]).split(self.sizes)
            torch._foreach_sub_(self.parameters, [u.view_as(p) for u, p in zip(updates, self.parameters)])
            return
        # some parameter got no gradient (its m, v and t stay as they are), the t differ or the
        # dtypes do: one parameter at a time
        for i in live:
            p = self.parameters[i]
            p.sub_(self._updates(self.m[i], self.v[i], p.grad, self.steps[i]))

    def _updates(self, m: Tensor, v: Tensor, grad: Tensor, t: int) -> Tensor:
        """Update m and v in place with the gradient; return lr * m_hat / (sqrt(v_hat) + eps) at step t."""
        b1, b2 = self.betas
        m.mul_(b1).add_(grad, alpha=1 - b1)
        v.mul_(b2).addcmul_(grad, grad, value=1 - b2)
        denominator = (v / (1 - b2 ** t)).sqrt_().add_(self.eps)
        return (m / (1 - b1 ** t)).mul_(self.lr).div_(denominator)

