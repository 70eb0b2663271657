"""The course's one training loop (used from lesson 01 on; imports only torch and ipywidgets).

Every model the lessons train, from two projection matrices in lesson 01 to the tiny
Transformer, goes through `train`: the caller says what the loss of step i is, the loop does
the rest. Seeding belongs to the caller: the model's initial weights and the data generator
are seeded where they are made, so the same call gives the same numbers every time.
"""

from __future__ import annotations

from typing import Callable, Iterable

import torch
from torch import Tensor, nn

from .guards import require_choice, require_count, require_number

OPTIMIZERS = ("adam", "sgd")


def train(loss_of_step: Callable[[int], Tensor], parameters: Iterable[nn.Parameter] | Iterable[Tensor],
          steps: int, lr: float, optimizer: str = "adam", progress: bool = False) -> list[float]:
    """Minimise loss_of_step(i) for i = 0..steps-1 over `parameters`; return every step's loss.

    optimizer: "adam" (torch.optim.Adam) or "sgd" (plain gradient descent, no momentum).
    progress=True shows a progress bar in the notebook: use it for runs longer than a second.
    """
    require_count("steps", steps)
    lr = require_number("lr", lr, positive=True)
    require_choice("optimizer", optimizer, OPTIMIZERS)
    parameters = list(parameters)
    if not parameters:
        raise ValueError("parameters is empty: there is nothing to train")
    step_rule = (torch.optim.Adam if optimizer == "adam" else torch.optim.SGD)(parameters, lr=lr)
    bar = _progress_bar(steps) if progress else None
    losses = []
    for step in range(steps):
        loss = loss_of_step(step)
        step_rule.zero_grad()
        loss.backward()
        step_rule.step()
        losses.append(loss.item())
        if bar is not None and (step + 1) % max(1, steps // 50) == 0:
            bar.value = step + 1
    if bar is not None:
        bar.value = steps
    return losses


def _progress_bar(steps: int):
    """An ipywidgets bar shown in the notebook (its saved text is the same on every run)."""
    import ipywidgets
    from IPython.display import display

    bar = ipywidgets.IntProgress(value=0, min=0, max=steps, description="training")
    display(bar)
    return bar
