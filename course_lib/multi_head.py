"""Lesson 08: many heads. Split the width into H heads, attend in each, concatenate, project.

The layer is lesson 01's `Attention` with n_heads=H (one head is H = 1, its default): it
splits q, k and v into heads with `split_heads`, attends in each through the one attention path
(the heads are one more batch dimension, (B, H, T, d_head); the weights are (B, H, T, S) for
every H) and puts them side by side with `merge_heads`. The split and merge
taught here are those same functions, with the input checks a notebook's call gets. Masks are
lesson 02's (True = may attend).

Dimension names: see course_lib/__init__.py. H heads; d_head = d_k / H (queries and keys),
d_v / H (values) per head.
"""

from __future__ import annotations

import copy
import functools
from typing import NamedTuple

import torch
from torch import Tensor, nn

from .attention import Attention, _merge_heads, _split_heads
from .copying import induction_batch, induction_scores, ov_copy_scores, weight_on_source  # lesson 06's data and probes
from .guards import require_count, require_float, require_index, require_instance, require_integer, require_items
from .measure import OperationCounter
from .model import DecoderOnly, ModelConfig
from .torch_copy import to_torch
from .runs import run_each
from .training import IGNORE, train_tiny_model

__all__ = ["Attention", "to_torch"]  # the layer and torch's copy of it, as lesson 08 names them


def split_heads(x: Tensor, n_heads: int) -> Tensor:
    """(..., T, H * d_head) -> (..., H, T, d_head): the layer's own split, checked.

    Columns h*d_head .. (h+1)*d_head - 1 are head h.
    """
    require_float("x", x, min_rank=2)
    n_heads = require_count("n_heads", n_heads)
    if x.shape[-1] % n_heads:
        raise ValueError(f"x's last dimension {x.shape[-1]} does not split into n_heads={n_heads} equal heads: "
                         "n_heads must divide it")
    return _split_heads(x, n_heads)


def merge_heads(x: Tensor) -> Tensor:
    """(..., H, T, d_head) -> (..., T, H * d_head): the layer's own merge, checked; head 0 first."""
    require_float("x", x, min_rank=3)
    return _merge_heads(x)


def _require_head(layer: Attention, head: object) -> int:
    """head must be one of the layer's heads: an int in 0..n_heads-1."""
    return require_index("head", head, layer.n_heads, "heads")


# ------------------------------------------------------------------ cost


def multiply_adds(d_model: int, n_heads: int, T: int = 16, S: int | None = None) -> dict[str, int]:
    """Arithmetic COUNTED (lesson 02's OperationCounter) in one forward pass of a layer.

    An Attention(d_model, n_heads=n_heads) attends from T query rows to a memory of S rows
    (default T; the cost is that of self-attention when S = T), batch 1. Returns
    {kind of operation: count}: "multiply-adds" (the matrix products) and one entry per
    elementwise operation (the softmax's exp, ...).
    """
    d_model, T = require_count("d_model", d_model), require_count("T", T)
    require_count("n_heads", n_heads)
    if d_model % n_heads:
        raise ValueError(f"n_heads={n_heads} must divide d_model={d_model}: each head takes d_model / n_heads columns")
    S = T if S is None else require_count("S", S)
    layer = Attention(d_model, n_heads=n_heads)
    gen = torch.Generator().manual_seed(0)
    x, memory = torch.randn(1, T, d_model, generator=gen), torch.randn(1, S, d_model, generator=gen)
    counter = OperationCounter()
    with torch.no_grad(), counter:
        layer(x, memory)
    return dict(sorted(counter.counts.items()))


# ------------------------------------------------------------------ the QK and OV view of one head


def head_weights(layer: Attention, head: int) -> dict[str, Tensor]:
    """Head h's slices of the four projections, as nn.Linear stores them (out, in):

    query, key: (d_head, D) and (d_head, d_memory); value: (d_v/H, d_memory); out: (D, d_v/H).
    """
    require_instance("layer", layer, Attention, "a course_lib.attention.Attention layer")
    head = _require_head(layer, head)
    qk, ov = slice(head * layer.d_head, (head + 1) * layer.d_head), \
        slice(head * layer.d_value_head, (head + 1) * layer.d_value_head)
    return {"query": layer.query.weight[qk].detach(), "key": layer.key.weight[qk].detach(),
            "value": layer.value.weight[ov].detach(), "out": layer.out.weight[:, ov].detach()}


def qk_matrix(layer: Attention, head: int) -> Tensor:
    """(D, d_memory) bilinear form W_QK of one head.

    The head's score of x_t on y_s is x_t W_QK y_s^T / sqrt(d_head) (plus bias terms when the
    layer has biases). W_QK = W_Q^T W_K is a product through d_head
    columns, so its rank is at most d_head; nothing makes it symmetric.
    """
    w = head_weights(layer, head)
    return w["query"].T @ w["key"]  # (D, d_head) @ (d_head, d_memory) -> (D, d_memory)


def ov_matrix(layer: Attention, head: int) -> Tensor:
    """(d_memory, D) map W_OV of one head: a source row y with weight 1 adds y W_OV to the output.

    W_OV = W_V^T W_O^T (row-vector convention), rank at most d_v / H: each head writes a
    low-rank update into the residual stream; the layer's output is the sum over heads.
    """
    w = head_weights(layer, head)
    return w["value"].T @ w["out"].T  # (d_memory, d_v/H) @ (d_v/H, D) -> (d_memory, D)


def without_heads(model: nn.Module, heads: list[int] | tuple[int, ...],
                  layer: int = 0) -> nn.Module:
    """A copy of `model` with `heads` of its layer `layer` silenced (ablated).

    A head is silenced by zeroing its columns of the output projection: it still attends but
    writes nothing. `model` is an Attention layer, or a DecoderOnly model.
    """
    require_instance("model", model, nn.Module, "an nn.Module")
    if isinstance(model, Attention):
        target = model
    else:
        layers = getattr(model, "layers", [])
        require_index("layer", layer, len(layers), "layers of the model")
        target = require_instance(f"model.layers[{layer}].attention", layers[layer].attention, Attention)
    require_instance("heads", heads, (list, tuple), "a list of head indices")
    heads = [_require_head(target, h) for h in heads]
    silenced = copy.deepcopy(model)
    if isinstance(silenced, Attention):
        out = silenced.out
    else:
        out = silenced.layers[layer].attention.out
    with torch.no_grad():
        for h in heads:
            out.weight[:, h * target.d_value_head: (h + 1) * target.d_value_head] = 0.0
    return silenced


# ------------------------------------------------------------------ a task with two relations
# Each position t >= 1 must answer two questions at once: which symbol came just before it
# (t - 1), and which symbol opened the sequence (position 0). The answer is the pair, one class
# of n_symbols^2: class = previous * n_symbols + first. Sequences are uniformly random symbols
# 0 .. n_symbols - 1; the model's vocabulary is the n_symbols^2 answer classes (input ids use
# only the first n_symbols of them).


def _require_symbols(name: str, values: object, n_symbols: object, power: int, rank: int | None = None) -> None:
    """values: an integer tensor (of `rank` dimensions) with entries in 0..n_symbols^power - 1;
    n_symbols an int >= 2."""
    require_count("n_symbols", n_symbols, minimum=2)
    size = n_symbols ** power
    require_integer(name, values, rank or 0, rank)
    if values.numel() and not (0 <= int(values.min()) and int(values.max()) < size):
        raise ValueError(f"{name} must lie in 0..{size - 1} for n_symbols={n_symbols}, got values from "
                         f"{int(values.min())} to {int(values.max())}")


def two_relation_targets(ids: Tensor, n_symbols: int) -> Tensor:
    """ids: (B, T) symbols in 0..n_symbols-1 -> targets (B, T).

    targets[t] = previous * n_symbols + first; IGNORE at t = 0.
    """
    _require_symbols("ids", ids, n_symbols, 1, rank=2)
    targets = ids.roll(1, dims=-1) * n_symbols + ids[:, :1]  # (B, T): [t] = ids[t-1] * N + ids[0]
    targets[:, 0] = IGNORE  # position 0 has no previous symbol
    return targets


def split_answer(classes: Tensor, n_symbols: int) -> tuple[Tensor, Tensor]:
    """Answer classes (any shape) -> (previous symbol, first symbol), each of the same shape."""
    _require_symbols("classes", classes, n_symbols, 2)
    return classes.div(n_symbols, rounding_mode="floor"), classes.remainder(n_symbols)


def two_relation_batch(n_sequences: int, length: int, n_symbols: int):
    """make_batch(generator) -> (ids (B, T), targets (B, T)): random sequences, for training."""
    require_count("n_sequences", n_sequences)
    require_count("length", length, minimum=3)
    require_count("n_symbols", n_symbols, minimum=2)

    def make_batch(generator: torch.Generator) -> tuple[Tensor, Tensor]:
        ids = torch.randint(n_symbols, (n_sequences, length), generator=generator)  # (B, T)
        return ids, two_relation_targets(ids, n_symbols)

    return make_batch


def multi_head_model(n_heads: int, n_symbols: int = 6, length: int = 8, d_model: int = 32,
                     seed: int = 0) -> DecoderOnly:
    """The course's DecoderOnly model (one causal layer, learned positions, float64) with n_heads
    heads, for the two-relation task: its vocabulary is the n_symbols^2 answer classes."""
    n_symbols = require_count("n_symbols", n_symbols, minimum=2)
    require_count("n_heads", n_heads)
    require_count("d_model", d_model)
    require_count("seed", seed, minimum=0)
    config = ModelConfig(vocab_size=n_symbols * n_symbols, max_len=require_count("length", length, 3),
                         d_model=d_model, n_heads=n_heads, seed=seed)
    model = DecoderOnly(config)
    # The attention weights are drawn first, from the seed (the order in which the lesson's runs
    # were first measured; the model's own order draws them after the embeddings). Neither order
    # makes every seed train alike: lesson 08 counts, over ten seeds, how often the heads
    # specialise and how often one head learns both relations.
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model.attention.load_state_dict(Attention(d_model, n_heads=n_heads, bias=True).state_dict())
    return model.to(torch.float64)


def train_two_relations(n_heads: int, n_symbols: int = 6, length: int = 8, d_model: int = 32,
                        steps: int = 100, lr: float = 0.015, batch: int = 64, seed: int = 0):
    """multi_head_model trained (the course's one loop, via train_tiny_model) on two_relation_batch.

    Training runs in float32 (a step takes about two thirds of float64's time on a CPU; lesson
    08 trains twenty models), from multi_head_model's float64 weights rounded; the trained
    model is returned in float64, so that sums of its parts (logit_parts) add up to rounding.
    Returns (model, losses).
    """
    require_count("batch", batch)
    model = multi_head_model(n_heads, n_symbols, length, d_model, seed).float()
    losses = train_tiny_model(model, two_relation_batch(batch, length, n_symbols), steps, lr, seed)
    return model.double(), losses


def _require_relation_model(model: object, n_sequences: object = 1) -> int:
    """The model's n_symbols, or a TypeError naming what it must be."""
    require_instance("model", model, DecoderOnly, "a DecoderOnly model (see multi_head_model)")
    require_count("n_sequences", n_sequences)
    return round(model.config.vocab_size ** 0.5)


def _fresh_batch(model: DecoderOnly, n_sequences: int, n_symbols: int,
                 seed: int) -> tuple[Tensor, Tensor]:
    """(ids (B, T), targets (B, T)) of the model's length, from a generator seeded by `seed`."""
    make_batch = two_relation_batch(n_sequences, model.config.max_len, n_symbols)
    return make_batch(torch.Generator().manual_seed(seed))


@torch.no_grad()
def relation_accuracy(model: nn.Module, n_sequences: int = 512, seed: int = 1) -> dict[str, float]:
    """On fresh sequences, the share of positions t >= 1 whose answer gets each relation right.

    Returns {"previous": ..., "first": ...}; chance is 1 / n_symbols for each.
    """
    n_symbols = _require_relation_model(model, n_sequences)
    require_count("seed", seed, minimum=0)
    ids, _ = _fresh_batch(model, n_sequences, n_symbols, seed)
    previous, first = split_answer(model(ids).argmax(-1)[:, 1:], n_symbols)  # (B, T-1) each
    return {"previous": (previous == ids[:, :-1]).double().mean().item(),
            "first": (first == ids[:, :1]).double().mean().item()}


@torch.no_grad()
def relation_attention(model: nn.Module, n_sequences: int = 256, seed: int = 1) -> Tensor:
    """(H, 2): mean weight each head puts on key t-1 and on key 0.

    Averaged over queries t >= 2 of fresh sequences.
    """
    n_symbols = _require_relation_model(model, n_sequences)
    require_count("seed", seed, minimum=0)
    ids, _ = _fresh_batch(model, n_sequences, n_symbols, seed)
    model(ids)
    weights = model.last_weights  # (B, H, T, T)
    # (B, H, T-2): the weight on key t-1, for t >= 2
    on_previous = torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1)[..., 1:]
    on_first = weights[..., 2:, 0]  # (B, H, T-2)
    return torch.stack([on_previous.mean((0, 2)), on_first.mean((0, 2))], dim=-1)  # (H, 2)


def train_relation_seeds(steps: dict[int, int], seeds: tuple[int, ...], progress: bool | str = False,
                         workers: int = 1, **settings) -> dict[int, list]:
    """train_two_relations for every number of heads and every seed: {n_heads: [(model, losses)]}.

    steps: {n_heads: training steps}; `seeds` seed both the initial weights and the batches;
    `settings` go to train_two_relations. progress=True shows one bar for all the runs,
    labelled "two relations" (a string names the task otherwise), with the step and loss of
    each run going on; workers > 1 trains that many at once (runs.run_each: the same
    models).
    """
    if not isinstance(steps, dict) or not steps:
        raise TypeError(f"steps must be a non-empty dict {{n_heads: steps}}, got {steps!r}")
    seeds = tuple(require_items("seeds", seeds))
    runs = [(n_heads, require_count("steps", n), seed) for n_heads, n in steps.items()
            for seed in seeds]
    names = [f"{n_heads} head{'s' * (n_heads > 1)}, seed {seed}" for n_heads, _, seed in runs]
    label = "two relations" if progress is True else progress
    trained = run_each(functools.partial(_relation_run, settings=settings), runs, workers, label,
                       names)
    by_heads: dict[int, list] = {n_heads: [] for n_heads in steps}
    for (n_heads, _, _), run in zip(runs, trained):
        by_heads[n_heads].append(run)
    return by_heads


def _relation_run(run: tuple[int, int, int], settings: dict):
    n_heads, n_steps, seed = run
    return train_two_relations(n_heads, steps=n_steps, seed=seed, **settings)


# ------------------------------------------------------------------ the logits, split by path
# The tiny model has one attention layer, a residual and no LayerNorm, so its logits are a sum:
# logits = (x + sum_h head_h(x) + b_O) W_U^T + b_U, with x = token + position rows. Each head's
# term is linear in x once its attention weights are given (we take the weights the model
# computed: "direct logit attribution"), so the parts add up to the logits exactly.


@torch.no_grad()
def logit_parts(model: nn.Module, ids: Tensor) -> dict[str, Tensor]:
    """ids: (B, T) -> {part: (B, T, V)} logits of a one-layer multi_head_model, split by path.

    "direct": the token and position rows straight to the read-out through the residual;
    "head h": what head h writes (its weighted values, b_V included, through its columns of
    W_O), read out; "biases": b_O and b_U, the same at every position. The parts sum to
    model(ids). The attention weights are the model's own for these ids.
    """
    _require_relation_model(model)
    if len(model.layers) != 1 or model.layers[0].ffn is not None or not model.config.residual:
        raise ValueError("logit_parts needs one attention layer with a residual and no MLP (see multi_head_model)")
    attention = model.attention
    model(ids)  # keeps each head's weights
    weights = model.last_weights  # (B, H, T, T)
    x = model.positions.add(model.tokens(ids))  # (B, T, D): the residual stream before the layer
    readout = model.readout.weight  # (V, D)
    values = split_heads(attention.value(x), attention.n_heads)  # (B, H, T, d_v/H), b_V included
    parts = {"direct": x @ readout.T}
    for h in range(attention.n_heads):
        written = (weights[:, h] @ values[:, h]) @ head_weights(attention, h)["out"].T  # (B, T, D)
        parts[f"head {h}"] = written @ readout.T
    constant = model.readout.bias.clone()  # (V,)
    if attention.out.bias is not None:
        constant += attention.out.bias @ readout.T
    parts["biases"] = constant.expand_as(parts["direct"])
    return parts


def relation_logits(logits: Tensor, n_symbols: int) -> Tensor:
    """(..., n_symbols^2) answer logits -> (..., 2, n_symbols): [0] 'previous', [1] 'first'.

    Class = previous * n_symbols + first, so the logits are an n_symbols x n_symbols table;
    each half is that table averaged over the other half (linear: parts still add up).
    """
    require_float("logits", logits, min_rank=1)
    require_count("n_symbols", n_symbols, minimum=2)
    if logits.shape[-1] != n_symbols * n_symbols:
        raise ValueError(f"logits must have n_symbols^2 = {n_symbols * n_symbols} answer classes in their last "
                         f"dimension, got shape {tuple(logits.shape)}")
    table = logits.unflatten(-1, (n_symbols, n_symbols))  # (..., previous, first)
    return torch.stack([table.mean(-1), table.mean(-2)], dim=-2)  # (..., 2, n_symbols)


@torch.no_grad()
def relation_margins(model: nn.Module, n_sequences: int = 256, seed: int = 1) -> dict[str, Tensor]:
    """Each logit part's margin for each relation, on fresh sequences, queries t >= 2.

    Returns {part: (2,)}: for relation r (0 previous, 1 first), the mean over positions of the
    part's relation logit of the right symbol minus the mean of the wrong ones. Margins add
    up over the parts to the whole model's margin (key "total"). From t = 2 on, t - 1 and 0 are
    different positions, so a head that reads one cannot get the other right by coincidence.
    """
    n_symbols = _require_relation_model(model, n_sequences)
    require_count("seed", seed, minimum=0)
    ids, _ = _fresh_batch(model, n_sequences, n_symbols, seed)
    first = ids[:, :1].expand(-1, ids.shape[1] - 2)  # (B, T-2)
    answers = torch.stack([ids[:, 1:-1], first], dim=-1)  # (B, T-2, 2): right previous, first
    parts = logit_parts(model, ids)
    parts["total"] = sum(parts.values())
    margins = {}
    for name, logits in parts.items():
        halves = relation_logits(logits[:, 2:], n_symbols)  # (B, T-2, 2, n_symbols)
        right = halves.gather(-1, answers.unsqueeze(-1)).squeeze(-1)  # (B, T-2, 2)
        wrong = (halves.sum(-1) - right) / (n_symbols - 1)
        margins[name] = (right - wrong).mean((0, 1))  # (2,)
    return margins


# ------------------------------------------------------------------ induction heads among many
# Lesson 06 trained a 2-layer model with one head per layer, so its induction head was the
# only head of layer 2. With several heads per layer, nothing says which head does what: a scan
# measures every head of every layer on repeated random tokens (lesson 06's probe) and lets
# the numbers say which heads look back one position, which prefix-match and which copy.
# Layers are counted from 0 in arguments (as without_heads takes them) and from 1 in
# HeadScan.layer and in what a lesson prints, as lesson 06 names them ("layer 2").

INDUCTION_PERIODS = (2, 3, 4, 5, 6, 7)  # lesson 06's training data: block lengths L
INDUCTION_PREFIX = (0, 16)  # and its filler before the block (drawn up to the most that fits)


def induction_heads_model(n_heads: int = 4, d_model: int = 32, seed: int = 0, vocab_size: int = 24,
                          length: int = 24) -> DecoderOnly:
    """Lesson 06's induction model with n_heads heads per layer, untrained: a causal, attention-only
    DecoderOnly (2 layers, learned positions, no FFN, no norm), float64. Each head has
    d_model / n_heads columns."""
    require_count("n_heads", n_heads)
    require_count("d_model", d_model)
    if d_model % n_heads:
        raise ValueError(f"n_heads={n_heads} must divide d_model={d_model}: each head takes d_model / n_heads columns")
    config = ModelConfig(vocab_size=require_count("vocab_size", vocab_size, minimum=3),
                         max_len=require_count("length", length, minimum=3), d_model=d_model, n_heads=n_heads,
                         n_decoder_layers=2, d_ff=0, seed=require_count("seed", seed, minimum=0))
    return DecoderOnly(config).to(torch.float64)


def train_induction_heads(n_heads: int = 4, d_model: int = 32, steps: int = 200, lr: float = 0.02,
                          seed: int = 0, vocab_size: int = 24, length: int = 24, batch: int = 64,
                          progress: bool | str = False) -> tuple[DecoderOnly, list[float]]:
    """induction_heads_model trained on lesson 06's data (copying.induction_batch: [BOS], filler,
    a block of L = 2..7 distinct tokens repeated; the target is every next token that can be
    known from earlier in the sequence), by the course's one loop (train_tiny_model).

    Training runs in float32 (about half of float64's time on a CPU); the model is returned in
    float64 for the measurements. With the defaults (4 heads of width 8, 200 steps of 64
    sequences at lr 0.02) every seed of 0..9 learns the task (tests/test_multi_head.py);
    at width 16 and lr 0.01 seed 8 had not after 300 steps. Returns (model, every step's loss).
    """
    require_count("batch", batch)
    model = induction_heads_model(n_heads, d_model, seed, vocab_size, length).float()
    make_batch = induction_batch(batch, length, vocab_size, INDUCTION_PERIODS, INDUCTION_PREFIX)
    losses = train_tiny_model(model, make_batch, steps, lr, seed,
                              progress="induction" if progress is True else progress)
    return model.double(), losses


def train_induction_head_seeds(seeds: tuple[int, ...] | list[int] | range, workers: int = 1,
                               progress: bool | str = False, **settings) -> list[tuple[DecoderOnly, list[float]]]:
    """train_induction_heads(seed=s, **settings) for each seed s, in order: [(model, losses)].

    workers=2 trains two at once in forked processes (runs.run_each: the same models).
    progress=True shows one bar, labelled "induction heads", with each run's step and loss.
    """
    seeds = [require_count("seed", s, minimum=0) for s in require_items("seeds", seeds)]
    label = "induction heads" if progress is True else progress
    return run_each(functools.partial(_induction_heads_run, settings=settings), seeds, workers, label,
                    [f"seed {s}" for s in seeds])


def _induction_heads_run(seed: int, settings: dict) -> tuple[DecoderOnly, list[float]]:
    return train_induction_heads(seed=seed, **settings)


def _require_repeated(model: object, ids: object, targets: object | None = None) -> int:
    """model: a DecoderOnly; ids (and targets) (B, 2 half + 1) repeated random tokens
    (copying.repeated_tokens_batch). Returns half."""
    require_instance("model", model, DecoderOnly, "a DecoderOnly model (see induction_heads_model)")
    require_integer("ids", ids, 2, 2)
    T = ids.shape[-1]
    half = (T - 1) // 2
    if T % 2 == 0 or half < 2 or not torch.equal(ids[:, 1:half + 1], ids[:, half + 1:]):
        raise ValueError(f"ids must be repeated random tokens, [BOS], a block of half >= 2 tokens, the same block "
                         f"again (copying.repeated_tokens_batch), got shape {tuple(ids.shape)}"
                         + ("" if T % 2 == 0 or half < 2 else " whose two halves differ"))
    if T > model.config.max_len:
        raise ValueError(f"ids of length {T} must fit the model's max_len={model.config.max_len}")
    if targets is not None:
        require_integer("targets", targets, 2, 2)
        if targets.shape != ids.shape:
            raise ValueError(f"targets {tuple(targets.shape)} must have the shape of ids {tuple(ids.shape)}")
    return half


class HeadScan(NamedTuple):
    """One head measured on repeated random tokens: [BOS], a block of distinct tokens, the block again."""
    layer: int  # counted from 1, as lesson 06 names layers
    head: int  # counted from 0, as the model indexes them
    previous_token: float  # mean weight of every query i >= 1 on key i - 1
    prefix_matching: float  # mean weight of the second copy's queries on the token after their first occurrence
    copying: float  # eigenvalue copying score of the head's (V, V) map W_E W_OV W_U (-1 .. 1)


def head_ov_circuit(model: DecoderOnly, layer: int, head: int) -> Tensor:
    """(V, V) map W_E W_OV W_U of one head: row a = the logits this head adds when it attends,
    with weight 1, to a row holding token a's embedding (its biases left out)."""
    require_instance("model", model, DecoderOnly, "a DecoderOnly model")
    require_index("layer", layer, len(model.layers), "layers")
    with torch.no_grad():
        return model.tokens.weight @ ov_matrix(model.layers[layer].attention, head) @ model.readout.weight.T


@torch.no_grad()
def scan_heads(model: DecoderOnly, ids: Tensor) -> list[HeadScan]:
    """Every head of every layer of `model` on ids (B, 2 half + 1), repeated random tokens
    (copying.repeated_tokens_batch): one HeadScan per head, layer by layer.

    previous-token score: the weight on key i - 1, averaged over queries 1 .. T - 1 and the
    batch. Prefix-matching score (Olsson et al. 2022): the weight a query of the second copy
    (positions half + 1 .. 2 half) puts on the key just after its token's occurrence in the
    first copy (copying.induction_scores), averaged. Copying score (Elhage et al. 2021): the
    eigenvalue score of head_ov_circuit (copying.ov_copy_scores), from the weights alone: what
    the head would add to the logits if it attended to a token, wherever it attends.
    A head that attends evenly to the i + 1 keys it can see scores about 1 / (i + 1) on both
    attention scores.
    """
    half = _require_repeated(model, ids)
    model(ids)  # keeps each layer's weights (B, H, T, T)
    scans = []
    for layer, weights in enumerate(model.layer_weights):
        for head in range(weights.shape[1]):
            previous = weight_on_source(weights, -1, head).mean()  # queries 1 .. T - 1
            matching = induction_scores(weights, ids, head)[half + 1:].mean()  # the second copy
            _, copying = ov_copy_scores(head_ov_circuit(model, layer, head))
            scans.append(HeadScan(layer + 1, head, float(previous), float(matching), copying))
    return scans


@torch.no_grad()
def second_copy_loss(model: nn.Module, ids: Tensor, targets: Tensor) -> dict[str, float]:
    """The model's mean loss (nats) and accuracy on the second copy of repeated random tokens:
    predicting its tokens 2 .. half (positions half + 1 .. 2 half - 1, as lesson 06's
    repeated_tokens_probe scores them), each of which followed the same token in the first copy.

    ids, targets: (B, 2 half + 1) from copying.repeated_tokens_batch. Returns {"loss", "accuracy"}.
    A model that knows which tokens the block holds but not their order does no better than
    ln((half - 1)!) / (half - 1) nats (copying.order_blind_loss).
    """
    half = _require_repeated(model, ids, targets)
    late = slice(half + 1, 2 * half)
    logits = model(ids)[:, late]  # (B, half - 1, V)
    wanted = targets[:, late]  # (B, half - 1)
    loss = nn.functional.cross_entropy(logits.transpose(1, 2), wanted)
    accuracy = (logits.argmax(-1) == wanted).double().mean()
    return {"loss": float(loss), "accuracy": float(accuracy)}


def head_ablations(model: DecoderOnly, ids: Tensor, targets: Tensor, layer: int = 1) -> dict[str, dict[str, float]]:
    """second_copy_loss of `model` as it is ("none"), with each head of `layer` (counted from 0)
    silenced alone ("head h", without_heads: its columns of W_O zeroed, so it writes nothing),
    and with all of them silenced at once ("all")."""
    require_instance("model", model, DecoderOnly, "a DecoderOnly model")
    require_index("layer", layer, len(model.layers), "layers")
    n_heads = model.layers[layer].attention.n_heads
    results = {"none": second_copy_loss(model, ids, targets)}
    for head in range(n_heads):
        results[f"head {head}"] = second_copy_loss(without_heads(model, [head], layer), ids, targets)
    results["all"] = second_copy_loss(without_heads(model, list(range(n_heads)), layer), ids, targets)
    return results
