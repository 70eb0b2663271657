"""Lesson 06: the copy mechanism. Hand-set heads that copy a token from another position.

Residual layout of the hand-set heads (rows are vectors, as in lesson 01): a row x of width D
is cut into contiguous slices, each holding one kind of information,
    x[tokens]     the token's code (one-hot, or any unit vectors when V > width)
    x[positions]  the position, one-hot: coordinate positions.start + p is 1 at position p
and, for the induction head, slices the heads write into. Every head here is an `Attention`
layer of lesson 01 with d_k = d_v = D (so its weights load into a DecoderOnly layer) and
weights copied in; its layer divides the scores by sqrt(d_k), so the query weights carry a
factor sqrt(d_k) to give scores of exactly `gap`.
Shapes use the course's names (course_lib/__init__.py): B, T, S, D, d_k, d_v, V.
"""

from __future__ import annotations

import functools
import math
from typing import Callable, NamedTuple, Sequence

import torch
from torch import Tensor

from .attention import Attention
from .attention_scores import attention_scores, scaled_dot_product_attention
from .guards import (broadcast_shape, require_bool, require_choice, require_count, require_float, require_float_dtype,
                     require_index, require_instance, require_integer, require_items, require_number,
                     require_same_dtype, require_same_shape)
from .masks import causal_mask
from .model import DecoderOnly, ModelConfig, require_ids
from .positional_encoding import POSITION_KINDS, tiny_model
from .runs import run_each
from .training import IGNORE, train, train_tiny_model

Batches = Callable[[torch.Generator], tuple[Tensor, Tensor]]
BOS = 0  # the induction data's first token: it never appears again, so nothing copies it


def _require_slice(name: str, part: object, d_model: int) -> range:
    """A slice with explicit start and stop inside 0..d_model, step 1; returns its range."""
    ints = isinstance(part, slice) and part.step in (None, 1) and all(type(v) is int for v in (part.start, part.stop))
    if not ints or not 0 <= part.start < part.stop <= d_model:
        raise ValueError(f"{name} must be a slice of the residual's coordinates, slice(start, stop) with ints "
                         f"0 <= start < stop <= d_model={d_model} and no step, got {part!r}")
    return range(part.start, part.stop)


def _overlap(a: range, b: range) -> bool:
    return a.start < b.stop and b.start < a.stop


def position_copy_head(d_model: int, offset: int, tokens: slice, positions: slice,
                       write: slice | None = None, gap: float = 20.0, bias: bool = False,
                       dtype: torch.dtype = torch.float32) -> Attention:
    """A hand-set head whose query at position i attends to position i + offset and copies it.

    x: (..., T, D) laid out as the module docstring says: x[..., tokens] the token code (width W),
    x[..., positions] the one-hot position (width P = the longest sequence, T <= P).
    Scores: query i, key j -> gap if j == i + offset, else 0 (exactly: one-hot codes). So the
    source gets weight e^gap / (e^gap + S - 1) among S keys. A query whose i + offset lies
    outside 0..P-1 scores 0 everywhere (uniform weights): its output means nothing.
    Output row i = sum_j w_ij x_j[tokens], written into the coordinates `write` (width W;
    default: the token slice itself), zero elsewhere: (..., T, D).
    offset > 0 reads ahead (use without a causal mask); offset < 0 reads back (causal is fine).
    Returns Attention(d_model, bias=bias) (d_k = d_v = D; biases zero), frozen (requires_grad
    False), in `dtype` (weights set in that dtype: float64 scores are gap to 1e-15). Its weights
    copy into a DecoderOnly layer with `model.layers[k].attention.load_state_dict(head.state_dict())`
    (pass bias=True there).
    """
    require_count("d_model", d_model)
    token_range = _require_slice("tokens", tokens, d_model)
    position_range = _require_slice("positions", positions, d_model)
    write_range = token_range if write is None else _require_slice("write", write, d_model)
    gap = require_number("gap", gap, non_negative=True)
    require_bool("bias", bias)
    require_float_dtype("dtype", dtype)
    _require_offset(offset, len(position_range))  # 0 would copy the query's own token
    if _overlap(token_range, position_range) or _overlap(write_range, position_range):
        raise ValueError(f"tokens={tokens!r} and write={write!r} must not overlap positions={positions!r}: the "
                         "head reads positions and tokens from separate coordinates")
    if len(write_range) != len(token_range):
        raise ValueError(f"write={write!r} must be as wide as tokens={tokens!r}: it receives the copied token code")
    head = _zero_head(d_model, bias, dtype)
    with torch.no_grad():
        # rows are outputs, columns inputs (nn.Linear): q = W x, so W[a, b] sends x_b into q_a.
        sharp = gap * math.sqrt(d_model)  # the layer divides by sqrt(d_k) = sqrt(D)
        P, p0 = len(position_range), position_range.start
        for p in range(max(0, -offset), min(P, P - offset)):
            head.query.weight[p0 + p + offset, p0 + p] = sharp  # query i asks for i + offset
        for p in range(P):
            head.key.weight[p0 + p, p0 + p] = 1.0  # key j says "I am position j"
        for a, b in zip(token_range, token_range):
            head.value.weight[a, b] = 1.0  # the value is the token code
        for a, b in zip(write_range, token_range):
            head.out.weight[a, b] = 1.0  # and lands in the `write` coordinates
    return head.requires_grad_(False)  # hand-set, not for training


def content_copy_head(d_model: int, match_from: slice, match_to: slice, tokens: slice,
                      write: slice, gap: float = 20.0, bias: bool = False,
                      dtype: torch.dtype = torch.float32) -> Attention:
    """A hand-set head that attends by content: query i scores key j by
    gap * x_i[match_from] . x_j[match_to].

    x: (..., T, D). The query reads the coordinates `match_from` of its own row, the key reads
    `match_to` of its row (same width); with unit codes the best match scores gap. The value
    is x_j[tokens], written into the coordinates `write` (same width) of the output (..., T, D).
    Induction head, second layer: match_from = the token, match_to = "the token before me"
    (written by a previous-token head), tokens = the token: it copies what followed last time.
    Returns Attention(d_model, bias=bias) (d_k = d_v = D; biases zero), frozen, in `dtype`.
    match_from may overlap tokens (the induction head matches on the token it copies).
    """
    require_count("d_model", d_model)
    ranges = {name: _require_slice(name, part, d_model) for name, part in
              (("match_from", match_from), ("match_to", match_to), ("tokens", tokens), ("write", write))}
    for a, b, role in (("match_from", "match_to", "query and key compare them coordinate by coordinate"),
                       ("tokens", "write", "write receives the copied token code")):
        if len(ranges[a]) != len(ranges[b]):
            raise ValueError(f"{a}={ranges[a].start}:{ranges[a].stop} (width {len(ranges[a])}) and "
                             f"{b}={ranges[b].start}:{ranges[b].stop} (width {len(ranges[b])}) must be "
                             f"equally wide: {role}")
    gap = require_number("gap", gap, non_negative=True)
    require_bool("bias", bias)
    require_float_dtype("dtype", dtype)
    head = _zero_head(d_model, bias, dtype)
    with torch.no_grad():
        sharp = gap * math.sqrt(d_model)  # the layer divides by sqrt(d_k) = sqrt(D)
        for a, b in zip(ranges["match_to"], ranges["match_from"]):
            head.query.weight[a, b] = sharp  # the query's code, moved to where keys keep theirs
        for a in ranges["match_to"]:
            head.key.weight[a, a] = 1.0
        for a in ranges["tokens"]:
            head.value.weight[a, a] = 1.0
        for a, b in zip(ranges["write"], ranges["tokens"]):
            head.out.weight[a, b] = 1.0
    return head.requires_grad_(False)


def _zero_head(d_model: int, bias: bool, dtype: torch.dtype) -> Attention:
    """An Attention(d_model) with every weight 0, in dtype: the hand-set heads fill in theirs."""
    head = Attention(d_model, bias=bias).to(dtype)
    with torch.no_grad():
        for p in head.parameters():
            p.zero_()
    return head


# ---------------------------------------------------------------- token codes and the score gap

def token_codes(vocab_size: int, width: int, seed: int = 0) -> Tensor:
    """One unit code per token: (V, W), float64. One-hot when W >= V, else seeded random units.

    With W < V the codes cannot all be orthogonal: their coherence (largest |cosine| between
    two codes) is above 0, and a copy head needs a larger score gap (see gap_needed).
    """
    require_count("vocab_size", vocab_size, minimum=2)
    require_count("width", width)
    require_count("seed", seed, minimum=0)
    if width >= vocab_size:
        return torch.eye(vocab_size, width, dtype=torch.float64)
    codes = torch.randn(vocab_size, width, generator=torch.Generator().manual_seed(seed),
                        dtype=torch.float64)
    return codes / codes.norm(dim=-1, keepdim=True)


def coherence(codes: Tensor) -> float:
    """Largest |cos| between two different rows of codes (V, W): 0 if orthogonal, 1 for a repeat."""
    require_float("codes", codes, 2, 2)
    if len(codes) < 2:
        raise ValueError(f"codes must have at least two rows (two codes to compare), got shape {tuple(codes.shape)}")
    unit = codes / codes.norm(dim=-1, keepdim=True)
    cosines = (unit @ unit.T).abs().fill_diagonal_(0.0)  # (V, V)
    return float(cosines.max())


def source_weight(gap: float, n_keys: int) -> float:
    """Softmax weight on the key scoring `gap` above the n_keys - 1 others: e^g / (e^g + S - 1)."""
    gap = require_number("gap", gap, non_negative=True)
    require_count("n_keys", n_keys)
    return 1.0 / (1.0 + (n_keys - 1) * math.exp(-gap))


def gap_needed(n_keys: int, coherence: float = 0.0) -> float:
    """Score gap above which a copy head reads out the right token for EVERY sequence.

    Unit codes with coherence c: the output is w e_t + (mix of the others, weight 1 - w); its
    dot product with e_t beats every other code when w (1 - c) > (1 - w)(1 + c), that is
    w / (1 - w) = e^gap / (S - 1) > (1 + c) / (1 - c): gap > ln(S - 1) + ln((1 + c) / (1 - c)).
    """
    require_count("n_keys", n_keys, minimum=2)
    c = require_number("coherence", coherence, non_negative=True)
    if c >= 1:
        raise ValueError(f"coherence must be below 1 (two equal codes cannot be told apart), got {c}")
    return math.log(n_keys - 1) + math.log((1 + c) / (1 - c))


# ---------------------------------------------------------------- hand-set models

def _set_model(model: DecoderOnly, codes: Tensor, position_start: int, read_start: int,
               heads: list[Attention]) -> DecoderOnly:
    """Copy hand-set weights into a DecoderOnly (float64): codes, positions, heads, readout."""
    V, W = codes.shape
    P = model.config.max_len
    model = model.to(torch.float64)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.tokens.weight[:, :W] = codes
        if hasattr(model.positions, "table"):
            model.positions.table.weight[:, position_start:position_start + P] = torch.eye(P)
        for layer, head in zip(model.layers, heads):
            layer.attention.load_state_dict(head.state_dict())
        # the logit of v is code_v . what was copied
        model.readout.weight[:, read_start:read_start + W] = codes
    return model.requires_grad_(False)


def hand_set_copy_model(codes: Tensor, max_len: int, offset: int = 1, gap: float = 20.0,
                        positions: bool = True) -> DecoderOnly:
    """One-layer DecoderOnly that outputs at position i the token at i + offset. No training.

    codes: (V, W) token codes. Residual row: [code (W) | one-hot position (max_len)],
    D = W + max_len.
    No residual (the output is the copied code alone); causal only when offset < 0.
    positions=False builds it with no position scheme: the position coordinates stay 0.
    """
    require_float("codes", codes, 2, 2)
    V, W = codes.shape
    require_count("max_len", max_len, minimum=2)
    _require_offset(offset, max_len)
    require_bool("positions", positions)
    D = W + max_len  # the hand-set solution needs a coordinate per position beside the code
    config = ModelConfig(vocab_size=V, max_len=max_len, d_model=D, causal=offset < 0,
                        positions="learned" if positions else "none", residual=False)
    head = position_copy_head(D, offset, tokens=slice(0, W), positions=slice(W, D), gap=gap,
                              bias=True,
                              dtype=torch.float64)
    return _set_model(DecoderOnly(config), codes, W, 0, [head])


def hand_set_induction_model(codes: Tensor, max_len: int, gap: float = 20.0) -> DecoderOnly:
    """Two-layer causal DecoderOnly that predicts, after [A][B] ... [A], the token [B]. No training.

    Residual row: [token (W) | one-hot position (P) | previous token (W) | copied token (W)].
    Layer 1, a previous-token head, writes the token at i - 1 into "previous token"; layer 2
    matches its token against every key's "previous token" and copies that key's token (every
    earlier match shares the weight). Position 0 has no previous token and records its own: the
    data start with BOS, which never comes back, so nothing matches it.
    """
    require_float("codes", codes, 2, 2)
    V, W = codes.shape
    require_count("max_len", max_len, minimum=2)
    P = max_len
    D = 3 * W + P
    token, position = slice(0, W), slice(W, W + P)
    previous, copied = slice(W + P, 2 * W + P), slice(2 * W + P, D)
    config = ModelConfig(vocab_size=V, max_len=P, d_model=D, causal=True, n_decoder_layers=2)
    heads = [position_copy_head(D, -1, token, position, write=previous, gap=gap, bias=True,
                                dtype=torch.float64),
             content_copy_head(D, token, previous, token, copied, gap=gap, bias=True,
                               dtype=torch.float64)]
    return _set_model(DecoderOnly(config), codes, W, 2 * W + P, heads)


# ---------------------------------------------------------------- data

def copy_batch(n_sequences: int, length: int, vocab_size: int, offset: int = 1) -> Batches:
    """make_batch: random ids (B, T); the target at i is the token at i + offset (else IGNORE)."""
    require_count("n_sequences", n_sequences)
    require_count("length", length, minimum=2)
    require_count("vocab_size", vocab_size)
    _require_offset(offset, length)

    def make_batch(generator: torch.Generator) -> tuple[Tensor, Tensor]:
        ids = torch.randint(vocab_size, (n_sequences, length), generator=generator)  # (B, T)
        return ids, copy_targets(ids, offset)

    return make_batch


def _require_offset(offset: object, length: int) -> int:
    """A source offset: a nonzero int with |offset| < length (0 would copy each token onto itself)."""
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise TypeError(f"offset must be an int, got {type(offset).__name__} {offset!r}")
    if offset == 0 or abs(offset) >= length:
        raise ValueError(f"offset must be a nonzero int shorter than the sequence (|offset| < T={length}), "
                         f"got offset={offset}")
    return offset


def copy_targets(ids: Tensor, offset: int) -> Tensor:
    """targets[b, i] = ids[b, i + offset], IGNORE where i + offset is outside: ids (B, T) -> (B, T)."""
    require_integer("ids", ids, 2, 2)
    T = ids.shape[-1]
    _require_offset(offset, T)
    targets = ids.roll(-offset, dims=-1)  # (B, T): position i gets the token at i + offset
    if offset > 0:
        targets[:, T - offset:] = IGNORE
    else:
        targets[:, :-offset] = IGNORE
    return targets


def every_token_everywhere(vocab_size: int, length: int, offset: int,
                           seed: int = 0) -> tuple[Tensor, Tensor]:
    """Every token at every source position: V * (T - |offset|) random sequences, one per
    (token, source).

    Returns ids (N, T) and targets (N, T) with only the one (token, source) pair as target.
    """
    require_count("vocab_size", vocab_size, minimum=2)
    require_count("length", length, minimum=2)
    _require_offset(offset, length)
    gen = torch.Generator().manual_seed(require_count("seed", seed, minimum=0))
    ids = torch.randint(vocab_size, (vocab_size * length, length), generator=gen)  # (V*T, T)
    source = torch.arange(length).repeat(vocab_size)  # (V*T,)
    token = torch.arange(vocab_size).repeat_interleave(length)
    query = source - offset
    keep = (query >= 0) & (query < length)
    ids, source, token, query = ids[keep], source[keep], token[keep], query[keep]
    rows = torch.arange(len(ids))
    ids[rows, source] = token
    targets = torch.full_like(ids, IGNORE)
    targets[rows, query] = token
    return ids, targets


def induction_batch(n_sequences: int, length: int, vocab_size: int,
                    periods: tuple[int, ...] = (3, 4, 5, 6, 7), prefix: tuple[int, int] = (0, 0)
                    ) -> Batches:
    """make_batch: [BOS], P distinct filler tokens, then a block of L distinct tokens repeated.

    Per sequence, L is drawn from `periods`, then P uniformly from lo .. min(hi, the most that
    fits): P + 2 L + 1 <= T (a block and one repeat) and P + L <= V - 1 (the filler and the
    block share no token, so the first token that comes back is the block's). ids (B, T); the
    target at i is the next token wherever it can be known from earlier in the sequence
    (P + L + 1 <= i <= T - 2), else IGNORE. L varies, so no fixed offset copies right; P
    varies, so the block starts anywhere.
    """
    require_count("n_sequences", n_sequences)
    require_count("length", length, minimum=3)
    require_count("vocab_size", vocab_size, minimum=3)
    if not periods or any(type(L) is not int or not 2 <= L < vocab_size for L in periods):
        raise ValueError(f"periods must be ints L with 2 <= L < vocab_size={vocab_size}, got {periods!r}")
    pair = isinstance(prefix, tuple) and len(prefix) == 2 and all(type(p) is int for p in prefix)
    if not pair or not 0 <= prefix[0] <= prefix[1]:
        raise ValueError(f"prefix must be (lo, hi), ints with 0 <= lo <= hi, got {prefix!r}")
    lo, hi = prefix
    room = {L: min(hi, length - 2 * L - 1, vocab_size - 1 - L) for L in periods}  # largest P per L
    if min(room.values()) < lo:
        raise ValueError(f"periods {periods!r} must fit with at least lo={lo} filler tokens: P + 2 L + 1 <= "
                         f"length={length} and P + L <= vocab_size - 1 = {vocab_size - 1}")
    period_choices = torch.tensor(periods)
    largest = torch.tensor([room[L] for L in periods])

    def make_batch(generator: torch.Generator) -> tuple[Tensor, Tensor]:
        pick = torch.randint(len(periods), (n_sequences, 1), generator=generator)  # (B, 1)
        L = period_choices[pick]  # (B, 1)
        P = torch.full_like(L, lo)  # drawn only when it varies, so prefix (0, 0) keeps the old data
        if hi > lo:
            span = largest[pick] - lo + 1  # (B, 1): how many prefix lengths fit
            P = lo + (torch.rand(n_sequences, 1, generator=generator, dtype=torch.float64)
                      * span).long()
        # (B, V - 1): a random order of the tokens but BOS
        tokens = torch.rand(n_sequences, vocab_size - 1, generator=generator).argsort(-1) + 1
        t = torch.arange(length)  # (T,)
        # filler: tokens[t - 1] for 1 <= t <= P; block: tokens[P + (t - 1 - P) mod L] after it
        where = torch.where(t <= P, t - 1, P + (t - 1 - P) % L).clamp_min(0)  # (B, T)
        ids = tokens.gather(1, where)
        ids[:, 0] = BOS
        targets = ids.roll(-1, dims=-1)
        targets[(t < P + L + 1) | (t == length - 1)] = IGNORE
        return ids, targets

    return make_batch


def repeat_once_batch(n_sequences: int, length: int, vocab_size: int) -> Batches:
    """make_batch: natural repeats. [BOS], then uniformly random tokens 1 .. V - 1, kept only
    when the last token occurred exactly once before (at some j, 1 <= j <= T - 2).

    ids (B, T); the one target is at the last position: the token that followed the earlier
    occurrence, ids[j + 1] (IGNORE elsewhere). Unlike induction_batch, other tokens repeat too,
    and the earlier occurrence sits anywhere. Sequences that fail the condition are redrawn.
    """
    require_count("n_sequences", n_sequences)
    require_count("length", length, minimum=3)
    require_count("vocab_size", vocab_size, minimum=3)

    def make_batch(generator: torch.Generator) -> tuple[Tensor, Tensor]:
        kept: list[Tensor] = []
        while sum(len(k) for k in kept) < n_sequences:
            ids = torch.randint(1, vocab_size, (n_sequences, length), generator=generator)
            ids[:, 0] = BOS
            seen = ids[:, :-1] == ids[:, -1:]  # (B, T - 1): where the last token occurred before
            kept.append(ids[seen.sum(-1) == 1])
        ids = torch.cat(kept)[:n_sequences]  # (B, T)
        j = (ids[:, :-1] == ids[:, -1:]).int().argmax(-1)  # (B,): the earlier occurrence
        targets = torch.full_like(ids, IGNORE)
        targets[:, -1] = ids[torch.arange(n_sequences), j + 1]
        return ids, targets

    return make_batch


def repeated_tokens_batch(n_sequences: int, half: int, vocab_size: int) -> Batches:
    """make_batch: repeated random tokens, the probe of Olsson et al. 2022. [BOS], then `half`
    distinct random tokens 1 .. V - 1, then the same tokens again: ids (B, 2 half + 1).

    The target at every position i < T - 1 is the next token: in the first copy it cannot be
    known (a token not seen yet), in the second it can, so the loss there minus the loss in the
    first copy measures in-context learning. Distinct tokens give each query of the second copy
    exactly one matching key.
    """
    require_count("n_sequences", n_sequences)
    require_count("half", half, minimum=2)
    require_count("vocab_size", vocab_size, minimum=3)
    if half > vocab_size - 1:
        raise ValueError(f"half={half} distinct tokens do not fit in the vocab_size - 1 = {vocab_size - 1} tokens "
                         "that are not BOS")

    def make_batch(generator: torch.Generator) -> tuple[Tensor, Tensor]:
        # (B, half): the first `half` of a random order of the tokens but BOS
        block = (torch.rand(n_sequences, vocab_size - 1, generator=generator).argsort(-1) + 1)[:, :half]
        ids = torch.cat([torch.full((n_sequences, 1), BOS), block, block], dim=1)  # (B, T)
        targets = ids.roll(-1, dims=-1)
        targets[:, -1] = IGNORE
        return ids, targets

    return make_batch


# ---------------------------------------------------------------- measurements

def _require_scored(model: object, ids: object, targets: object) -> Tensor:
    """model a DecoderOnly, ids and targets (B, T) integers with at least one target; returns
    where the targets are (B, T) bool."""
    require_instance("model", model, DecoderOnly)
    require_integer("ids", ids, 2, 2)
    require_same_shape("targets", require_integer("targets", targets, 2, 2), "ids", ids)
    keep = targets != IGNORE
    if not keep.any():
        raise ValueError(f"targets must hold at least one target (a value other than IGNORE={IGNORE}): "
                         "there is nothing to score")
    return keep


@torch.no_grad()
def copy_accuracy(model: DecoderOnly, ids: Tensor, targets: Tensor) -> float:
    """Share of the targets (not IGNORE) that are the model's top answer. ids, targets: (B, T)."""
    keep = _require_scored(model, ids, targets)
    return float((model(ids).argmax(-1)[keep] == targets[keep]).double().mean())


@torch.no_grad()
def copy_accuracies(model: DecoderOnly, batches: list[tuple[Tensor, Tensor]]) -> list[float]:
    """copy_accuracy of each (ids (B_k, T), targets (B_k, T)) batch, from one forward pass.

    The batches share T; they are run as one (sum B_k, T) batch, which costs one call's Python
    overhead instead of one per batch.
    """
    require_instance("model", model, DecoderOnly)
    if not isinstance(batches, (list, tuple)) or not batches:
        raise ValueError(f"batches must be a non-empty list of (ids, targets) pairs, got {batches!r}")
    for k, batch in enumerate(batches):
        if not isinstance(batch, (list, tuple)) or len(batch) != 2:
            raise TypeError(f"batches must hold (ids, targets) pairs, got {type(batch).__name__} at position {k}")
        require_integer(f"batches[{k}] ids", batch[0], 2, 2)
        require_same_shape(f"batches[{k}] targets", require_integer(f"batches[{k}] targets", batch[1], 2, 2),
                           f"batches[{k}] ids", batch[0])
        if batch[0].shape[-1] != batches[0][0].shape[-1]:
            raise ValueError(f"batches must share one length T: batches[{k}] has {batch[0].shape[-1]}, "
                             f"batches[0] {batches[0][0].shape[-1]}")
    ids = torch.cat([b[0] for b in batches])  # (N, T)
    targets = torch.cat([b[1] for b in batches])
    keep = targets != IGNORE  # (N, T)
    right = (model(ids).argmax(-1) == targets) & keep
    sizes = [len(b[0]) for b in batches]
    return [float(r[k].double().mean()) for r, k in zip(right.split(sizes), keep.split(sizes))]


@torch.no_grad()
def copy_lead(model: DecoderOnly, ids: Tensor, targets: Tensor) -> float:
    """Smallest lead, in logits, of the target over the best other token, over every target.

    ids, targets: (B, T); targets IGNORE where there is none. Positive exactly when every
    target is the model's top answer (copy_accuracy 1); its size says how far the model is
    from getting one wrong.
    """
    keep = _require_scored(model, ids, targets)
    logits = model(ids)[keep]  # (N, V): the positions that have a target
    wanted = targets[keep][:, None]  # (N, 1)
    others = logits.scatter(1, wanted, -math.inf).amax(-1)  # (N,): the best wrong token
    return float((logits.gather(1, wanted)[:, 0] - others).min())


def weight_on_source(weights: Tensor, offset: int, head: int = 0) -> Tensor:
    """Attention weight of query i on key i + offset in one head, averaged over the batch.

    weights (B, H, T, T), a layer's self-attention weights (model.last_weights, or
    model.layer_weights[k]); head: which of its H heads (0, the only one, in a one-head model)
    -> (T - |offset|,).
    """
    weights = _require_head_weights(weights, head)  # (B, T, T)
    _require_offset(offset, weights.shape[-1])
    return torch.diagonal(weights, offset=offset, dim1=-2, dim2=-1).mean(0)


def _require_head_weights(weights: object, head: object) -> Tensor:
    """weights (B, H, T, T) of a self-attention layer -> head `head`'s (B, T, T)."""
    require_float("weights", weights)
    if weights.dim() != 4 or weights.shape[-1] != weights.shape[-2]:
        raise ValueError(f"weights must be a layer's self-attention weights (B, H, T, T), with the head axis H (1 for "
                         f"one head) and one column per key of the query's own sequence, got shape "
                         f"{tuple(weights.shape)}")
    head = require_index("head", head, weights.shape[1], "heads in weights (B, H, T, T)")
    return weights[:, head]  # (B, T, T)


def matching_keys(ids: Tensor) -> Tensor:
    """(B, T, T) bool: key j matches query i when j < i and the token before j is the token at i.

    These are the keys an induction head looks for: after [A][B] ... [A], the key holding [B].
    ids: (B, T).
    """
    require_integer("ids", ids, 2, 2)
    T = ids.shape[-1]
    # (B, T, T): the token at j - 1 is the token at i
    matches = ids[:, None, :].roll(1, -1) == ids[:, :, None]
    earlier = torch.ones(T, T, dtype=torch.bool).tril(-1)  # j < i
    earlier[:, 0] = False  # key 0 has no token before it
    return matches & earlier


def induction_scores(weights: Tensor, ids: Tensor, head: int = 0) -> Tensor:
    """Weight of query i on its matching keys (see matching_keys), per position, in one head.

    weights (B, H, T, T), a layer's self-attention weights for ids (B, T); head: which of its
    H heads (0, the only one, in a one-head model) -> (T,): the mean over the sequences in
    which query i has a matching key, NaN where none has.
    """
    one_head = _require_head_weights(weights, head)  # (B, T, T)
    matches = matching_keys(ids)  # (B, T, T)
    if one_head.shape != matches.shape:
        raise ValueError(f"weights of shape {tuple(weights.shape)} must be (B, H, T, T) for ids of shape (B, T) = "
                         f"{tuple(ids.shape)}")
    on_match = (one_head * matches).sum(-1)  # (B, T)
    found = matches.any(-1)  # (B, T)
    count = found.sum(0)  # (T,)
    score = (on_match * found).sum(0) / count.clamp_min(1)
    return torch.where(count > 0, score, torch.nan)


@torch.no_grad()
def second_layer_weights(model: DecoderOnly, ids: Tensor, embedding_only: str = "") -> Tensor:
    """Layer 2's attention weights (B, H, T, T) for ids (B, T), with one input of it cut off.

    embedding_only = "key" computes layer 2's keys from the embedding (tokens + positions)
    alone, without layer 1's output, its queries from the full residual stream: the
    K-composition test (Elhage et al. 2021). "query" does the same to the queries; "" changes
    nothing. Needs a DecoderOnly with 2 layers or more and a residual stream. Layer 2 runs its own
    attention (heads, rotation, score bias, pre-LN norm) on the two inputs.
    """
    if not isinstance(model, DecoderOnly) or len(model.layers) < 2 or not model.config.residual:
        raise ValueError(f"model must be a DecoderOnly with 2 layers or more and a residual stream (second_layer_weights "
                         f"needs them), got {type(model).__name__}")
    if embedding_only not in ("", "key", "query"):
        raise ValueError(f"embedding_only must be '', 'key' or 'query', got {embedding_only!r}")
    T, first, second = require_ids(ids, model.config), model.layers[0], model.layers[1]
    mask, bias = causal_mask(T) if model.config.causal else None, model.positions.score_bias(T)  # (T, T)
    embedded = model.positions.add(model.tokens(ids).to(model.readout.weight.dtype))  # (B, T, D): layer 1 reads it
    residual = first.run(embedded, mask, bias=bias, rotate=model.positions.rotate)[0]  # (B, T, D)
    queries_from = embedded if embedding_only == "query" else residual
    keys_from = embedded if embedding_only == "key" else residual
    # Layer 2 as cross-attention from queries_from to keys_from: the weights need no values
    _, weights = second.attention.run(second.sublayer_input(second.attention_norm, queries_from),
                                      second.sublayer_input(second.attention_norm, keys_from), mask, bias,
                                      model.positions.rotate)
    return weights  # (B, H, T, T)


@torch.no_grad()
def run_ablated(model: DecoderOnly, ids: Tensor, layer: int | None = None, how: str = "zero"
                ) -> tuple[Tensor, list[Tensor]]:
    """The model's forward pass with one layer's attention output knocked out.

    ids (B, T) -> (logits (B, T, V), each layer's attention output (B, T, D), as it was before any
    knocking out). layer=None changes nothing. how="zero" adds nothing in its place (the residual
    stream passes on); "mean" adds its mean over the batch at each position (B-mean), which keeps
    what the head writes whatever the sequence (a bias, say) and removes what depends on it.
    An attention output times the read-out, out @ W_U^T, is that head's direct effect on the
    logits (for a model without a final norm).
    """
    require_instance("model", model, DecoderOnly)
    if not model.config.residual:
        raise ValueError("model must have a residual stream (run_ablated removes one layer's output from it), "
                         "got residual=False")
    if layer is not None:
        require_index("layer", layer, len(model.layers), "layers")
    require_choice("how", how, ("zero", "mean"))
    outs: list[Tensor] = []

    def run_then_record(attention: Attention, k: int):
        run = attention.run  # the layer's own, bound method

        def knocked(*args, **kwargs) -> tuple[Tensor, Tensor]:
            out, weights = run(*args, **kwargs)  # (B, T, D), (B, H, T, S)
            outs.append(out)
            if k == layer:
                out = torch.zeros_like(out) if how == "zero" else out.mean(0, keepdim=True).expand_as(out)
            return out, weights
        return knocked

    # The model's own forward pass, with each layer's attention call wrapped for this one run.
    for k, block in enumerate(model.layers):
        block.attention.run = run_then_record(block.attention, k)
    try:
        return model(ids), outs  # (B, T, V), one (B, T, D) per layer
    finally:
        for block in model.layers:
            del block.attention.run  # back to the class's method


def position_losses(logits: Tensor, targets: Tensor) -> Tensor:
    """Cross-entropy at each position, averaged over the batch: logits (B, T, V), targets (B, T)
    -> (T,), NaN where no sequence has a target. Late minus early positions of a repeated
    sequence is the in-context-learning score (Olsson et al. 2022)."""
    require_float("logits", logits, 3, 3)
    require_integer("targets", targets, 2, 2)
    if logits.shape[:2] != targets.shape:
        raise ValueError(f"logits {tuple(logits.shape)} must be (B, T, V) for targets {tuple(targets.shape)}")
    keep = targets != IGNORE  # (B, T)
    V = logits.shape[-1]
    scored = targets[keep]
    outside = scored[(scored < 0) | (scored >= V)]
    if len(outside):
        raise ValueError(f"targets must be token ids 0 .. V - 1 = {V - 1} or IGNORE={IGNORE}, got "
                         f"{sorted(set(outside.tolist()))[:5]}")
    loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), targets.clamp_min(0),
                                             reduction="none")  # (B, T)
    count = keep.sum(0)  # (T,)
    mean = (loss * keep).sum(0) / count.clamp_min(1)
    return torch.where(count > 0, mean, torch.nan)


class ProbeScores(NamedTuple):
    """One model on repeated random tokens (repeated_tokens_batch), as Olsson et al. 2022 test it."""
    prefix_matching: float  # the layer's mean weight, second copy's queries, on the token after their first
    first_loss: float  # mean loss (nats) predicting tokens 2 .. half of the first copy: unknowable
    second_loss: float  # mean loss predicting the second copy's tokens 2 .. half: each seen before
    accuracy: float  # share of those second-copy tokens that are the model's top answer

    @property
    def in_context(self) -> float:
        """The in-context-learning score: late tokens' loss minus early tokens' (nats; < 0 helps)."""
        return self.second_loss - self.first_loss


@torch.no_grad()
def repeated_tokens_probe(model: DecoderOnly, ids: Tensor, targets: Tensor, layer: int | None = None,
                          ablate: int | None = None, how: str = "zero") -> ProbeScores:
    """Measure `model` on a repeated_tokens_batch: ids, targets (B, 2 half + 1).

    Prefix matching is read from the attention of `layer` (None: the last), whose one head (the
    model must have n_heads=1) weighs, at each of the second copy's queries (positions
    half + 1 .. 2 half), the key holding the token that followed the query's token last time
    (induction_scores). The losses compare the same offsets into each copy: the first copy's
    positions 1 .. half - 1 against the second's half + 1 .. 2 half - 1, so the in-context
    score is late minus early as Olsson et al. 2022 define it.
    ablate: a layer whose attention output is knocked out for the run, `how` as run_ablated.
    """
    require_instance("model", model, DecoderOnly)
    require_integer("ids", ids, 2, 2)
    T = ids.shape[-1]
    half = (T - 1) // 2
    if T % 2 == 0 or half < 2:
        raise ValueError(f"ids must be repeated random tokens of odd length T = 2 half + 1 >= 5 (as "
                         f"repeated_tokens_batch makes them), got shape {tuple(ids.shape)}")
    if not torch.equal(ids[:, 1:half + 1], ids[:, half + 1:]):
        raise ValueError(f"ids must be repeated random tokens: [BOS], a block of {half} tokens, the same block "
                         "again; in the ids passed the two halves after position 0 differ")
    layer = len(model.layers) - 1 if layer is None else require_index("layer", layer, len(model.layers), "layers")
    if model.config.n_heads != 1:
        raise ValueError(f"model must have one head per layer (config.n_heads=1): repeated_tokens_probe reads the "
                         f"prefix matching of a layer's one head, got n_heads={model.config.n_heads}")
    if ablate is not None:
        require_index("ablate", ablate, len(model.layers), "layers")
    require_choice("how", how, ("zero", "mean"))
    # (B, T, V); either run keeps each layer's attention weights in model.layer_weights
    logits = model(ids) if ablate is None else run_ablated(model, ids, ablate, how)[0]
    losses = position_losses(logits, targets)  # (T,); checks targets
    early, late = slice(1, half), slice(half + 1, 2 * half)
    right = logits.argmax(-1)[:, late] == targets[:, late]  # (B, half - 1)
    # (half,): every second-copy query; head 0, the layer's only head
    matching = induction_scores(model.layer_weights[layer], ids, head=0)[half + 1:]
    return ProbeScores(float(matching.mean()), float(losses[early].mean()), float(losses[late].mean()),
                       float(right.double().mean()))


@torch.no_grad()
def logit_paths(model: DecoderOnly, ids: Tensor) -> dict[str, Tensor]:
    """ids (B, T) -> {path: (B, T, V)}: the logits of an attention-only DecoderOnly (residual, no
    norm, no FFN), split by the path they come along, as direct logit attribution does.

    With no norm the logits are linear in the residual stream, and the stream is the embedding
    plus what each layer's attention wrote: logits = (x + out_1 + ... + out_K) W_U^T + b_U.
    "direct": x W_U^T, the token and position rows straight to the read-out; "layer k": out_k W_U^T,
    what layer k's head wrote (its b_O included), with the attention weights the model computed;
    "bias": b_U at every position. The paths sum to model(ids) up to rounding.
    """
    require_instance("model", model, DecoderOnly)
    if not model.config.residual or model.norm is not None or any(b.ffn is not None for b in model.layers):
        raise ValueError("model must be attention-only with a residual stream and no norm (config residual=True, "
                         "norm='none', d_ff=0): only then are its logits a sum over paths")
    _, outputs = run_ablated(model, ids)  # each layer's attention output (B, T, D); checks ids
    embedded = model.positions.add(model.tokens(ids).to(model.readout.weight.dtype))  # (B, T, D)
    readout = model.readout.weight  # (V, D)
    paths = {"direct": embedded @ readout.T}
    for k, out in enumerate(outputs):
        paths[f"layer {k + 1}"] = out @ readout.T
    paths["bias"] = model.readout.bias.detach().expand_as(paths["direct"])  # a view would keep requires_grad
    return paths


def step_of_change(steps: list[int], values: list[float], share: float = 0.5) -> int:
    """The first of `steps` at which `values` have made `share` of their change from the first
    value to the last (a score measured at checkpoints of a training run; rising or falling).

    steps: increasing ints, one per value. share 0.5: the halfway step; 0.1 and 0.9 bound the
    window in which most of the change happens.
    """
    require_items("steps", steps)
    values = [require_number(f"values[{i}]", v) for i, v in enumerate(require_items("values", values))]
    if len(values) != len(steps) or len(steps) < 2:
        raise ValueError(f"steps and values must be two or more, one value per step, got {len(steps)} steps and "
                         f"{len(values)} values")
    if any(type(k) is not int for k in steps) or any(b <= a for a, b in zip(steps, steps[1:])):
        raise ValueError(f"steps must be increasing ints, got {list(steps)[:6]}")
    share = require_number("share", share, positive=True, at_most=1.0)  # a fraction of the change
    first, change = values[0], values[-1] - values[0]
    if change == 0:
        raise ValueError(f"values must change between the first step and the last: both are {first}")
    return next(k for k, v in zip(steps, values) if (v - first) / change >= share)


class LossBump(NamedTuple):
    """How far a training loss's running mean climbs back up (loss_bump)."""
    rise: float  # the largest rise of the running mean above its lowest earlier value (0: it never rises)
    step: int  # the step (counted from 1) whose running mean is that far above the earlier low
    noise: float  # the spread (std) of single steps' losses around the running mean that ends at them


def loss_bump(losses: Sequence[float], window: int = 10) -> LossBump:
    """Looks for the bump of Olsson et al. (2022), a rise of the training loss before the phase change.

    losses: one per step (train_tiny_model's list). The running mean over `window` steps ends at
    steps window .. len(losses); `rise` is its largest climb above its lowest value so far.
    """
    values = [require_number(f"losses[{i}]", v) for i, v in enumerate(require_items("losses", losses))]
    window = require_count("window", window, minimum=2)
    if len(values) <= window:
        raise ValueError(f"losses must hold more than window = {window} steps, got {len(values)}")
    steps = torch.tensor(values, dtype=torch.float64)
    mean = steps.unfold(0, window, 1).mean(-1)  # (n - window + 1,): ends at steps window .. n
    above = mean - torch.cummin(mean, 0).values
    at = int(above.argmax())
    return LossBump(float(above[at]), at + window, float((steps[window - 1:] - mean).std()))


class Composition(NamedTuple):
    """A composition score of a trained model beside the same score for random weights."""
    trained: float
    draws: Tensor  # (samples,): the score of each single draw of Gaussian weights

    @property
    def percentile(self) -> float:
        """The share of single random draws (0 .. 100%) that score below the trained model."""
        return float((self.draws < self.trained).double().mean())


COMPOSITIONS = ("K", "Q", "V")


def composition_scores(model: DecoderOnly, samples: int = 1000, seed: int = 0) -> dict[str, Composition]:
    """How much layer 2 of `model` reads what layer 1's head writes, from the weights alone: the
    K-, Q- and V-composition scores of Elhage et al. 2021, each beside `samples` single draws.

    The score of two matrices A, B is ||A B||_F / (||A||_F ||B||_F): about 1/sqrt(D) for random
    (D, D) matrices, larger when B writes into what A reads. In the course's row convention
    (x W^T for nn.Linear weights W) the score of query x against key y is x W_QK y^T with
    W_QK = W_Q^T W_K (D, D), and layer 1 writes x W_OV, W_OV = W_V^T W_O^T (D, D):
        K: layer 2's keys read layer 1's output,    W_QK(2) W_OV(1)^T
        Q: layer 2's queries read it,               W_OV(1) W_QK(2)
        V: layer 2's values read it,                W_OV(1) W_OV(2)
    Biases are left out. The baseline of each: the same score for single draws of Gaussian
    W_Q, W_K, W_V, W_O of the same shapes (seeded), one score per draw, so the trained score can
    be placed among them (Composition.percentile) rather than beside their mean.
    """
    if not isinstance(model, DecoderOnly) or len(model.layers) < 2:
        raise ValueError(f"model must be a DecoderOnly with 2 layers or more (composition_scores reads layers 1 and "
                         f"2), got {type(model).__name__}")
    require_count("samples", samples)
    require_count("seed", seed, minimum=0)
    first, second = model.layers[0].attention, model.layers[1].attention
    if first.n_heads != 1 or second.n_heads != 1:
        raise ValueError(f"composition_scores takes one-head layers (config.n_heads=1), got n_heads={first.n_heads}")

    def scores(q1: Tensor, k1: Tensor, v1: Tensor, o1: Tensor, q2: Tensor, k2: Tensor, v2: Tensor,
               o2: Tensor) -> dict[str, Tensor]:  # (..., D, D) each -> (...,) each
        ov1, qk2, ov2 = v1.mT @ o1.mT, q2.mT @ k2, v2.mT @ o2.mT
        pairs = {"K": (qk2, ov1.mT), "Q": (ov1, qk2), "V": (ov1, ov2)}
        return {kind: (a @ b).norm(dim=(-2, -1)) / (a.norm(dim=(-2, -1)) * b.norm(dim=(-2, -1)))
                for kind, (a, b) in pairs.items()}

    with torch.no_grad():
        weights = [w for layer in (first, second) for w in
                   (layer.query.weight, layer.key.weight, layer.value.weight, layer.out.weight)]
        gen = torch.Generator().manual_seed(seed)
        draws = [torch.randn(samples, *w.shape, generator=gen, dtype=w.dtype) for w in weights]
        trained, random = scores(*weights), scores(*draws)
    return {kind: Composition(float(trained[kind]), random[kind]) for kind in COMPOSITIONS}


def order_blind_loss(half: int) -> float:
    """The lowest mean loss (nats) on the second copy of repeated random tokens that a model can
    reach without knowing the first copy's order: a uniform guess among the block's tokens not
    yet repeated. Scored as repeated_tokens_probe scores it, at positions half + 1 .. 2 half - 1,
    where k = half - 1, ..., 1 tokens remain: mean of ln k = ln((half - 1)!) / (half - 1).
    A model without induction (no "what followed what") cannot go below it."""
    require_count("half", half, minimum=2)
    return math.lgamma(half) / (half - 1)


def ov_circuit(model: DecoderOnly, layer: int = 0) -> Tensor:
    """(V, V) map W_E W_V W_O W_U of one head: row a = the logits a token a at the source adds.

    Rows are vectors (x W): tokens.weight (V, D), value and out as x W^T, readout W_U^T.
    """
    require_instance("model", model, DecoderOnly)
    require_index("layer", layer, len(model.layers), "layers")
    head = model.layers[layer].attention
    with torch.no_grad():
        return (model.tokens.weight @ head.value.weight.T @ head.out.weight.T
                @ model.readout.weight.T)


def ov_copy_scores(ov: Tensor) -> tuple[float, float]:
    """How much a (V, V) OV map copies: (lookup, eigenvalue score).

    lookup: the share of rows whose largest entry is on the diagonal (token a raises logit a
    most). Eigenvalue score: sum_i lambda_i / sum_i |lambda_i| over the complex eigenvalues of
    the map, the copying score of Elhage et al. 2021 ("A Mathematical Framework for Transformer
    Circuits"): 1 when every eigenvalue is positive (a multiple of the identity), -1 when every
    one is negative, near 0 for a random map. The sum of the eigenvalues is the trace.
    """
    require_float("ov", ov, 2, 2)
    if ov.shape[0] != ov.shape[1]:
        raise ValueError(f"ov must be square (V, V), got shape {tuple(ov.shape)}")
    lookup = (ov.argmax(-1) == torch.arange(len(ov))).double().mean()
    eigenvalues = torch.linalg.eigvals(ov.double())  # (V,) complex
    score = eigenvalues.sum().real / eigenvalues.abs().sum()
    return float(lookup), float(score)


# ---------------------------------------------------------------- training

def _require_sizes(vocab_size: int, length: int, d_model: int, seed: int, batch: int) -> None:
    """The sizes a training run of this lesson takes, named as its caller spelt them."""
    require_count("vocab_size", vocab_size, minimum=2)
    require_count("length", length, minimum=2)
    require_count("d_model", d_model)
    require_count("seed", seed, minimum=0)
    require_count("batch", batch)


def train_copy_model(vocab_size: int = 16, length: int = 8, d_model: int = 32, offset: int = 1,
                     steps: int = 100, lr: float = 0.005, seed: int = 0, batch: int = 64
                     ) -> tuple[DecoderOnly, list[float]]:
    """A one-layer DecoderOnly (learned positions, float64) trained from scratch to copy the token
    at i + offset.

    lr 0.005: with the defaults every held-out token is copied from step 40 on, and stays so
    (checked to step 250 for 48 seeds). At lr 0.03 Adam's steps, sized by gradients that have
    become tiny, now and then kick the model out of the solution for a few steps: the held-out
    accuracy dips below 96% on some seeds, at steps that move with the CPU's rounding.
    """
    _require_sizes(vocab_size, length, d_model, seed, batch)
    _require_offset(offset, length)
    model = DecoderOnly(ModelConfig(vocab_size=vocab_size, max_len=length, d_model=d_model,
                                 causal=offset < 0,
                                 seed=seed)).to(torch.float64)
    losses = train_tiny_model(model, copy_batch(batch, length, vocab_size, offset), steps, lr, seed)
    return model, losses


def train_induction_model(vocab_size: int = 24, length: int = 24, d_model: int = 16,
                          steps: int = 300, lr: float = 0.01, seed: int = 0,
                          periods: tuple[int, ...] = (2, 3, 4, 5, 6, 7),
                          prefix: tuple[int, int] = (0, 16), batch: int = 64,
                          progress: bool | str = False, layers: int = 2, positions: str = "learned",
                          on_step: Callable[[DecoderOnly, int], None] | None = None
                          ) -> tuple[DecoderOnly, list[float]]:
    """An attention-only causal DecoderOnly (float64, two layers by default) trained on
    induction_batch.

    The filler prefix P is drawn up to the most that fits, so the first repeat lands at every
    position: with a fixed start (P = 0) a model can learn a shortcut at late positions that
    only works once the block has come back twice. progress=True shows a bar labelled
    "induction" with the step and the loss (a string names the task otherwise).
    layers=1 trains the control of Olsson et al. 2022: the same data, steps and width, one layer.
    positions="rope" turns queries and keys by position (lesson 04) in place of the learned table
    (for RoPE, d_model / heads must be even); any of lesson 04's schemes may be named.
    on_step(model, k) is called before step k's batch, after k updates (k = 0 .. steps - 1), to
    measure the model as it trains; it must not change the model (the caller's measurement
    runs under no_grad and draws from its own generator, so the run is the same with or
    without it). Measure the finished model after the call returns.
    """
    _require_sizes(vocab_size, length, d_model, seed, batch)
    progress = "induction" if progress is True else progress
    if not (progress is False or isinstance(progress, str)):
        raise TypeError(f"progress must be True, False or the task's name, got {progress!r}")
    require_count("layers", layers)
    require_choice("positions", positions, POSITION_KINDS)
    if on_step is not None and not callable(on_step):
        raise TypeError(f"on_step must be None or a function (model, step) -> None, got {type(on_step).__name__}")
    model = tiny_model(positions, vocab_size=vocab_size, max_len=length, d_model=d_model,
                       n_decoder_layers=layers, d_ff=0, seed=seed).to(torch.float64)
    make_batch = induction_batch(batch, length, vocab_size, periods, prefix)
    if on_step is not None:
        make_batch = _calling_before(make_batch, lambda k: on_step(model, k))
    losses = train_tiny_model(model, make_batch, steps, lr, seed, progress=progress)
    return model, losses


class TrackedRun(NamedTuple):
    """A training run of train_induction_model and its probe scores as it trained."""
    model: DecoderOnly
    losses: list[float]  # every step's training loss
    track: dict[int, ProbeScores]  # step k (after k updates) -> repeated_tokens_probe's scores


def train_induction_runs(models: Sequence[tuple[int, str]], probe: tuple[Tensor, Tensor], every: int = 10,
                         seed: int = 0, workers: int = 1, progress: bool | str = False, **settings
                         ) -> list[TrackedRun]:
    """One train_induction_model run per (layers, positions) in `models` (e.g. (2, "learned");
    `seed` and `settings`, the function's other arguments, shared), each measured as it trains:
    repeated_tokens_probe on `probe` (ids, targets (B, T) of a repeated_tokens_batch) every
    `every` steps and after the last.

    workers=2 trains two runs at once in forked processes (runs.run_each: the same numbers,
    one thread each). progress=True shows one bar, labelled "induction", with each run's step
    and loss.
    """
    models = [_require_variant(m) for m in require_items("models", models)]
    if not (isinstance(probe, tuple) and len(probe) == 2):
        raise TypeError(f"probe must be (ids, targets) of a repeated_tokens_batch, got {type(probe).__name__}")
    require_integer("probe ids", probe[0], 2, 2)
    require_same_shape("probe targets", require_integer("probe targets", probe[1], 2, 2), "probe ids", probe[0])
    require_count("every", every)
    require_count("seed", seed, minimum=0)
    label = "induction" if progress is True else progress
    names = [f"{n} layer{'s' * (n > 1)}, {kind}, seed {seed}" for n, kind in models]
    return run_each(functools.partial(_tracked_run, probe=probe, every=every, seed=seed, settings=settings), models,
                    workers, label, names)


def _require_variant(variant: object) -> tuple[int, str]:
    """One entry of train_induction_runs' models: (layers, positions)."""
    if not (isinstance(variant, tuple) and len(variant) == 2):
        raise TypeError(f"each of models must be a pair (layers, positions) such as (2, \"learned\"), got {variant!r}")
    return require_count("layers", variant[0]), require_choice("positions", variant[1], POSITION_KINDS)


def _tracked_run(variant: tuple[int, str], probe: tuple[Tensor, Tensor], every: int, seed: int,
                 settings: dict) -> TrackedRun:
    layers, positions = variant
    track: dict[int, ProbeScores] = {}

    def record(model: DecoderOnly, step: int) -> None:
        if step % every == 0:
            track[step] = repeated_tokens_probe(model, *probe)

    model, losses = train_induction_model(seed=seed, layers=layers, positions=positions, on_step=record, **settings)
    track[len(losses)] = repeated_tokens_probe(model, *probe)
    return TrackedRun(model, losses, track)


def _calling_before(make_batch: Batches, call: Callable[[int], None]) -> Batches:
    """make_batch that first calls call(k) on its k-th use (k = 0, 1, ...): the training loop
    draws one batch per step, so k is the number of updates made so far."""
    count = [0]

    def counted(generator: torch.Generator) -> tuple[Tensor, Tensor]:
        with torch.no_grad():
            call(count[0])
        count[0] += 1
        return make_batch(generator)

    return counted


# ------------------------------------------------- the seed's argument: copying without softmax

def unnormalised_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Attention with the softmax removed: output row t = sum_s (q_t . k_s) v_s. (..., T, d_v).

    The "no softmax" variant the seed argues about: the course's scores (lesson 01, scale 1),
    then their mix of the values, with no exp and no normalisation. (Not the linear attention
    of Katharopoulos et al. 2020, which replaces exp(q . k) by phi(q) . phi(k) for a non-negative
    feature map phi and still divides by the sum of the weights, phi(q_t) . sum_s phi(k_s).)
    """
    scores = attention_scores(q, k, scale=1.0)  # (..., T, S); checks q and k
    require_float("v", v, min_rank=2)
    require_same_dtype(k=k, v=v)
    if v.shape[-2] != k.shape[-2]:
        raise ValueError(f"v must have one row per key: k has shape {tuple(k.shape)}, v {tuple(v.shape)}")
    broadcast_shape("scores", tuple(scores.shape[:-2]), "v", tuple(v.shape[:-2]))  # their batches
    return scores @ v  # (..., T, d_v)


class UnnormalisedCopyFit(NamedTuple):
    """The best copier without softmax found: y(x) = sum_j (a . x_j) M x_j over [context..., x]."""
    error: float  # mean over the vocabulary of |y(x) - x|^2 (codes have |x| about 1)
    query: Tensor  # a = K^T q: (d,), the score of row x_j is a . x_j
    value: Tensor  # M = W_O W_V: (d, d)


def _keys(tokens: Tensor, context: Tensor) -> Tensor:
    """(n, m + 1, d): for each token x, the rows [context..., x] the query attends to."""
    n = tokens.shape[0]
    return torch.cat([context.expand(n, *context.shape), tokens[:, None]], dim=1)


def _require_copy_problem(tokens: Tensor, context: Tensor) -> None:
    require_float("tokens", tokens, 2, 2)
    require_float("context", context, 2, 2)
    if context.shape[-1] != tokens.shape[-1] or context.dtype != tokens.dtype:
        raise ValueError(f"context {tuple(context.shape)} {context.dtype} must have the width and dtype of tokens "
                         f"{tuple(tokens.shape)} {tokens.dtype}")


def unnormalised_copy_fit(tokens: Tensor, context: Tensor, steps: int = 150, lr: float = 0.1,
                          seed: int | None = None) -> UnnormalisedCopyFit:
    """Fit, by least squares, a query and a value map so that unnormalised attention (no
    softmax) copies every token.

    tokens: (n, d), the vocabulary; context: (m, d), rows that sit before the copied token (the
    seed's f1, f2; m may be 0). The output for token x is y(x) = sum_j (a . x_j) M x_j over the
    rows [context..., x] (the seed's equation 7); the loss is mean_x |y(x) - x|^2. y is linear
    in M, so for each a the best M is solved exactly (pseudo-inverse); a is trained by Adam from the
    scores that are as constant as possible (a with a . x = 1 in the least-squares sense), and
    the best a met on the way is kept. A local search: its error bounds the best one from above.
    seed=None starts from those constant scores; an int starts from a random a (seeded).
    """
    _require_copy_problem(tokens, context)
    keys = _keys(tokens, context)  # (n, m + 1, d)
    # pinv, not lstsq: torch's lstsq gave wrong answers at random for wide (n < d) systems here
    start = torch.linalg.pinv(tokens) @ torch.ones(len(tokens), dtype=tokens.dtype)  # (d,)
    if seed is not None:  # another start, as long as the constant-score one
        gen = torch.Generator().manual_seed(require_count("seed", seed, minimum=0))
        start = (torch.randn(start.shape, generator=gen, dtype=tokens.dtype)
                 * start.norm() / math.sqrt(len(start)))
    query = start.clone().requires_grad_(True)  # (d,)

    def best_value() -> tuple[Tensor, Tensor]:
        # (n, d): sum_j s_j x_j
        mixed = unnormalised_attention(query.expand(len(tokens), 1, -1), keys, keys)[:, 0]
        value_t = torch.linalg.pinv(mixed) @ tokens  # (d, d): least squares, y = mixed @ M^T
        return mixed, value_t

    # Adam blows rounding-noise gradients up to full steps: keep the best a seen
    best = [math.inf, start]

    def loss_of_step(_: int) -> Tensor:
        mixed, value_t = best_value()
        loss = ((mixed @ value_t - tokens) ** 2).sum(-1).mean()
        if loss.item() < best[0]:
            best[:] = [loss.item(), query.detach().clone()]
        return loss

    train(loss_of_step, [query], steps, lr)
    with torch.no_grad():
        query.copy_(best[1])
        mixed, value_t = best_value()
        error = float(((mixed @ value_t - tokens) ** 2).sum(-1).mean())
    return UnnormalisedCopyFit(error, query.detach(), value_t.T.contiguous())


def unnormalised_copy_fits(problems: Sequence[dict], workers: int = 1) -> list[UnnormalisedCopyFit]:
    """unnormalised_copy_fit(**problem) for each problem, a dict of its arguments (tokens,
    context, and steps, lr, seed as wanted), in order. workers > 1 fits that many at once in
    forked processes (runs.run_each: the same fits, in less wall time on that many cores).
    """
    problems = require_items("problems", problems)
    for k, problem in enumerate(problems):
        if not isinstance(problem, dict):
            raise TypeError(f"problems must hold dicts of unnormalised_copy_fit's arguments, got "
                            f"{type(problem).__name__} at position {k}")
        _require_copy_problem(problem.get("tokens"), problem.get("context"))
    return run_each(_fit_problem, problems, workers)


def _fit_problem(problem: dict) -> UnnormalisedCopyFit:
    return unnormalised_copy_fit(**problem)


def softmax_copy_error(tokens: Tensor, context: Tensor, query: Tensor) -> float:
    """The same copy problem with the softmax kept and V = I: mean_x |attention output - x|^2.

    tokens: (n, d), context: (m, d), query: (d,), the score of row x_j is query . x_j.
    """
    _require_copy_problem(tokens, context)
    require_float("query", query, 1, 1)
    if query.shape[0] != tokens.shape[-1] or query.dtype != tokens.dtype:
        raise ValueError(f"query {tuple(query.shape)} {query.dtype} must have the width and dtype of tokens "
                         f"{tuple(tokens.shape)} {tokens.dtype}")
    keys = _keys(tokens, context)  # (n, m + 1, d)
    out, _ = scaled_dot_product_attention(query.expand(len(tokens), 1, -1), keys, keys,
                                          scale=1.0)  # (n, 1, d)
    return float(((out[:, 0] - tokens) ** 2).sum(-1).mean())
