"""Independent runs (one per seed) at once, beside the notebook: `run_each` and `start_each`.

`run_each` runs independent trainings and shows the step and loss of each run in progress,
also when the runs go on in other processes. `start_each` starts such runs in one other
process and returns at once: the notebook goes on beside them, and `.results()` collects them
later. Each run is seeded by its item, so the numbers are the same however the runs are spread.
"""

from __future__ import annotations

import functools
import multiprocessing
import pickle
import sys
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Callable, Iterable, Sequence, TypeVar

import torch

from .guards import require_count
from .training import progress_bar, reporting_to, require_progress

Item, Result = TypeVar("Item"), TypeVar("Result")


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
    label = require_progress("progress", progress, "training")
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
        with reporting_to(functools.partial(board.step, index) if board else None):
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

    with reporting_to(None if sink is None else report):
        return job(item)
