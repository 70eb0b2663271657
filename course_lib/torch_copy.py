"""Torch's own modules holding the course's weights, to compare the two.

`to_torch(mine)` builds the torch module that computes what an Attention layer, a Block or an
EncoderDecoder computes (nn.MultiheadAttention, nn.TransformerEncoderLayer or DecoderLayer,
nn.Transformer), holding its weights; `from_torch(mine, theirs)` copies torch's weights into ours.
Weights alone do not fix what a module computes: both first compare the settings the weights do
not show (norm placement, activation, heads, LayerNorm's eps, biases) and every shape, and refuse
a mismatch by name, before anything is copied. torch's boolean attention masks mean the opposite
of the course's (True = may NOT attend): `to_torch_mha_mask` converts.
"""

from __future__ import annotations

import warnings
from typing import TypeVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import Attention
from .guards import require_bool, require_mask
from .model import Block, EncoderDecoder

Mine = TypeVar("Mine", Attention, Block, EncoderDecoder)
Pairs = list[tuple[str, Tensor | None, Tensor | None]]  # (where, our tensor, torch's), None: no bias


def to_torch_mha_mask(mask: Tensor) -> Tensor:
    """Our convention (True = may attend) -> nn.MultiheadAttention's (True = may NOT attend).

    Use it for both `attn_mask` (T, S) and `key_padding_mask` (B, S); a padding_mask of shape
    (B, 1, S) becomes a key_padding_mask with `to_torch_mha_mask(mask[:, 0])`.
    """
    return ~require_mask("mask", mask)


@torch.no_grad()
def to_torch(mine: Attention | Block | EncoderDecoder, batch_first: bool = True) -> nn.Module:
    """A new torch module holding `mine`'s weights and computing what it computes (dropout 0).

    Attention -> nn.MultiheadAttention with num_heads = mine.n_heads (needs d_k = d_v = d_model, as
    torch projects to embed_dim; a d_memory != d_model becomes kdim = vdim); with
    average_attn_weights=False its weights are (B, H, T, S), as ours, for every H. Block -> nn.TransformerEncoderLayer, or
    nn.TransformerDecoderLayer for cross=True. EncoderDecoder -> nn.Transformer (its blocks and final
    norms; embeddings, positions and read-out are ours alone). A setting torch cannot take (no norm,
    no FFN, no residual, attention without biases beside a biased FFN) is refused by name, as
    from_torch refuses it. batch_first=False: torch then takes and returns (T, B, D).
    """
    require_bool("batch_first", batch_first)
    if isinstance(mine, Attention):
        theirs = _torch_attention(mine, batch_first)
    elif isinstance(mine, (Block, EncoderDecoder)):
        theirs = _torch_layers(mine, batch_first)
    else:
        raise TypeError(f"mine must be an Attention, a Block or an EncoderDecoder, got {type(mine).__name__}")
    for _, ours, torchs in _require_pairs(mine, theirs):
        if ours is not None:
            torchs.copy_(ours)
    return theirs


def _torch_attention(layer: Attention, batch_first: bool) -> nn.MultiheadAttention:
    widths = (layer.query.out_features, layer.value.out_features)
    if widths != (layer.d_model, layer.d_model):
        raise ValueError(f"mine must have d_k = d_v = d_model = {layer.d_model} for nn.MultiheadAttention, got "
                         f"d_k, d_v = {widths}")
    return nn.MultiheadAttention(layer.d_model, layer.n_heads, bias=layer.query.bias is not None,
                                 batch_first=batch_first, dtype=layer.query.weight.dtype,
                                 kdim=layer.d_memory, vdim=layer.d_memory)


def _torch_layers(mine: Block | EncoderDecoder, batch_first: bool) -> nn.Module:
    """The torch layer (or whole nn.Transformer) of `mine`'s sizes and settings, weights still torch's."""
    block = mine if isinstance(mine, Block) else mine.decoder[0]
    where = "" if isinstance(mine, Block) else "decoder.0."
    _require_same(where, "norm (torch's layers have post-LN or pre-LN)", block.norm in ("post", "pre"), True)
    _require_same(where, "FFN presence (d_ff > 0)", block.ffn is not None, True)
    attention = block.attention
    sizes = dict(d_model=attention.d_model, nhead=attention.n_heads, dim_feedforward=block.ffn.linear1.out_features,
                 dropout=0.0, activation="relu", layer_norm_eps=block.attention_norm.eps, batch_first=batch_first,
                 norm_first=block.norm == "pre", bias=attention.query.bias is not None,
                 dtype=attention.query.weight.dtype)
    with warnings.catch_warnings():  # torch warns that pre-LN turns off its nested-tensor fast path
        warnings.simplefilter("ignore", UserWarning)
        if isinstance(mine, EncoderDecoder):
            return nn.Transformer(num_encoder_layers=len(mine.encoder), num_decoder_layers=len(mine.decoder), **sizes)
        layer = nn.TransformerDecoderLayer if mine.cross_attention is not None else nn.TransformerEncoderLayer
        return layer(**sizes)


@torch.no_grad()
def from_torch(mine: Mine, theirs: nn.Module) -> Mine:
    """Copy torch's weights into ours and return `mine` (the same object, now holding them).

    nn.MultiheadAttention -> Attention, nn.TransformerEncoderLayer -> Block (cross=False),
    nn.TransformerDecoderLayer -> Block (cross=True), nn.Transformer -> EncoderDecoder (its blocks
    and final norms; embeddings, positions and read-out are ours alone). Raises, naming the setting
    and both values, unless the two compute the same function; then nothing is copied.
    """
    for _, ours, torchs in _require_pairs(mine, theirs):
        if ours is not None:
            ours.copy_(torchs)
    return mine


def _require_pairs(mine: nn.Module, theirs: nn.Module) -> Pairs:
    """Every (where, ours, torch's) weight pair, after every setting, bias and shape was compared."""
    kinds = {Attention: nn.MultiheadAttention, Block: (nn.TransformerEncoderLayer, nn.TransformerDecoderLayer),
             EncoderDecoder: nn.Transformer}
    wanted = next((t for kind, t in kinds.items() if isinstance(mine, kind)), None)
    if wanted is None:
        raise TypeError(f"mine must be an Attention, a Block or an EncoderDecoder, got {type(mine).__name__}")
    if not isinstance(theirs, wanted):
        names = " or ".join(t.__name__ for t in (wanted if isinstance(wanted, tuple) else (wanted,)))
        raise TypeError(f"theirs must be a torch {names} to match a {type(mine).__name__}, got {type(theirs).__name__}")
    pairs = _require_matching(mine, theirs, "")
    for where, ours, torchs in pairs:
        if (ours is None) != (torchs is None):
            has, lacks = ("mine", "theirs") if torchs is None else ("theirs", "mine")
            raise ValueError(f"mine and theirs must both have {where} (a bias or a norm's gain) or both not: {has} "
                             f"has it, {lacks} has none")
        if ours is not None and ours.shape != torchs.shape:
            raise ValueError(f"mine and theirs must have the same shape at {where}: mine {tuple(ours.shape)}, theirs "
                             f"{tuple(torchs.shape)}")
    return pairs


def _require_same(where: str, setting: str, ours: object, torchs: object) -> None:
    if ours != torchs:
        at = f" at {where.rstrip('.')}" if where else ""
        raise ValueError(f"mine and theirs must have the same {setting}{at}: mine has {ours!r}, theirs {torchs!r} "
                         "(copied, they would compute different functions)")


def _require_matching(mine: nn.Module, theirs: nn.Module, where: str) -> Pairs:
    """The weight pairs of two modules of matching kinds, comparing the settings on the way."""
    if isinstance(mine, Attention):
        _require_same(where, "number of heads", mine.n_heads, theirs.num_heads)
        _require_same(where, "extra key/value biases (add_bias_kv)", False, theirs.bias_k is not None)
        _require_same(where, "zero key/value row (add_zero_attn)", False, theirs.add_zero_attn)
        if theirs._qkv_same_embed_dim:  # torch stacks W_Q, W_K, W_V into one (3D, D) weight
            weights = theirs.in_proj_weight.chunk(3)
        else:  # kdim != embed_dim: three separate weights
            weights = (theirs.q_proj_weight, theirs.k_proj_weight, theirs.v_proj_weight)
        biases = theirs.in_proj_bias.chunk(3) if theirs.in_proj_bias is not None else (None,) * 3
        linears = {"query": mine.query, "key": mine.key, "value": mine.value}
        return ([(f"{where}{n}.weight", m.weight, w) for (n, m), w in zip(linears.items(), weights)]
                + [(f"{where}{n}.bias", m.bias, b) for (n, m), b in zip(linears.items(), biases)]
                + _linear(f"{where}out", mine.out, theirs.out_proj))
    if isinstance(mine, Block):
        cross = isinstance(theirs, nn.TransformerDecoderLayer)
        _require_same(where, "cross-attention (Block(cross=True), as a DecoderLayer)", mine.cross_attention is not None,
                      cross)
        _require_same(where, "FFN presence (d_ff > 0)", mine.ffn is not None, True)
        _require_same(where, "norm", mine.norm, "pre" if theirs.norm_first else "post")
        _require_same(where, "residual connections", mine.residual, True)
        activation = getattr(theirs.activation, "__name__", type(theirs.activation).__name__)
        _require_same(where, "FFN activation", "relu", "relu" if theirs.activation in (F.relu, torch.relu) or
              isinstance(theirs.activation, nn.ReLU) else activation)
        pairs = _require_matching(mine.attention, theirs.self_attn, f"{where}attention.")
        if cross:
            pairs += _require_matching(mine.cross_attention, theirs.multihead_attn, f"{where}cross_attention.")
            pairs += _require_norm(f"{where}cross_norm", mine.cross_norm, theirs.norm2)
        ffn_norm = theirs.norm3 if cross else theirs.norm2
        return (pairs + _require_norm(f"{where}attention_norm", mine.attention_norm, theirs.norm1)
                + _linear(f"{where}ffn.linear1", mine.ffn.linear1, theirs.linear1)
                + _linear(f"{where}ffn.linear2", mine.ffn.linear2, theirs.linear2)
                + _require_norm(f"{where}ffn_norm", mine.ffn_norm, ffn_norm))
    _require_same(where, "number of encoder blocks", len(mine.encoder), len(theirs.encoder.layers))
    _require_same(where, "number of decoder blocks", len(mine.decoder), len(theirs.decoder.layers))
    blocks = [(f"encoder.{i}.", m, t) for i, (m, t) in enumerate(zip(mine.encoder, theirs.encoder.layers))]
    blocks += [(f"decoder.{i}.", m, t) for i, (m, t) in enumerate(zip(mine.decoder, theirs.decoder.layers))]
    pairs = []
    for name, block, layer in blocks:
        pairs += _require_matching(block, layer, name)
    return (pairs + _require_norm("encoder_norm", mine.encoder_norm, theirs.encoder.norm)
            + _require_norm("decoder_norm", mine.decoder_norm, theirs.decoder.norm))


def _linear(where: str, mine: nn.Linear, theirs: nn.Linear) -> Pairs:
    return [(f"{where}.weight", mine.weight, theirs.weight), (f"{where}.bias", mine.bias, theirs.bias)]


def _require_norm(where: str, mine: nn.LayerNorm, theirs: nn.LayerNorm | None) -> Pairs:
    _require_same(where, "LayerNorm presence", True, isinstance(theirs, nn.LayerNorm))
    _require_same(where, "LayerNorm eps", mine.eps, theirs.eps)
    return [(f"{where}.weight", mine.weight, theirs.weight), (f"{where}.bias", mine.bias, theirs.bias)]
