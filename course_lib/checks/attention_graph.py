"""Visible checks for exercise set 10 (attention as a graph and as energy)."""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import Tensor

from ..attention_graph import attention_rollout, hopfield_energy, hopfield_run, hopfield_update, with_residual
from ..attention import Attention
from ..attention_scores import scaled_dot_product_attention
from . import call, compare, exercise_check, passed
from .bug_hints import name_shape_bug
from .hand_in import ATTENTION_OPS, Case, Exercise

# Tiny inputs the learner can follow by hand (float64, 3 tokens / 2 patterns in width 2).
PREVIOUS = torch.tensor([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], dtype=torch.float64)
MIXER = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.5, 0.5], [0.0, 0.0, 1.0]], dtype=torch.float64)
PATTERNS = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)  # (S=2, D=2)
STATE = torch.tensor([0.6, 0.2], dtype=torch.float64)  # (D,)
NOT_STOCHASTIC = "I + A is not row-stochastic: use residual * I + (1 - residual) * A"
SWAPPED = ("the residual weight and the attention weight are swapped: "
           "residual * I + (1 - residual) * A")
STATES = torch.tensor([[0.6, 0.2], [0.0, 1.0], [0.5, 0.5]], dtype=torch.float64)  # (B=3, D)


def _mix(w: Tensor, residual: float) -> Tensor:
    return residual * torch.eye(len(w), dtype=w.dtype) + (1 - residual) * w


def _rollout_of(rollout: Callable, label: str, layers: list[Tensor], residual: float) -> object:
    """The learner's rollout of copies of `layers`, naming a change made to them in place.

    The framework sees in-place changes of tensor arguments only, and these are in a list; the
    copies also keep the check's own matrices as they are for the cases that follow.
    """
    given = [w.clone() for w in layers]
    got = call(label, rollout, given, residual)
    if any(not torch.equal(g, w) for g, w in zip(given, layers)):
        raise AssertionError("`rollout` changed the matrices in `layer_weights` in place (the caller's are modified). "
                             "Likely bug: an in-place operation such as `w *= ...` or `w += ...` on a layer's matrix; "
                             "compute a new one instead, e.g. `mixed = residual * eye + (1 - residual) * w`")
    return got


@exercise_check
def check_rollout(rollout: Callable) -> None:
    layers = [PREVIOUS, MIXER]  # layer 1 reads the previous token; layer 2 mixes 1 with 2
    got = _rollout_of(rollout, "rollout([A1, A2], 0.0)", layers, 0.0)
    eye = torch.eye(3, dtype=torch.float64)
    compare("rollout([A1, A2], residual=0.0)  (no residual: the plain product A2 @ A1)", got,
            attention_rollout(layers, 0.0), {
                "multiplied in the wrong order: the LAST layer goes on the left, A2 @ A1":
                    PREVIOUS @ MIXER,
                NOT_STOCHASTIC: (eye + MIXER) @ (eye + PREVIOUS),
                SWAPPED: eye,
                "the layers were multiplied entry by entry (*): following paths is the matrix product, @":
                    MIXER * PREVIOUS * eye,
            })
    got = _rollout_of(rollout, "rollout([A1, A2], 0.5)", layers, 0.5)
    compare("rollout([A1, A2], residual=0.5)  (each layer 0.5 I + 0.5 A, then the product)", got,
            attention_rollout(layers, 0.5), {
                "multiplied in the wrong order: the LAST layer goes on the left":
                    _mix(PREVIOUS, 0.5) @ _mix(MIXER, 0.5),
                NOT_STOCHASTIC: (eye + MIXER) @ (eye + PREVIOUS),
                "the residual was left out": MIXER @ PREVIOUS,
            })
    three = [MIXER, PREVIOUS, MIXER]
    got = _rollout_of(rollout, "rollout([A1, A2, A3], 0.2)", three, 0.2)
    compare("rollout([A1, A2, A3], residual=0.2)  (three layers: A3~ @ A2~ @ A1~)", got,
            attention_rollout(three, 0.2), {
        "only the first two layers were used": _mix(PREVIOUS, 0.2) @ _mix(MIXER, 0.2),
        SWAPPED:
            _mix(MIXER, 0.8) @ _mix(PREVIOUS, 0.8) @ _mix(MIXER, 0.8),
    })
    passed("rollout")


@exercise_check
def check_hopfield_step(hopfield_step: Callable) -> None:
    got = call("hopfield_step(xi, X, beta=2.0)", hopfield_step, STATE, PATTERNS, 2.0)
    a, b = math.exp(2.0 * 0.6), math.exp(2.0 * 0.2)  # the two softmax numerators
    want = torch.tensor([a, b], dtype=torch.float64) / (a + b)
    raw = torch.tensor([0.6, 0.2], dtype=torch.float64)
    compare("hopfield_step([0.6, 0.2], X = I (2 patterns), beta=2)  (softmax(beta X xi) = weights; "
            "the new state is their mix of the patterns)", got, want, {
                "beta left out: the scores must be multiplied by beta":
                    (raw.exp() / raw.exp().sum()),
                "beta divides the scores instead of multiplying them":
                    ((raw / 2).exp() / (raw / 2).exp().sum()),
                "the softmax is missing: the weights are the raw scores beta X xi": 2.0 * raw,
                "scaled by 1/sqrt(D) as in a Transformer layer; here the scale is beta":
                    ((raw / math.sqrt(2)).exp() / (raw / math.sqrt(2)).exp().sum()),
            })
    patterns = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], dtype=torch.float64)  # (S=3, D=2)
    got = call("hopfield_step(states (B=3, D=2), X (S=3), beta=1.0)", hopfield_step, STATES,
               patterns, 1.0)
    wrong_axis = torch.softmax(STATES @ patterns.T, dim=0) @ patterns
    name_shape_bug("hopfield_step on a batch of 3 states, 3 patterns, beta=1", got, STATES.shape, {
        (3, 3): "(B, S) is one weight per pattern: the new states are those weights @ X, shape (B, D)"})
    compare("hopfield_step on a batch of 3 states, 3 patterns, beta=1  (one row per state)", got,
            hopfield_update(STATES, patterns, 1.0)[0], {
                "the softmax runs over the batch of states; each state's weights run over the "
                "patterns (last axis)":
                    wrong_axis,
            })
    passed("hopfield_step")


@exercise_check
def check_energy(energy: Callable) -> None:
    got = call("energy(xi, X, beta=2.0)", energy, STATE, PATTERNS, 2.0)
    lse = math.log(math.exp(1.2) + math.exp(0.4)) / 2.0
    want = torch.tensor(-lse + 0.5 * 0.4 + math.log(2) / 2.0 + 0.5, dtype=torch.float64)
    compare("energy([0.6, 0.2], X = I, beta=2)  = -lse + |xi|^2/2 + log(S)/beta + M^2/2", got,
            want, {
        "the log-sum-exp is not divided by beta":
            torch.tensor(-2 * lse + 0.2 + math.log(2) / 2 + 0.5, dtype=torch.float64),
        "max instead of log-sum-exp (that is the beta -> infinity limit)":
            torch.tensor(-0.6 + 0.2 + math.log(2) / 2 + 0.5, dtype=torch.float64),
        "the constants log(S)/beta + M^2/2 are missing":
            torch.tensor(-lse + 0.2, dtype=torch.float64),
        "the quadratic term must be +|xi|^2 / 2":
            torch.tensor(-lse - 0.2 + math.log(2) / 2 + 0.5, dtype=torch.float64),
        "|xi|^2 without the 1/2: the quadratic term is (xi * xi).sum(-1) / 2":
            torch.tensor(-lse + 0.4 + math.log(2) / 2 + 0.5, dtype=torch.float64),
        # X = I: each pattern has norm 1, the whole matrix sqrt(2)
        "M is the largest norm of ONE pattern, patterns.norm(dim=-1).max(), not the norm of the whole matrix":
            torch.tensor(-lse + 0.2 + math.log(2) / 2 + 1.0, dtype=torch.float64),
    })
    got = call("energy(states (B=3, D=2), X, beta=1)", energy, STATES, PATTERNS, 1.0)
    want = hopfield_energy(STATES, PATTERNS, 1.0)
    own_square = 0.5 * (STATES * STATES).sum(-1)  # (B,)
    compare("energy of a batch of 3 states, beta=1  (one energy per state)", got, want, {
        "|xi|^2 was summed over the whole batch: each state has its own, (xi * xi).sum(-1)":
            want - own_square + own_square.sum(),
    })
    big = torch.tensor([1.0, 0.0])  # float32, beta = 200: exp(200) overflows float32
    got = call("energy([1, 0] in float32, X, beta=200)", energy, big, PATTERNS.float(), 200.0)
    compare("energy at beta = 200 in float32  (exp(200) = inf in float32)", got,
            hopfield_energy(big, PATTERNS.float(), 200.0), {
                "exp overflows: subtract the largest score before exp (or use torch.logsumexp)":
                    torch.tensor(-math.inf),
            }, atol=1e-4)
    passed("energy")


# ---------------------------------------------------------------- hidden tests (see hand_in.py)
# torch's ready-made products of a list of matrices: the rollout asks for the loop written out.
MULTI_DOT_OPS = frozenset({"aten::linalg_multi_dot", "aten::chain_matmul"})
# (B, S, D, beta): one state (B = None), a batch, a sharp beta, a single pattern.
STEP_INPUTS = [(None, 3, 2, 0.5), (4, 5, 8, 3.0), (7, 16, 4, 20.0), (1, 1, 3, 1.0)]
ENERGY_INPUTS = [(None, 3, 2, 0.5), (4, 5, 8, 3.0), (6, 16, 4, 50.0), (2, 1, 3, 1.0)]


def _rollout_cases(gen: torch.Generator) -> list[Case]:
    cases = []
    # one layer, no residual, a residual of 1 (the identity), and in between
    for t, n_layers, residual in [(2, 1, 0.5), (4, 2, 0.0), (5, 3, 0.3), (6, 4, 0.9), (3, 2, 1.0)]:
        layers = [torch.randn(t, t, generator=gen, dtype=torch.float64).softmax(-1) for _ in range(n_layers)]
        cases.append(Case(f"T={t}, {n_layers} layers, residual={residual}",
                          lambda layers=layers, r=residual: attention_rollout(layers, r), (layers, residual)))
    return cases


def _states(gen: torch.Generator, b: int | None, s: int, d: int, spread: float) -> tuple[Tensor, Tensor]:
    """A state (D,), or a batch of states (B, D) when b is not None, and random patterns (S, D) scaled by `spread`."""
    xi = torch.randn(*(() if b is None else (b,)), d, generator=gen, dtype=torch.float64)
    return xi, spread * torch.randn(s, d, generator=gen, dtype=torch.float64)


def _step_cases(gen: torch.Generator) -> list[Case]:
    cases = []
    for b, s, d, beta in STEP_INPUTS:
        xi, patterns = _states(gen, b, s, d, spread=1.0)
        cases.append(Case(f"B={b}, S={s}, D={d}, beta={beta}",
                          lambda xi=xi, x=patterns, beta=beta: hopfield_update(xi, x, beta)[0], (xi, patterns, beta)))
    return cases


def _along(energy: Callable, states: Tensor, patterns: Tensor, beta: float) -> Tensor:
    """The learner's energy at every state of a run, one call per state: (steps + 1, ...)."""
    return torch.stack([energy(state, patterns, beta) for state in states])


def _energy_cases(gen: torch.Generator) -> list[Case]:
    cases = []
    for b, s, d, beta in ENERGY_INPUTS:
        xi, patterns = _states(gen, b, s, d, spread=2.0)
        label = f"B={b}, S={s}, D={d}, beta={beta}"
        cases.append(Case(label, lambda xi=xi, x=patterns, beta=beta: hopfield_energy(xi, x, beta),
                          (xi, patterns, beta)))
        # The energy never rises along the updates: the learner's energy at every state of a run.
        states, energies = hopfield_run(xi, patterns, beta, 5)
        cases.append(Case(f"{label}: at each state of 5 updates (the energy never rises)",
                          lambda energies=energies: energies,
                          run=lambda fn, states=states, x=patterns, beta=beta: _along(fn, states, x, beta)))
    # States at stored patterns of norm 3, beta = 100: exp(beta x.xi) = exp(900) overflows even float64.
    patterns = 3 * torch.nn.functional.normalize(torch.randn(4, 5, generator=gen, dtype=torch.float64), dim=-1)
    xi = patterns[torch.randperm(4, generator=gen)[:2]]
    cases.append(Case("2 states at stored patterns of norm 3, beta=100 (exp would overflow)",
                      lambda: hopfield_energy(xi, patterns, 100.0), (xi, patterns, 100.0)))
    return cases


EXERCISES = {spec.name: spec for spec in [
    Exercise("rollout", _rollout_cases, atol=1e-9, rtol=1e-5, forbidden_ops=MULTI_DOT_OPS,
             forbidden_names=("attention_rollout", "with_residual", "multi_dot"),
             forbidden_objects=(attention_rollout, with_residual)),
    Exercise("hopfield_step", _step_cases, atol=1e-9, rtol=1e-5, forbidden_ops=ATTENTION_OPS,
             forbidden_names=("hopfield_update", "scaled_dot_product_attention", "hopfield_run"),
             forbidden_objects=(hopfield_update, hopfield_run, scaled_dot_product_attention, Attention)),
    Exercise("energy", _energy_cases, atol=1e-9, rtol=0.0, forbidden_names=("hopfield_energy", "hopfield_run"),
             forbidden_objects=(hopfield_energy, hopfield_run)),
]}
