"""Visible checks for exercise set 05 (normalization)."""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from ..normalization import batch_norm, batch_statistics, layer_norm, rms_norm
from . import compare, earlier_answers, exercise_check, passed


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
        print(f"{name}\n  expected shape: {tuple(expected.shape)}\n  got shape:      {tuple(got.shape)}")
        raise AssertionError(f"{name}: wrong shape. Likely bug: {hints[tuple(got.shape)]}")


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
