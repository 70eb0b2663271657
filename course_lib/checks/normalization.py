"""Visible checks for exercise set 05 (normalization)."""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from ..normalization import (BatchNorm, LayerNorm, RMSNorm, batch_norm, batch_statistics, layer_norm, normalize,
                             rms_norm)
from . import compare, earlier_answers, exercise_check, passed
from .hand_in import NORM_OPS, Case, Exercise


def reference_batch_stats(x: Tensor) -> tuple[Tensor, Tensor]:
    """What exercise 1's batch_stats returns: (..., D) -> mean (D,), biased var (D,)."""
    return batch_statistics(x)[:2]

# A batch of B = 2 sequences, T = 3 positions, D = 2 features, small enough to check by hand:
# feature 0 holds 1, 2, 3, 5, 6, 7 (mean 4), feature 1 holds 0, 2, 4, 0, 2, 4 (mean 2).
X = torch.tensor([[[1.0, 0.0], [2.0, 2.0], [3.0, 4.0]],
                  [[5.0, 0.0], [6.0, 2.0], [7.0, 4.0]]])
GAMMA2, BETA2 = torch.tensor([2.0, 0.5]), torch.tensor([1.0, -1.0])
RUNNING_MEAN, RUNNING_VAR = torch.tensor([0.5, -1.0]), torch.tensor([2.0, 1.0])
# Tokens (rows) of D = 4 features for LayerNorm and RMSNorm.
ROWS = torch.tensor([[1.0, 2.0, 3.0, 6.0], [0.0, 0.0, 4.0, 4.0], [3.0, 4.0, 0.0, 0.0], [1.0, -1.0, 1.0, -1.0]])
GAMMA4, BETA4 = torch.tensor([1.0, 2.0, 1.0, 0.5]), torch.tensor([0.0, 0.0, 1.0, -1.0])
BIG_EPS = 0.5  # large enough that where eps goes shows in the digits


def _flat(x: Tensor) -> Tensor:
    return x.reshape(-1, x.shape[-1])


def _pair(name: str, got: object) -> tuple[object, object]:
    if not (isinstance(got, tuple) and len(got) == 2):
        raise AssertionError(f"{name}: expected a tuple of two tensors (mean, var), got {type(got).__name__}")
    return got


def _shape_hint(name: str, got: object, expected: Tensor, hints: dict[tuple[int, ...], str]) -> None:
    """Name the axis mistake when the answer has a telling wrong shape."""
    if isinstance(got, Tensor) and got.shape != expected.shape and tuple(got.shape) in hints:
        raise AssertionError(f"{name}: wrong shape. Likely bug: {hints[tuple(got.shape)]}\n"
                             f"  expected shape: {tuple(expected.shape)}\n  got shape:      {tuple(got.shape)}")


@exercise_check
def check_batch_stats(batch_stats: Callable) -> None:
    got_mean, got_var = _pair("batch_stats(X)", batch_stats(X.clone()))
    mean, var, _ = batch_statistics(X)
    hints = {(2, 3): "you averaged over the features (LayerNorm's axis); BatchNorm averages over every token",
             (3, 2): "you averaged over the batch axis only; BatchNorm averages over batch AND positions",
             (2, 2): "you averaged over the positions only; BatchNorm averages over batch AND positions"}
    _shape_hint("mean of batch_stats(X)", got_mean, mean, hints)
    compare("mean of batch_stats(X), one per feature", got_mean, mean)
    _shape_hint("var of batch_stats(X)", got_var, var, hints)
    compare("var of batch_stats(X), one per feature", got_var, var, {
        "unbiased variance (divides by n - 1, torch.var's default)? BatchNorm normalizes with the biased one":
            _flat(X).var(0),
        "did you forget to subtract the mean before squaring?": (_flat(X) ** 2).mean(0),
    })
    passed("batch_stats")


@exercise_check
def check_batch_norm_forward(batch_norm_forward: Callable) -> None:
    # One mistake costs once: the earlier exercises\' answers are the references here.
    with earlier_answers(batch_norm_forward, batch_stats=reference_batch_stats):
        def run(training: bool, eps: float = 1e-5) -> Tensor:
            return batch_norm_forward(X.clone(), GAMMA2.clone(), BETA2.clone(), RUNNING_MEAN.clone(),
                                      RUNNING_VAR.clone(), training, eps)

        mean, var, _ = batch_statistics(X)
        for training in (True, False):
            for eps in (1e-5, BIG_EPS):
                mode = "training" if training else "eval"
                use_mean, use_var = (mean, var) if training else (RUNNING_MEAN, RUNNING_VAR)
                other_mean, other_var = (RUNNING_MEAN, RUNNING_VAR) if training else (mean, var)
                expected = batch_norm(X, RUNNING_MEAN.clone(), RUNNING_VAR.clone(), GAMMA2, BETA2, training, 0.0, eps)
                compare(f"batch_norm_forward(X, ..., training={training}, eps={eps}) [{mode} mode]",
                        run(training, eps), expected, {
                            f"in {mode} mode use the {'batch' if training else 'running'} statistics, "
                            f"not the {'running' if training else 'batch'} ones":
                                (X - other_mean) / torch.sqrt(other_var + eps) * GAMMA2 + BETA2,
                            "eps belongs inside the square root: sqrt(var + eps)":
                                (X - use_mean) / (torch.sqrt(use_var) + eps) * GAMMA2 + BETA2,
                            "unbiased variance? BatchNorm normalizes with the biased one (divide by n)":
                                (X - mean) / torch.sqrt(_flat(X).var(0) + eps) * GAMMA2 + BETA2,
                            "gamma and beta swapped? gamma multiplies, beta is added":
                                (X - use_mean) / torch.sqrt(use_var + eps) * BETA2 + GAMMA2,
                        })
        passed("batch_norm_forward")


@exercise_check
def check_update_running(update_running: Callable) -> None:
    # One mistake costs once: the earlier exercises\' answers are the references here.
    with earlier_answers(update_running, batch_stats=reference_batch_stats):
        momentum = 0.25
        got_mean, got_var = _pair("update_running(...)", update_running(RUNNING_MEAN.clone(), RUNNING_VAR.clone(),
                                                                       X.clone(), momentum))
        want_mean, want_var = RUNNING_MEAN.clone(), RUNNING_VAR.clone()
        batch_norm(X, want_mean, want_var, momentum=momentum)
        mean, var, n = batch_statistics(X)
        compare("new running_mean (momentum 0.25)", got_mean, want_mean, {
            "momentum on the wrong side? new = (1 - momentum) * old + momentum * batch":
                momentum * RUNNING_MEAN + (1 - momentum) * mean,
        })
        compare("new running_var (momentum 0.25, n = 6 tokens)", got_var, want_var, {
            "the running variance is fed the UNBIASED batch variance, var * n / (n - 1)":
                (1 - momentum) * RUNNING_VAR + momentum * var,
            "momentum on the wrong side? new = (1 - momentum) * old + momentum * batch":
                momentum * RUNNING_VAR + (1 - momentum) * var * n / (n - 1),
        })
        passed("update_running")


@exercise_check
def check_layer_norm_rows(layer_norm_rows: Callable) -> None:
    for eps in (1e-5, BIG_EPS):
        got = layer_norm_rows(ROWS.clone(), GAMMA4.clone(), BETA4.clone(), eps)
        mean, var = ROWS.mean(-1, keepdim=True), ROWS.var(-1, unbiased=False, keepdim=True)
        _shape_hint(f"layer_norm_rows(ROWS, GAMMA4, BETA4, eps={eps})", got, ROWS, {
            (4,): "the statistics need keepdim=True so they broadcast back over the features"})
        compare(f"layer_norm_rows(ROWS, GAMMA4, BETA4, eps={eps})", got, layer_norm(ROWS, GAMMA4, BETA4, eps), {
            "unbiased variance (torch.var's default divides by D - 1)? LayerNorm uses the biased one":
                (ROWS - mean) / torch.sqrt(ROWS.var(-1, keepdim=True) + eps) * GAMMA4 + BETA4,
            "statistics over the rows (BatchNorm's axis)? LayerNorm uses each row's own features":
                (ROWS - ROWS.mean(0)) / torch.sqrt(ROWS.var(0, unbiased=False) + eps) * GAMMA4 + BETA4,
            "eps belongs inside the square root: sqrt(var + eps)":
                (ROWS - mean) / (torch.sqrt(var) + eps) * GAMMA4 + BETA4,
            "gamma and beta swapped? gamma multiplies, beta is added":
                (ROWS - mean) / torch.sqrt(var + eps) * BETA4 + GAMMA4,
        })
    passed("layer_norm_rows")


@exercise_check
def check_rms_norm_rows(rms_norm_rows: Callable) -> None:
    for eps in (1e-6, BIG_EPS):
        got = rms_norm_rows(ROWS.clone(), GAMMA4.clone(), eps)
        square = (ROWS ** 2).mean(-1, keepdim=True)
        compare(f"rms_norm_rows(ROWS, GAMMA4, eps={eps})", got, rms_norm(ROWS, GAMMA4, eps), {
            "you subtracted the mean: that is LayerNorm. RMSNorm divides the raw row by its root mean square":
                layer_norm(ROWS, GAMMA4, eps=eps),
            "missing square root? divide by sqrt(mean(x^2) + eps)": ROWS / (square + eps) * GAMMA4,
            "mean of |x| instead of the root mean square?": ROWS / (ROWS.abs().mean(-1, keepdim=True) + eps) * GAMMA4,
            "eps belongs inside the square root: sqrt(mean(x^2) + eps)": ROWS / (square.sqrt() + eps) * GAMMA4,
        })
    passed("rms_norm_rows")


# ---------------------------------------------------------------- hidden tests (see hand_in.py)
# Every answer here is computed from means and squares: none may run any of torch's normalization
# kernels (NORM_OPS), not only the one its name suggests. A batch_norm over the transposed rows
# is a ready-made LayerNorm, and a LayerNorm of [x, -x] a ready-made RMSNorm.
def _randn(gen: torch.Generator, *shape: int) -> Tensor:
    return torch.randn(*shape, generator=gen, dtype=torch.float64)


def _features_second(x: Tensor) -> Tensor:
    """(B, T, D) <-> (B, D, T), the layout of torch's BatchNorm1d; (N, D) stays."""
    return x.transpose(1, 2) if x.dim() == 3 else x


def _torch_batch_stats(x: Tensor) -> tuple[Tensor, Tensor]:
    flat = _flat(x)
    return flat.mean(0), flat.var(0, unbiased=False)


def _torch_batch_norm(x: Tensor, gamma: Tensor, beta: Tensor, running_mean: Tensor, running_var: Tensor,
                      training: bool, eps: float) -> Tensor:
    # F.batch_norm updates the running statistics it is given in training mode: give it copies
    y = F.batch_norm(_features_second(x), running_mean.clone(), running_var.clone(), gamma, beta, training, eps=eps)
    return _features_second(y)


def _torch_running_update(running_mean: Tensor, running_var: Tensor, x: Tensor,
                          momentum: float) -> tuple[Tensor, Tensor]:
    """The running statistics of an nn.BatchNorm1d after one training step on x."""
    layer = torch.nn.BatchNorm1d(x.shape[-1], momentum=momentum).double()
    with torch.no_grad():
        layer.running_mean.copy_(running_mean)
        layer.running_var.copy_(running_var)
        layer(_features_second(x))
    return layer.running_mean, layer.running_var


def _batch_stats_cases(gen: torch.Generator) -> list[Case]:
    cases = []
    for shape in [(5, 3), (2, 4, 6), (3, 2, 5, 4), (7, 1, 2)]:
        x = _randn(gen, *shape) * 3 + 1
        cases.append(Case(f"x of shape {shape}", lambda x=x: _torch_batch_stats(x), (x,)))
    return cases


def _batch_norm_cases(gen: torch.Generator) -> list[Case]:
    cases = []
    for shape, eps in [((6, 3), 1e-5), ((2, 5, 4), 0.3), ((3, 4, 2), 1.0)]:
        d = shape[-1]
        x, gamma, beta, running_mean = _randn(gen, *shape) * 2 + 1, _randn(gen, d), _randn(gen, d), _randn(gen, d)
        running_var = torch.rand(d, generator=gen, dtype=torch.float64) + 0.5
        for training in (True, False):
            args = (x, gamma, beta, running_mean, running_var, training, eps)
            cases.append(Case(f"x of shape {shape}, training={training}, eps={eps}",
                              lambda args=args: _torch_batch_norm(*args), args))
    return cases


def _update_running_cases(gen: torch.Generator) -> list[Case]:
    cases = []
    for shape, momentum in [((5, 3), 0.1), ((2, 6, 4), 0.5), ((3, 2, 2), 0.9)]:
        d = shape[-1]
        running_mean, running_var = _randn(gen, d), torch.rand(d, generator=gen, dtype=torch.float64) + 0.5
        args = (running_mean, running_var, _randn(gen, *shape) * 2 - 1, momentum)
        cases.append(Case(f"x of shape {shape}, momentum={momentum}", lambda args=args: _torch_running_update(*args),
                          args))
    return cases


def _layer_norm_cases(gen: torch.Generator) -> list[Case]:
    cases = []
    for shape, eps in [((7,), 1e-5), ((3, 5), 0.5), ((2, 4, 6), 1e-5), ((2, 2, 3, 8), 2.0)]:
        d = shape[-1]
        x, gamma, beta = _randn(gen, *shape) * 3 + 2, _randn(gen, d), _randn(gen, d)
        cases.append(Case(f"x of shape {shape}, eps={eps}",
                          lambda x=x, g=gamma, b=beta, eps=eps: F.layer_norm(x, x.shape[-1:], g, b, eps),
                          (x, gamma, beta, eps)))
    return cases


def _rms_norm_cases(gen: torch.Generator) -> list[Case]:
    cases = []
    for shape, eps in [((9,), 1e-6), ((4, 6), 0.5), ((2, 3, 8), 1e-6), ((2, 2, 2, 5), 3.0)]:
        x, gamma = _randn(gen, *shape) * 2 + 1, _randn(gen, shape[-1])
        cases.append(Case(f"x of shape {shape}, eps={eps}",
                          lambda x=x, g=gamma, eps=eps: F.rms_norm(x, x.shape[-1:], g, eps), (x, gamma, eps)))
    return cases


# float64 inputs, compared as closely as torch.allclose's defaults (the old hidden tests' tolerance)
_TOLERANCE = dict(atol=1e-8, rtol=1e-5)
EXERCISES = {spec.name: spec for spec in [
    Exercise("batch_stats", _batch_stats_cases, **_TOLERANCE, forbidden_ops=NORM_OPS,
             forbidden_names=("batch_norm", "BatchNorm1d"), forbidden_objects=(batch_statistics, batch_norm)),
    Exercise("batch_norm_forward", _batch_norm_cases, **_TOLERANCE, forbidden_ops=NORM_OPS,
             forbidden_names=("batch_norm", "BatchNorm1d", "instance_norm"),
             forbidden_objects=(batch_norm, BatchNorm, normalize), uses={"batch_stats": reference_batch_stats}),
    Exercise("update_running", _update_running_cases, **_TOLERANCE, forbidden_ops=NORM_OPS,
             forbidden_names=("batch_norm", "BatchNorm1d"), forbidden_objects=(batch_norm, BatchNorm),
             uses={"batch_stats": reference_batch_stats}),
    Exercise("layer_norm_rows", _layer_norm_cases, **_TOLERANCE, forbidden_ops=NORM_OPS,
             forbidden_names=("layer_norm", "LayerNorm", "group_norm", "GroupNorm"),
             forbidden_objects=(layer_norm, LayerNorm)),
    Exercise("rms_norm_rows", _rms_norm_cases, **_TOLERANCE, forbidden_ops=NORM_OPS,
             forbidden_names=("rms_norm", "RMSNorm"), forbidden_objects=(rms_norm, RMSNorm)),
]}
