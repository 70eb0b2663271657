"""Lesson 09: the Transformer, assembled from the course's pieces and trained on a CPU.

Read it top to bottom: a flat config, the position-wise feed-forward network, ONE block class
(encoder block, decoder block, or a decoder-only block), the encoder-decoder model, and a
decoder-only model that reuses the same blocks. Nothing is written again here: the heads are
lesson 08's MultiHeadAttention, the masks lesson 02's, the positions lesson 04's sinusoidal
table, the norms lesson 05's LayerNorm, and training goes through course_lib.training.train.

With dropout 0 and ReLU, a block is torch's nn.TransformerEncoderLayer (cross=False) or
nn.TransformerDecoderLayer (cross=True), post-LN or pre-LN (norm_first), and the model's core
is nn.Transformer: `copy_from_torch` copies their weights in and the tests compare outputs and
gradients. After the model: the toy tasks (reverse, sort), greedy decoding (with or without a
KV cache), the lesson's measurements (the FFN's share, parallel vs sequential, rank collapse
without residuals, post-LN vs pre-LN), and a reverser whose weights are set by hand.

Dimension names: see course_lib/__init__.py. S source positions, T target positions.
"""

from __future__ import annotations

import functools
import time
import warnings
from dataclasses import dataclass
from typing import Callable, NamedTuple

import torch
from torch import Tensor, nn

from .guards import require_choice, require_count, require_float, require_integer, require_number
from .masks import causal_mask, padding_mask, require_length_fits, require_token_ids
from .multi_head import MultiHeadAttention, attend_heads
from .normalization import LayerNorm
from .positional_encoding import SinusoidalPositionalEncoding, frequencies
from .training import run_each, train


@dataclass
class TransformerConfig:
    """Everything that defines a Transformer, flat: one line of a notebook changes one thing."""

    vocab_size: int = 12  # source and target share one vocabulary and one embedding table
    max_len: int = 16  # longest source or target (the sinusoidal table's length)
    d_model: int = 32
    n_heads: int = 4
    d_ff: int = 64  # the FFN's hidden width (4 * d_model in the 2017 paper)
    n_encoder_layers: int = 1
    n_decoder_layers: int = 1
    norm_first: bool = False  # False: post-LN (2017), True: pre-LN (GPT-2); torch's norm_first
    residual: bool = True  # False only to see what the residual connections are for
    eps: float = 1e-5  # LayerNorm's epsilon
    seed: int = 0  # the initial weights

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise, naming the field, unless every field has a usable value."""
        require_count("config.vocab_size", self.vocab_size, minimum=2)
        require_count("config.max_len", self.max_len)
        for name in ("d_model", "n_heads", "d_ff"):
            require_count(f"config.{name}", getattr(self, name))
        require_count("config.n_encoder_layers", self.n_encoder_layers, minimum=0)
        require_count("config.n_decoder_layers", self.n_decoder_layers, minimum=0)
        require_count("config.seed", self.seed, minimum=0)
        require_number("config.eps", self.eps, non_negative=True)
        for name in ("norm_first", "residual"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"config.{name} must be True or False, got {getattr(self, name)!r}")
        if self.d_model % self.n_heads or self.d_model % 2:
            raise ValueError(f"config.d_model={self.d_model} must be even (sinusoidal pairs) and split "
                             f"into config.n_heads={self.n_heads} equal heads")


class FeedForward(nn.Module):
    """The position-wise FFN: Linear(D, d_ff), ReLU, Linear(d_ff, D), on every token alone.

    x: (..., T, D) -> (..., T, D). Names as torch's layers: linear1, linear2.
    """

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.linear1, self.linear2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear2(torch.relu(self.linear1(x)))  # (..., T, d_ff) -> (..., T, D)


class Block(nn.Module):
    """Self-attention, then (cross=True) cross-attention to the encoder's output, then the FFN.

    Each of these sublayers f sits on a residual branch with its own LayerNorm:
        post-LN (norm_first=False, 2017):  x = LN(x + f(x))
        pre-LN  (norm_first=True, GPT-2):  x = x + f(LN(x))
    cross=False with no mask: an encoder block; with a causal mask: a decoder-only (GPT) block.
    x: (B, T, D), memory: (B, S, D) -> (B, T, D). The last call's attention weights are kept
    in `self_weights` (B, H, T, T) and `cross_weights` (B, H, T, S). With a `cache` dict, x
    holds only new positions and the block keeps every position's keys and values there.
    """

    def __init__(self, config: TransformerConfig, cross: bool):
        super().__init__()
        D, H = config.d_model, config.n_heads
        self.norm_first, self.residual = config.norm_first, config.residual
        self.self_attention = MultiHeadAttention(D, H, bias=True)
        self.cross_attention = MultiHeadAttention(D, H, bias=True) if cross else None
        self.ffn = FeedForward(D, config.d_ff)
        self.norms = nn.ModuleList(LayerNorm(D, config.eps) for _ in range(3 if cross else 2))
        self.self_weights: Tensor | None = None
        self.cross_weights: Tensor | None = None

    def forward(self, x: Tensor, mask: Tensor | None = None, memory: Tensor | None = None,
                memory_mask: Tensor | None = None,
                cache: dict[str, tuple[Tensor, Tensor]] | None = None) -> Tensor:
        """cache (a dict, empty at the first call): x holds only the NEW positions; their keys and
        values are appended to the ones kept from earlier calls (self-attention), and memory's
        keys and values are projected once and kept (cross-attention). mask: (new, all) or None."""
        if (memory is None) != (self.cross_attention is None):
            raise ValueError("memory must be given to a block with cross=True, and only to one")

        def attend(layer: MultiHeadAttention, h: Tensor, source: Tensor | None, m: Tensor | None,
                   kept: str) -> tuple[Tensor, Tensor]:
            if cache is None:
                return layer(h, source, mask=m)  # (B, T, D), (B, H, T, S)
            if source is None:  # self-attention: the new positions' k, v after the kept ones
                q, k, v = layer.project(h)  # (B, T_new, d_k), ...
                if kept in cache:
                    k, v = torch.cat([cache[kept][0], k], -2), torch.cat([cache[kept][1], v], -2)
            elif kept in cache:  # cross-attention: memory's k, v were projected at the first call
                q, (k, v) = layer.query(h), cache[kept]
            else:
                q, k, v = layer.project(h, source)  # (B, T_new, d_k), (B, S, d_k), (B, S, d_v)
            cache[kept] = (k, v)
            out, weights = attend_heads(q, k, v, layer.n_heads, m)  # (B, T, D), (B, H, T, S)
            return layer.out(out), weights

        def attend_self(h: Tensor) -> Tensor:
            out, self.self_weights = attend(self.self_attention, h, None, mask, "self")
            return out

        def attend_memory(h: Tensor) -> Tensor:
            out, self.cross_weights = attend(self.cross_attention, h, memory, memory_mask, "memory")
            return out

        sublayers = [attend_self] + ([attend_memory] if self.cross_attention is not None else []) + [self.ffn]
        for norm, sublayer in zip(self.norms, sublayers):
            h = sublayer(norm(x) if self.norm_first else x)
            h = x + h if self.residual else h  # the residual: x itself reaches the next sublayer
            x = h if self.norm_first else norm(h)
        return x


class Transformer(nn.Module):
    """The encoder-decoder Transformer: embed, encode the source, decode the target, read out.

    model(src, tgt_in) -> logits (B, T, V): src (B, S) and tgt_in (B, T) are token ids; the
    decoder's position t sees tgt_in[:, :t+1] (causal mask) and the whole source (minus the
    padding past src_lengths). encode / decode split the two halves for greedy decoding;
    encode_vectors / decode_vectors are the core that equals nn.Transformer.
    """

    def __init__(self, config: TransformerConfig):
        super().__init__()
        if not isinstance(config, TransformerConfig):
            raise TypeError(f"config must be a TransformerConfig, got {type(config).__name__}")
        config.validate()  # fields may have been changed since the config was made
        self.config = config
        D, V = config.d_model, config.vocab_size
        with torch.random.fork_rng():  # seeded initial weights; the caller's generator is left alone
            torch.manual_seed(config.seed)
            self.tokens = nn.Embedding(V, D)
            self.positions = SinusoidalPositionalEncoding(config.max_len, D)
            self.encoder = nn.ModuleList(Block(config, cross=False) for _ in range(config.n_encoder_layers))
            self.decoder = nn.ModuleList(Block(config, cross=True) for _ in range(config.n_decoder_layers))
            # nn.Transformer ends both stacks with a LayerNorm, post-LN or pre-LN alike
            self.encoder_norm, self.decoder_norm = LayerNorm(D, config.eps), LayerNorm(D, config.eps)
            self.readout = nn.Linear(D, V)

    def embed(self, ids: Tensor, start: int = 0) -> Tensor:
        """ids: (B, T) at positions start .. start + T - 1 -> (B, T, D): token plus position."""
        require_token_ids("ids", ids, self.config.vocab_size)  # (B, T) ids in 0..V-1
        require_count("start", start, minimum=0)
        require_length_fits(start + ids.shape[-1], self.config.max_len, "model")
        x = self.tokens(ids).to(self.readout.weight.dtype)  # (B, T, D)
        if start == 0:
            return self.positions(x)  # (B, T, D)
        return x + self.positions.table[start:start + ids.shape[-1]].to(x.dtype)  # (B, T, D)

    def encode_vectors(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        """x: (B, S, D) -> memory (B, S, D). mask: (B, 1, S) padding mask or None."""
        for block in self.encoder:
            x = block(x, mask)
        return self.encoder_norm(x)

    def decode_vectors(self, y: Tensor, memory: Tensor, memory_mask: Tensor | None = None) -> Tensor:
        """y: (B, T, D), memory: (B, S, D) -> (B, T, D); every block is causal over y."""
        mask = causal_mask(y.shape[-2])  # (T, T)
        for block in self.decoder:
            y = block(y, mask, memory, memory_mask)
        return self.decoder_norm(y)

    def encode(self, src: Tensor, src_lengths: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        """src: (B, S) ids -> (memory (B, S, D), padding mask (B, 1, S) or None)."""
        mask = None if src_lengths is None else padding_mask(src_lengths, src.shape[-1])  # (B, 1, S)
        return self.encode_vectors(self.embed(src), mask), mask

    def decode(self, tgt_in: Tensor, memory: Tensor, memory_mask: Tensor | None = None) -> Tensor:
        """tgt_in: (B, T) ids -> logits (B, T, V)."""
        return self.readout(self.decode_vectors(self.embed(tgt_in), memory, memory_mask))

    def forward(self, src: Tensor, tgt_in: Tensor, src_lengths: Tensor | None = None) -> Tensor:
        memory, mask = self.encode(src, src_lengths)  # (B, S, D)
        return self.decode(tgt_in, memory, mask)  # (B, T, V)

    def decode_cached(self, new: Tensor, memory: Tensor, memory_mask: Tensor | None,
                      caches: list[dict[str, tuple[Tensor, Tensor]]]) -> Tensor:
        """new: (B, n) ids that follow the ones already decoded into `caches` (one dict per
        decoder block, empty before the first call) -> logits (B, n, V) of the new positions.

        Only the new rows go through the decoder: each block appends their keys and values to
        the ones it kept (the KV cache) and projects memory's keys and values only once.
        """
        if len(caches) != len(self.decoder):
            raise ValueError(f"caches needs one dict per decoder block ({len(self.decoder)}), "
                             f"got {len(caches)}")
        start = caches[0]["self"][0].shape[-2] if caches and "self" in caches[0] else 0
        y = self.embed(new, start)  # (B, n, D)
        n = new.shape[-1]
        mask = None if n == 1 else causal_mask(start + n)[start:]  # (n, start + n)
        for block, cache in zip(self.decoder, caches):
            y = block(y, mask, memory, memory_mask, cache=cache)
        return self.readout(self.decoder_norm(y))  # (B, n, V)


class DecoderOnly(nn.Module):
    """A decoder-only (GPT-style) model from the same blocks: cross=False, causal mask.

    ids: (B, T) -> logits (B, T, V). Config fields used: vocab_size, max_len, d_model, n_heads,
    d_ff, n_decoder_layers, norm_first, residual, eps, seed.
    """

    def __init__(self, config: TransformerConfig):
        super().__init__()
        if not isinstance(config, TransformerConfig):
            raise TypeError(f"config must be a TransformerConfig, got {type(config).__name__}")
        config.validate()
        self.config = config
        with torch.random.fork_rng():
            torch.manual_seed(config.seed)
            self.tokens = nn.Embedding(config.vocab_size, config.d_model)
            self.positions = SinusoidalPositionalEncoding(config.max_len, config.d_model)
            self.blocks = nn.ModuleList(Block(config, cross=False) for _ in range(config.n_decoder_layers))
            self.norm = LayerNorm(config.d_model, config.eps)
            self.readout = nn.Linear(config.d_model, config.vocab_size)

    embed = Transformer.embed

    def forward(self, ids: Tensor) -> Tensor:
        x, mask = self.embed(ids), causal_mask(ids.shape[-1])  # (B, T, D), (T, T)
        for block in self.blocks:
            x = block(x, mask)
        return self.readout(self.norm(x))  # (B, T, V)


# ---------------------------------------------------------------- torch's modules, weights copied in

@torch.no_grad()
def copy_attention_from_torch(mine: MultiHeadAttention, theirs: nn.MultiheadAttention) -> None:
    """theirs' packed in_proj (3D, D) holds W_Q, W_K, W_V stacked; out_proj is our `out`."""
    for linear, weight, bias in zip((mine.query, mine.key, mine.value), theirs.in_proj_weight.chunk(3),
                                    theirs.in_proj_bias.chunk(3)):
        linear.weight.copy_(weight)
        linear.bias.copy_(bias)
    mine.out.weight.copy_(theirs.out_proj.weight)
    mine.out.bias.copy_(theirs.out_proj.bias)


@torch.no_grad()
def copy_block_from_torch(block: Block, layer: nn.TransformerEncoderLayer | nn.TransformerDecoderLayer) -> None:
    """Copy an nn.TransformerEncoderLayer (into cross=False) or DecoderLayer (cross=True)."""
    decoder = isinstance(layer, nn.TransformerDecoderLayer)
    if decoder != (block.cross_attention is not None):
        raise ValueError("a decoder layer goes into a block with cross=True, an encoder layer into cross=False")
    copy_attention_from_torch(block.self_attention, layer.self_attn)
    if decoder:
        copy_attention_from_torch(block.cross_attention, layer.multihead_attn)
    for mine, theirs in ((block.ffn.linear1, layer.linear1), (block.ffn.linear2, layer.linear2)):
        mine.weight.copy_(theirs.weight)
        mine.bias.copy_(theirs.bias)
    norms = (layer.norm1, layer.norm2) + ((layer.norm3,) if decoder else ())
    for mine, theirs in zip(block.norms, norms):
        mine.weight.copy_(theirs.weight)
        mine.bias.copy_(theirs.bias)


@torch.no_grad()
def copy_from_torch(model: Transformer, theirs: nn.Transformer) -> None:
    """Copy nn.Transformer's layers and final norms into `model` (same depths and widths)."""
    pairs = list(zip(model.encoder, theirs.encoder.layers)) + list(zip(model.decoder, theirs.decoder.layers))
    if len(model.encoder) != len(theirs.encoder.layers) or len(model.decoder) != len(theirs.decoder.layers):
        raise ValueError("model and theirs must have the same numbers of encoder and decoder layers")
    for block, layer in pairs:
        copy_block_from_torch(block, layer)
    for mine, norm in ((model.encoder_norm, theirs.encoder.norm), (model.decoder_norm, theirs.decoder.norm)):
        mine.weight.copy_(norm.weight)
        mine.bias.copy_(norm.bias)


def torch_gaps(norm_first: bool, n_layers: int = 2, d_model: int = 16, n_heads: int = 4, d_ff: int = 24,
               seed: int = 0) -> tuple[float, float]:
    """Largest |difference| between this model's core and nn.Transformer (random weights copied in,
    padding and causal masks, float64): (outputs, gradients of every input and weight)."""
    config = TransformerConfig(d_model=d_model, n_heads=n_heads, d_ff=d_ff, n_encoder_layers=n_layers,
                               n_decoder_layers=n_layers, norm_first=norm_first, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    with warnings.catch_warnings():  # torch warns that pre-LN turns off its nested-tensor fast path
        warnings.simplefilter("ignore", UserWarning)
        theirs = nn.Transformer(d_model, n_heads, n_layers, n_layers, d_ff, dropout=0.0, batch_first=True,
                                norm_first=norm_first).double()
    with torch.no_grad():  # random norms and biases too, so a swapped gamma or a lost bias shows
        for p in theirs.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * 0.5 + (p.dim() == 1))
    mine = Transformer(config).double()
    copy_from_torch(mine, theirs)
    x, y = (torch.randn(3, n, d_model, generator=gen, dtype=torch.float64, requires_grad=True) for n in (6, 5))
    real = padding_mask([6, 4, 2], 6)  # (B, 1, S)
    out_theirs = theirs(x, y, tgt_mask=~causal_mask(5), src_key_padding_mask=~real[:, 0],
                        memory_key_padding_mask=~real[:, 0])  # torch's masks: True = NOT allowed
    out_mine = mine.decode_vectors(y, mine.encode_vectors(x, real), real)
    upstream = torch.randn(out_mine.shape, generator=gen, dtype=torch.float64)
    core = [*mine.encoder.parameters(), *mine.decoder.parameters(), *mine.encoder_norm.parameters(),
            *mine.decoder_norm.parameters()]
    g_theirs = torch.autograd.grad((out_theirs * upstream).sum(), [x, y, *theirs.parameters()])
    g_mine = torch.autograd.grad((out_mine * upstream).sum(), [x, y, *core])
    with torch.no_grad():  # torch's weight gradients, moved into our layout by the same copy
        for p, g in zip(theirs.parameters(), g_theirs[2:]):
            p.copy_(g)
        copy_from_torch(mine, theirs)
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


def sequence_loss(model: Transformer, batch: Batch) -> Tensor:
    """Mean cross-entropy of the teacher-forced logits against every answer token."""
    logits = model(batch.src, batch.tgt_in)  # (B, T, V)
    return nn.functional.cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten())


def train_transformer(task: str = "reverse", config: TransformerConfig | None = None, steps: int = 200,
                      n_sequences: int = 64, length: int = 8, lr: float = 3e-3, seed: int = 0,
                      progress: bool | str = False) -> tuple[Transformer, list[float]]:
    """Train a float64 Transformer on `task` with the course's one loop (Adam); returns (model, losses).

    Sources have `length` symbols in 1..vocab_size-1 (0 is BOS) and never come from the held-out part.
    progress=True shows a bar labelled with the task, with the step and the loss.
    """
    config = TransformerConfig() if config is None else config
    if not isinstance(config, TransformerConfig):
        raise TypeError(f"config must be a TransformerConfig, got {type(config).__name__}")
    model = Transformer(config).double()
    generator = torch.Generator().manual_seed(require_count("seed", seed, minimum=0))

    def loss_of_step(_: int) -> Tensor:
        return sequence_loss(model, toy_batch(task, n_sequences, length, config.vocab_size - 1, generator))

    label = task if progress is True else progress
    return model, train(loss_of_step, model.parameters(), steps, lr, progress=label)


def final_losses(task: str, configs: dict[str, Callable[[int], TransformerConfig]],
                 seeds: list[int], steps: int, n_sequences: int, length: int, lr: float,
                 last: int = 5, progress: bool | str = False, workers: int = 1) -> dict[str, list[float]]:
    """Train every configs[name](seed) for each seed (weights and batches from that seed) and
    return, per name, the mean loss of the `last` steps of each run: {name: [one per seed]}.
    progress=True shows one bar that counts the runs, labelled with the task, and the step and
    loss of each run going on; workers > 1 trains that many at once (training.run_each: the
    same losses)."""
    require_count("last", last)
    if last > require_count("steps", steps):
        raise ValueError(f"last={last} is more than steps={steps}")
    runs = [(name, make(seed), seed) for name, make in configs.items() for seed in seeds]
    job = functools.partial(_final_loss, task=task, steps=steps, n_sequences=n_sequences,
                            length=length, lr=lr, last=last)
    losses: dict[str, list[float]] = {name: [] for name in configs}
    names = [f"{name}, seed {seed}" for name, _, seed in runs]
    label = task if progress is True else progress
    for (name, _, _), loss in zip(runs, run_each(job, runs, workers, label, names)):
        losses[name].append(loss)
    return losses


def _final_loss(run: tuple[str, TransformerConfig, int], task: str, steps: int, n_sequences: int,
                length: int, lr: float, last: int) -> float:
    _, config, seed = run
    _, losses = train_transformer(task, config, steps, n_sequences, length, lr, seed)
    return sum(losses[-last:]) / last


# ---------------------------------------------------------------- greedy decoding, one token at a time

class Decoding(NamedTuple):
    tokens: Tensor  # (B, T) the chosen tokens
    logits: Tensor  # (B, T, V) step t's logits (the last row of the decoder's output)
    cross_weights: Tensor  # (B, T, H, S) step t's cross-attention (last decoder block)


@torch.no_grad()
def greedy_decode(model: Transformer, src: Tensor, steps: int, cache: bool = False) -> Decoding:
    """Encode src (B, S) once; then `steps` times: decode the prefix, append the argmax token.

    The decoder sees only what it has written so far (BOS first), never the answer.
    cache=False runs the decoder on the whole prefix at every step; cache=True gives it only
    the newest token, and each block reuses the keys and values kept from earlier steps.
    """
    if not isinstance(model, Transformer):
        raise TypeError(f"model must be a Transformer, got {type(model).__name__}")
    require_count("steps", steps)
    if not isinstance(cache, bool):
        raise TypeError(f"cache must be True or False, got {cache!r}")
    memory, mask = model.encode(src)  # (B, S, D)
    prefix = torch.full((src.shape[0], 1), BOS)  # (B, 1)
    caches: list[dict[str, tuple[Tensor, Tensor]]] = [{} for _ in model.decoder]
    logits, weights = [], []
    for _ in range(steps):
        if cache:
            last = model.decode_cached(prefix[:, -1:], memory, mask, caches)[:, -1]  # (B, V)
        else:
            last = model.decode(prefix, memory, mask)[:, -1]  # (B, V): only the newest row is new
        logits.append(last)
        weights.append(model.decoder[-1].cross_weights[:, :, -1])  # (B, H, S)
        prefix = torch.cat([prefix, last.argmax(-1, keepdim=True)], dim=1)  # (B, t + 2)
    return Decoding(prefix[:, 1:], torch.stack(logits, 1), torch.stack(weights, 1))


def exact_match(predicted: Tensor, answer: Tensor) -> float:
    """Share of rows whose every token is right: predicted, answer (B, T) -> a float in [0, 1]."""
    require_integer("predicted", predicted, 2, 2)
    require_integer("answer", answer, 2, 2)
    if predicted.shape != answer.shape:
        raise ValueError(f"predicted {tuple(predicted.shape)} and answer {tuple(answer.shape)} differ in shape")
    return (predicted == answer).all(-1).double().mean().item()


def held_out_accuracy(model: Transformer, task: str, n_sequences: int = 500, length: int = 8,
                      seed: int = 1) -> float:
    """Exact-sequence accuracy of greedy decoding on held-out sources (never trained on)."""
    if not isinstance(model, Transformer):
        raise TypeError(f"model must be a Transformer, got {type(model).__name__}")
    batch = toy_batch(task, n_sequences, length, model.config.vocab_size - 1, torch.Generator().manual_seed(seed),
                      held_out=True)
    return exact_match(greedy_decode(model, batch.src, length).tokens, batch.tgt_out)


# ---------------------------------------------------------------- measurements: parameters and time

def parameter_counts(model: nn.Module) -> dict[str, int]:
    """Parameters by part, counted from the module: attention, ffn, norms, tokens, readout."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    counts: dict[str, int] = {}
    for name, p in model.named_parameters():
        part = next((k for k in ("attention", "ffn", "norm") if k in name), name.split(".")[0])
        counts[part] = counts.get(part, 0) + p.numel()
    return counts


def _seconds(fn: Callable[[], object], repeats: int) -> float:
    """Fastest of `repeats` runs (the least disturbed by other programs), in seconds."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


@torch.no_grad()
def time_one_pass_vs_steps(lengths: list[int], d_model: int = 32, repeats: int = 3) -> dict[int, float]:
    """For each T: time of decoding T positions one call per position (as generation must) over the
    time of ONE teacher-forced pass that computes all T positions at once (as training does)."""
    model = Transformer(TransformerConfig(d_model=d_model, d_ff=2 * d_model, max_len=max(lengths)))
    ratios = {}
    for T in lengths:
        src = tgt = torch.ones(4, require_count("T", T), dtype=torch.long)
        memory, _ = model.encode(src)  # (4, T, D)
        one_pass = _seconds(lambda: model.decode(tgt, memory), repeats)  # (4, T, V) at once
        step_by_step = _seconds(lambda: [model.decode(tgt[:, : t + 1], memory) for t in range(T)], repeats)
        ratios[T] = step_by_step / one_pass
    return ratios


@torch.no_grad()
def time_block_vs_rnn(lengths: list[int], d_model: int = 64, n_sequences: int = 8,
                      repeats: int = 3) -> dict[int, tuple[float, float]]:
    """For each T: seconds of one encoder block's forward (all T positions at once) and of
    torch's nn.RNN at the same width (T updates, each waiting for the one before)."""
    require_count("d_model", d_model)
    block = Block(TransformerConfig(d_model=d_model, n_heads=4, d_ff=4 * d_model, max_len=max(lengths)), cross=False)
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


def depth_probe(config: TransformerConfig, task: str = "sort", length: int = 8, seed: int = 0,
                n_sequences: int = 32) -> DepthProbe:
    """At initialisation (float64, one batch of n_sequences sources drawn with `seed`): how
    much of the training signal reaches the first decoder block's weights (|gradient of the
    loss|), the same when the decoder reads varied memory (random rows (B, S, D), the only
    change), and how close the encoder's output rows are to all being one row
    (rank_one_residual)."""
    model = Transformer(config).double()
    generator = torch.Generator().manual_seed(require_count("seed", seed, minimum=0))
    batch = toy_batch(task, require_count("n_sequences", n_sequences), length, config.vocab_size - 1,
                      generator)
    random_rows = torch.randn(n_sequences, length, config.d_model, generator=generator,
                              dtype=torch.float64)  # (B, S, D)
    memory, _ = model.encode(batch.src)  # (B, S, D)
    weights = list(model.decoder[0].parameters())
    norms = []
    for rows in (memory, random_rows):
        logits = model.decode(batch.tgt_in, rows)  # (B, T, V)
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


# ---------------------------------------------------------------- reversal, set by hand

def hand_set_reverser(length: int = 8, vocab_size: int = 11, max_len: int = 16,
                      sharpness: float = 30.0, token_scale: float = 20.0) -> Transformer:
    """A Transformer whose weights are SET, not trained, to reverse sources of `length` symbols.

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
        raise ValueError(f"hand_set_reverser has 11 token columns: vocab_size={vocab_size} needs "
                         "more")
    require_length_fits(length, max_len, "max_len")
    require_number("sharpness", sharpness, positive=True)
    require_number("token_scale", token_scale, positive=True)
    config = TransformerConfig(vocab_size=vocab_size, max_len=max_len, d_model=D, n_heads=1, d_ff=4,
                               n_encoder_layers=0, n_decoder_layers=1)
    model = Transformer(config).double()
    token_cols = [2 * j for j in range(n_pairs - 1 - vocab_size, n_pairs - 1)]  # sine columns
    ref = 2 * (n_pairs - 1)  # the slowest sine: sin(1.3e-4 * pos), below 2e-3 for pos < 16
    fast = 2 * (n_pairs - 1 - 11)  # columns 0 .. fast - 1: the 20 fastest pairs, position only
    angles = frequencies(D) * (length - 1)  # (32,) c_j (length - 1)
    block = model.decoder[0]
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        for norm in [*block.norms, model.encoder_norm, model.decoder_norm]:
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
