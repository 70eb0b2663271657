"""The course's one training loop (used from lesson 01 on; imports torch, and ipywidgets for a bar).

Every model the lessons train, from two projection matrices in lesson 01 to the tiny
Transformer, goes through `train`: the caller says what the loss of step i is, the loop does
the rest. Seeding belongs to the caller: the model's initial weights and the data generator
are seeded where they are made, so the same call gives the same numbers every time.

A loop that takes seconds shows a progress bar (`progress_bar`) with what it is doing: for
training, the task, the step and the current loss. The optimisers are course_lib.optimizers';
runs side by side (one per seed, in other processes) are course_lib.runs'.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterable, Iterator

import torch
from torch import Tensor, nn

from .guards import require_choice, require_count, require_number
from .optimizers import SGD, Adam, require_parameters
from .progress import Progress

OPTIMIZERS = ("adam", "sgd")
StepReport = Callable[[int, int, float], None]  # (step, steps, loss), after step `step` of `steps`


# Where `train` also reports its steps: set by `run_each` while one of its runs trains, so
# that runs started inside a job (which know nothing of the bar) still show their loss.
_report_step: StepReport | None = None


def train(loss_of_step: Callable[[int], Tensor], parameters: Iterable[nn.Parameter] | Iterable[Tensor],
          steps: int, lr: float, optimizer: str = "adam", progress: bool | str = False) -> list[float]:
    """Minimise loss_of_step(i) for i = 0..steps-1 over `parameters`; return every step's loss.

    optimizer: "adam" (Adam, torch's defaults betas = (0.9, 0.999), eps = 1e-8) or "sgd"
    (plain gradient descent, no momentum). Both are written out below: they give torch.optim's
    numbers without its first-use import of torch's compiler (seconds in every notebook).
    progress: a progress bar in the notebook, labelled with the task (a string, e.g.
    "reverse") or "training" (True), showing the step and the current loss; use it for runs
    longer than a second.
    """
    require_count("steps", steps)
    lr = require_number("lr", lr, positive=True)
    require_choice("optimizer", optimizer, OPTIMIZERS)
    label = require_progress("progress", progress, "training")
    if not callable(loss_of_step):
        raise TypeError(f"loss_of_step must be a function of the step number, got {type(loss_of_step).__name__}")
    parameters = require_parameters("parameters", parameters)
    if not any(p.requires_grad for p in parameters):  # frozen ones beside trained ones are fine (a hand-set head)
        raise ValueError("parameters must include one that requires gradients (requires_grad=True): "
                         "none would ever move")
    step_rule = Adam(parameters, lr) if optimizer == "adam" else SGD(parameters, lr)
    bar = progress_bar(steps, label, unit="training steps") if label else None
    report = _report_step
    every = max(1, steps // 50)  # about 50 updates per run: a widget message costs time too
    losses = []
    with _subnormals_flushed():
        for step in range(steps):
            loss = loss_of_step(step)
            if step == 0:  # what the first step returns, every step returns
                _require_loss(loss)
            for p in parameters:
                p.grad = None
            loss.backward()
            step_rule.step()
            losses.append(loss.item())
            if (step + 1) % every == 0 or step + 1 == steps:
                if bar is not None:
                    bar.update(step + 1, f"step {step + 1} of {steps}, loss {losses[-1]:.4g}")
                if report is not None:
                    report(step + 1, steps, losses[-1])
    return losses


def _require_loss(loss: object) -> None:
    """What loss_of_step returned must be a one-number float tensor that depends on the parameters."""
    if not isinstance(loss, Tensor) or loss.numel() != 1 or not loss.is_floating_point():
        got = f"a tensor of shape {tuple(loss.shape)} and dtype {loss.dtype}" if isinstance(loss, Tensor) \
            else type(loss).__name__
        raise TypeError(f"loss_of_step must return a one-element float tensor (the loss), got {got}")
    if not loss.requires_grad:
        raise ValueError("loss_of_step must return a loss computed from the parameters (it has no gradient)")


@contextlib.contextmanager
def _subnormals_flushed() -> Iterator[None]:
    """While the block runs, this thread's CPU reads and writes subnormal floats as 0.

    Subnormals (float32 below 1.2e-38) appear once a model is sure of its answers: attention
    weights of exp(-90), the gradients that flow through them. A CPU multiplies them some ten to
    a hundred times slower than other numbers, and they change no weight: an update of 1e-39 is
    far below what a weight of size 0.01 can resolve. Measured: every lesson's training gives the
    same losses digit for digit, and lesson 04's learned table trains in 0.21 s instead of 0.36 s.
    Only training flushes: lesson 01 shows what exp() does to tiny numbers.
    """
    torch.set_flush_denormal(True)  # returns False, and does nothing, on a CPU without the mode
    try:
        yield
    finally:
        torch.set_flush_denormal(False)  # torch's default


def progress_bar(total: int, label: str = "training", unit: str = "steps") -> Progress:
    """Show a Progress bar in the notebook and return it: every slow loop of the course shows
    one, whatever it counts (training steps, runs, widths), with the task as its label."""
    from IPython.display import display

    bar = Progress(require_count("total", total), label, unit)
    display(bar)
    return bar


def require_progress(name: str, progress: object, default: str) -> str:
    """The bar's label asked for by a `progress` argument: "" (no bar), `default` or the text."""
    if isinstance(progress, bool):
        return default if progress else ""
    if isinstance(progress, str) and progress.strip():
        return progress
    raise TypeError(f"{name} must be True, False or the task's name, got {progress!r}")


@contextlib.contextmanager
def reporting_to(report: StepReport | None) -> Iterator[None]:
    """While the block runs, every `train` call also sends its steps to `report`."""
    global _report_step
    before, _report_step = _report_step, report
    try:
        yield
    finally:
        _report_step = before


# ------------------------------------------------------------------ training a model of token ids

IGNORE = -100  # a target that no loss is taken on (F.cross_entropy's ignore_index)


def train_tiny_model(model: nn.Module, make_batch: Callable[[torch.Generator], tuple[Tensor, Tensor]],
                     steps: int, lr: float = 3e-2, seed: int = 0, progress: bool | str = False) -> list[float]:
    """Train `model` (ids (B, T) -> logits (B, T, V), as course_lib.model's DecoderOnly) in place on
    batches from make_batch(generator) -> (ids (B, T), targets (B, T)).

    The loss is the cross-entropy of the model's logits at every position whose target is not
    IGNORE. The data generator is seeded by `seed`. Returns every step's loss. progress: as
    in `train` (True, or the task's name for the bar).
    """
    if not isinstance(model, nn.Module) or not callable(make_batch):
        raise TypeError(f"model must be an nn.Module and make_batch a function generator -> (ids, targets), got "
                        f"{type(model).__name__} and {type(make_batch).__name__}")
    if not isinstance(progress, (bool, str)):
        raise TypeError(f"progress must be True, False or the task's name, got {type(progress).__name__}")
    generator = torch.Generator().manual_seed(require_count("seed", seed, minimum=0))

    def loss_of_step(_: int) -> Tensor:
        ids, targets = make_batch(generator)
        logits = model(ids)  # (B, T, V)
        return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                           ignore_index=IGNORE)

    return train(loss_of_step, model.parameters(), steps, lr, progress=progress)
