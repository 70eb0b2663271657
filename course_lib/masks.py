"""Lesson 02: masks, and the three places a Transformer uses attention.

Dimension names as in course_lib.attention: B batch, T query positions, S key/value
positions, D model width, d_k, d_v. In a translation model the source has n tokens and
the target m tokens; cross-attention's score matrix is (m, n).

Boolean masks: True = this query may attend to this key (torch.nn.functional's
scaled_dot_product_attention uses the same convention). torch.nn.MultiheadAttention's
boolean `attn_mask` and `key_padding_mask` use the opposite one, True = NOT allowed:
`to_torch_mha_mask` converts. Additive masks are float: 0 where allowed, -inf where not,
added to the scores before the softmax.

A query whose every key is masked gets zero weights and a zero output row, never NaN
(course_lib.attention.softmax returns zeros for an all -inf row).
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

import torch
from torch import Tensor, nn

from ._checks import broadcast_shape, require_float, require_positive, require_rank, require_tensor
from .attention import attention_scores, check_mask, check_qkv, scaled_dot_product_attention, softmax

# ------------------------------------------------------------------ building masks


def _require_length(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative int, got {value!r}")
    return value


def causal_mask(T: int, S: int | None = None) -> Tensor:
    """(T, S) boolean, True on and below the diagonal: query t may attend to keys 0..t.

    S defaults to T. For S != T the diagonal starts at the top-left corner, as torch's
    scaled_dot_product_attention(is_causal=True) does.
    """
    T = _require_length("T", T)
    S = T if S is None else _require_length("S", S)
    return torch.ones(T, S, dtype=torch.bool).tril()  # (T, S)


def padding_mask(lengths: Sequence[int] | Tensor, S: int, side: str = "right") -> Tensor:
    """(B, 1, S) boolean, True where key s of sequence b is a real token, False on padding.

    lengths: B real-token counts, each in 0..S. side="right" pads at the end (real tokens
    first), side="left" pads at the start. The middle axis of size 1 broadcasts over the T
    query positions, so the result combines with a (T, S) causal mask into (B, T, S).
    """
    S = _require_length("S", S)
    if isinstance(lengths, Tensor):
        if lengths.dim() != 1 or lengths.is_floating_point() or lengths.dtype == torch.bool:
            raise TypeError(f"lengths must be a 1-D integer tensor, got dtype {lengths.dtype} "
                            f"and shape {tuple(lengths.shape)}")
        lengths = lengths.tolist()
    lengths = [_require_length("each length", n) for n in lengths]
    if any(n > S for n in lengths):
        raise ValueError(f"lengths {lengths} must each be at most S={S}")
    if side not in ("right", "left"):
        raise ValueError(f"side must be 'right' or 'left', got {side!r}")
    positions = torch.arange(S)  # (S,)
    counts = torch.tensor(lengths, dtype=torch.long).reshape(-1, 1)  # (B, 1)
    real = positions < counts if side == "right" else positions >= S - counts  # (B, S)
    return real[:, None, :]  # (B, 1, S)


def combine_masks(*masks: Tensor) -> Tensor:
    """Logical AND of boolean masks, broadcast together: a key is allowed only if every mask allows it."""
    if not masks:
        raise ValueError("combine_masks needs at least one mask")
    combined = None
    for index, mask in enumerate(masks):
        require_tensor(f"masks[{index}]", mask)
        if mask.dtype != torch.bool:
            raise TypeError(f"masks[{index}] must be boolean (True = may attend), got dtype {mask.dtype}")
        if combined is not None:
            broadcast_shape(f"masks[0..{index - 1}] combined", tuple(combined.shape), f"masks[{index}]", tuple(mask.shape))
        combined = mask if combined is None else combined & mask
    return combined


def additive_mask(mask: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """Boolean mask -> float mask of the same shape: 0.0 where True, -inf where False.

    Adding it to the scores and taking the softmax gives exactly the weights of the boolean
    form; two additive masks combine by addition (-inf + anything finite = -inf).
    """
    require_tensor("mask", mask)
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be a boolean tensor (True = may attend), got dtype {mask.dtype}")
    return torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, float("-inf"))


def to_torch_mha_mask(mask: Tensor) -> Tensor:
    """Our convention (True = may attend) -> nn.MultiheadAttention's (True = may NOT attend).

    Use it for both `attn_mask` (T, S) and `key_padding_mask` (B, S); a padding_mask of shape
    (B, 1, S) becomes a key_padding_mask with `to_torch_mha_mask(mask[:, 0])`.
    """
    require_tensor("mask", mask)
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be a boolean tensor, got dtype {mask.dtype}")
    return ~mask


# ------------------------------------------------------------------ attention with an additive mask


def attention_with_bias(q: Tensor, k: Tensor, v: Tensor, bias: Tensor,
                        scale: float | None = None) -> tuple[Tensor, Tensor]:
    """softmax(q k^T * scale + bias) v, for a float (additive) mask or any score bias.

    q: (..., T, d_k), k: (..., S, d_k), v: (..., S, d_v), bias: float, broadcastable to (..., T, S).
    Returns (output (..., T, d_v), weights (..., T, S)); a row that is all -inf gives zeros.
    """
    check_qkv(q, k, v)
    scores = attention_scores(q, k, scale)  # (..., T, S)
    require_tensor("bias", bias)
    require_float("bias", bias)
    if broadcast_shape("bias", tuple(bias.shape), "scores", tuple(scores.shape)) != scores.shape:
        raise ValueError(f"bias of shape {tuple(bias.shape)} does not broadcast to the scores' shape "
                         f"{tuple(scores.shape)} (..., T, S)")
    weights = softmax(scores + bias.to(scores.dtype), dim=-1)  # (..., T, S)
    return weights @ v, weights  # (..., T, d_v)


# ------------------------------------------------------------------ one attention layer, three uses


class Attention(nn.Module):
    """One attention head with input and output projections (nanoGPT style, no dropout).

    Self-attention: layer(x) with x: (..., T, D). Cross-attention: layer(x, memory) with
    memory: (..., S, d_memory); queries come from x, keys and values from memory.
    Returns (output (..., T, D), weights (..., T, S)).
    """

    def __init__(self, d_model: int, d_k: int | None = None, d_v: int | None = None,
                 d_memory: int | None = None, bias: bool = False):
        super().__init__()
        d_k, d_v, d_memory = d_k or d_model, d_v or d_model, d_memory or d_model
        self.d_model, self.d_memory = d_model, d_memory
        self.query = nn.Linear(d_model, d_k, bias=bias)
        self.key = nn.Linear(d_memory, d_k, bias=bias)
        self.value = nn.Linear(d_memory, d_v, bias=bias)
        self.out = nn.Linear(d_v, d_model, bias=bias)

    def forward(self, x: Tensor, memory: Tensor | None = None, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        for name, t, width in (("x", x, self.d_model), ("memory", memory, self.d_memory)):
            if t is None:
                continue
            require_tensor(name, t)
            require_float(name, t)
            require_rank(name, t, 2)
            if t.shape[-1] != width:
                raise ValueError(f"{name} must have last dimension {width}, got shape {tuple(t.shape)}")
        source = x if memory is None else memory  # self-attention reads its own input
        q, k, v = self.query(x), self.key(source), self.value(source)  # (..., T, d_k), (..., S, d_k), (..., S, d_v)
        out, weights = scaled_dot_product_attention(q, k, v, mask)  # (..., T, d_v), (..., T, S)
        return self.out(out), weights  # (..., T, D)


def to_multihead_attention(layer: Attention) -> nn.MultiheadAttention:
    """An nn.MultiheadAttention (1 head, batch_first) holding `layer`'s weights, for comparison.

    Needs d_k = d_v = d_model = d_memory, torch's own layout for one head.
    """
    widths = (layer.query.out_features, layer.value.out_features, layer.d_memory)
    if any(w != layer.d_model for w in widths):
        raise ValueError(f"nn.MultiheadAttention needs d_k = d_v = d_memory = d_model = {layer.d_model}, "
                         f"got d_k, d_v, d_memory = {widths}")
    has_bias = layer.query.bias is not None
    dtype = layer.query.weight.dtype
    mha = nn.MultiheadAttention(layer.d_model, num_heads=1, bias=has_bias, batch_first=True, dtype=dtype)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([layer.query.weight, layer.key.weight, layer.value.weight]))
        mha.out_proj.weight.copy_(layer.out.weight)
        if has_bias:
            mha.in_proj_bias.copy_(torch.cat([layer.query.bias, layer.key.bias, layer.value.bias]))
            mha.out_proj.bias.copy_(layer.out.bias)
    return mha


def encoder_self_attention(layer: Attention, source: Tensor,
                           source_lengths: Sequence[int] | None = None) -> tuple[Tensor, Tensor]:
    """Source attends to itself; only padding keys are hidden.

    source: (B, n, D) -> output (B, n, D), weights (B, n, n).
    """
    require_rank("source", source, 3, 3)
    mask = None if source_lengths is None else padding_mask(source_lengths, source.shape[1])  # (B, 1, n)
    return layer(source, mask=mask)


def decoder_self_attention(layer: Attention, target: Tensor,
                           target_lengths: Sequence[int] | None = None) -> tuple[Tensor, Tensor]:
    """Target attends to its own past: causal mask AND padding mask.

    target: (B, m, D) -> output (B, m, D), weights (B, m, m), zero above the diagonal.
    """
    require_rank("target", target, 3, 3)
    m = target.shape[1]
    mask = causal_mask(m)  # (m, m)
    if target_lengths is not None:
        mask = combine_masks(mask, padding_mask(target_lengths, m))  # (B, m, m)
    return layer(target, mask=mask)


def cross_attention(layer: Attention, target: Tensor, source: Tensor,
                    source_lengths: Sequence[int] | None = None) -> tuple[Tensor, Tensor]:
    """Queries from the target, keys and values from the (encoded) source; no causal mask.

    target: (B, m, D), source: (B, n, d_memory) -> output (B, m, D), weights (B, m, n).
    """
    require_rank("target", target, 3, 3)
    require_rank("source", source, 3, 3)
    if target.shape[0] != source.shape[0]:
        raise ValueError(f"target {tuple(target.shape)} and source {tuple(source.shape)} need the same batch size B")
    mask = None if source_lengths is None else padding_mask(source_lengths, source.shape[1])  # (B, 1, n)
    return layer(target, source, mask=mask)


# ------------------------------------------------------------------ additive (Bahdanau) attention


class AdditiveScorer(nn.Module):
    """Bahdanau's score: a one-hidden-layer MLP of each (query, key) pair.

    score(q_t, k_s) = w . tanh(W_q q_t + W_k k_s). q: (..., T, d_q), k: (..., S, d_k) ->
    scores (..., T, S). d_q and d_k may differ, which a dot product does not allow.
    """

    def __init__(self, d_q: int, d_k: int, d_hidden: int):
        super().__init__()
        self.d_q, self.d_k, self.d_hidden = d_q, d_k, d_hidden
        self.query = nn.Linear(d_q, d_hidden, bias=False)
        self.key = nn.Linear(d_k, d_hidden, bias=True)
        self.w = nn.Linear(d_hidden, 1, bias=False)

    def forward(self, q: Tensor, k: Tensor) -> Tensor:
        for name, t, width in (("q", q, self.d_q), ("k", k, self.d_k)):
            require_tensor(name, t)
            require_float(name, t)
            require_rank(name, t, 2)
            if t.shape[-1] != width:
                raise ValueError(f"{name} must have last dimension {width}, got shape {tuple(t.shape)}")
        broadcast_shape("q's batch dimensions", tuple(q.shape[:-2]), "k's batch dimensions", tuple(k.shape[:-2]))
        # Project each query and key once, then pair them by broadcasting: (..., T, 1, h) + (..., 1, S, h).
        hidden = torch.tanh(self.query(q)[..., :, None, :] + self.key(k)[..., None, :, :])  # (..., T, S, h)
        return self.w(hidden).squeeze(-1)  # (..., T, S)


def additive_attention(scorer: AdditiveScorer, q: Tensor, k: Tensor, v: Tensor,
                       mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """softmax(scorer(q, k)) v, masked like dot-product attention.

    q: (..., T, d_q), k: (..., S, d_k), v: (..., S, d_v), mask: bool broadcastable to (..., T, S).
    Returns (output (..., T, d_v), weights (..., T, S)).
    """
    require_tensor("v", v)
    require_rank("v", v, 2)
    if v.shape[-2] != k.shape[-2]:
        raise ValueError(f"k and v must have the same number of positions S: k has shape {tuple(k.shape)}, "
                         f"v has shape {tuple(v.shape)}")
    scores = scorer(q, k)  # (..., T, S)
    if mask is not None:
        check_mask(mask, tuple(scores.shape))
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = softmax(scores, dim=-1)  # (..., T, S)
    return weights @ v, weights  # (..., T, d_v)


def operations_per_score(kind: str, d_k: int, d_hidden: int = 0) -> dict[str, int]:
    """Arithmetic spent on each (query, key) pair, the part of the cost that grows with T*S.

    "dot": d_k multiply-adds. "additive": d_hidden additions (W_q q_t + W_k k_s), d_hidden tanh
    calls and d_hidden multiply-adds (w . tanh(...)). The projections of queries and keys are
    done once per token, for both kinds, and are not counted here.
    """
    if kind == "dot":
        return {"multiply-adds": d_k, "additions": 0, "tanh": 0}
    if kind == "additive":
        return {"multiply-adds": d_hidden, "additions": d_hidden, "tanh": d_hidden}
    raise ValueError(f"kind must be 'dot' or 'additive', got {kind!r}")


def seconds_per_score(score_fn: Callable[[Tensor, Tensor], Tensor], q: Tensor, k: Tensor, repeats: int = 20) -> float:
    """Best-of-`repeats` wall-clock seconds of score_fn(q, k), divided by the number of scores.

    Timing varies from machine to machine and run to run: show it, never assert on it.
    """
    best = float("inf")
    with torch.no_grad():
        for _ in range(repeats):
            start = time.perf_counter()
            scores = score_fn(q, k)
            best = min(best, time.perf_counter() - start)
    return best / scores.numel()


# ------------------------------------------------------------------ is a layer causal?


def _require_sequence_fn_input(x: Tensor) -> None:
    require_tensor("x", x)
    require_float("x", x)
    require_rank("x", x, 2, 2)


def future_perturbation(fn: Callable[[Tensor], Tensor], x: Tensor, seed: int = 0) -> Tensor:
    """How much the past outputs move when the future inputs change.

    fn maps x: (T, D) to (T, d_out). Entry t of the result (shape (T,)) is the largest
    |change| of any output row 0..t when every input row after t is replaced by fresh
    random values. A causal fn gives exactly zeros.
    """
    _require_sequence_fn_input(x)
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
    _require_sequence_fn_input(x)
    jacobian = torch.autograd.functional.jacobian(fn, x)  # (T, d_out, T, D)
    return jacobian.pow(2).sum(dim=(1, 3)).sqrt()  # (T, T)


def prefix_outputs(fn: Callable[[Tensor], Tensor], x: Tensor) -> Tensor:
    """Row t = the last output row of fn run on the prefix x[:t+1] alone.

    x: (T, D) -> (T, d_out). With a causal fn this equals fn(x): one forward pass gives
    every prefix's answer, which is why a decoder trains on all positions in parallel.
    """
    _require_sequence_fn_input(x)
    return torch.stack([fn(x[: t + 1])[-1] for t in range(x.shape[0])])  # (T, d_out)


# ------------------------------------------------------------------ break it: a decoder without its mask


class TinyDecoder(nn.Module):
    """Token + position embedding, one attention layer with a residual, a linear head to the vocabulary."""

    def __init__(self, vocab: int, max_len: int, d_model: int, causal: bool):
        super().__init__()
        self.causal = causal
        self.tokens = nn.Embedding(vocab, d_model)
        self.positions = nn.Embedding(max_len, d_model)
        self.attention = Attention(d_model)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, ids: Tensor) -> Tensor:
        """ids: (B, T) integer tokens -> logits (B, T, vocab) for the token after each position."""
        T = ids.shape[-1]
        x = self.tokens(ids) + self.positions.weight[:T]  # (B, T, D)
        mask = causal_mask(T) if self.causal else None
        return self.head(x + self.attention(x, mask=mask)[0])  # (B, T, vocab)


def train_next_token(causal: bool, steps: int = 100, vocab: int = 8, T: int = 8, d_model: int = 32,
                     batch: int = 64, seed: int = 0) -> dict[str, float]:
    """Train a TinyDecoder to predict the next token of uniformly random sequences.

    No model can beat a loss of ln(vocab) on such data when it only sees the past. Returns
    the last training loss and, on fresh sequences, two accuracies: teacher forcing (the
    whole sequence in view at once, as in training) and generation (position t predicted
    from the prefix of t+1 tokens alone: the future is not written yet).
    """
    if steps < 1 or vocab < 2 or T < 2:
        raise ValueError(f"need steps >= 1, vocab >= 2 and T >= 2, got steps={steps}, vocab={vocab}, T={T}")
    gen = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng():  # seeded initial weights; the caller's generator is left alone
        torch.manual_seed(seed)
        model = TinyDecoder(vocab, T, d_model, causal)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-2)
    for _ in range(steps):
        ids = torch.randint(vocab, (batch, T + 1), generator=gen)  # inputs ids[:, :T], targets ids[:, 1:]
        logits = model(ids[:, :-1])  # (batch, T, vocab)
        loss = nn.functional.cross_entropy(logits.reshape(-1, vocab), ids[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        ids = torch.randint(vocab, (256, T + 1), generator=gen)
        seen_whole = (model(ids[:, :-1]).argmax(-1) == ids[:, 1:]).float().mean().item()
        generated = torch.stack([model(ids[:, : t + 1])[:, -1].argmax(-1) for t in range(T)], dim=1)  # (256, T)
        generation = (generated == ids[:, 1:]).float().mean().item()
    return {"train_loss": loss.item(), "teacher_forcing_accuracy": seen_whole, "generation_accuracy": generation}


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
    if word not in MEANING or language not in ("EN", "FR"):
        raise ValueError(f"unknown word {word!r} or language {language!r} (languages: 'EN', 'FR')")
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
    require_positive("sharpness", float(sharpness))
    layer = Attention(d_model)
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
    optimizer = torch.optim.Adam(scorer.parameters(), lr=lr)
    target_weights = target_weights.detach()
    live = target_weights.sum(-1) > 0  # (..., T): rows with at least one allowed key
    for _ in range(steps):
        scores = scorer(q, k)  # (..., T, S)
        if mask is not None:
            scores = scores.masked_fill(~mask, -1e9)  # finite, so log_softmax has no 0 * -inf terms
        loss = -(target_weights * torch.log_softmax(scores, -1)).sum(-1)[live].mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return loss.item()
