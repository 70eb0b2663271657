"""Lesson 02: masks, and the three places a Transformer uses attention.

Dimension names as in course_lib/__init__.py: B batch, T query positions, S key/value
positions, D model width, d_k, d_v. In a translation model the source has n tokens and
the target m tokens; cross-attention's score matrix is (m, n).

Boolean masks: True = this query may attend to this key (torch.nn.functional's
scaled_dot_product_attention uses the same convention). torch.nn.MultiheadAttention's
boolean `attn_mask` and `key_padding_mask` use the opposite one, True = NOT allowed:
`course_lib.torch_copy.to_torch_mha_mask` converts, beside `to_torch`, which builds torch's layer.
Additive masks are float: 0 where allowed, -inf where not, added to the scores before the softmax.
What a score costs and whether a layer is causal are measured in course_lib.measure.

Masks broadcast by torch's rule and nothing else. The head-free scores of lesson 01 are (B, T, S);
an Attention layer's weights have a head axis, (B, H, T, S) (H = 1 for one head), so a per-sequence
mask for a layer carries it with size 1: (B, 1, T, S), or (B, 1, 1, S) for padding alone.

A query whose every key is masked gets zero weights and a zero output row, never NaN
(course_lib.attention_scores.softmax returns zeros for an all -inf row).
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor, nn

from .attention import Attention, causal_mask  # causal_mask: a decoder layer's, defined beside it
from .attention_scores import softmax
from .guards import (broadcast_shape, require_broadcasts_to, require_choice, require_count, require_float,
                     require_float_dtype, require_instance, require_integer, require_mask, require_number,
                     require_same_shape, require_width)
from .training import train

# ------------------------------------------------------------------ building masks

def padding_mask(lengths: Sequence[int] | Tensor, S: int, side: str = "right") -> Tensor:
    """(B, 1, S) boolean, True where key s of sequence b is a real token, False on padding.

    lengths: B real-token counts, each in 0..S. side="right" pads at the end (real tokens
    first), side="left" pads at the start. The middle axis of size 1 broadcasts over the T
    query positions, so the result combines with a (T, S) causal mask into (B, T, S): one mask per
    sequence for head-free (B, T, S) scores, such as scaled_dot_product_attention's. An Attention
    layer's weights are (B, H, T, S): give it padding_mask(lengths, S)[:, None], (B, 1, 1, S).
    """
    S = require_count("S", S, minimum=0)
    lengths = _require_lengths("lengths", lengths, S)
    require_choice("side", side, ("right", "left"))
    positions = torch.arange(S)  # (S,)
    counts = torch.tensor(lengths, dtype=torch.long).reshape(-1, 1)  # (B, 1)
    real = positions < counts if side == "right" else positions >= S - counts  # (B, S)
    return real[:, None, :]  # (B, 1, S)


def _require_lengths(name: str, lengths: object, S: int) -> list[int]:
    """B real-token counts (a list or a 1-D integer tensor), each in 0..S; returns them as a list."""
    if isinstance(lengths, Tensor):
        lengths = require_integer(name, lengths, 1, 1).tolist()
    if isinstance(lengths, (str, bytes)) or not isinstance(lengths, Sequence):
        raise TypeError(f"{name} must be a list of B real-token counts, got {type(lengths).__name__} {lengths!r}")
    for n in lengths:
        require_count(name, n, minimum=0)
    if any(n > S for n in lengths):
        raise ValueError(f"{name} {lengths} must each be at most S={S}")
    return list(lengths)


def combine_masks(*masks: Tensor) -> Tensor:
    """Logical AND of boolean masks, broadcast together: a key is allowed only if every mask allows it."""
    if not masks:
        raise ValueError("masks must hold at least one mask: combine_masks(mask, ...)")
    combined = None
    for index, mask in enumerate(masks):
        require_mask(f"masks[{index}]", mask)
        if combined is not None:
            broadcast_shape(f"masks[0..{index - 1}] combined", tuple(combined.shape), f"masks[{index}]", tuple(mask.shape))
        combined = mask if combined is None else combined & mask
    return combined


def additive_mask(mask: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """Boolean mask -> float mask of the same shape: 0.0 where True, -inf where False.

    Adding it to the scores and taking the softmax gives exactly the weights of the boolean
    form; two additive masks combine by addition (-inf + anything finite = -inf).
    """
    require_mask("mask", mask)
    require_float_dtype("dtype", dtype)  # it holds -inf
    return torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, float("-inf"))


# ------------------------------------------------------------------ one attention layer, three uses
# The layer is course_lib.attention's `Attention`; a float (additive) mask goes in as its `bias=`.
# Its weights always have a head axis, (B, H, T, S), also with one head (H = 1), and it reads a mask
# by torch's broadcasting rule alone: a mask for it needs that head axis, of size 1 to serve every head.


def _require_layer_padding_mask(name: str, lengths: Sequence[int] | Tensor | None, x: Tensor) -> Tensor | None:
    """For a layer over x: (B, S, D), B lengths -> (B, 1, 1, S) boolean (None without lengths).

    padding_mask's (B, 1, S) with a head axis added in front of the query axis: both of size 1, so
    every head and every query of sequence b hides its padding keys. The count of lengths must be B.
    """
    if lengths is None:
        return None
    mask = padding_mask(_require_lengths(name, lengths, x.shape[1]), x.shape[1])  # (B', 1, S)
    if mask.shape[0] != x.shape[0]:
        raise ValueError(f"{name} must give one length per sequence: {mask.shape[0]} lengths for a batch of "
                         f"B={x.shape[0]} sequences")
    return mask[:, None]  # (B, 1, 1, S): heads, queries, keys


def encoder_self_attention(layer: Attention, source: Tensor,
                           source_lengths: Sequence[int] | None = None) -> tuple[Tensor, Tensor]:
    """Source attends to itself; only padding keys are hidden.

    source: (B, n, D) -> output (B, n, D), weights (B, H, n, n), H = layer.n_heads (1 by default).
    """
    require_instance("layer", layer, Attention, "a course_lib.attention.Attention layer")
    require_width("source", require_float("source", source, 3, 3), layer.d_model)
    mask = _require_layer_padding_mask("source_lengths", source_lengths, source)  # (B, 1, 1, n) or None
    return layer(source, mask=mask)  # (B, n, D), (B, H, n, n)


def decoder_self_attention(layer: Attention, target: Tensor,
                           target_lengths: Sequence[int] | None = None) -> tuple[Tensor, Tensor]:
    """Target attends to its own past: causal mask AND padding mask.

    target: (B, m, D) -> output (B, m, D), weights (B, H, m, m), zero above the diagonal.
    """
    require_instance("layer", layer, Attention, "a course_lib.attention.Attention layer")
    require_width("target", require_float("target", target, 3, 3), layer.d_model)
    mask = causal_mask(target.shape[1])  # (m, m): the same for every sequence and head
    if target_lengths is not None:
        padding = _require_layer_padding_mask("target_lengths", target_lengths, target)  # (B, 1, 1, m)
        mask = combine_masks(mask, padding)  # (B, 1, m, m)
    return layer(target, mask=mask)  # (B, m, D), (B, H, m, m)


def cross_attention(layer: Attention, target: Tensor, source: Tensor,
                    source_lengths: Sequence[int] | None = None) -> tuple[Tensor, Tensor]:
    """Queries from the target, keys and values from the (encoded) source; no causal mask.

    target: (B, m, D), source: (B, n, d_memory) -> output (B, m, D), weights (B, H, m, n).
    """
    require_instance("layer", layer, Attention, "a course_lib.attention.Attention layer")
    require_width("target", require_float("target", target, 3, 3), layer.d_model)
    require_width("source", require_float("source", source, 3, 3), layer.d_memory)
    if target.shape[0] != source.shape[0]:
        raise ValueError(f"target {tuple(target.shape)} and source {tuple(source.shape)} must have the same "
                         "batch size B")
    mask = _require_layer_padding_mask("source_lengths", source_lengths, source)  # (B, 1, 1, n) or None
    return layer(target, source, mask=mask)  # (B, m, D), (B, H, m, n)


# ------------------------------------------------------------------ additive (Bahdanau) attention


class AdditiveScorer(nn.Module):
    """Bahdanau's score: a one-hidden-layer MLP of each (query, key) pair.

    score(q_t, k_s) = w . tanh(W_q q_t + W_k k_s). q: (..., T, d_q), k: (..., S, d_k) ->
    scores (..., T, S). W_q and W_k map both sides to d_hidden, so d_q and d_k may differ
    (a dot-product layer's W_Q and W_K do the same; only the raw q . k needs equal widths).
    """

    def __init__(self, d_q: int, d_k: int, d_hidden: int):
        super().__init__()
        self.d_q, self.d_k, self.d_hidden = (require_count(n, w) for n, w in
                                             (("d_q", d_q), ("d_k", d_k), ("d_hidden", d_hidden)))
        self.query = nn.Linear(d_q, d_hidden, bias=False)
        self.key = nn.Linear(d_k, d_hidden, bias=True)
        self.w = nn.Linear(d_hidden, 1, bias=False)

    def forward(self, q: Tensor, k: Tensor) -> Tensor:
        for name, t, width in (("q", q, self.d_q), ("k", k, self.d_k)):
            require_float(name, t, min_rank=2)
            require_width(name, t, width)
        broadcast_shape("q's batch dimensions", tuple(q.shape[:-2]), "k's batch dimensions", tuple(k.shape[:-2]))
        return self.pair_scores(self.query(q), self.key(k))  # (..., T, S)

    def pair_scores(self, hq: Tensor, hk: Tensor) -> Tensor:
        """The per-pair part, on projected rows hq: (..., T, h), hk: (..., S, h) -> (..., T, S)."""
        # Pair every query with every key by broadcasting: (..., T, 1, h) + (..., 1, S, h).
        hidden = torch.tanh(hq[..., :, None, :] + hk[..., None, :, :])  # (..., T, S, h)
        return self.w(hidden).squeeze(-1)  # (..., T, S)


def additive_attention(scorer: AdditiveScorer, q: Tensor, k: Tensor, v: Tensor,
                       mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """softmax(scorer(q, k)) v, masked like dot-product attention.

    q: (..., T, d_q), k: (..., S, d_k), v: (..., S, d_v), mask: bool broadcastable to (..., T, S).
    Returns (output (..., T, d_v), weights (..., T, S)).
    """
    require_instance("scorer", scorer, AdditiveScorer, "an AdditiveScorer")
    scores = scorer(q, k)  # (..., T, S); the scorer checks q and k
    if require_float("v", v, min_rank=2).shape[-2] != k.shape[-2]:
        raise ValueError(f"k and v must share S: k has shape {tuple(k.shape)}, v has shape {tuple(v.shape)}")
    try:
        torch.broadcast_shapes(scores.shape[:-2], v.shape[:-2])
    except RuntimeError:
        raise ValueError(f"v's batch must broadcast with q's and k's: q has shape {tuple(q.shape)}, k "
                         f"{tuple(k.shape)}, v {tuple(v.shape)}") from None
    weights = softmax(scores, mask=mask)  # (..., T, S)
    return weights @ v, weights  # (..., T, d_v)


# ------------------------------------------------------------------ a toy translation pair

# English -> French. "black cat" becomes "chat noir": the adjective moves behind the noun, so
# the alignment that cross-attention finds crosses over. The second pair is one word shorter
# and padded, to give the padding mask something to hide.
SOURCE = [["the", "black", "cat", "sleeps"], ["the", "dog", "runs", "<pad>"]]
TARGET = [["<bos>", "le", "chat", "noir", "dort"], ["<bos>", "le", "chien", "court", "<pad>"]]
SOURCE_LENGTHS, TARGET_LENGTHS = [4, 3], [5, 4]
MEANING = {"the": "DET", "le": "DET", "black": "BLACK", "noir": "BLACK", "cat": "CAT", "chat": "CAT",
           "sleeps": "SLEEP", "dort": "SLEEP", "dog": "DOG", "chien": "DOG", "runs": "RUN", "court": "RUN",
           "<bos>": "BOS", "<pad>": "PAD"}
CONCEPTS = sorted(set(MEANING.values()))


def toy_embedding(word: str, language: str) -> Tensor:
    """Hand-set embedding: one coordinate per meaning plus one per language (EN, FR).

    A word and its translation share their meaning coordinate, so their dot product is 1;
    two words of one language share the language coordinate; width D = len(CONCEPTS) + 2.
    """
    if word not in MEANING:
        raise ValueError(f"word must be one of the toy vocabulary {sorted(MEANING)}, got {word!r}")
    require_choice("language", language, ("EN", "FR"))
    x = torch.zeros(len(CONCEPTS) + 2)
    x[CONCEPTS.index(MEANING[word])] = 1.0
    x[len(CONCEPTS) + ("EN", "FR").index(language)] = 1.0
    return x


def toy_translation_batch() -> tuple[Tensor, Tensor]:
    """Embedded SOURCE (B=2, n=4, D) and TARGET (B=2, m=5, D) sentences."""
    source = torch.stack([torch.stack([toy_embedding(w, "EN") for w in s]) for s in SOURCE])  # (B, n, D)
    target = torch.stack([torch.stack([toy_embedding(w, "FR") for w in s]) for s in TARGET])  # (B, m, D)
    return source, target


def matching_layer(d_model: int, sharpness: float = 4.0) -> Attention:
    """An Attention layer whose score is sharpness * x_t . x_s (W_Q = W_K = c*I, W_V = W_O = I).

    With toy embeddings, a target word scores `sharpness` more on its translation than on
    a word of unrelated meaning: a hand-set stand-in for what training would learn.
    Its parameters are frozen (requires_grad=False).
    """
    require_number("sharpness", sharpness, positive=True)
    layer = Attention(d_model)  # checks d_model
    factor = (sharpness * d_model ** 0.5) ** 0.5  # the layer divides by sqrt(d_k) = sqrt(d_model)
    with torch.no_grad():
        for linear, value in ((layer.query, factor), (layer.key, factor), (layer.value, 1.0), (layer.out, 1.0)):
            linear.weight.copy_(torch.eye(d_model) * value)
    return layer.requires_grad_(False)  # hand-set, not for training


def fit_additive_scorer(scorer: AdditiveScorer, q: Tensor, k: Tensor, target_weights: Tensor,
                        mask: Tensor | None = None, steps: int = 200, lr: float = 0.05) -> float:
    """Train `scorer` (in place) so additive_attention's weights match target_weights.

    q: (..., T, d_q), k: (..., S, d_k), target_weights: (..., T, S). The loss is the mean
    cross-entropy of the rows that have an allowed key; returns the last loss.
    """
    require_instance("scorer", scorer, AdditiveScorer, "an AdditiveScorer")
    scores = scorer(q, k).detach()  # (..., T, S); the scorer checks q and k
    require_same_shape("target_weights", require_float("target_weights", target_weights), "the scores", scores)
    if mask is not None:
        require_mask("mask", mask)
        require_broadcasts_to("mask", mask, tuple(scores.shape), "scores")
    target_weights = target_weights.detach()
    live = target_weights.sum(-1) > 0  # (..., T): rows with at least one allowed key
    wanted = target_weights > 0  # (..., T, S): the keys whose log-weight the loss reads

    def loss_of_step(_: int) -> Tensor:
        weights = softmax(scorer(q, k), mask=mask)  # (..., T, S): the course's one masked softmax
        # A masked key's weight is exactly 0 and its target is 0: its log is taken of 1 instead, so
        # the loss reads 0 there and its gradient is 0, not 0 * log 0 = NaN.
        log_weights = torch.where(wanted, weights, torch.ones_like(weights)).log()
        return -(target_weights * log_weights).sum(-1)[live].mean()

    return train(loss_of_step, scorer.parameters(), steps, lr)[-1]
