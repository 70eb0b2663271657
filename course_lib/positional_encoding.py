"""Lesson 04: telling attention where a token is. Sinusoidal, learned, rotary (RoPE) and ALiBi.

Attention on its own sees a set of tokens, not a sequence (lesson 03). A position encoding
puts the order back, in one of three places:
    added to the input      sinusoidal table (fixed) or a learned table (one row per position)
    rotating q and k        RoPE: the score q_m . k_n then depends on positions only through m - n
    added to the scores     ALiBi: a penalty growing linearly with the distance t - s

Layout of a width-D encoding: D/2 pairs of coordinates (2j, 2j+1), pair j turning at the
angular frequency c_j = base^(-2j/D) (base = 10000 in "Attention Is All You Need").
    sinusoidal:  PE[pos, 2j] = sin(c_j pos),  PE[pos, 2j+1] = cos(c_j pos)
    RoPE:        the pair (x_2j, x_2j+1) of a query or key at position m is rotated by c_j m
Shapes use the course's names: B batch, T positions, D model width, d head width.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .guards import require_float, require_number, require_rank, require_tensor
from .attention import attention_scores, softmax
from .masks import causal_mask

POSITION_KINDS = ("none", "learned", "sinusoidal", "rope", "alibi")


# ---------------------------------------------------------------- input checks

def _require_even_width(name: str, width: int) -> int:
    if isinstance(width, bool) or not isinstance(width, int):
        raise TypeError(f"{name} must be an int, got {type(width).__name__}")
    if width < 2 or width % 2:
        raise ValueError(f"{name} must be an even number >= 2 (the coordinates come in sin/cos pairs), "
                         f"got {name}={width}")
    return width


def _as_positions(positions: int | Tensor, name: str = "positions") -> Tensor:
    """An int n means positions 0..n-1; a tensor must hold non-negative integers (any shape)."""
    if isinstance(positions, bool):
        raise TypeError(f"{name} must be an int or an integer tensor, got bool")
    if isinstance(positions, int):
        if positions < 0:
            raise ValueError(f"the number of positions must be >= 0, got {name}={positions}")
        return torch.arange(positions)
    require_tensor(name, positions)
    if positions.is_floating_point() or positions.is_complex() or positions.dtype == torch.bool:
        raise TypeError(f"{name} must hold integers (token indices 0, 1, 2, ...), got dtype {positions.dtype}")
    if positions.numel() and int(positions.min()) < 0:
        raise ValueError(f"{name} must be >= 0 (position 0 is the first token), got a minimum of "
                         f"{int(positions.min())} in {name} of shape {tuple(positions.shape)}")
    return positions


def _require_count(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {name}={value!r}")
    return value


def _require_length(kind: str, length: int, max_len: int) -> None:
    if length > max_len:
        raise ValueError(
            f"sequence length T={length} is longer than max_len={max_len} of this {kind}: it has rows for "
            f"positions 0..{max_len - 1} only, so positions {max_len}..{length - 1} have no encoding")


# ---------------------------------------------------------------- sinusoidal encoding

def frequencies(d_model: int, base: float = 10000.0) -> Tensor:
    """Angular frequency of each sin/cos pair: c_j = base^(-2j/d_model), shape (d_model/2,), float64.

    c_0 = 1 radian per position (wavelength 2 pi); the last pair turns base^(-1 + 2/d_model)
    radians per position, a wavelength of almost 2 pi * base positions.
    """
    _require_even_width("d_model", d_model)
    require_number("base", base, positive=True)
    return float(base) ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)


def sinusoidal_encoding(positions: int | Tensor, d_model: int, base: float = 10000.0,
                        dtype: torch.dtype = torch.float32) -> Tensor:
    """PE[pos, 2j] = sin(c_j pos), PE[pos, 2j+1] = cos(c_j pos).

    positions: an int T (positions 0..T-1) or an integer tensor of shape (...);
    returns (T, d_model) or (..., d_model). The angles are computed in float64 and cast at the end,
    so large positions keep their accuracy in float32.
    """
    positions = _as_positions(positions)
    angles = positions.to(torch.float64).unsqueeze(-1) * frequencies(d_model, base)  # (..., D/2)
    # stack then flatten interleaves: sin, cos, sin, cos, ...
    return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(-2).to(dtype)  # (..., D)


def sinusoidal_dot(offsets: int | Tensor, d_model: int, base: float = 10000.0) -> Tensor:
    """PE_t . PE_{t+k} = sum_j cos(c_j k): the same for every t. offsets k: int or (...) -> (...), float64.

    k may be negative here (it is an offset, not a position); cos is even, so k and -k agree.
    """
    k = torch.as_tensor(offsets)
    if k.is_floating_point() or k.is_complex() or k.dtype == torch.bool:
        raise TypeError(f"offsets must be integers, got dtype {k.dtype}")
    return torch.cos(k.to(torch.float64).unsqueeze(-1) * frequencies(d_model, base)).sum(-1)


def block_rotation(angles: Tensor, scales: Tensor | None = None) -> Tensor:
    """Block-diagonal matrix with block j = scales_j * [[cos a_j, -sin a_j], [sin a_j, cos a_j]].

    angles: (D/2,) -> (D, D); each block turns the pair (x_2j, x_2j+1) counter-clockwise by a_j
    (and stretches it by scales_j, default 1). Its dtype is that of `angles`.
    """
    require_tensor("angles", angles)
    require_float("angles", angles)
    require_rank("angles", angles, 1, 1)
    scales = torch.ones_like(angles) if scales is None else scales.to(angles.dtype)
    if scales.shape != angles.shape:
        raise ValueError(f"scales of shape {tuple(scales.shape)} must match angles of shape {tuple(angles.shape)}")
    cos, sin = angles.cos() * scales, angles.sin() * scales
    blocks = torch.stack([torch.stack([cos, -sin], -1), torch.stack([sin, cos], -1)], -2)  # (D/2, 2, 2)
    return torch.block_diag(*blocks)  # (D, D)


def shift_matrix(k: int, d_model: int, base: float = 10000.0) -> Tensor:
    """M_k with PE(pos + k) = M_k @ PE(pos) for every pos; (D, D), float64, independent of pos.

    It is sin(a + b) = sin a cos b + cos a sin b and cos(a + b) = cos a cos b - sin a sin b
    written as a matrix: on the pair (sin, cos) that is a clockwise turn by c_j k.
    """
    if isinstance(k, bool) or not isinstance(k, int):
        raise TypeError(f"k must be an int offset, got {type(k).__name__}")
    return block_rotation(-k * frequencies(d_model, base))


def _check_rows(x: Tensor, d_model: int, max_len: int, table: str) -> None:
    """Raise unless x is (..., T, d_model) with T <= max_len, the rows a position table has."""
    require_tensor("x", x)
    require_rank("x", x, 2)
    if x.shape[-1] != d_model:
        raise ValueError(f"x of shape {tuple(x.shape)} must end in d_model={d_model}")
    _require_length(table, x.shape[-2], max_len)


class SinusoidalPositionalEncoding(nn.Module):
    """x + PE[:T] with a fixed (max_len, D) table; x: (..., T, D) -> (..., T, D).

    Nothing is learned; longer inputs are refused only because the table was cut at max_len.
    """

    def __init__(self, d_model: int, max_len: int, base: float = 10000.0):
        super().__init__()
        self.d_model, self.max_len = _require_even_width("d_model", d_model), _require_count("max_len", max_len)
        self.register_buffer("table", sinusoidal_encoding(max_len, d_model, base), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        _check_rows(x, self.d_model, self.max_len, "sinusoidal table")
        return x + self.table[: x.shape[-2]].to(x.dtype)  # (..., T, D)


class LearnedPositionalEmbedding(nn.Module):
    """x + P[:T] with a learned (max_len, D) table (GPT-2 style); x: (..., T, D) -> (..., T, D).

    Row p is trained only by sequences that reach position p; there is no row past max_len.
    """

    def __init__(self, max_len: int, d_model: int):
        super().__init__()
        self.max_len, self.d_model = _require_count("max_len", max_len), _require_count("d_model", d_model)
        self.table = nn.Embedding(max_len, d_model)

    def forward(self, x: Tensor) -> Tensor:
        _check_rows(x, self.d_model, self.max_len, "learned position table")
        return x + self.table.weight[: x.shape[-2]]  # (..., T, D)


# ---------------------------------------------------------------- rotary encoding (RoPE)

def apply_rope(x: Tensor, positions: int | Tensor | None = None, base: float = 10000.0) -> Tensor:
    """Rotate each pair (x_2j, x_2j+1) of the row at position m by the angle c_j m.

    x: (..., T, d) with d even; positions: None (0..T-1) or an integer tensor (T,) -> (..., T, d).
    Row m comes out as block_rotation(m * c) @ x_m, so q_m . k_n = q^T R((n - m) c) k.
    """
    require_tensor("x", x)
    require_float("x", x)
    require_rank("x", x, 2)
    d = _require_even_width("the last dimension d of x", x.shape[-1])
    positions = _as_positions(x.shape[-2] if positions is None else positions)
    if positions.shape != (x.shape[-2],):
        raise ValueError(f"positions of shape {tuple(positions.shape)} must have one entry per row of x: "
                         f"x has shape {tuple(x.shape)}, so ({x.shape[-2]},)")
    angles = (positions.to(torch.float64).unsqueeze(-1) * frequencies(d, base)).to(x.dtype)  # (T, d/2)
    cos, sin = angles.cos(), angles.sin()
    even, odd = x[..., 0::2], x[..., 1::2]  # (..., T, d/2) each
    rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)  # (..., T, d/2, 2)
    return rotated.flatten(-2)  # (..., T, d)


# ---------------------------------------------------------------- ALiBi

def alibi_slopes(n_heads: int) -> Tensor:
    """Head h (1-based) gets slope 2^(-8h/H): for H = 8 that is 1/2, 1/4, ..., 1/256. (H,), float32.

    This is the geometric sequence of the ALiBi paper for H a power of two.
    """
    _require_count("n_heads", n_heads)
    return 2.0 ** (-8.0 * torch.arange(1, n_heads + 1, dtype=torch.float32) / n_heads)


def alibi_bias(length: int, slopes: Tensor) -> Tensor:
    """Score bias -slope_h * (t - s) for keys s at or before query t, 0 where s > t (masked anyway).

    slopes: (H,) -> (H, T, T). Added to the scores, it depends only on the distance t - s.
    """
    require_tensor("slopes", slopes)
    require_rank("slopes", slopes, 1, 1)
    t = _as_positions(length, "length")
    distance = (t.unsqueeze(-1) - t).clamp_min(0).to(slopes.dtype)  # (T, T): t - s, 0 above the diagonal
    return 0.0 - slopes.view(-1, 1, 1) * distance  # (H, T, T); 0.0 - x turns -0.0 into 0.0


# ---------------------------------------------------------------- a tiny model to train

class TinyPositionModel(nn.Module):
    """Token embedding, one causal attention head, a linear read-out; `position` picks the encoding.

    tokens: (B, T) integer ids -> logits (B, T, vocab_size).
    position: "none", "learned" (table of max_len rows), "sinusoidal" (added to the input),
    "rope" (rotates q and k) or "alibi" (a distance penalty of slope `alibi_slope` on the scores).
    """

    def __init__(self, vocab_size: int, d_model: int, position: str, max_len: int = 64,
                 base: float = 10000.0, alibi_slope: float = 1.0):
        super().__init__()
        if position not in POSITION_KINDS:
            raise ValueError(f"position must be one of {POSITION_KINDS}, got {position!r}")
        _require_count("vocab_size", vocab_size)
        _require_count("d_model", d_model)
        if position in ("sinusoidal", "rope"):
            _require_even_width("d_model", d_model)
        self.position, self.base, self.max_len, self.alibi_slope = position, base, max_len, alibi_slope
        self.tokens = nn.Embedding(vocab_size, d_model)
        if position == "learned":
            self.learned = LearnedPositionalEmbedding(max_len, d_model)
        if position == "sinusoidal":
            self.sinusoidal = SinusoidalPositionalEncoding(d_model, max_len, base)
        self.q, self.k, self.v = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.readout = nn.Linear(d_model, vocab_size)

    def forward(self, tokens: Tensor) -> Tensor:
        require_tensor("tokens", tokens)
        require_rank("tokens", tokens, 2, 2)
        if tokens.is_floating_point() or tokens.dtype == torch.bool:
            raise TypeError(f"tokens must be integer ids, got dtype {tokens.dtype}")
        vocab_size = self.tokens.num_embeddings
        if tokens.numel() and not (0 <= int(tokens.min()) and int(tokens.max()) < vocab_size):
            raise ValueError(f"tokens must be ids in 0..{vocab_size - 1}, got values from {int(tokens.min())} "
                             f"to {int(tokens.max())} in tokens of shape {tuple(tokens.shape)}")
        length = tokens.shape[1]
        x = self.tokens(tokens)  # (B, T, D)
        if self.position == "learned":
            x = self.learned(x)
        elif self.position == "sinusoidal":
            x = self.sinusoidal(x)
        q, k, v = self.q(x), self.k(x), self.v(x)  # (B, T, D) each
        if self.position == "rope":
            q, k = apply_rope(q, base=self.base), apply_rope(k, base=self.base)
        scores = attention_scores(q, k)  # (B, T, T)
        if self.position == "alibi":
            scores = scores + alibi_bias(length, torch.tensor([self.alibi_slope]))[0]
        weights = softmax(scores.masked_fill(~causal_mask(length), float("-inf")))  # (B, T, T)
        return self.readout(weights @ v)  # (B, T, vocab_size)


def random_tokens(n_sequences: int, length: int, vocab_size: int, generator: torch.Generator) -> Tensor:
    """(n_sequences, length) uniform random token ids."""
    return torch.randint(vocab_size, (n_sequences, length), generator=generator)


def train_previous_token(position: str, train_length: int = 8, max_len: int = 64, vocab_size: int = 16,
                         d_model: int = 32, steps: int = 200, lr: float = 0.02, seed: int = 0,
                         **model_kwargs) -> tuple[TinyPositionModel, float]:
    """Train a TinyPositionModel to output, at each position t >= 1, the token at t - 1.

    Sequences have exactly `train_length` tokens, so a learned table's rows past train_length
    never get a gradient. Returns (model, final training loss). About 0.2 s on one CPU thread,
    plus about 1 s of warm-up for the first model of a session.
    """
    if not 2 <= train_length <= max_len:
        raise ValueError(f"need 2 <= train_length <= max_len, got train_length={train_length}, max_len={max_len}")
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    model = TinyPositionModel(vocab_size, d_model, position, max_len=max_len, **model_kwargs)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    for _ in range(steps):
        tokens = random_tokens(64, train_length, vocab_size, generator)
        logits = model(tokens)[:, 1:]  # (B, T-1, V): position t predicts token t-1
        loss = F.cross_entropy(logits.reshape(-1, vocab_size), tokens[:, :-1].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model, loss.item()


@torch.no_grad()
def previous_token_accuracy(model: TinyPositionModel, length: int, n_sequences: int = 256, seed: int = 1) -> Tensor:
    """Share of held-out sequences whose token t-1 is predicted correctly at position t.

    Returns (length - 1,): entry i is the accuracy at position t = i + 1. Chance is 1 / vocab_size.
    """
    vocab_size = model.tokens.num_embeddings
    tokens = random_tokens(n_sequences, length, vocab_size, torch.Generator().manual_seed(seed))
    predicted = model(tokens).argmax(-1)  # (B, T)
    return (predicted[:, 1:] == tokens[:, :-1]).float().mean(0)  # (T-1,)


def wavelength(d_model: int, j: int, base: float = 10000.0) -> float:
    """Positions per full turn of pair j: 2 pi / c_j."""
    if not 0 <= j < d_model // 2:
        raise ValueError(f"pair index j={j} is out of range: d_model={d_model} has pairs 0..{d_model // 2 - 1}")
    return 2 * math.pi / float(frequencies(d_model, base)[j])
