"""The one training loop: its written-out Adam and SGD against torch.optim, its input checks, and
what its progress bars show (live: the task, the step and the loss; saved: the same text on
every run)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch

from course_lib import optimizers, runs, training
from course_lib.runs import run_each, start_each
from course_lib.training import train


def _problem(seed: int):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(32, 5, generator=gen, dtype=torch.float64)
    y = torch.randn(32, 3, generator=gen, dtype=torch.float64)
    w0 = torch.randn(5, 3, generator=gen, dtype=torch.float64)
    return x, y, w0


@pytest.mark.parametrize("optimizer,torch_rule", [("adam", torch.optim.Adam), ("sgd", torch.optim.SGD)])
def test_train_takes_torch_optims_steps(optimizer, torch_rule):
    x, y, w0 = _problem(0)
    ours, theirs = w0.clone().requires_grad_(True), w0.clone().requires_grad_(True)
    losses = train(lambda _: ((x @ ours - y) ** 2).mean(), [ours], steps=50, lr=0.05, optimizer=optimizer)
    rule = torch_rule([theirs], lr=0.05)
    for _ in range(50):
        rule.zero_grad()
        ((x @ theirs - y) ** 2).mean().backward()
        rule.step()
    assert torch.allclose(ours, theirs, atol=1e-10, rtol=0)
    assert losses[-1] < losses[0] / 2


def test_adams_flat_step_is_bit_for_bit_its_per_parameter_step():
    """Adam steps all parameters as one flat vector when each has a gradient and they share a
    dtype; otherwise one at a time. Both must give the same numbers, to the last bit: a lesson's
    printed digits must not depend on which one ran."""
    gen = torch.Generator().manual_seed(5)
    shapes = [(16, 32), (32,), (), (5, 3)]
    flat = [torch.randn(s, generator=gen) for s in shapes]
    apart = [p.clone() for p in flat]
    idle = torch.zeros(2)  # never gets a gradient, so its Adam takes the per-parameter path
    flat_rule, apart_rule = optimizers.Adam(flat, 0.02), optimizers.Adam(apart + [idle], 0.02)
    assert flat_rule.flat_m is not None
    for _ in range(40):
        for p, q in zip(flat, apart):
            p.grad = torch.randn(p.shape, generator=gen)
            q.grad = p.grad.clone()
        flat_rule.step()
        apart_rule.step()
    assert all(torch.equal(p, q) for p, q in zip(flat, apart))
    assert torch.equal(idle, torch.zeros(2))


@pytest.mark.parametrize("seed", range(25))
def test_adam_equals_torchs_step_for_step_when_parameters_skip_gradients(seed):
    """Property: for random shapes, settings and a random pattern of steps on which each
    parameter gets no gradient, every parameter equals torch.optim.Adam's after every step.
    A parameter that skips steps must keep its own step count, as torch's does."""
    gen = torch.Generator().manual_seed(seed)
    rand = lambda: torch.rand((), generator=gen).item()  # noqa: E731
    n = 1 + int(rand() * 4)
    shapes = [tuple(1 + int(rand() * 4) for _ in range(int(rand() * 3))) for _ in range(n)]
    lr, betas, eps = 10 ** (-3 + 2 * rand()), (0.5 + 0.49 * rand(), 0.9 + 0.0999 * rand()), 10 ** (-10 + 4 * rand())
    ours = [torch.randn(s, generator=gen, dtype=torch.float64) for s in shapes]
    theirs = [p.clone().requires_grad_(True) for p in ours]
    rule, torch_rule = optimizers.Adam(ours, lr, betas, eps), torch.optim.Adam(theirs, lr=lr, betas=betas, eps=eps)
    skip = rand() * 0.7  # how often a parameter gets no gradient
    for step in range(40):
        for p, q in zip(ours, theirs):
            if rand() < skip:
                p.grad = q.grad = None
            else:
                p.grad = torch.randn(p.shape, generator=gen, dtype=torch.float64)
                q.grad = p.grad.clone()
        rule.step()
        torch_rule.step()
        for i, (p, q) in enumerate(zip(ours, theirs)):
            assert torch.allclose(p, q.detach(), rtol=0, atol=1e-12), (step, i, (p - q).abs().max().item())


def test_train_with_a_parameter_left_out_of_some_losses_ends_where_torch_ends():
    """The case a shared step counter gets wrong: one weight takes part in the loss on every
    other step only (its gradient is None on the others)."""
    x, y, w0 = _problem(2)
    ours = [w0.clone().requires_grad_(True), torch.zeros(3, dtype=torch.float64, requires_grad=True)]
    theirs = [p.detach().clone().requires_grad_(True) for p in ours]

    def loss(w, b, step):
        return ((x @ w + (b if step % 2 else 0) - y) ** 2).mean()

    train(lambda step: loss(*ours, step), ours, steps=10, lr=0.05)
    rule = torch.optim.Adam(theirs, lr=0.05)
    for step in range(10):
        rule.zero_grad(set_to_none=True)
        loss(*theirs, step).backward()
        rule.step()
    for p, q in zip(ours, theirs):
        assert torch.allclose(p, q, rtol=0, atol=1e-12)


def test_train_returns_the_loss_of_every_step_and_lowers_it():
    x, y, w0 = _problem(1)
    w = w0.clone().requires_grad_(True)
    losses = train(lambda _: ((x @ w - y) ** 2).mean(), [w], steps=30, lr=0.1, optimizer="sgd")
    assert len(losses) == 30 and all(b < a for a, b in zip(losses, losses[1:]))


@pytest.mark.parametrize("kwargs,error,message", [
    ({"steps": 0}, ValueError, "steps must be >= 1"),
    ({"steps": 2.5}, TypeError, "steps must be an int"),
    ({"lr": -1.0}, ValueError, "lr must be positive"),
    ({"lr": float("inf")}, ValueError, "lr must be finite"),
    ({"lr": "fast"}, TypeError, "lr must be a number"),
    ({"optimizer": "rmsprop"}, ValueError, "optimizer must be one of"),
    ({"parameters": [torch.zeros(2)]}, ValueError, "parameters must include one that requires gradients"),
    ({"parameters": [torch.zeros(2, dtype=torch.int64)]}, TypeError, "parameters must hold floating-point"),
    ({"parameters": torch.zeros(2, requires_grad=True)}, TypeError, "parameters must be a list of tensors"),
    ({"loss_of_step": 3.0}, TypeError, "loss_of_step must be a function"),
    ({"loss_of_step": lambda _: 1.0}, TypeError, "loss_of_step must return a one-element float tensor"),
    ({"loss_of_step": lambda _: torch.ones(3, requires_grad=True)}, TypeError, "got a tensor of shape \\(3,\\)"),
    ({"loss_of_step": lambda _: torch.tensor(1.0)}, ValueError, "loss_of_step must return a loss computed"),
])
def test_bad_arguments_are_named(kwargs, error, message):
    w = torch.zeros(2, requires_grad=True)
    arguments = {"loss_of_step": lambda _: (w ** 2).sum(), "parameters": [w], "steps": 3, "lr": 0.1,
                 "optimizer": "adam"} | kwargs
    with pytest.raises(error, match=message):
        train(**arguments)


@pytest.mark.parametrize("kwargs,error,message", [
    ({"lr": 0.0}, ValueError, "lr must be positive"),
    ({"betas": (1.0, 0.9)}, ValueError, r"betas must each be in \[0, 1\)"),
    ({"betas": (0.9,)}, TypeError, "betas must be a pair"),
    ({"betas": (0.9, float("nan"))}, ValueError, "betas must be finite"),
    ({"eps": 0.0}, ValueError, "eps must be positive"),
    ({"parameters": []}, ValueError, "parameters must not be empty"),
])
def test_adams_bad_settings_are_named(kwargs, error, message):
    arguments = {"parameters": [torch.zeros(2)], "lr": 0.1} | kwargs
    with pytest.raises(error, match=message):
        optimizers.Adam(**arguments)


def test_no_parameters_is_named():
    with pytest.raises(ValueError, match="parameters must not be empty"):
        train(lambda _: torch.tensor(0.0), [], steps=1, lr=0.1)


def _seeded_loss(seed: int) -> float:
    generator = torch.Generator().manual_seed(seed)
    w = torch.randn(4, generator=generator, requires_grad=True)
    return train(lambda _: (w - 1).pow(2).sum(), [w], steps=20, lr=0.1)[-1]


def test_run_each_in_two_processes_gives_the_runs_in_order_with_the_same_results():
    seeds = [3, 1, 4, 1, 5]
    assert run_each(_seeded_loss, seeds, workers=2) == run_each(_seeded_loss, seeds) == [
        _seeded_loss(s) for s in seeds]


def _pid_after(path: str) -> int:
    """Wait until `path` exists (another process makes it), then return this process's id; -1 if
    it never comes (a start_each that waited for its runs would otherwise hang the test)."""
    give_up = time.monotonic() + 60
    while not Path(path).exists():
        if time.monotonic() > give_up:
            return -1
        time.sleep(0.001)
    return os.getpid()


def _fails(seed: int) -> float:
    raise ValueError(f"run {seed} failed")


def test_start_each_returns_before_its_runs_end_and_gives_run_eachs_results(tmp_path):
    """The runs cannot end before this test makes the file they wait for: start_each returned
    while they were running. Then .results() gives the runs in order, the numbers run_each gives."""
    go = str(tmp_path / "go")
    waiting = start_each(_pid_after, [go, go])
    seeded = start_each(_seeded_loss, [3, 1, 4], finish=lambda losses: losses[::-1])  # queued behind
    assert not any(future.done() for future in waiting.futures)
    Path(go).touch()
    pids = waiting.results()
    assert seeded.results() == run_each(_seeded_loss, [4, 1, 3])  # finish got them in order
    # one other process for every call, kept: the second core, not one process per run
    assert len(set(pids)) == 1 and pids[0] not in (-1, os.getpid())
    assert start_each(_pid_after, [go]).results() == pids[:1]


def test_start_each_shows_a_bar_of_the_runs_at_results(bars):
    later = start_each(_seeded_loss, [3, 1], progress="toy runs", names=["a", "b"])
    assert not bars  # nothing shows while the runs go on in the background
    assert later.results() == run_each(_seeded_loss, [3, 1])
    (bar,) = bars
    assert (bar.label, bar.total, bar.unit) == ("toy runs", 2, "runs")
    assert bar.shown[-1] == (2, "2 of 2 runs done")


def test_a_failed_background_run_raises_at_results_and_the_next_start_still_runs():
    later = start_each(_fails, [7])
    with pytest.raises(ValueError, match="run 7 failed"):
        later.results()
    assert start_each(_seeded_loss, [2]).results() == [_seeded_loss(2)]


@pytest.mark.parametrize("kwargs,error,message", [
    ({"job": 3}, TypeError, "job must be a function of one item, got int"),
    ({"items": "123"}, TypeError, "items must be a list of the runs' inputs"),
    ({"names": ["a"]}, ValueError, "names must give one name per item: 1 names for 2 items"),
    ({"progress": 1}, TypeError, "progress must be True, False or the task's name"),
    ({"finish": "sum"}, TypeError, "finish must be a function of the list of results, got str"),
])
def test_start_each_refuses_bad_input_before_starting_anything(kwargs, error, message):
    with pytest.raises(error, match=message):
        start_each(**({"job": _seeded_loss, "items": [1, 2]} | kwargs))


def _zeros(n: int) -> torch.Tensor:
    return torch.zeros(n)


def test_start_each_runs_in_the_default_dtype_its_caller_has_now():
    """Its process is forked once and kept: a dtype set after that must still reach the runs."""
    start_each(_zeros, [1]).results()  # the process exists from here on, in float32
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        (later,) = start_each(_zeros, [2]).results()
        (here,) = run_each(_zeros, [2])
    finally:
        torch.set_default_dtype(before)
    assert later.dtype == here.dtype == torch.float64


class ShownBar:
    """Stands in for progress_bar: records what a bar would show, without a notebook."""

    def __init__(self, total: int, label: str, unit: str = "steps"):
        self.total, self.label, self.unit, self.shown = total, label, unit, []

    def update(self, done: float, text: str) -> None:
        self.shown.append((done, text))


@pytest.fixture
def bars(monkeypatch) -> list[ShownBar]:
    made: list[ShownBar] = []

    def progress_bar(*args, **kwargs) -> ShownBar:
        made.append(ShownBar(*args, **kwargs))
        return made[-1]

    for module in (training, runs):  # the loop's bar and run_each's board
        monkeypatch.setattr(module, "progress_bar", progress_bar)
    return made


def test_a_training_bar_names_the_task_and_shows_the_step_and_the_loss(bars):
    w = torch.tensor([3.0], requires_grad=True)
    losses = train(lambda _: (w ** 2).sum(), [w], steps=100, lr=0.1, progress="toy task")
    (bar,) = bars
    assert (bar.label, bar.total) == ("toy task", 100)
    assert len(bar.shown) == 50  # every other step: about 50 updates per run
    done, text = bar.shown[-1]
    assert done == 100 and text == f"step 100 of 100, loss {losses[-1]:.4g}"


def test_run_each_in_two_processes_shows_each_runs_step_and_loss(bars):
    seeds = [3, 1, 4]
    shown = run_each(_seeded_loss, seeds, workers=2, progress="toy runs", names=["a", "b", "c"])
    assert shown == run_each(_seeded_loss, seeds)  # the bar changes nothing
    (bar,) = bars
    assert (bar.label, bar.total, bar.unit) == ("toy runs", 3, "runs")
    texts = [text for _, text in bar.shown]
    for name in "abc":  # each run's steps came back from its process
        assert any(f"{name}: step 20 of 20, loss" in text for text in texts), name
    assert bar.shown[-1] == (3, "3 of 3 runs done")


@pytest.mark.parametrize("call,error,message", [
    (lambda w: train(lambda _: w.sum(), [w], steps=2, lr=0.1, progress=1), TypeError,
     "progress must be True, False or the task's name"),
])
def test_bad_progress_arguments_are_named(call, error, message):
    with pytest.raises(error, match=message):
        call(torch.zeros(2, requires_grad=True))
