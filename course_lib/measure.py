"""Measuring helpers of lesson 02, used again by later lessons: what a computation costs, and
whether a layer is causal.

Cost: `OperationCounter` counts the arithmetic torch runs inside a `with` block (lesson 08
counts the multiply-adds of its heads with it, lesson 09 those of a KV cache);
`operations_per_score` counts, per (query, key) pair, what a dot-product and an additive
(Bahdanau) score cost; `seconds_per_score` times a score function.
Causality, three probes of a function of a sequence x: (T, D): `future_perturbation` (change the
future, watch the past), `influence_matrix` (gradient norms) and `prefix_outputs` (run each
prefix alone).

What a causal mask is for, measured by training: `train_next_token` trains the course's model
with and without it and compares teacher forcing with generation.

It sits on lesson 02's floor, above masks.py (whose AdditiveScorer it counts) and model.py (which
it trains).
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Callable

import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode

from .guards import require_choice, require_count, require_float, require_instance
from .masks import AdditiveScorer
from .model import DecoderOnly, ModelConfig
from .training import train_tiny_model

# ------------------------------------------------------------------ what a computation costs


class OperationCounter(TorchDispatchMode):
    """Counts the arithmetic torch actually runs inside a `with` block, by kind of operation.

    Every matrix product counts its multiply-adds: (.., m, k) @ (.., k, n) is m*k*n per batch
    entry, whatever form torch ran it in (mm, a matrix times a vector (mv), a dot product,
    batched (bmm), with a bias added (addmm, addmv, baddbmm, addbmm)); `@` with broadcasting,
    `einsum` and `nn.Linear` reach torch as these forms. The bias of the add* forms counts one
    addition per output element. add/sub, mul/div and tanh count one per output element, and
    torch's softmax one exp per output element (its max, sum and division ride along);
    shape-only operations (views, transposes) count nothing; anything else is listed under its
    own name so that no work goes uncounted. An in-place form (exp_, add_) counts as its plain
    one: the arithmetic is the same.
    """

    MATMULS = ("mm", "bmm", "mv", "dot", "vdot", "addmm", "addmv", "baddbmm", "addbmm")
    KINDS = {"add": "additions", "sub": "additions", "mul": "multiplications", "div": "multiplications",
             "tanh": "tanh", "exp": "exp", "_softmax": "exp"}
    SHAPE_ONLY = ("view", "_unsafe_view", "t", "transpose", "unsqueeze", "squeeze", "expand", "slice",
                  "permute", "reshape", "alias", "detach", "clone", "_to_copy")

    def __init__(self):
        super().__init__()
        self.counts: Counter[str] = Counter()

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # Nothing here is compiled: without this, torch imports its compiler on the first count
        # (seconds of a lesson's run time) only to switch it off inside this mode.
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if name.endswith("_") and not name.startswith("_"):  # exp_ does the arithmetic of exp, in place
            name = name[:-1]
        if name in self.MATMULS:
            a, b = args[-2], args[-1]  # addmm(bias, a, b): the product is of the last two
            # a: (.., m, k) or (k,); each of its entries meets n entries of b: (.., k, n), or 1 of b: (k,)
            self.counts["multiply-adds"] += a.numel() * (b.shape[-1] if b.dim() >= 2 else 1)
            if name.startswith("add"):
                self.counts["additions"] += out.numel()
        elif name in self.KINDS:
            self.counts[self.KINDS[name]] += out.numel()
        elif name not in self.SHAPE_ONLY:  # some return a tuple (max) or a number (item)
            results = out if isinstance(out, (tuple, list)) else (out,)
            self.counts[name] += sum(r.numel() for r in results if isinstance(r, torch.Tensor))
        return out


def operations_per_score(kind: str, d_k: int, d_hidden: int | None = None, T: int = 6, S: int = 5
                         ) -> dict[str, float]:
    """Arithmetic per (query, key) pair, COUNTED while a (T, S) score matrix is computed.

    Only the part that grows with T*S is run: the projections of queries and keys happen
    once per token for both kinds and are done before counting. "dot": q @ k^T on
    projected rows of width d_k. "additive": AdditiveScorer.pair_scores on projected rows of
    width d_hidden (default d_k). Returns {kind of operation: count / (T*S)}.
    """
    require_choice("kind", kind, ("dot", "additive"))
    d_k = require_count("d_k", d_k)
    d_hidden = d_k if d_hidden is None else require_count("d_hidden", d_hidden)
    T, S = require_count("T", T), require_count("S", S)
    gen = torch.Generator().manual_seed(0)
    width = d_k if kind == "dot" else d_hidden
    hq, hk = torch.randn(T, width, generator=gen), torch.randn(S, width, generator=gen)  # projected rows
    scorer = AdditiveScorer(d_k, d_k, d_hidden) if kind == "additive" else None
    counter = OperationCounter()
    with torch.no_grad(), counter:
        scores = hq @ hk.T if scorer is None else scorer.pair_scores(hq, hk)  # (T, S)
    assert scores.shape == (T, S)
    return {name: count / (T * S) for name, count in sorted(counter.counts.items())}


def seconds_per_score(score_fn: Callable[[Tensor, Tensor], Tensor], q: Tensor, k: Tensor, repeats: int = 20) -> float:
    """Best-of-`repeats` wall-clock seconds of score_fn(q, k), divided by the number of scores.

    Timing varies from machine to machine and run to run: show it, assert only wide margins.
    """
    require_instance("score_fn", score_fn, Callable, "a function of (q, k)")
    require_float("q", q, min_rank=2)
    require_float("k", k, min_rank=2)
    require_count("repeats", repeats)
    best = float("inf")
    with torch.no_grad():
        for _ in range(repeats):
            start = time.perf_counter()
            scores = score_fn(q, k)
            best = min(best, time.perf_counter() - start)
    if not isinstance(scores, Tensor) or not scores.numel():
        raise TypeError(f"score_fn must return the scores as a non-empty tensor, got {type(scores).__name__}")
    return best / scores.numel()


# ------------------------------------------------------------------ is a layer causal?


def _require_sequence_fn_input(fn: object, x: Tensor) -> None:
    """fn must be a function of x, and x one non-empty sequence (T, D); fn(x) must be a tensor of
    output rows (T_out, d_out), which is what each probe compares (T_out may differ from T: a
    cross-attention's target rows as a function of its source)."""
    require_instance("fn", fn, Callable, "a function of x")
    require_float("x", x, 2, 2)
    if not len(x):
        raise ValueError(f"x must hold at least one position, got shape {tuple(x.shape)}")
    with torch.no_grad():
        out = fn(x)
    if not isinstance(out, Tensor) or out.dim() != 2:
        got = f"shape {tuple(out.shape)}" if isinstance(out, Tensor) else type(out).__name__
        raise ValueError(f"fn must map x of shape {tuple(x.shape)} to output rows (T_out, d_out), got {got}")


def future_perturbation(fn: Callable[[Tensor], Tensor], x: Tensor, seed: int = 0) -> Tensor:
    """How much the past outputs move when the future inputs change.

    fn maps x: (T, D) to (T, d_out). Entry t of the result (shape (T,)) is the largest
    |change| of any output row 0..t when every input row after t is replaced by fresh
    random values. A causal fn gives exactly zeros.
    """
    _require_sequence_fn_input(fn, x)
    require_count("seed", seed, minimum=0)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        reference = fn(x)
        changes = []
        for t in range(x.shape[0]):
            perturbed = x.clone()
            perturbed[t + 1:] = torch.randn(perturbed[t + 1:].shape, generator=gen, dtype=x.dtype)
            changes.append((fn(perturbed)[: t + 1] - reference[: t + 1]).abs().max())
    return torch.stack(changes)  # (T,)


def influence_matrix(fn: Callable[[Tensor], Tensor], x: Tensor) -> Tensor:
    """(T, T) gradient norms: entry [t, s] = || d fn(x)[t] / d x[s] || (Frobenius).

    fn maps x: (T, D) to (T, d_out). A causal fn has exact zeros above the diagonal.
    """
    _require_sequence_fn_input(fn, x)
    jacobian = torch.autograd.functional.jacobian(fn, x)  # (T, d_out, T, D)
    return jacobian.pow(2).sum(dim=(1, 3)).sqrt()  # (T, T)


def prefix_outputs(fn: Callable[[Tensor], Tensor], x: Tensor) -> Tensor:
    """Row t = the last output row of fn run on the prefix x[:t+1] alone.

    x: (T, D) -> (T, d_out). With a causal fn this equals fn(x): one forward pass gives
    every prefix's answer, which is why a decoder trains on all positions in parallel.
    """
    _require_sequence_fn_input(fn, x)
    return torch.stack([fn(x[: t + 1])[-1] for t in range(x.shape[0])])  # (T, d_out)


# ------------------------------------------------------------------ what the causal mask is for


def train_next_token(causal: bool, steps: int = 100, vocab: int = 8, T: int = 8, d_model: int = 32,
                     batch: int = 64, seed: int = 0) -> dict[str, float]:
    """Train a DecoderOnly model to predict the next token of uniformly random sequences (lesson 02).

    No model can beat a loss of ln(vocab) on such data when it only sees the past. Returns
    the last training loss and, on fresh sequences, two accuracies: teacher forcing (the
    whole sequence in view at once, as in training) and generation (position t predicted
    from the prefix of t+1 tokens alone: the future is not written yet).
    """
    require_count("T", T, minimum=2)
    require_count("batch", batch)
    require_count("vocab", vocab, minimum=2)
    # float64: the demo's figures then hardly depend on the CPU's kernels or the thread count.
    model = DecoderOnly(ModelConfig(vocab_size=vocab, max_len=T, d_model=d_model, causal=causal, seed=seed))
    model = model.to(torch.float64)

    def next_token_batch(generator: torch.Generator) -> tuple[Tensor, Tensor]:
        ids = torch.randint(vocab, (batch, T + 1), generator=generator)
        return ids[:, :-1], ids[:, 1:]  # inputs, and the token after each of them

    losses = train_tiny_model(model, next_token_batch, steps, seed=seed)
    with torch.no_grad():
        ids = torch.randint(vocab, (256, T + 1), generator=torch.Generator().manual_seed(seed + 1))
        seen_whole = (model(ids[:, :-1]).argmax(-1) == ids[:, 1:]).float().mean().item()
        generated = torch.stack([model(ids[:, : t + 1])[:, -1].argmax(-1) for t in range(T)], dim=1)  # (256, T)
        generation = (generated == ids[:, 1:]).float().mean().item()
    return {"train_loss": losses[-1], "teacher_forcing_accuracy": seen_whole, "generation_accuracy": generation}


def next_token_run(run: tuple[bool, int], steps: int = 100) -> dict[str, float]:
    """train_next_token(causal, steps, seed=seed) for run = (causal, seed): one item for
    runs.run_each, which trains several runs at once in other processes (lesson 02)."""
    causal, seed = run
    return train_next_token(causal, steps, seed=seed)
