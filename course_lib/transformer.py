"""Lesson 09: the Transformer, assembled from the course's pieces and trained on a CPU.

Read it top to bottom: a flat config, the position-wise feed-forward network, ONE block class
(encoder block, decoder block, or a decoder-only block), the encoder-decoder model, and a
decoder-only model that reuses the same blocks. Nothing is written again here: the heads are
lesson 08's MultiHeadAttention, the masks lesson 02's, the positions lesson 04's sinusoidal
table, the norms lesson 05's LayerNorm, and training goes through course_lib.training.train.

With dropout 0 and ReLU, a block is torch's nn.TransformerEncoderLayer (cross=False) or
nn.TransformerDecoderLayer (cross=True), post-LN or pre-LN (norm_first), and the model's core
is nn.Transformer: `copy_from_torch` copies their weights in and the tests compare outputs and
gradients. After the model: the toy tasks (reverse, sort), greedy decoding, and the lesson's
measurements (residuals, post-LN vs pre-LN, the FFN's share, parallel vs sequential).

Dimension names: see course_lib/__init__.py. S source positions, T target positions.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from typing import Callable, NamedTuple

import torch
from torch import Tensor, nn

from .guards import require_choice, require_count, require_integer, require_number
from .masks import causal_mask, padding_mask, require_length_fits, require_token_ids
from .multi_head import MultiHeadAttention
from .normalization import LayerNorm
from .positional_encoding import SinusoidalPositionalEncoding
from .training import train


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
    in `self_weights` (B, H, T, T) and `cross_weights` (B, H, T, S).
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
                memory_mask: Tensor | None = None) -> Tensor:
        if (memory is None) != (self.cross_attention is None):
            raise ValueError("memory must be given to a block with cross=True, and only to one")

        def attend_self(h: Tensor) -> Tensor:
            out, self.self_weights = self.self_attention(h, mask=mask)  # (B, T, D), (B, H, T, T)
            return out

        def attend_memory(h: Tensor) -> Tensor:
            out, self.cross_weights = self.cross_attention(h, memory, mask=memory_mask)  # (B, H, T, S)
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

    def embed(self, ids: Tensor) -> Tensor:
        require_token_ids("ids", ids, self.config.vocab_size)  # (B, T) ids in 0..V-1
        require_length_fits(ids.shape[-1], self.config.max_len, "model")
        x = self.tokens(ids)  # (B, T, D)
        return self.positions(x.to(self.readout.weight.dtype))  # (B, T, D)

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
                      progress: bool = False) -> tuple[Transformer, list[float]]:
    """Train a float64 Transformer on `task` with the course's one loop (Adam); returns (model, losses).

    Sources have `length` symbols in 1..vocab_size-1 (0 is BOS) and never come from the held-out part.
    """
    config = TransformerConfig() if config is None else config
    if not isinstance(config, TransformerConfig):
        raise TypeError(f"config must be a TransformerConfig, got {type(config).__name__}")
    model = Transformer(config).double()
    generator = torch.Generator().manual_seed(require_count("seed", seed, minimum=0))

    def loss_of_step(_: int) -> Tensor:
        return sequence_loss(model, toy_batch(task, n_sequences, length, config.vocab_size - 1, generator))

    return model, train(loss_of_step, model.parameters(), steps, lr, progress=progress)


# ---------------------------------------------------------------- greedy decoding, one token at a time

class Decoding(NamedTuple):
    tokens: Tensor  # (B, T) the chosen tokens
    logits: Tensor  # (B, T, V) step t's logits (the last row of the decoder's output)
    cross_weights: Tensor  # (B, T, H, S) step t's cross-attention (last decoder block)


@torch.no_grad()
def greedy_decode(model: Transformer, src: Tensor, steps: int) -> Decoding:
    """Encode src (B, S) once; then `steps` times: decode the prefix, append the argmax token.

    The decoder sees only what it has written so far (BOS first), never the answer.
    """
    if not isinstance(model, Transformer):
        raise TypeError(f"model must be a Transformer, got {type(model).__name__}")
    require_count("steps", steps)
    memory, mask = model.encode(src)  # (B, S, D)
    prefix = torch.full((src.shape[0], 1), BOS)  # (B, 1)
    logits, weights = [], []
    for _ in range(steps):
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


def first_block_gradient(config: TransformerConfig, task: str = "sort", length: int = 8, seed: int = 0) -> float:
    """|gradient| of the loss with respect to the first decoder block's weights, at initialisation
    (float64, one batch of 32): how much of the training signal reaches the bottom of the stack."""
    model = Transformer(config).double()
    batch = toy_batch(task, 32, length, config.vocab_size - 1, torch.Generator().manual_seed(seed))
    grads = torch.autograd.grad(sequence_loss(model, batch), list(model.decoder[0].parameters()))
    return torch.cat([g.flatten() for g in grads]).norm().item()
