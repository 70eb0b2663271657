"""The course's one training loop (used from lesson 01 on; imports torch, and ipywidgets for a bar).

Every model the lessons train, from two projection matrices in lesson 01 to the tiny
Transformer, goes through `train`: the caller says what the loss of step i is, the loop does
the rest. Seeding belongs to the caller: the model's initial weights and the data generator
are seeded where they are made, so the same call gives the same numbers every time.

A loop that takes seconds shows a progress bar (`progress_bar`) with what it is doing: for
training, the task, the step and the current loss. `run_each` runs independent trainings
(one per seed) and shows the step and loss of each run in progress, also when the runs go
on in other processes. `start_each` starts such runs in one other process and returns at
once: the notebook goes on beside them, and `.results()` collects them later.
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
import pickle
import sys
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Callable, Iterable, Iterator, Sequence, TypeVar

import torch
from torch import Tensor, nn

from .guards import require_choice, require_count, require_number
from .progress import Progress

OPTIMIZERS = ("adam", "sgd")
Item, Result = TypeVar("Item"), TypeVar("Result")
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
    label = _require_progress("progress", progress, "training")
    if not callable(loss_of_step):
        raise TypeError(f"loss_of_step must be a function of the step number, got {type(loss_of_step).__name__}")
    parameters = _require_parameters("parameters", parameters)
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


def _require_parameters(name: str, parameters: object) -> list[Tensor]:
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
        self.parameters = _require_parameters("parameters", parameters)
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
        self.parameters = parameters = _require_parameters("parameters", parameters)
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


def progress_bar(total: int, label: str = "training", unit: str = "steps") -> Progress:
    """Show a Progress bar in the notebook and return it: every slow loop of the course shows
    one, whatever it counts (training steps, runs, widths), with the task as its label."""
    from IPython.display import display

    bar = Progress(require_count("total", total), label, unit)
    display(bar)
    return bar


def _require_progress(name: str, progress: object, default: str) -> str:
    """The bar's label asked for by a `progress` argument: "" (no bar), `default` or the text."""
    if isinstance(progress, bool):
        return default if progress else ""
    if isinstance(progress, str) and progress.strip():
        return progress
    raise TypeError(f"{name} must be True, False or the task's name, got {progress!r}")


@contextlib.contextmanager
def _reporting_to(report: StepReport | None) -> Iterator[None]:
    """While the block runs, every `train` call also sends its steps to `report`."""
    global _report_step
    before, _report_step = _report_step, report
    try:
        yield
    finally:
        _report_step = before


class _RunBoard:
    """What run_each shows: how many runs are done, and the step and loss of each run going on."""

    def __init__(self, label: str, names: Sequence[str]):
        self.names = names
        self.bar = progress_bar(len(names), label, unit="runs")
        self.going: dict[int, tuple[int, int, float]] = {}  # run index -> (step, steps, loss)
        self.finished: set[int] = set()

    def step(self, index: int, step: int, steps: int, loss: float) -> None:
        if index not in self.finished:  # a report can arrive after its run's result
            self.going[index] = (step, steps, loss)
            self._show()

    def finish(self, index: int) -> None:
        self.going.pop(index, None)
        self.finished.add(index)
        self._show()

    def _show(self) -> None:
        done = len(self.finished) + sum(step / steps for step, steps, _ in self.going.values())
        parts = [f"{len(self.finished)} of {len(self.names)} runs done"] + [
            f"{self.names[i]}: step {step} of {steps}, loss {loss:.3g}"
            for i, (step, steps, loss) in sorted(self.going.items())]
        self.bar.update(done, "; ".join(parts))


def _require_runs(job: object, items: object, progress: object, names: object) -> tuple[list, str, list[str]]:
    """run_each's and start_each's arguments: (the items as a list, the bar's label or "", the names)."""
    if not callable(job):
        raise TypeError(f"job must be a function of one item, got {type(job).__name__}")
    if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
        raise TypeError(f"items must be a list of the runs' inputs (e.g. seeds), got {type(items).__name__}")
    items = list(items)
    label = _require_progress("progress", progress, "training")
    names = [f"run {i + 1}" for i in range(len(items))] if names is None else list(names)
    if len(names) != len(items):
        raise ValueError(f"names must give one name per item: {len(names)} names for {len(items)} items")
    return items, label, names


def _require_pickles(job: object, items: list) -> None:
    """job and items must pickle, to go to another process: say so here, not as pickle's error there."""
    for name, value in (("job", job), ("items", items)):
        try:
            pickle.dumps(value)
        except Exception as error:  # pickle raises PicklingError, AttributeError or TypeError
            raise TypeError(f"{name} must pickle to run in another process (a module-level function, or a "
                            f"functools.partial of one, not a lambda or a function defined in another): "
                            f"{type(error).__name__}: {error}") from None


def run_each(job: Callable[[Item], Result], items: Sequence[Item], workers: int = 1,
             progress: bool | str = False, names: Sequence[str] | None = None) -> list[Result]:
    """[job(item) for item in items]: independent runs (one seed each), in order.

    workers > 1 runs that many at once in forked processes, one thread each (on Linux;
    elsewhere one after another): each run is seeded by its item, so the results are the same,
    in less wall time on a machine with that many cores. `job` and the items must pickle (a
    module-level function or a functools.partial of one, not a lambda).
    progress: one bar counting the runs, labelled with the task (a string) or "training"
    (True); beside it, each run in progress by its name in `names` (one per item, default
    "run 1", "run 2", ...) with the step and loss that `train` reached in it.
    """
    items, label, names = _require_runs(job, items, progress, names)
    require_count("workers", workers)
    if workers > 1 and sys.platform == "linux":
        _require_pickles(job, items)
    board = _RunBoard(label, names) if label and items else None
    if workers > 1 and sys.platform == "linux":
        return _run_in_processes(job, items, workers, board)
    results = []
    for index, item in enumerate(items):
        with _reporting_to(functools.partial(board.step, index) if board else None):
            results.append(job(item))
        if board is not None:
            board.finish(index)
    return results


def _run_in_processes(job: Callable[[Item], Result], items: list[Item], workers: int,
                      board: _RunBoard | None) -> list[Result]:
    """run_each's runs in `workers` forked processes; their steps come back through a queue."""
    context = multiprocessing.get_context("fork")
    # A SimpleQueue's put is written to its pipe before it returns, so a run's last steps are
    # there before its result: none arrives after the run was counted done (and dropped).
    steps = context.SimpleQueue() if board is not None else None
    # One thread per process: a child forked while torch's threads ran could wait on them.
    with ProcessPoolExecutor(workers, context, initializer=_start_worker,
                             initargs=(steps,)) as pool:
        futures = [pool.submit(_run_reporting, job, index, item)
                   for index, item in enumerate(items)]
        return _results_as_they_end(futures, board, steps)


def _results_as_they_end(futures: list[Future], board: _RunBoard | None,
                         steps: multiprocessing.SimpleQueue | None = None) -> list:
    """Every future's result, in order, once all are done; a run that fails raises at once. The
    board (if any) counts each run as it ends and shows the steps that arrive on `steps`."""
    index_of: dict[Future, int] = {future: i for i, future in enumerate(futures)}
    pending = set(futures)
    while pending:
        ended, pending = wait(pending, timeout=0.1, return_when=FIRST_COMPLETED)
        if board is not None and steps is not None:
            _show_reports(steps, board)
        for future in ended:
            future.result()  # a run that failed raises here, at once
            if board is not None:
                board.finish(index_of[future])
    return [future.result() for future in futures]


_ahead: ProcessPoolExecutor | None = None  # start_each's one process, made at its first call


class Later:
    """Runs that start_each started: `results()` waits for them and returns them."""

    def __init__(self, futures: list[Future], label: str, names: list[str],
                 finish: Callable[[list], object] = list, run_here: Callable[[], list] | None = None):
        self.futures, self.label, self.names, self.finish, self.run_here = futures, label, names, finish, run_here

    def results(self) -> object:
        """[job(item) for item in items], as start_each was asked (passed through `finish`), once
        every run is done. With a label, a bar counts the runs as they end (those done already
        at once): the same bar whether they are still running or not."""
        if self.run_here is not None:  # no fork here: the runs go now, one after another
            return self.finish(self.run_here())
        board = _RunBoard(self.label, self.names) if self.label and self.futures else None
        return self.finish(_results_as_they_end(self.futures, board))


def start_each(job: Callable[[Item], Result], items: Sequence[Item], progress: bool | str = False,
               names: Sequence[str] | None = None, finish: Callable[[list[Result]], object] = list) -> Later:
    """Start [job(item) for item in items] in one other process and return at once: a lesson's
    next cells go on in this one, on the other core, while the runs train; `.results()` waits
    for them (finish(the list), in order; finish defaults to the list itself).

    The process is forked at the first call, with one thread, and kept: the runs of every call
    go through it one after another, in the order they were started. Each run is seeded by its
    item, so the results are the ones run_each gives with one thread (in its worker processes, or
    in a notebook that sets one thread, as the lessons do). Elsewhere than on Linux nothing is
    forked: `.results()` runs them then. progress and names: as in run_each (the bar shows at
    `.results()`, counting the runs done; their steps are not shown).
    """
    global _ahead
    items, label, names = _require_runs(job, items, progress, names)
    if not callable(finish):
        raise TypeError(f"finish must be a function of the list of results, got {type(finish).__name__}")
    if sys.platform != "linux":
        return Later([], label, names, finish, functools.partial(run_each, job, items, 1, label or False, names))
    _require_pickles(job, items)
    if _ahead is None or _ahead._broken:  # none yet, or its process died (killed): a new one
        _ahead = ProcessPoolExecutor(1, multiprocessing.get_context("fork"), initializer=_start_worker,
                                     initargs=(None,))
    # The process was forked at the first call: torch's default dtype now goes with each run.
    dtype = torch.get_default_dtype()
    return Later([_ahead.submit(_in_dtype, dtype, job, item) for item in items], label, names, finish)


def _in_dtype(dtype: torch.dtype, job: Callable[[Item], Result], item: Item) -> Result:
    """job(item) with torch's default dtype as the caller of start_each had it."""
    torch.set_default_dtype(dtype)
    return job(item)


def _show_reports(steps: multiprocessing.SimpleQueue, board: _RunBoard) -> None:
    """Pass every (run, step, steps, loss) the workers have sent so far to the board."""
    while not steps.empty():
        board.step(*steps.get())


_worker_steps: multiprocessing.SimpleQueue | None = None  # in a worker: where its runs' steps go


def _start_worker(steps: multiprocessing.SimpleQueue | None) -> None:
    global _worker_steps
    torch.set_num_threads(1)
    _worker_steps = steps


def _run_reporting(job: Callable[[Item], Result], index: int, item: Item) -> Result:
    """job(item) in a worker; its training steps go to the parent as (index, step, steps, loss)."""
    sink = _worker_steps

    def report(step: int, steps: int, loss: float) -> None:
        sink.put((index, step, steps, loss))

    with _reporting_to(None if sink is None else report):
        return job(item)


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
