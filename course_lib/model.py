"""The course's model, in one file: a config, a feed-forward layer, one block, two models.

Read it top to bottom, as nanoGPT's model.py: the config (every field flat, checked once), the
position-wise FeedForward, ONE Block (attention, optional cross-attention, optional FFN, each on
a residual branch with no norm, post-LN or pre-LN), the decoder-only model every lesson from 02
on trains, and the encoder-decoder model of lesson 09. The attention is lesson 01's layer with
n_heads heads, the masks lesson 02's. The norms are torch's nn.LayerNorm (lesson 05 writes its
own and compares them with torch's). Below the model: torch's modules with the same weights
(one way out, `to_torch`, one way in, `from_torch`), and the training of a decoder-only model.

Dimension names: see course_lib/__init__.py. S source positions, T target positions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor, nn

from .attention_scores import Attention, Rotation
from .guards import (require_bool, require_choice, require_count, require_float, require_instance, require_mask,
                     require_number, require_same_shape, require_token_ids, require_width)
from .masks import causal_mask
from .training import train

NORMS = ("none", "post", "pre")
# A KV cache: one attention layer's kept keys and values, {"k": ..., "v": ...}; decode takes one
# (self-attention's, memory's) pair per block, empty at first, and then only the new positions.
Cache = dict[str, Tensor]


@dataclass
class ModelConfig:
    """Everything that defines a model, flat, so one line of a notebook changes one thing."""
    vocab_size: int = 8
    max_len: int = 8  # longest sequence: rows of a position table
    d_model: int = 32
    n_heads: int | None = None  # None: one head, weights (B, T, S); H: H heads, weights (B, H, T, S)
    d_ff: int = 0  # the FFN's hidden width; 0 = attention only (4 * d_model in the 2017 paper)
    n_decoder_layers: int = 1  # the blocks of a decoder-only model, or of the decoder
    n_encoder_layers: int = 1  # the encoder-decoder's encoder blocks (a decoder-only model has none)
    norm: str = "none"  # "post": x = LN(x + f(x)) (2017); "pre": x = x + f(LN(x)) (GPT-2)
    positions: str = "learned"  # "none" and "learned" are built here; other schemes are passed in
    causal: bool = True  # a decoder-only model's mask (the encoder-decoder's decoder is always causal)
    residual: bool = True  # False only to see what the residual connections are for
    bias: bool = True  # biases in the attention projections
    eps: float = 1e-5  # LayerNorm's epsilon
    seed: int = 0  # the initial weights

    def __post_init__(self) -> None:
        check_config(self)  # below, with the models' other input checks


class FeedForward(nn.Module):
    """The position-wise FFN on every token alone: Linear(D, d_ff), ReLU, Linear(d_ff, D), named as
    torch's layers name them. x: (..., T, D) -> (..., T, D)."""

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        require_count("d_model", d_model)
        require_count("d_ff", d_ff)  # d_ff = 0 would be a layer that always outputs its bias
        self.linear1, self.linear2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear2(torch.relu(self.linear1(x)))  # (..., T, d_ff) -> (..., T, D)


class Block(nn.Module):
    """Self-attention, then (cross=True) cross-attention to a memory, then (d_ff > 0) the FFN, each
    on a residual branch: norm "none" x = x + f(x), "post" x = LN(x + f(x)), "pre" x = x + f(LN(x)).
    x: (B, T, D), memory: (B, S, D) -> (x, its attention weights, cross-attention's or None), weights
    (B, [H,] T, S). Its input is trusted: the models check theirs."""

    def __init__(self, config: ModelConfig, cross: bool = False):
        super().__init__()
        D, H = config.d_model, config.n_heads
        self.norm, self.residual = config.norm, config.residual
        self.attention = Attention(D, bias=config.bias, n_heads=H)
        self.cross_attention = Attention(D, bias=config.bias, n_heads=H) if cross else None
        self.ffn = FeedForward(D, config.d_ff) if config.d_ff else None
        n_norms = 0 if config.norm == "none" else 1 + cross + (self.ffn is not None)
        self.norms = nn.ModuleList(nn.LayerNorm(D, config.eps) for _ in range(n_norms))

    def forward(self, x: Tensor, mask: Tensor | None = None, memory: Tensor | None = None,
                memory_mask: Tensor | None = None, bias: Tensor | None = None, rotate: Rotation | None = None,
                cache: tuple[Cache, Cache] | None = None) -> tuple[Tensor, Tensor, Tensor | None]:
        if (memory is None) != (self.cross_attention is None):
            raise ValueError("memory must be given to a block with cross-attention (cross=True), and only to one")
        kept, kept_memory = cache or (None, None)  # a KV cache: x holds only the newest positions
        out, weights = self.attention.attend(self.before(0, x), None, mask, bias, rotate, kept)
        x, cross_weights = self.after(0, x, out), None
        if self.cross_attention is not None:
            out, cross_weights = self.cross_attention.attend(self.before(1, x), memory, memory_mask, cache=kept_memory)
            x = self.after(1, x, out)
        if self.ffn is not None:
            x = self.after(-1, x, self.ffn(self.before(-1, x)))
        return x, weights, cross_weights

    def before(self, i: int, x: Tensor) -> Tensor:  # pre-LN normalizes a sublayer's input, never the stream
        return self.norms[i](x) if self.norm == "pre" else x

    def after(self, i: int, x: Tensor, out: Tensor) -> Tensor:  # the residual adds; post-LN normalizes the sum
        x = x + out if self.residual else out
        return self.norms[i](x) if self.norm == "post" else x


class DecoderOnly(nn.Module):
    """The decoder-only model every lesson trains: ids (B, T) -> logits (B, T, V), causal if config.causal.
    The last forward's weights stay for the lessons: `layer_weights` (one per block), `last_weights`."""

    def __init__(self, config: ModelConfig, positions: Positions | None = None):
        super().__init__()
        self.config = require_config(config)
        with torch.random.fork_rng():  # seeded initial weights; the caller's generator is left alone
            torch.manual_seed(config.seed)
            self.tokens = nn.Embedding(config.vocab_size, config.d_model)
            self.positions = built_positions(config, positions)
            self.layers = nn.ModuleList(Block(config) for _ in range(config.n_decoder_layers))
            self.norm = None if config.norm == "none" else nn.LayerNorm(config.d_model, config.eps)
            self.readout = nn.Linear(config.d_model, config.vocab_size)
        self.layer_weights: list[Tensor] = []

    @property
    def attention(self) -> Attention:  # the first block's, the only one in most lessons
        return self.layers[0].attention

    @property
    def last_weights(self) -> Tensor | None:
        return self.layer_weights[0] if self.layer_weights else None

    def forward(self, ids: Tensor) -> Tensor:
        T = require_ids(ids, self.config)
        x = self.positions.add(self.tokens(ids).to(self.readout.weight.dtype))  # (B, T, D)
        mask, bias = causal_mask(T) if self.config.causal else None, self.positions.score_bias(T)  # (T, T)
        self.layer_weights = []
        for block in self.layers:
            x, weights, _ = block(x, mask, bias=bias, rotate=self.positions.rotate)
            self.layer_weights.append(weights.detach())
        return self.readout(x if self.norm is None else self.norm(x))  # (B, T, V)


class EncoderDecoder(nn.Module):
    """model(src (B, S), tgt_in (B, T), src_mask (B, S)) -> logits (B, T, V): target position t sees
    tgt_in[:, :t+1] and the real source tokens. encode and decode work on vectors, as nn.Transformer's."""

    def __init__(self, config: ModelConfig, positions: Positions | None = None):
        super().__init__()
        self.config, D = require_config(config), config.d_model
        with torch.random.fork_rng():  # seeded initial weights; the caller's generator is left alone
            torch.manual_seed(config.seed)
            self.tokens = nn.Embedding(config.vocab_size, D)
            self.positions = built_positions(config, positions)
            self.encoder = nn.ModuleList(Block(config) for _ in range(config.n_encoder_layers))
            self.decoder = nn.ModuleList(Block(config, cross=True) for _ in range(config.n_decoder_layers))
            self.encoder_norm, self.decoder_norm = nn.LayerNorm(D, config.eps), nn.LayerNorm(D, config.eps)
            self.readout = nn.Linear(D, config.vocab_size)

    def embed(self, ids: Tensor, start: int = 0) -> Tensor:
        """ids: (B, T) at positions start .. start + T - 1 -> (B, T, D): token plus position."""
        return self.positions.add(self.tokens(ids).to(self.readout.weight.dtype), start)

    def encode(self, x: Tensor, src_mask: Tensor | None = None) -> Tensor:
        """x: (B, S, D) -> memory (B, S, D). src_mask: (B, S), True = real token, or None."""
        for block in self.encoder:
            x = block(x, keys_mask(src_mask, self.config.n_heads))[0]
        return self.encoder_norm(x)

    def decode(self, y: Tensor, memory: Tensor, src_mask: Tensor | None = None,
               caches: list[tuple[Cache, Cache]] | None = None) -> tuple[Tensor, Tensor]:
        """y: (B, T, D), memory: (B, S, D) -> ((B, T, D), the last block's cross-attention weights)."""
        start = caches[0][0]["k"].shape[-2] if caches and caches[0][0] else 0  # positions decoded before
        mask, memory_mask = causal_mask(start + y.shape[-2])[start:], keys_mask(src_mask, self.config.n_heads)
        cross_weights = None
        for i, block in enumerate(self.decoder):
            y, _, cross_weights = block(y, mask, memory, memory_mask, cache=caches[i] if caches else None)
        return self.decoder_norm(y), cross_weights

    def forward(self, src: Tensor, tgt_in: Tensor, src_mask: Tensor | None = None) -> Tensor:
        require_inputs(self.config, src, tgt_in, src_mask)
        memory = self.encode(self.embed(src), src_mask)  # (B, S, D)
        return self.readout(self.decode(self.embed(tgt_in), memory, src_mask)[0])  # (B, T, V)


# ---------------------------------------------------------------- where positions enter, and the source's padding

class Positions(nn.Module):
    """Where a position scheme acts on the model. This base class adds nothing.

    add(x): added to the token rows (a table, learned or sinusoidal); rotate(q, k): turns queries
    and keys by position (RoPE, lesson 04); score_bias(T): a bias added to the scores (ALiBi,
    lesson 04), or None. With none of them, attention sees a set of tokens, not a sequence (lesson 03).
    """

    def add(self, x: Tensor, start: int = 0) -> Tensor:
        return x

    def rotate(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        return q, k

    def score_bias(self, T: int) -> Tensor | None:
        return None


class LearnedPositions(Positions):
    """x + P[start:start + T] with a learned (max_len, D) table (GPT-2); x: (..., T, D) -> (..., T, D)."""

    def __init__(self, max_len: int, d_model: int):
        super().__init__()
        self.max_len, self.d_model = require_count("max_len", max_len), require_count("d_model", d_model)
        self.table = nn.Embedding(max_len, d_model)

    def forward(self, x: Tensor, start: int = 0) -> Tensor:
        """add(x, start), checked: x (..., T, D) must fit the table's width and rows."""
        require_float("x", x, min_rank=2)
        require_width("x", x, self.d_model)
        require_length_fits(require_count("start", start, minimum=0) + x.shape[-2], self.max_len,
                            "learned position table")
        return self.add(x, start)

    def add(self, x: Tensor, start: int = 0) -> Tensor:
        return x + self.table.weight[start:start + x.shape[-2]]  # (..., T, D)


def keys_mask(src_mask: Tensor | None, n_heads: int | None) -> Tensor | None:
    """(B, S) real-token mask -> the same for every query (and head): (B, 1, S) or (B, 1, 1, S)."""
    if src_mask is None:
        return None
    return src_mask[:, None] if n_heads is None else src_mask[:, None, None]


# ---------------------------------------------------------------- the models' input checks, once

def check_config(config: ModelConfig) -> None:
    """Raise, naming the field, unless every field of the config has a usable value."""
    for name, minimum in (("vocab_size", 2), ("max_len", 1), ("d_model", 1), ("d_ff", 0),
                          ("n_decoder_layers", 0), ("n_encoder_layers", 0), ("seed", 0)):
        require_count(f"config.{name}", getattr(config, name), minimum)
    if config.n_heads is not None:
        require_count("config.n_heads", config.n_heads)
    require_choice("config.norm", config.norm, NORMS)
    require_instance("config.positions", config.positions, str, "a string")  # built_positions reads its value
    require_number("config.eps", config.eps, non_negative=True)
    for name in ("causal", "residual", "bias"):
        require_bool(f"config.{name}", getattr(config, name))
    if config.n_heads is not None and config.d_model % config.n_heads:
        raise ValueError(f"config.d_model={config.d_model} does not split into config.n_heads={config.n_heads} heads")


def require_config(config: object) -> ModelConfig:
    check_config(require_instance("config", config, ModelConfig))  # its fields may have changed since it was made
    return config


def built_positions(config: ModelConfig, positions: Positions | None) -> Positions:
    """The scheme passed in, or the one config.positions names ("none" or "learned")."""
    if positions is not None:
        return require_instance("positions", positions, Positions, "a Positions scheme")
    kind = require_choice("config.positions", config.positions, ("none", "learned"))
    return LearnedPositions(config.max_len, config.d_model) if kind == "learned" else Positions()


def require_ids(ids: Tensor, config: ModelConfig, name: str = "ids") -> int:
    """ids must be (B, T) token ids in 0..V-1 with T <= max_len; returns T."""
    require_token_ids(name, ids, config.vocab_size)
    require_length_fits(ids.shape[-1], config.max_len, "model")
    return ids.shape[-1]


def require_inputs(config: ModelConfig, src: Tensor, tgt_in: Tensor, src_mask: Tensor | None) -> None:
    """An encoder-decoder's input: src (B, S) and tgt_in (B, T) token ids, src_mask None or bool (B, S)."""
    require_ids(src, config, "src")
    require_ids(tgt_in, config, "tgt_in")
    if src_mask is not None:
        require_same_shape("src_mask", require_mask("src_mask", src_mask), "src", src)


def require_length_fits(T: int, max_len: int, table: str) -> None:
    """T positions fit a table (or model) with rows for positions 0..max_len-1."""
    if T > max_len:  # lesson 04 prints this message
        raise ValueError(f"sequence length T={T} is longer than max_len={max_len} of this {table}: it has rows for "
                         f"positions 0..{max_len - 1} only, so positions {max_len}..{T - 1} have no encoding")


# ---------------------------------------------------------------- torch's modules, the same weights

def to_torch_mha_mask(mask: Tensor) -> Tensor:
    """Our convention (True = may attend) -> nn.MultiheadAttention's (True = may NOT attend).

    Use it for both `attn_mask` (T, S) and `key_padding_mask` (B, S); a padding_mask of shape
    (B, 1, S) becomes a key_padding_mask with `to_torch_mha_mask(mask[:, 0])`.
    """
    return ~require_mask("mask", mask)


def to_torch(layer: Attention, batch_first: bool = True) -> nn.MultiheadAttention:
    """An nn.MultiheadAttention holding `layer`'s weights (its n_heads heads, or one), for comparison.

    Needs d_k = d_v = d_model (torch projects to embed_dim); a d_memory != d_model becomes torch's
    kdim = vdim = d_memory. batch_first=False: torch then takes and returns (T, B, D). torch's
    weights are (B, H, T, S) with average_attn_weights=False, for one head too.
    """
    require_instance("layer", layer, Attention, "a course_lib.attention_scores.Attention layer")
    require_bool("batch_first", batch_first)
    widths = (layer.query.out_features, layer.value.out_features)
    if widths != (layer.d_model, layer.d_model):
        raise ValueError(f"nn.MultiheadAttention needs d_k = d_v = d_model = {layer.d_model}, got d_k, d_v = {widths}")
    theirs = nn.MultiheadAttention(layer.d_model, layer.n_heads or 1, bias=layer.query.bias is not None,
                                   batch_first=batch_first, dtype=layer.query.weight.dtype,
                                   kdim=layer.d_memory, vdim=layer.d_memory)
    from_torch(layer, theirs, into_torch=True)
    return theirs


def _pairs(mine: nn.Module, theirs: nn.Module) -> list[tuple[Tensor | None, Tensor | None]]:
    """(our tensor, torch's tensor) for every weight the two modules share."""
    if isinstance(mine, Attention):
        if theirs._qkv_same_embed_dim:  # torch stacks W_Q, W_K, W_V into one (3D, D) weight
            weights = theirs.in_proj_weight.chunk(3)
        else:  # kdim != embed_dim: three separate weights
            weights = (theirs.q_proj_weight, theirs.k_proj_weight, theirs.v_proj_weight)
        biases = theirs.in_proj_bias.chunk(3) if theirs.in_proj_bias is not None else (None,) * 3
        linears = (mine.query, mine.key, mine.value)
        return ([(m.weight, w) for m, w in zip(linears, weights)] + [(m.bias, b) for m, b in zip(linears, biases)]
                + [(mine.out.weight, theirs.out_proj.weight), (mine.out.bias, theirs.out_proj.bias)])
    if isinstance(mine, Block):
        cross = isinstance(theirs, nn.TransformerDecoderLayer)
        if cross != (mine.cross_attention is not None) or mine.ffn is None or mine.norm == "none":
            raise ValueError("a DecoderLayer goes into a Block with cross=True, an EncoderLayer into cross=False, "
                             "both with an FFN and norms")
        pairs = _pairs(mine.attention, theirs.self_attn) + (_pairs(mine.cross_attention, theirs.multihead_attn)
                                                             if cross else [])
        norms = (theirs.norm1, theirs.norm2) + ((theirs.norm3,) if cross else ())
        modules = [(mine.ffn.linear1, theirs.linear1), (mine.ffn.linear2, theirs.linear2)]
        modules += list(zip(mine.norms, norms))
        return pairs + [(getattr(m, n), getattr(t, n)) for m, t in modules for n in ("weight", "bias")]
    if isinstance(mine, EncoderDecoder):
        if (len(mine.encoder), len(mine.decoder)) != (len(theirs.encoder.layers), len(theirs.decoder.layers)):
            raise ValueError("model and theirs must have the same numbers of encoder and decoder layers")
        blocks = list(zip(mine.encoder, theirs.encoder.layers)) + list(zip(mine.decoder, theirs.decoder.layers))
        norms = [(mine.encoder_norm, theirs.encoder.norm), (mine.decoder_norm, theirs.decoder.norm)]
        return ([p for block, layer in blocks for p in _pairs(block, layer)]
                + [(getattr(m, n), getattr(t, n)) for m, t in norms for n in ("weight", "bias")])
    raise TypeError(f"from_torch copies into an Attention, a Block or an EncoderDecoder, got {type(mine).__name__}")


@torch.no_grad()
def from_torch(mine: nn.Module, theirs: nn.Module, into_torch: bool = False) -> None:
    """Copy torch's weights into ours: nn.MultiheadAttention -> Attention, nn.TransformerEncoderLayer
    or DecoderLayer (ReLU) -> Block, nn.Transformer -> EncoderDecoder (its layers and final norms).
    into_torch=True copies the other way (to_torch uses it)."""
    kinds = {Attention: nn.MultiheadAttention, Block: (nn.TransformerEncoderLayer, nn.TransformerDecoderLayer),
             EncoderDecoder: nn.Transformer}
    wanted = next((t for kind, t in kinds.items() if isinstance(mine, kind)), None)
    if wanted is not None and not isinstance(theirs, wanted):
        raise TypeError(f"theirs must be a {wanted} to copy into a {type(mine).__name__}, got {type(theirs).__name__}")
    for ours, torchs in _pairs(mine, theirs):
        if (ours is None) != (torchs is None):
            raise ValueError("one layer has biases where the other has none")
        if ours is not None:
            (torchs if into_torch else ours).copy_(ours if into_torch else torchs)


# ---------------------------------------------------------------- training a decoder-only model

IGNORE = -100  # a target that no loss is taken on (F.cross_entropy's ignore_index)


def train_tiny_model(model: DecoderOnly, make_batch: Callable[[torch.Generator], tuple[Tensor, Tensor]],
                     steps: int, lr: float = 3e-2, seed: int = 0, progress: bool | str = False) -> list[float]:
    """Train `model` in place on batches from make_batch(generator) -> (ids (B, T), targets (B, T)).

    The loss is the cross-entropy of the model's logits at every position whose target is not
    IGNORE. The data generator is seeded by `seed`. Returns every step's loss. progress: as
    in `train` (True, or the task's name for the bar).
    """
    generator = torch.Generator().manual_seed(require_count("seed", seed, minimum=0))
    vocab_size = model.config.vocab_size

    def loss_of_step(_: int) -> Tensor:
        ids, targets = make_batch(generator)
        logits = model(ids)  # (B, T, vocab_size)
        return nn.functional.cross_entropy(logits.reshape(-1, vocab_size), targets.reshape(-1), ignore_index=IGNORE)

    return train(loss_of_step, model.parameters(), steps, lr, progress=progress)


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
    training.run_each, which trains several runs at once in other processes (lesson 02)."""
    causal, seed = run
    return train_next_token(causal, steps, seed=seed)
