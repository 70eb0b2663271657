"""The course's model: a config, a feed-forward layer, one block, two models. Read it top to bottom,
as nanoGPT's model.py: the flat config, the position-wise FeedForward, ONE Block (attention,
optional cross-attention, optional FFN, each on a residual branch with no norm, post-LN or pre-LN),
the decoder-only model every lesson from 02 on trains and lesson 09's encoder-decoder model. The
attention layer is course_lib.attention's, the masks lesson 02's, the norms torch's nn.LayerNorm.
Dimension names: see course_lib/__init__.py. S source positions, T target positions.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .attention import Attention, Cache, Rotation, causal_rows
from .guards import (require_bool, require_choice, require_count, require_float, require_instance, require_length_fits,
                     require_mask, require_number, require_same_dtype, require_token_ids, require_width)

NORMS = ("none", "post", "pre")
POSITIONS = ("none", "learned", "sinusoidal", "rope", "alibi")  # the schemes of lesson 04; two are built here


@dataclass
class ModelConfig:
    """Everything that defines a model, flat, so one line of a notebook changes one thing."""
    vocab_size: int = 8
    max_len: int = 8  # longest sequence: rows of a position table
    d_model: int = 32
    n_heads: int = 1  # the attention weights are (B, H, T, S), also for one head
    d_ff: int = 0  # the FFN's hidden width; 0 = attention only (4 * d_model in the 2017 paper)
    n_decoder_layers: int = 1  # the blocks of a decoder-only model, or of the decoder
    n_encoder_layers: int = 1  # the encoder-decoder's encoder blocks (a decoder-only model has none)
    norm: str = "none"  # "post": x = LN(x + f(x)) (2017); "pre": x = x + f(LN(x)) (GPT-2)
    positions: str = "learned"  # one of POSITIONS: "none" and "learned" are built here, others passed in
    causal: bool = True  # a decoder-only model's mask (the encoder-decoder's decoder is always causal)
    residual: bool = True  # False only to see what the residual connections are for
    bias: bool = True  # biases in the attention projections
    eps: float = 1e-5  # LayerNorm's epsilon
    seed: int = 0  # the initial weights

    def __post_init__(self) -> None:
        check_config(self)  # below, with the models' other input checks


class FeedForward(nn.Module):
    """The position-wise FFN, Linear(D, d_ff), ReLU, Linear(d_ff, D) as torch names them: x (..., T, D) ->
    (..., T, D). Here and below, forward checks its input, run trusts it: a model checks once."""

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        require_count("d_model", d_model)
        require_count("d_ff", d_ff)  # d_ff = 0 would be a layer that always outputs its bias
        self.linear1, self.linear2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x: Tensor) -> Tensor:
        require_width("x", require_float("x", x, min_rank=1), self.linear1.in_features)
        require_same_dtype(x=x, weights=self.linear1.weight)
        return self.run(x)

    def run(self, x: Tensor) -> Tensor:
        return self.linear2(torch.relu(self.linear1(x)))  # (..., T, d_ff) -> (..., T, D)


class Block(nn.Module):
    """Self-attention, then (cross=True) cross-attention to a memory, then (d_ff > 0) the FFN, each
    on a residual branch: norm "none" x = x + f(x), "post" x = LN(x + f(x)), "pre" x = x + f(LN(x)).
    x: (B, T, D), memory: (B, S, D) -> (x, its attention weights, cross-attention's or None), weights
    (B, H, T, S). forward checks x, the masks, bias and rotate as Attention.forward does."""

    def __init__(self, config: ModelConfig, cross: bool = False):
        super().__init__()
        D, H, cross = require_config(config).d_model, config.n_heads, require_bool("cross", cross)
        self.norm, self.residual = config.norm, config.residual
        self.attention = Attention(D, bias=config.bias, n_heads=H)
        self.cross_attention = Attention(D, bias=config.bias, n_heads=H) if cross else None
        self.ffn = FeedForward(D, config.d_ff) if config.d_ff else None
        norm = lambda present: nn.LayerNorm(D, config.eps) if present and config.norm != "none" else None
        self.attention_norm, self.cross_norm, self.ffn_norm = norm(True), norm(cross), norm(config.d_ff)

    def forward(self, x: Tensor, mask: Tensor | None = None, memory: Tensor | None = None,
                memory_mask: Tensor | None = None, bias: Tensor | None = None,
                rotate: Rotation | None = None) -> tuple[Tensor, Tensor, Tensor | None]:
        self.attention.check_input(x, None, mask, bias, rotate)
        if (memory is None) != (self.cross_attention is None):
            raise ValueError("memory must be given to a block with cross-attention (cross=True), and only to one")
        if memory is not None:
            self.cross_attention.check_input(x, memory, memory_mask, None)
        return self.run(x, mask, memory, memory_mask, bias, rotate)

    def run(self, x: Tensor, mask: Tensor | None = None, memory: Tensor | None = None,
            memory_mask: Tensor | None = None, bias: Tensor | None = None, rotate: Rotation | None = None,
            cache: tuple[Cache, Cache] | None = None) -> tuple[Tensor, Tensor, Tensor | None]:
        kept, kept_memory = cache or (None, None)  # a KV cache: x holds only the newest positions
        out, weights = self.attention.run(self.sublayer_input(self.attention_norm, x), None, mask, bias, rotate, kept)
        x, cross_weights = self.add_to_stream(self.attention_norm, x, out), None  # (B, T, D); weights (B, H, T, S)
        if self.cross_attention is not None:
            out, cross_weights = self.cross_attention.run(self.sublayer_input(self.cross_norm, x), memory, memory_mask,
                                                          cache=kept_memory)
            x = self.add_to_stream(self.cross_norm, x, out)  # (B, T, D); cross_weights (B, H, T, S)
        if self.ffn is not None:
            x = self.add_to_stream(self.ffn_norm, x, self.ffn.run(self.sublayer_input(self.ffn_norm, x)))
        return x, weights, cross_weights

    def sublayer_input(self, norm: nn.Module | None, x: Tensor) -> Tensor:
        """What a sublayer reads from the residual stream x: x itself, or LN(x) in pre-LN."""
        return norm(x) if self.norm == "pre" else x

    def add_to_stream(self, norm: nn.Module | None, x: Tensor, out: Tensor) -> Tensor:
        """The residual stream after a sublayer: x + out (out alone when residual=False), then LN of
        that sum in post-LN."""
        x = x + out if self.residual else out
        return norm(x) if self.norm == "post" else x


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

    def forward(self, ids: Tensor, caches: list[Cache] | None = None) -> Tensor:
        """ids (B, T) -> logits (B, T, V). caches: one dict per block, empty at first, as
        EncoderDecoder.decode takes them: ids then holds only the positions after the kept ones, whose
        keys and values each block reuses (and extends by these)."""
        start = require_caches(caches, self)  # positions kept before
        T = require_ids(ids, self.config, start=start)
        x = self.positions.add(self.tokens(ids).to(self.readout.weight.dtype), start)  # (B, T, D)
        mask = causal_rows(start, T) if self.config.causal else None  # (T, start + T)
        bias = self.positions.score_bias(start + T)  # (start + T, start + T) or None
        bias = bias if bias is None else bias[..., start:, :]  # (T, start + T)
        self.layer_weights = []
        for i, block in enumerate(self.layers):
            kept = None if caches is None else (caches[i], None)
            x, weights, _ = block.run(x, mask, bias=bias, rotate=self.positions.rotate, cache=kept)
            self.layer_weights.append(weights.detach())
        return self.readout(x if self.norm is None else self.norm(x))  # (B, T, V)


class EncoderDecoder(nn.Module):
    """model(src (B, S), tgt_in (B, T), src_mask (B, S)) -> logits (B, T, V): target position t sees
    tgt_in[:, :t+1] and the real source tokens. embed, encode and decode are its three steps, each
    checking its input as forward does; encode and decode work on vectors, as nn.Transformer's."""

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

    def forward(self, src: Tensor, tgt_in: Tensor, src_mask: Tensor | None = None) -> Tensor:
        keys = require_inputs(self.config, src, tgt_in, src_mask)  # (B, 1, [1,] S) or None
        memory = self._encode(self._embed(src), keys)  # (B, S, D)
        return self.readout(self._decode(self._embed(tgt_in), memory, keys)[0])  # (B, T, V)

    def embed(self, ids: Tensor, start: int = 0) -> Tensor:
        """ids: (B, T) at positions start .. start + T - 1 -> (B, T, D): token plus position."""
        require_ids(ids, self.config, start=require_count("start", start, minimum=0))
        return self._embed(ids, start)

    def encode(self, x: Tensor, src_mask: Tensor | None = None) -> Tensor:
        """x: (B, S, D) -> memory (B, S, D). src_mask: True = real token, (B, S) or padding_mask's (B, 1, S)."""
        return self._encode(x, require_src_mask(src_mask, require_vectors("x", x, self)))

    def decode(self, y: Tensor, memory: Tensor, src_mask: Tensor | None = None,
               caches: list[tuple[Cache, Cache]] | None = None) -> tuple[Tensor, Tensor]:
        """y: (B, T, D), memory: (B, S, D) -> ((B, T, D), the last block's cross-attention weights).
        caches: one (self-attention's, memory's) pair of dicts per decoder block, empty at first;
        y then holds only the positions after the cached ones."""
        require_vectors("y", y, self)
        if require_vectors("memory", memory, self).shape[0] != y.shape[0]:
            raise ValueError(f"y {tuple(y.shape)} and memory {tuple(memory.shape)} must have the same batch size B")
        if caches is not None and (not isinstance(caches, list) or len(caches) != len(self.decoder)):
            raise ValueError(f"caches must be a list of {len(self.decoder)} (dict, dict) pairs, one per block")
        return self._decode(y, memory, require_src_mask(src_mask, memory), caches)

    def _embed(self, ids: Tensor, start: int = 0) -> Tensor:
        return self.positions.add(self.tokens(ids).to(self.readout.weight.dtype), start)  # (B, T, D)

    def _encode(self, x: Tensor, keys: Tensor | None) -> Tensor:
        """keys: which source positions are real, as the weights read it, (B, 1, 1, S), or None."""
        for block in self.encoder:
            x = block.run(x, keys)[0]  # (B, S, D)
        return self.encoder_norm(x)

    def _decode(self, y: Tensor, memory: Tensor, keys: Tensor | None,
                caches: list[tuple[Cache, Cache]] | None = None) -> tuple[Tensor, Tensor]:
        start = caches[0][0]["k"].shape[-2] if caches and caches[0][0] else 0  # positions decoded before
        mask = causal_rows(start, y.shape[-2])  # (T, start + T)
        cross_weights = None
        for i, block in enumerate(self.decoder):
            y, _, cross_weights = block.run(y, mask, memory, keys, cache=caches[i] if caches else None)
        return self.decoder_norm(y), cross_weights  # (B, T, D), (B, H, T, S)


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
                            "learned position table", "start + the length of x")
        return self.add(x, start)

    def add(self, x: Tensor, start: int = 0) -> Tensor:
        return x + self.table.weight[start:start + x.shape[-2]]  # (..., T, D)


# ---------------------------------------------------------------- the models' input checks, once

def check_config(config: ModelConfig, at: str = "") -> None:
    """Raise, naming the field as the caller wrote it (at: "config." for a config passed on), unless
    every field of the config has a usable value."""
    for name, minimum in (("vocab_size", 2), ("max_len", 1), ("d_model", 1), ("n_heads", 1), ("d_ff", 0),
                          ("n_decoder_layers", 1), ("n_encoder_layers", 0), ("seed", 0)):
        require_count(f"{at}{name}", getattr(config, name), minimum)
    require_choice(f"{at}norm", config.norm, NORMS)
    require_choice(f"{at}positions", config.positions, POSITIONS)
    require_number(f"{at}eps", config.eps, positive=True)  # LayerNorm divides by sqrt(variance + eps)
    for name in ("causal", "residual", "bias"):
        require_bool(f"{at}{name}", getattr(config, name))
    if config.d_model % config.n_heads:
        raise ValueError(f"{at}d_model={config.d_model} does not split into {at}n_heads={config.n_heads} heads: "
                         f"n_heads must divide d_model")


def require_config(config: object) -> ModelConfig:
    check_config(require_instance("config", config, ModelConfig), "config.")  # its fields may have changed since
    return config


def built_positions(config: ModelConfig, positions: Positions | None) -> Positions:
    """The scheme passed in, or the one config.positions names ("none" or "learned")."""
    if positions is not None:
        return require_instance("positions", positions, Positions, "a Positions scheme")
    kind = require_choice("config.positions", config.positions, ("none", "learned"))
    return LearnedPositions(config.max_len, config.d_model) if kind == "learned" else Positions()


def require_ids(ids: Tensor, config: ModelConfig, name: str = "ids", start: int = 0) -> int:
    """ids must be (B, T) token ids in 0..V-1 at positions start..start+T-1 < max_len, B and T at
    least 1; returns T."""
    require_token_ids(name, ids, config.vocab_size)
    if not ids.numel():
        raise ValueError(f"{name} must hold at least one sequence of at least one token, got shape "
                         f"{tuple(ids.shape)}")
    require_length_fits(start + ids.shape[-1], config.max_len, "model", f"the length of {name}")
    return ids.shape[-1]


def require_vectors(name: str, x: Tensor, model: nn.Module) -> Tensor:
    """x must be (B, n, D) rows of the model's width and dtype (what embed returns)."""
    require_width(name, require_float(name, x, 3, 3), model.config.d_model)
    require_same_dtype(**{name: x, "the model's weights": model.readout.weight})
    return x


def require_src_mask(src_mask: Tensor | None, source: Tensor) -> Tensor | None:
    """src_mask: None, bool (B, S) or padding_mask's (B, 1, S) for source (B, S[, D]). Returns it as
    every head and query reads it: (B, 1, 1, S)."""
    if src_mask is None:
        return None
    require_mask("src_mask", src_mask, 2, 3)
    B, S = source.shape[:2]
    if tuple(src_mask.shape) not in ((B, S), (B, 1, S)):
        raise ValueError(f"src_mask of shape {tuple(src_mask.shape)} must be (B, S) = {(B, S)} "
                         "(or padding_mask's (B, 1, S)), one entry per source token")
    return src_mask.reshape(B, 1, 1, S)  # the same keys for every head and query


def require_caches(caches: list[Cache] | None, model: DecoderOnly) -> int:
    """caches: None, or one dict per block of a causal model with positions added to its tokens;
    returns how many positions they keep."""
    if caches is None:
        return 0
    if not isinstance(caches, list) or len(caches) != len(model.layers) or not all(isinstance(c, dict) for c in caches):
        raise ValueError(f"caches must be a list of {len(model.layers)} dicts, one per block (empty at first)")
    if not model.config.causal:
        raise ValueError("caches need config.causal=True: without the mask, kept positions would see later ones")
    if type(model.positions).rotate is not Positions.rotate:
        raise ValueError("caches need positions added to the tokens or a score bias: a rotation is not given "
                         "the kept positions' offsets here")
    return caches[0]["k"].shape[-2] if caches[0] else 0


def require_inputs(config: ModelConfig, src: Tensor, tgt_in: Tensor, src_mask: Tensor | None) -> Tensor | None:
    """src (B, S) and tgt_in (B, T) token ids of one batch, src_mask as require_src_mask, which gives
    what this returns."""
    require_ids(src, config, "src")
    require_ids(tgt_in, config, "tgt_in")
    if src.shape[0] != tgt_in.shape[0]:
        raise ValueError(f"src {tuple(src.shape)} and tgt_in {tuple(tgt_in.shape)} must have the same batch size B")
    return require_src_mask(src_mask, src)
