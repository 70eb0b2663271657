"""Lesson 09: the Transformer, assembled from the course's pieces and trained on a CPU.

The model is course_lib/model.py's EncoderDecoder: one Block class (encoder blocks without
cross-attention, decoder blocks with it), course_lib.attention's layer with n_heads heads, lesson 02's
masks, and here lesson 04's sinusoidal table for the positions; training goes through
course_lib.training.train. `transformer_config` gives the lesson's sizes and `transformer`
builds the model.

With dropout 0 and ReLU, a block is torch's nn.TransformerEncoderLayer (no cross-attention) or
nn.TransformerDecoderLayer (with it), post-LN or pre-LN (torch's norm_first), and the model's
core is nn.Transformer: torch_copy.from_torch copies their weights in and the tests compare outputs
and gradients. After the model: the toy tasks (reverse, sort), the same tasks for a GPT-style
`decoder_only` model (source, SEP, answer as one sequence, scored on the answer), greedy
decoding of either model (with or without a KV cache), the lesson's measurements (the FFN's
share, parallel vs sequential, rank collapse without residuals, post-LN vs pre-LN), and a
reverser whose weights are set by hand.

Dimension names: see course_lib/__init__.py. S source positions, T target positions.
"""

from __future__ import annotations

import dataclasses
import functools
import time
import warnings
from typing import Callable, NamedTuple

import torch
from torch import Tensor, nn

from .guards import (require_bool, require_choice, require_count, require_float, require_instance, require_integer,
                     require_items, require_length_fits, require_number, require_same_shape)
from .masks import causal_mask, padding_mask
from .model import (Block, DecoderOnly, EncoderDecoder, FeedForward, ModelConfig, Positions, require_ids,
                    require_inputs, require_src_mask)
from .positional_encoding import SinusoidalPositionalEncoding, frequencies
from .torch_copy import from_torch
from .runs import Later, run_each, start_each
from .training import train

__all__ = ["Block", "FeedForward"]  # the model's pieces, as lesson 09 names them


def transformer_config(**fields: object) -> ModelConfig:
    """A ModelConfig with lesson 09's sizes unless `fields` say otherwise: 12 tokens, 16 positions,
    4 heads, an FFN of width 64, post-LN (2017), sinusoidal positions, 1 encoder and 1 decoder block."""
    unknown = sorted(set(fields) - set(ModelConfig.__dataclass_fields__))
    if unknown:
        raise TypeError(f"fields must be ModelConfig fields ({', '.join(ModelConfig.__dataclass_fields__)}), "
                        f"got {unknown}")
    config = ModelConfig(**{"vocab_size": 12, "max_len": 16, "n_heads": 4, "d_ff": 64, "norm": "post",
                            "positions": "sinusoidal", **fields})
    if config.d_model % 2:
        raise ValueError(f"config.d_model={config.d_model} must be even: the sinusoidal table fills pairs")
    return config


def transformer(config: ModelConfig) -> EncoderDecoder:
    """The encoder-decoder model with lesson 04's sinusoidal positions: model(src, tgt_in) -> logits."""
    require_instance("config", config, ModelConfig)  # before its fields are read here
    return EncoderDecoder(config, SinusoidalPositionalEncoding(config.max_len, config.d_model))


def torch_gaps(norm_first: bool, n_layers: int = 2, d_model: int = 16, n_heads: int = 4, d_ff: int = 24,
               seed: int = 0) -> tuple[float, float]:
    """Largest |difference| between this model's core and nn.Transformer (random weights copied in,
    padding and causal masks, float64): (outputs, gradients of every input and weight)."""
    require_bool("norm_first", norm_first)
    for name, value in (("n_layers", n_layers), ("d_model", d_model), ("n_heads", n_heads), ("d_ff", d_ff)):
        require_count(name, value)
    require_count("seed", seed, minimum=0)
    config = transformer_config(d_model=d_model, n_heads=n_heads, d_ff=d_ff, n_encoder_layers=n_layers,
                                n_decoder_layers=n_layers, norm="pre" if norm_first else "post", seed=seed)
    gen = torch.Generator().manual_seed(seed)
    with warnings.catch_warnings():  # torch warns that pre-LN turns off its nested-tensor fast path
        warnings.simplefilter("ignore", UserWarning)
        theirs = nn.Transformer(d_model, n_heads, n_layers, n_layers, d_ff, dropout=0.0, batch_first=True,
                                norm_first=norm_first).double()
    with torch.no_grad():  # random norms and biases too, so a swapped gamma or a lost bias shows
        for p in theirs.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * 0.5 + (p.dim() == 1))
    mine = transformer(config).double()
    from_torch(mine, theirs)
    x, y = (torch.randn(3, n, d_model, generator=gen, dtype=torch.float64, requires_grad=True) for n in (6, 5))
    real = padding_mask([6, 4, 2], 6)  # (B, 1, S)
    # torch's masks: True = NOT allowed. The padding goes in as one (T, S) mask per sequence and
    # head, (B H, T, S), which torch adds to the scores just as it adds a key_padding_mask; its
    # key_padding_mask's first use imports sympy for a shape check (half a second of the lesson).
    hidden = (~real).repeat_interleave(n_heads, dim=0)  # (B H, 1, S)
    out_theirs = theirs(x, y, src_mask=hidden.expand(-1, 6, -1), tgt_mask=~causal_mask(5),
                        memory_mask=hidden.expand(-1, 5, -1))
    # ours: the (B, S) src_mask, which the model reads as (B, 1, 1, S), every head and query alike
    out_mine = mine.decode(y, mine.encode(x, real[:, 0]), real[:, 0])[0]  # (B, T, D)
    upstream = torch.randn(out_mine.shape, generator=gen, dtype=torch.float64)
    core = [*mine.encoder.parameters(), *mine.decoder.parameters(), *mine.encoder_norm.parameters(),
            *mine.decoder_norm.parameters()]
    g_theirs = torch.autograd.grad((out_theirs * upstream).sum(), [x, y, *theirs.parameters()])
    g_mine = torch.autograd.grad((out_mine * upstream).sum(), [x, y, *core])
    with torch.no_grad():  # torch's weight gradients, moved into our layout by the same copy
        for p, g in zip(theirs.parameters(), g_theirs[2:]):
            p.copy_(g)
        from_torch(mine, theirs)
    g_theirs = [*g_theirs[:2], *core]
    gaps = [(a - b).abs().max().item() for a, b in zip(g_mine, g_theirs)]
    return (out_mine - out_theirs).abs().max().item(), max(gaps)


# ---------------------------------------------------------------- toy tasks: reverse and sort

TASKS = ("reverse", "sort")
BOS = 0  # "begin": the decoder's first input; the symbols are 1 .. n_symbols


class Batch(NamedTuple):
    src: Tensor  # (B, S) symbols
    tgt_in: Tensor  # (B, T) BOS, then the answer shifted right by one (teacher forcing)
    tgt_out: Tensor  # (B, T) the answer


def task_answer(task: str, src: Tensor) -> Tensor:
    """The answer to `task` for each source row: src (B, S) -> (B, S)."""
    require_choice("task", task, TASKS)
    require_integer("src", src, 2, 2)
    return src.flip(-1) if task == "reverse" else src.sort(-1).values


def is_held_out(src: Tensor) -> Tensor:
    """(B, S) -> (B,) bool: about 1 source in 7, by a fixed hash of the whole row, is never trained on."""
    require_integer("src", src, 2, 2)
    return (src * torch.arange(3, 3 + src.shape[-1])).sum(-1) % 7 == 0


def toy_batch(task: str, n_sequences: int, length: int, n_symbols: int, generator: torch.Generator,
              held_out: bool = False) -> Batch:
    """n_sequences random sources of `length` symbols in 1..n_symbols (distinct ones for "sort"),
    from the training part (held_out=False) or the held-out part (True), with their answers."""
    require_choice("task", task, TASKS)
    require_count("n_sequences", n_sequences)
    require_count("length", length)
    require_count("n_symbols", n_symbols, minimum=2)
    require_instance("generator", generator, torch.Generator)
    require_bool("held_out", held_out)
    if task == "sort" and length > n_symbols:
        raise ValueError(f"sort draws distinct symbols: length={length} needs n_symbols >= length, got {n_symbols}")
    rows = []
    while sum(len(r) for r in rows) < n_sequences:  # draw more than needed, keep one part
        shape = (2 * n_sequences + 16, length)
        if task == "sort":  # distinct symbols: the next output is the smallest source symbol above the last
            src = torch.rand(shape[0], n_symbols, generator=generator).argsort(-1)[:, :length] + 1
        else:
            src = torch.randint(1, n_symbols + 1, shape, generator=generator)
        rows.append(src[is_held_out(src) == held_out])
    src = torch.cat(rows)[:n_sequences]  # (B, S)
    answer = task_answer(task, src)  # (B, T), T = S
    bos = torch.full((n_sequences, 1), BOS)
    return Batch(src, torch.cat([bos, answer[:, :-1]], dim=1), answer)


MODELS = (EncoderDecoder, DecoderOnly)
MODELS_TEXT = "an EncoderDecoder (see transformer) or a causal DecoderOnly (see decoder_only)"


def decoder_only(config: ModelConfig) -> DecoderOnly:
    """The GPT-style model on the same task: one causal stack over source, SEP, answer (see
    joined), with lesson 04's sinusoidal positions as the encoder-decoder's: ids (B, L) -> logits
    (B, L, V). config.n_encoder_layers is not used; config.causal must be True."""
    require_instance("config", config, ModelConfig)
    if not config.causal:
        raise ValueError("config.causal must be True: a decoder-only model that sees the answer ahead "
                         "learns to copy it")
    return DecoderOnly(config, SinusoidalPositionalEncoding(config.max_len, config.d_model))


SEP = BOS  # the decoder-only model's separator between source and answer: the same token 0


def joined(batch: Batch) -> Tensor:
    """The decoder-only model's sequences: source, SEP, answer: (B, S + 1 + T). It reads all but
    the last token and is scored only where the next token is an answer token."""
    require_instance("batch", batch, Batch, "a Batch (see toy_batch)")
    return torch.cat([batch.src, batch.tgt_in[:, :1].clone().fill_(SEP), batch.tgt_out], dim=1)


def sequence_loss(model: EncoderDecoder | DecoderOnly, batch: Batch) -> Tensor:
    """Mean cross-entropy of the teacher-forced logits against every answer token.

    An EncoderDecoder reads src and tgt_in; a DecoderOnly reads joined(batch) but its last token,
    and only its rows at SEP and after (each predicting the next answer token) are scored: the
    source is given, not learned, as the encoder-decoder's is.
    """
    require_instance("model", model, MODELS, MODELS_TEXT)
    require_instance("batch", batch, Batch, "a Batch (see toy_batch)")
    if isinstance(model, EncoderDecoder):
        logits = model(batch.src, batch.tgt_in)  # (B, T, V)
    else:
        S = batch.src.shape[1]
        logits = model(joined(batch)[:, :-1])[:, S:]  # (B, T, V): the rows at SEP and after
    return nn.functional.cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten())


def train_transformer(task: str = "reverse", config: ModelConfig | None = None, steps: int = 200,
                      n_sequences: int = 64, length: int = 8, lr: float = 3e-3, seed: int = 0,
                      progress: bool | str = False, gpt: bool = False
                      ) -> tuple[EncoderDecoder | DecoderOnly, list[float]]:
    """Train a float64 transformer on `task` with the course's one loop (Adam); returns (model, losses).

    Sources have `length` symbols in 1..vocab_size-1 (0 is BOS) and never come from the held-out part.
    progress=True shows a bar labelled with the task, with the step and the loss.
    gpt=True trains decoder_only(config) on the same batches (sequence_loss says how) in place of
    the encoder-decoder; its sequences are 2 * length long, so config.max_len must hold them.
    """
    config = transformer_config() if config is None else config
    _require_recipe(task, config, n_sequences, length, gpt)
    model = (decoder_only if gpt else transformer)(config).double()
    config = model.config
    generator = torch.Generator().manual_seed(require_count("seed", seed, minimum=0))

    def loss_of_step(_: int) -> Tensor:
        return sequence_loss(model, toy_batch(task, n_sequences, length, config.vocab_size - 1, generator))

    label = task if progress is True else progress
    return model, train(loss_of_step, model.parameters(), steps, lr, progress=label)


def _require_recipe(task: object, config: object, n_sequences: object, length: object, gpt: object) -> None:
    """What train_transformer needs before it builds a model: a known task, counts, a config, and
    (gpt=True) room in config.max_len for source, SEP and answer."""
    require_choice("task", task, TASKS)
    require_count("n_sequences", n_sequences)
    require_count("length", length)
    require_instance("config", config, ModelConfig)
    if require_bool("gpt", gpt):
        require_length_fits(2 * length, config.max_len, "config.max_len",
                            "2 * length (source, SEP, answer but its last token)")


class TrainedRun(NamedTuple):
    """One trained seed, as train_seeds returns it."""
    model: EncoderDecoder | DecoderOnly
    losses: list[float]  # every training step's
    accuracy: float  # held_out_accuracy on 500 held-out sources


def train_seeds(task: str, config: ModelConfig, seeds: list[int], steps: int, n_sequences: int, length: int,
                lr: float, gpt: bool = False, progress: bool | str = False, workers: int = 1,
                background: bool = False) -> list[TrainedRun] | Later:
    """train_transformer(task, config with each seed, ...) for each seed (weights and batches from
    that seed), with each model's held-out accuracy: one TrainedRun per seed. workers > 1 trains
    that many at once (runs.run_each: the same numbers). background=True returns at once,
    the runs going on in one other process: `.results()` gives the list (runs.start_each)."""
    _require_recipe(task, config, n_sequences, length, gpt)  # before any run starts, in this process
    require_count("steps", steps)
    require_number("lr", lr, positive=True)
    for seed in require_items("seeds", seeds):
        require_count("seeds", seed, minimum=0)
    job = functools.partial(_trained_run, task=task, config=config, steps=steps, n_sequences=n_sequences,
                            length=length, lr=lr, gpt=gpt)
    label = task if progress is True else progress
    kind = "decoder-only" if gpt else "encoder-decoder"
    names = [f"{kind}, seed {seed}" for seed in seeds]
    if require_bool("background", background):
        return start_each(job, list(seeds), label, names)
    return run_each(job, list(seeds), workers, label, names)


def _trained_run(seed: int, task: str, config: ModelConfig, steps: int, n_sequences: int, length: int, lr: float,
                 gpt: bool) -> TrainedRun:
    model, losses = train_transformer(task, dataclasses.replace(config, seed=seed), steps, n_sequences, length,
                                      lr, seed, gpt=gpt)
    return TrainedRun(model, losses, held_out_accuracy(model, task, length=length))


def final_losses(task: str, configs: dict[str, Callable[[int], ModelConfig]],
                 seeds: list[int], steps: int, n_sequences: int, length: int, lr: float,
                 last: int = 5, progress: bool | str = False, workers: int = 1,
                 background: bool = False) -> dict[str, list[float]] | Later:
    """Train every configs[name](seed) for each seed (weights and batches from that seed) and
    return, per name, the mean loss of the `last` steps of each run: {name: [one per seed]}.
    progress=True shows one bar that counts the runs, labelled with the task, and the step and
    loss of each run going on; workers > 1 trains that many at once (runs.run_each: the
    same losses). background=True returns at once, the runs going on in one other process:
    `.results()` gives the dict (runs.start_each)."""
    require_items("seeds", seeds)
    require_choice("task", task, TASKS)  # here, before any run starts (in the background too)
    require_count("n_sequences", n_sequences)
    require_count("length", length)
    require_number("lr", lr, positive=True)
    require_count("last", last)
    if last > require_count("steps", steps):
        raise ValueError(f"last={last} must be at most steps={steps}")
    runs = [(name, make(seed), seed) for name, make in configs.items() for seed in seeds]
    job = functools.partial(_final_loss, task=task, steps=steps, n_sequences=n_sequences,
                            length=length, lr=lr, last=last)
    names = [f"{name}, seed {seed}" for name, _, seed in runs]
    label = task if progress is True else progress

    def by_name(run_losses: list[float]) -> dict[str, list[float]]:
        losses: dict[str, list[float]] = {name: [] for name in configs}
        for (name, _, _), loss in zip(runs, run_losses):
            losses[name].append(loss)
        return losses

    if require_bool("background", background):
        return start_each(job, runs, label, names, finish=by_name)
    return by_name(run_each(job, runs, workers, label, names))


def _final_loss(run: tuple[str, ModelConfig, int], task: str, steps: int, n_sequences: int,
                length: int, lr: float, last: int) -> float:
    _, config, seed = run
    _, losses = train_transformer(task, config, steps, n_sequences, length, lr, seed)
    return sum(losses[-last:]) / last


# ---------------------------------------------------------------- greedy decoding, one token at a time

class Decoding(NamedTuple):
    tokens: Tensor  # (B, T) the chosen tokens
    logits: Tensor  # (B, T, V) step t's logits (the last row of the decoder's output)
    cross_weights: Tensor  # (B, H, T, S) step t's cross-attention (last decoder block)


def _logits(model: EncoderDecoder, tgt_in: Tensor, memory: Tensor, src_mask: Tensor | None = None) -> Tensor:
    """Teacher-forced logits (B, T, V) of target ids tgt_in (B, T) against an encoded memory (B, S, D)."""
    return model.readout(model.decode(model.embed(tgt_in), memory, src_mask)[0])


@torch.no_grad()
def greedy_decode(model: EncoderDecoder | DecoderOnly, src: Tensor, steps: int, cache: bool = False,
                  src_mask: Tensor | None = None) -> Decoding:
    """Encode src (B, S) once; then `steps` times: decode the prefix, append the argmax token.

    The decoder sees only what it has written so far (BOS first), never the answer.
    cache=False runs the decoder on the whole prefix at every step; cache=True gives it only
    the newest token, and each block reuses the keys and values kept from earlier steps.
    src_mask: (B, S) or (B, 1, S), True = real token, for sources padded at the end (None: all real).
    A DecoderOnly (decoder_only) continues src, SEP instead, and its cross_weights are its last
    block's self-attention weights from the newest row onto the S source positions.
    """
    require_instance("model", model, MODELS, MODELS_TEXT)
    require_ids(src, model.config, "src")
    require_count("steps", steps)
    require_bool("cache", cache)
    if isinstance(model, DecoderOnly):
        if src_mask is not None:
            raise ValueError("src_mask must be None for a DecoderOnly: its sources are not padded")
        if not model.config.causal:
            raise ValueError("model.config.causal must be True: greedy decoding writes one token after another")
        if cache and type(model.positions).rotate is not Positions.rotate:
            raise ValueError("cache must be False for a model whose positions rotate queries and keys (RoPE): "
                             "a rotation is not given the kept positions' offsets here")
        require_length_fits(src.shape[1] + steps, model.config.max_len, "model", "src, SEP and steps - 1 tokens")
        return _continue(model, src, steps, cache)
    require_src_mask(src_mask, src)  # refused here, before any step, as forward would
    require_length_fits(steps, model.config.max_len, "model", "steps")
    memory = model.encode(model.embed(src), src_mask)  # (B, S, D)
    prefix = torch.full((src.shape[0], 1), BOS)  # (B, 1)
    caches = [({}, {}) for _ in model.decoder] if cache else None  # per block: self-attention's, memory's
    logits, weights = [], []
    for _ in range(steps):
        new = prefix[:, -1:] if cache else prefix  # with a cache, only the newest token goes in
        start = prefix.shape[1] - new.shape[1]
        hidden, cross = model.decode(model.embed(new, start), memory, src_mask, caches)  # (B, n, D)
        last = model.readout(hidden)[:, -1]  # (B, V): only the newest row is new
        logits.append(last)
        weights.append(cross[..., -1, :])  # (B, H, S)
        prefix = torch.cat([prefix, last.argmax(-1, keepdim=True)], dim=1)  # (B, t + 2)
    return Decoding(prefix[:, 1:], torch.stack(logits, 1), torch.stack(weights, 2))


def _continue(model: DecoderOnly, src: Tensor, steps: int, cache: bool) -> Decoding:
    """greedy_decode for a DecoderOnly: the prompt src, SEP (B, S + 1) goes in whole at the first
    step; then, with a cache, only the newest token (its blocks keep the keys and values), without
    one, the model's own forward on the whole sequence written so far."""
    S = src.shape[1]
    sequence = torch.cat([src, torch.full((src.shape[0], 1), SEP)], dim=1)  # (B, S + 1)
    caches: list[dict] = [{} for _ in model.layers]  # per block: self-attention's keys and values
    logits, weights = [], []
    for _ in range(steps):
        start = caches[0]["k"].shape[-2] if cache and caches[0] else 0  # positions already kept
        last = model(sequence[:, start:], caches if cache else None)[:, -1]  # (B, V)
        logits.append(last)
        weights.append(model.layer_weights[-1][..., -1, :S])  # (B, H, S): the newest row's weights on the source
        sequence = torch.cat([sequence, last.argmax(-1, keepdim=True)], dim=1)
    return Decoding(sequence[:, S + 1:], torch.stack(logits, 1), torch.stack(weights, -2))


@torch.no_grad()
def unmasked_logits(model: EncoderDecoder, src: Tensor, tgt_in: Tensor) -> Tensor:
    """Teacher-forced logits (B, T, V) of src (B, S) and tgt_in (B, T) with the decoder's causal mask
    taken away: every target row sees every target row, later ones included. No model trains or
    decodes this way; it shows what the mask does (compare greedy_decode's step-by-step logits)."""
    require_instance("model", model, EncoderDecoder, "an EncoderDecoder (see transformer)")
    require_inputs(model.config, src, tgt_in, None)
    memory = model.encode(model.embed(src))  # (B, S, D)
    y = model.embed(tgt_in)  # (B, T, D)
    for block in model.decoder:
        y = block(y, None, memory)[0]  # mask None: no causal mask
    return model.readout(model.decoder_norm(y))  # (B, T, V)


class MaskEffect(NamedTuple):
    smallest_move: float  # the smallest change of a step's logits (largest over the vocabulary), steps 1..T-1
    tokens_changed: float  # share of the tokens of steps 1..T-1 whose argmax changes


def mask_effect(model: EncoderDecoder, src: Tensor, decoded: Decoding) -> MaskEffect:
    """What the causal mask does to a greedy decoding: decoded = greedy_decode(model, src, T),
    src (B, S). Its tokens go back in as one teacher-forced pass without the mask
    (unmasked_logits), and each step's logits (B, T, V) are compared with the decoding's. The
    last step is left out: it sees every token either way."""
    require_instance("decoded", decoded, Decoding, "a Decoding (see greedy_decode)")
    tokens = decoded.tokens  # (B, T)
    if tokens.shape[1] < 2:
        raise ValueError(f"decoded must hold at least 2 steps (the last is left out), got {tokens.shape[1]}")
    tgt_in = torch.cat([torch.full_like(tokens[:, :1], BOS), tokens[:, :-1]], dim=1)  # (B, T)
    no_mask = unmasked_logits(model, src, tgt_in)  # (B, T, V): every row sees every row
    moved = (no_mask - decoded.logits).abs().amax(-1)[:, :-1]  # (B, T - 1)
    changed = (no_mask.argmax(-1) != tokens)[:, :-1].double().mean()
    return MaskEffect(moved.min().item(), changed.item())


@torch.no_grad()
def token_accuracy(model: EncoderDecoder, batch: Batch, source_positions: bool = True) -> float:
    """Teacher-forced share of answer tokens that get the largest logit: batch's src (B, S), tgt_in and
    tgt_out (B, T) -> a float in [0, 1]. source_positions=False gives the encoder the source's tokens
    without their positions, so the memory, the decoder's only view of the source, holds no source
    position (the decoder's own positions stay)."""
    require_instance("model", model, EncoderDecoder, "an EncoderDecoder (see transformer)")
    require_instance("batch", batch, Batch, "a Batch (see toy_batch)")
    require_inputs(model.config, batch.src, batch.tgt_in, None)
    x = model.embed(batch.src)  # (B, S, D): token plus position
    if not require_bool("source_positions", source_positions):
        x = model.tokens(batch.src).to(x.dtype)  # (B, S, D): token alone
    logits = _logits(model, batch.tgt_in, model.encode(x))  # (B, T, V)
    return (logits.argmax(-1) == batch.tgt_out).double().mean().item()


def exact_match(predicted: Tensor, answer: Tensor) -> float:
    """Share of rows whose every token is right: predicted, answer (B, T) -> a float in [0, 1]."""
    require_integer("predicted", predicted, 2, 2)
    require_integer("answer", answer, 2, 2)
    require_same_shape("predicted", predicted, "answer", answer)
    if not len(predicted):
        raise ValueError(f"predicted must hold at least one row, got shape {tuple(predicted.shape)}")
    return (predicted == answer).all(-1).double().mean().item()


def held_out_accuracy(model: EncoderDecoder | DecoderOnly, task: str, n_sequences: int = 500, length: int = 8,
                      seed: int = 1) -> float:
    """Exact-sequence accuracy of greedy decoding on held-out sources (never trained on). Decoded
    with the KV cache: the same tokens as without it (lesson 09 checks), in less time."""
    require_instance("model", model, MODELS, MODELS_TEXT)
    require_count("seed", seed, minimum=0)
    batch = toy_batch(task, n_sequences, length, model.config.vocab_size - 1, torch.Generator().manual_seed(seed),
                      held_out=True)
    return exact_match(greedy_decode(model, batch.src, length, cache=True).tokens, batch.tgt_out)


# ---------------------------------------------------------------- measurements: parameters and time

def parameter_counts(model: nn.Module) -> dict[str, int]:
    """Parameters by part, counted from the module: attention, ffn, norms, tokens, readout."""
    require_instance("model", model, nn.Module, "an nn.Module")
    counts: dict[str, int] = {}
    for name, p in model.named_parameters():
        part = next((k for k in ("norm", "attention", "ffn") if k in name), name.split(".")[0])
        counts[part] = counts.get(part, 0) + p.numel()
    return counts


def _require_timing(lengths: object, d_model: object, repeats: object) -> None:
    """lengths a non-empty list of ints >= 1; d_model and repeats ints >= 1."""
    for T in require_items("lengths", lengths):
        require_count("lengths", T)
    require_count("d_model", d_model)
    require_count("repeats", repeats)


def _seconds(fn: Callable[[], object], repeats: int) -> float:
    """Fastest of `repeats` runs (the least disturbed by other programs), in seconds."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def roughly(value: float) -> str:
    """A timing, or a ratio of timings, to one significant digit ("~40" for 36.2, "~0.3" for 0.27):
    on a shared CPU the same call's time moves by a factor of 2, so more digits would be noise."""
    value = require_number("value", value, positive=True)
    return f"~{float(f'{value:.1g}'):g}"


@torch.no_grad()
def time_one_pass_vs_steps(lengths: list[int], d_model: int = 32, repeats: int = 3) -> dict[int, float]:
    """For each T: time of decoding T positions one call per position (as generation must) over the
    time of ONE teacher-forced pass that computes all T positions at once (as training does)."""
    _require_timing(lengths, d_model, repeats)
    model = transformer(transformer_config(d_model=d_model, d_ff=2 * d_model, max_len=max(lengths)))
    ratios = {}
    for T in lengths:
        src = tgt = torch.ones(4, require_count("T", T), dtype=torch.long)
        memory = model.encode(model.embed(src))  # (4, T, D)
        one_pass = _seconds(lambda: _logits(model, tgt, memory), repeats)  # (4, T, V) at once
        step_by_step = _seconds(lambda: [_logits(model, tgt[:, : t + 1], memory) for t in range(T)], repeats)
        ratios[T] = step_by_step / one_pass
    return ratios


@torch.no_grad()
def time_block_vs_rnn(lengths: list[int], d_model: int = 64, n_sequences: int = 8,
                      repeats: int = 3) -> dict[int, tuple[float, float]]:
    """For each T: seconds of one encoder block's forward (all T positions at once) and of
    torch's nn.RNN at the same width (T updates, each waiting for the one before)."""
    _require_timing(lengths, d_model, repeats)
    require_count("n_sequences", n_sequences)
    block = Block(transformer_config(d_model=d_model, n_heads=4, d_ff=4 * d_model, max_len=max(lengths)))
    rnn = nn.RNN(d_model, d_model, batch_first=True)
    times = {}
    for T in lengths:
        x = torch.randn(n_sequences, require_count("T", T), d_model)  # (B, T, D)
        times[T] = (_seconds(lambda: block(x), repeats), _seconds(lambda: rnn(x), repeats))
    return times


class DepthProbe(NamedTuple):
    gradient: float  # |gradient| at the first decoder block, the model as it is
    gradient_varied_memory: float  # the same with random memory rows in place of the encoder's
    memory_residual: float  # rank_one_residual of the encoder's output, mean over the batch


def depth_probe(config: ModelConfig, task: str = "sort", length: int = 8, seed: int = 0,
                n_sequences: int = 32) -> DepthProbe:
    """At initialisation (float64, one batch of n_sequences sources drawn with `seed`): how
    much of the training signal reaches the first decoder block's weights (|gradient of the
    loss|), the same when the decoder reads varied memory (random rows (B, S, D), the only
    change), and how close the encoder's output rows are to all being one row
    (rank_one_residual)."""
    model = transformer(config).double()
    generator = torch.Generator().manual_seed(require_count("seed", seed, minimum=0))
    batch = toy_batch(task, require_count("n_sequences", n_sequences), length, config.vocab_size - 1,
                      generator)
    random_rows = torch.randn(n_sequences, length, config.d_model, generator=generator,
                              dtype=torch.float64)  # (B, S, D)
    memory = model.encode(model.embed(batch.src))  # (B, S, D)
    weights = list(model.decoder[0].parameters())
    norms = []
    for rows in (memory, random_rows):
        logits = _logits(model, batch.tgt_in, rows)  # (B, T, V)
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten())
        grads = torch.autograd.grad(loss, weights)
        norms.append(torch.cat([g.flatten() for g in grads]).norm().item())
    return DepthProbe(norms[0], norms[1], rank_one_residual(memory.detach()).mean().item())


def rank_one_residual(x: Tensor) -> Tensor:
    """How far the rows of x are from all being one row: (..., T, D) -> (...,).

    Dong, Cordonnier & Loukas (2021): res(X) = X - 1 x^T with x = argmin_x ||X - 1 x^T||; here
    measured in the Frobenius norm, whose minimising x is the mean row, relative to ||X||.
    0 means rank collapse: every position carries the same vector.
    """
    require_float("x", x, min_rank=2)
    residual = x - x.mean(-2, keepdim=True)  # (..., T, D): X - 1 x^T
    return residual.norm(dim=(-2, -1)) / x.norm(dim=(-2, -1))


def position_probe(model: EncoderDecoder, src: Tensor) -> list[float]:
    """How well a linear read-out finds each source row's position in the encoder's stream.

    src: (B, S) sources without padding, B >= 2. The stream is read where the position enters
    (token plus position), after each encoder block, and in the memory the decoder reads (after
    the encoder's final norm). At each place, least squares fits a map from the rows (and a
    constant 1) to one-hot positions on the first B // 2 sources; the score is the fraction of
    the other sources' rows whose largest output is their own position (chance: 1 / S). The fit
    is ridge regression with a tiny penalty: a LayerNorm's output rows sum to 0, so the columns
    are linearly dependent, and plain least squares would then give a read-out that changes with
    the last bits of rounding (from one CPU kernel to another).
    Returns 2 + n_encoder_layers accuracies, in that order.
    """
    require_instance("model", model, EncoderDecoder, "an EncoderDecoder (see transformer)")
    if require_integer("src", src, min_rank=2, max_rank=2).shape[0] < 2:
        raise ValueError(f"src must hold at least 2 sources (half fit the read-out, half test it), "
                         f"got shape {tuple(src.shape)}")
    B, S = src.shape
    with torch.no_grad():
        x = model.embed(src)  # (B, S, D)
        stream = [x]
        for block in model.encoder:  # _encode's loop, keeping what enters each block
            x = block.run(x)[0]  # (B, S, D)
            stream.append(x)
        stream.append(model.encoder_norm(x))
    half = B // 2
    positions = torch.eye(S, dtype=x.dtype).expand(half, S, S).flatten(0, 1)  # (half S, S): one-hot
    penalty = 1e-6 * torch.eye(x.shape[-1] + 1, dtype=x.dtype)  # (D + 1, D + 1)
    accuracies = []
    for rows in stream:
        rows = torch.cat([rows, torch.ones(B, S, 1, dtype=rows.dtype)], -1)  # (B, S, D + 1)
        fit = rows[:half].flatten(0, 1)  # (half S, D + 1)
        read_out = torch.linalg.solve(fit.T @ fit + penalty, fit.T @ positions)  # (D + 1, S)
        guess = (rows[half:] @ read_out).argmax(-1)  # (B - half, S)
        accuracies.append((guess == torch.arange(S)).double().mean().item())
    return accuracies


# ---------------------------------------------------------------- reversal, set by hand

def hand_set_reverser(length: int = 8, vocab_size: int = 11, max_len: int = 16,
                      sharpness: float = 30.0, token_scale: float = 20.0) -> EncoderDecoder:
    """A transformer whose weights are SET, not trained, to reverse sources of `length` symbols.

    D = 64, no encoder block (memory = LN(token + position)), one post-LN decoder block with one
    head. Token v is token_scale * e_(tok v) on the sine columns of the 11 slowest sinusoid
    pairs (where the position adds at most 0.05); REF, the slowest sine, stays ~0 and is
    subtracted from every read, which cancels the mean that each LayerNorm removes. The
    decoder's self-attention and FFN are zero. Cross-attention: the key is the source position's
    fast sinusoid pairs, the query is the decoder position t's pairs reflected by the angle
    c_j (length - 1), so that q_t . k_s = sum_j cos(c_j (s + t - (length - 1))): largest at
    s = length - 1 - t. The value reads the source token, the output writes it 5x stronger than
    the decoder's own input token, and the read-out reads the token columns.
    """
    require_count("length", length)
    require_count("vocab_size", vocab_size, minimum=2)
    D, n_pairs = 64, 32
    if vocab_size > 11:
        raise ValueError(f"vocab_size must be at most 11 (the token columns), got {vocab_size}")
    require_count("max_len", max_len)
    if length > max_len:
        raise ValueError(f"length={length} must be at most max_len={max_len}")
    require_number("sharpness", sharpness, positive=True)
    require_number("token_scale", token_scale, positive=True)
    config = transformer_config(vocab_size=vocab_size, max_len=max_len, d_model=D, n_heads=1, d_ff=4,
                                n_encoder_layers=0, n_decoder_layers=1)
    model = transformer(config).double()
    token_cols = [2 * j for j in range(n_pairs - 1 - vocab_size, n_pairs - 1)]  # sine columns
    ref = 2 * (n_pairs - 1)  # the slowest sine: sin(1.3e-4 * pos), below 2e-3 for pos < 16
    fast = 2 * (n_pairs - 1 - 11)  # columns 0 .. fast - 1: the 20 fastest pairs, position only
    angles = frequencies(D) * (length - 1)  # (32,) c_j (length - 1)
    block = model.decoder[0]
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        for norm in [block.attention_norm, block.cross_norm, block.ffn_norm, model.encoder_norm, model.decoder_norm]:
            norm.weight.fill_(1.0)
        model.tokens.weight[torch.arange(vocab_size), token_cols[:vocab_size]] = token_scale
        cross = block.cross_attention
        read = torch.eye(D, dtype=torch.float64)  # x -> x - x[REF] on every column
        read[:, ref] -= 1.0
        key = torch.zeros(D, D, dtype=torch.float64)
        query = torch.zeros(D, D, dtype=torch.float64)
        for j in range(fast // 2):
            s, c = 2 * j, 2 * j + 1
            key[s, s] = key[c, c] = 1.0
            # (sin a, cos a) -> (-sin(a - b), cos(a - b)) with b = c_j (length - 1): then its dot
            # with (sin x, cos x) is cos(x + a - b)
            cb, sb = torch.cos(angles[j]), torch.sin(angles[j])
            query[s, s], query[s, c] = -cb, sb
            query[c, s], query[c, c] = sb, cb
        cross.key.weight.copy_(sharpness * key @ read)
        cross.query.weight.copy_(sharpness * query @ read)
        value = torch.zeros(D, D, dtype=torch.float64)
        value[token_cols, token_cols] = 5.0
        cross.value.weight.copy_(value @ read)
        cross.out.weight.copy_(torch.eye(D, dtype=torch.float64))
        model.readout.weight[torch.arange(vocab_size), token_cols[:vocab_size]] = 1.0
    return model
