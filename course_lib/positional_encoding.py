"""Lesson 04: telling attention where a token is. Sinusoidal, learned, rotary (RoPE) and ALiBi.

Attention on its own sees a set of tokens, not a sequence (lesson 03). A position encoding
puts the order back, through one of the three hooks of course_lib.model's `Positions`:
    add(x)          added to the input   sinusoidal table (fixed) or learned table (one row per position)
    rotate(q, k)    turns q and k        RoPE: the score q_m . k_n then depends on positions only via m - n
    score_bias(T)   added to the scores  ALiBi: a penalty growing linearly with the distance t - s
A layer calls rotate with each head's queries and keys, (..., H, T, d_head), and adds the score
bias to its scores (..., H, T, S) by torch's broadcasting: a (T, S) bias reaches every head,
an (H, T, S) one (alibi_bias with one slope per head) gives each head its own.

Layout of a width-D encoding: D/2 pairs of coordinates (2j, 2j+1), pair j turning at the
angular frequency c_j = base^(-2j/D) (base = 10000 in "Attention Is All You Need").
    sinusoidal:  PE[pos, 2j] = sin(c_j pos),  PE[pos, 2j+1] = cos(c_j pos)
    RoPE:        the pair (x_2j, x_2j+1) of a query or key at position m is turned by c_j m
`rotate_pairs` is the one function that turns pairs; RoPE, the rotation matrices and the
widgets are built from it. Rows are vectors, as in lesson 01: q = x W_Q, score = q k^T.
Shapes use the course's names (course_lib/__init__.py): B, T, S, D, d_k, H, V.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from typing import Callable, NamedTuple

import torch
from torch import Tensor, nn

from .guards import (require_bool, require_broadcasts_to, require_choice, require_count, require_float,
                     require_float_dtype, require_index, require_instance, require_integer, require_items,
                     require_length_fits, require_number, require_same_shape, require_width)
from .model import DecoderOnly, LearnedPositions, ModelConfig, Positions
from .runs import run_each
from .training import IGNORE, train_tiny_model

POSITION_KINDS = ("none", "learned", "sinusoidal", "rope", "alibi")
LearnedPositionalEmbedding = LearnedPositions  # the learned table is lesson 02's, under its usual name


# ---------------------------------------------------------------- input checks

def _require_even_width(name: str, width: object) -> int:
    """A width made of sin/cos pairs: a positive even int."""
    require_count(name, width)
    if width % 2:
        raise ValueError(f"{name} must be an even number >= 2 (sin/cos pairs), got {name}={width}")
    return width


def _require_positions(positions: int | Tensor, name: str = "positions") -> Tensor:
    """An int n means positions 0..n-1; a tensor must hold non-negative integers (any shape)."""
    if isinstance(positions, Tensor):
        require_integer(name, positions)
        if positions.numel() and int(positions.min()) < 0:
            raise ValueError(f"{name} must be >= 0 (0 is the first token), got a minimum of {int(positions.min())}")
        return positions
    if isinstance(positions, bool) or not isinstance(positions, int):
        raise TypeError(f"{name} must be an int (how many) or an integer tensor, got {type(positions).__name__}")
    return torch.arange(require_count(name, positions, minimum=0))


# ---------------------------------------------------------------- the one rotation of pairs

def rotate_pairs(x: Tensor, angles: Tensor) -> Tensor:
    """Turn each pair (x_2j, x_2j+1) counter-clockwise by angles[..., j].

    x: (..., d) with d even; angles: broadcastable to (..., d/2), any float dtype. cos and sin
    are taken in float64 and cast to x's dtype at the end, so a float32 x keeps its accuracy
    at large angles (position 2000 of RoPE is 2000 radians). Returns (..., d), x's dtype.
    """
    require_float("x", x, min_rank=1)
    _require_even_width("the last dimension d of x", x.shape[-1])
    require_float("angles", angles)
    require_broadcasts_to("angles", angles, tuple(x.shape[:-1]) + (x.shape[-1] // 2,), "pairs of x")
    angles = angles.to(torch.float64)
    return _turn(x, angles.cos().to(x.dtype), angles.sin().to(x.dtype))


def _turn(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """rotate_pairs with cos and sin of the angles given: (..., d) and (..., d/2) -> (..., d)."""
    even, odd = x[..., 0::2], x[..., 1::2]  # (..., d/2) each
    turned = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)  # (..., d/2, 2)
    return turned.flatten(-2)  # (..., d)


def block_rotation(angles: Tensor, scales: Tensor | None = None) -> Tensor:
    """The matrix of rotate_pairs: block j = scales_j * [[cos a_j, -sin a_j], [sin a_j, cos a_j]].

    angles: (D/2,) -> (D, D), angles' dtype; R @ x turns pair j of a column x by a_j (and
    stretches it by scales_j, default 1); for rows, x R^T = rotate_pairs(x, angles).
    For looking at the map as a matrix; computing with it goes through rotate_pairs.
    """
    require_float("angles", angles, 1, 1)
    if scales is not None:  # one scale per pair
        require_same_shape("scales", require_float("scales", scales, 1, 1), "angles", angles)
    identity = torch.eye(2 * angles.shape[0], dtype=angles.dtype)
    matrix = rotate_pairs(identity, angles).T  # (D, D): column i is the turned basis vector e_i
    if scales is not None:
        matrix = matrix * scales.to(angles.dtype).repeat_interleave(2)[:, None]  # row 2j, 2j+1 scaled by s_j
    return matrix


# ---------------------------------------------------------------- sinusoidal encoding

def frequencies(d_model: int, base: float = 10000.0) -> Tensor:
    """Angular frequency of each sin/cos pair: c_j = base^(-2j/d_model), shape (d_model/2,), float64.

    c_0 = 1 radian per position (wavelength 2 pi); the last pair j = d/2 - 1 turns
    base^(-1 + 2/d_model) radians per position: a wavelength of 2 pi * base^(1 - 2/d_model).
    """
    _require_even_width("d_model", d_model)
    base = require_number("base", base, positive=True)
    return base ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)


def wavelength(d_model: int, j: int, base: float = 10000.0) -> float:
    """Positions per full turn of pair j: 2 pi / c_j = 2 pi * base^(2j/d_model)."""
    freqs = frequencies(d_model, base)
    require_index("j", j, len(freqs), f"sin/cos pairs of d_model={d_model}")
    return 2 * math.pi / float(freqs[j])


def sinusoidal_encoding(positions: int | Tensor, d_model: int, base: float = 10000.0,
                        dtype: torch.dtype = torch.float32) -> Tensor:
    """PE[pos, 2j] = sin(c_j pos), PE[pos, 2j+1] = cos(c_j pos).

    positions: an int T (positions 0..T-1) or an integer tensor of shape (...);
    returns (T, D) or (..., D). The angles are computed in float64 and cast at the end,
    so large positions keep their accuracy in float32.
    """
    positions = _require_positions(positions)
    require_float_dtype("dtype", dtype)
    angles = positions.to(torch.float64).unsqueeze(-1) * frequencies(d_model, base)  # (..., D/2)
    # stack then flatten interleaves: sin, cos, sin, cos, ...
    return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(-2).to(dtype)  # (..., D)


def sinusoidal_dot(offsets: int | Tensor, d_model: int, base: float = 10000.0) -> Tensor:
    """PE_t . PE_{t+k} = sum_j cos(c_j k): the same for every t. offsets k: int or (...) -> (...), float64.

    k may be negative here (it is an offset, not a position); cos is even, so k and -k agree.
    """
    if isinstance(offsets, bool) or not isinstance(offsets, (int, Tensor)):
        raise TypeError(f"offsets must be an int or an integer tensor, got {type(offsets).__name__} {offsets!r}")
    k = require_integer("offsets", torch.as_tensor(offsets))
    return torch.cos(k.to(torch.float64).unsqueeze(-1) * frequencies(d_model, base)).sum(-1)  # (...)


def shift_matrix(k: int, d_model: int, base: float = 10000.0) -> Tensor:
    """M_k with PE(pos + k) = M_k @ PE(pos) for every pos (columns); (D, D), float64, independent of pos.

    It is sin(a + b) = sin a cos b + cos a sin b and cos(a + b) = cos a cos b - sin a sin b
    written as a matrix: on the pair (sin, cos) that is a clockwise turn by c_j k.
    For a table whose rows are positions: table[pos] @ M_k^T = table[pos + k].
    """
    if isinstance(k, bool) or not isinstance(k, int):
        raise TypeError(f"k must be an int offset, got {type(k).__name__} {k!r}")
    return block_rotation(-k * frequencies(d_model, base))


class SinusoidalPositionalEncoding(Positions):
    """x + PE[:T] with a fixed (max_len, D) table; x: (..., T, D) -> (..., T, D).

    Arguments in the order of nn.Embedding and LearnedPositions: (max_len, d_model).
    Nothing is learned; longer inputs are refused only because the table was cut at max_len.
    """

    def __init__(self, max_len: int, d_model: int, base: float = 10000.0):
        super().__init__()
        self.max_len = require_count("max_len", max_len)
        self.d_model = _require_even_width("d_model", d_model)
        # kept in float64 and cast per call, so a float64 model gets float64 positions
        table = sinusoidal_encoding(max_len, d_model, base, dtype=torch.float64)  # (max_len, D)
        self.register_buffer("table", table, persistent=False)

    def forward(self, x: Tensor, start: int = 0) -> Tensor:
        """add(x, start), checked: x (..., T, D) must fit the table's width and rows start .. start + T - 1."""
        require_float("x", x, min_rank=2)
        require_width("x", x, self.d_model)
        require_length_fits(require_count("start", start, minimum=0) + x.shape[-2], self.max_len, "sinusoidal table",
                            "start + the length of x")
        return self.add(x, start)

    def add(self, x: Tensor, start: int = 0) -> Tensor:
        return x + self.table[start:start + x.shape[-2]].to(x.dtype)  # (..., T, D)


# ---------------------------------------------------------------- rotary encoding (RoPE)

def apply_rope(x: Tensor, positions: int | Tensor | None = None, base: float = 10000.0) -> Tensor:
    """Turn each pair (x_2j, x_2j+1) of the row at position m by the angle c_j m.

    x: (..., T, d) with d even; positions: None (0..T-1) or an integer tensor (T,) -> (..., T, d).
    Row m comes out as x_m R(m c)^T, so q_m . k_n = q R((n - m) c) k^T.
    """
    require_float("x", x, min_rank=2)
    d = _require_even_width("the last dimension d of x", x.shape[-1])
    positions = _require_positions(x.shape[-2] if positions is None else positions)
    if positions.shape != (x.shape[-2],):
        raise ValueError(f"positions of shape {tuple(positions.shape)} must have one entry per row of x: x has shape "
                         f"{tuple(x.shape)}")
    angles = positions.to(torch.float64).unsqueeze(-1) * frequencies(d, base)  # (T, d/2), float64
    return rotate_pairs(x, angles)  # (..., T, d)


class RotaryPositions(Positions):
    """RoPE as a position scheme: rotate(q, k) turns both by their positions 0..T-1. A layer passes
    each head's rows, (..., H, T, d_head): every head's pairs turn by the same angles."""

    def __init__(self, base: float = 10000.0):
        super().__init__()
        self.base = require_number("base", base, positive=True)
        self._turns: dict[tuple[int, int, torch.dtype], tuple[Tensor, Tensor]] = {}

    def rotate(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        return self._turn_rows("q", q), self._turn_rows("k", k)  # (..., H, T, d_head) each

    def _turn_rows(self, name: str, x: Tensor) -> Tensor:
        """apply_rope(x, base=self.base), x: (..., T, d) -> (..., T, d), the same digits; cos and
        sin are kept per (T, d, dtype), as training asks for the same ones at every step."""
        key = tuple(x.shape[-2:]) + (x.dtype,) if isinstance(x, Tensor) and x.dim() >= 2 else None
        if key not in self._turns:  # checked once per (T, d, dtype): a training loop's later steps trust it
            require_float(name, x, min_rank=2)
            T, d = x.shape[-2], _require_even_width(f"the last dimension d of {name}", x.shape[-1])
            angles = torch.arange(T, dtype=torch.float64).unsqueeze(-1) * frequencies(d, self.base)
            self._turns[key] = angles.cos().to(x.dtype), angles.sin().to(x.dtype)  # (T, d/2) each
        return _turn(x, *self._turns[key])


# ---------------------------------------------------------------- ALiBi

def alibi_slopes(n_heads: int) -> Tensor:
    """Head h (1-based) gets slope 2^(-8h/H): for H = 8 that is 1/2, 1/4, ..., 1/256. (H,), float32.

    This is the geometric sequence of the ALiBi paper for H a power of two.
    """
    require_count("n_heads", n_heads)
    return 2.0 ** (-8.0 * torch.arange(1, n_heads + 1, dtype=torch.float32) / n_heads)


def alibi_bias(length: int, slopes: Tensor) -> Tensor:
    """Score bias -slope_h * (t - s) for keys s at or before query t, 0 where s > t (masked anyway).

    slopes: (H,) -> (H, T, T). Added to the scores, it depends only on the distance t - s: it
    favours the nearest keys, most of all the query's own position (distance 0). As a layer's bias
    it lines up with the scores' last three axes (H, T, S): head h gets slope h, whatever B is.
    """
    require_float("slopes", slopes, 1, 1)
    return _alibi(require_count("length", length), slopes)


def _alibi(length: int, slopes: Tensor) -> Tensor:
    """alibi_bias on checked input (a model's forward calls it at every step)."""
    t = torch.arange(length)
    distance = (t.unsqueeze(-1) - t).clamp_min(0).to(slopes.dtype)  # (T, T): t - s, 0 above the diagonal
    return 0.0 - slopes.view(-1, 1, 1) * distance  # (H, T, T); 0.0 - x turns -0.0 into 0.0


class ALiBiPositions(Positions):
    """ALiBi with one slope: score_bias(T) = -slope * (t - s), (T, T), so every head of a layer gets
    it (the lesson's tiny model has one head). slope: > 0.

    learned=True makes the slope a trained parameter (kept positive as exp of its log).
    """

    def __init__(self, slope: float = 0.5, learned: bool = False):
        super().__init__()
        log_slope = torch.tensor(math.log(require_number("slope", slope, positive=True)))
        if require_bool("learned", learned):
            self.log_slope = nn.Parameter(log_slope)
        else:
            self.register_buffer("log_slope", log_slope, persistent=False)

    @property
    def slope(self) -> float:
        return float(self.log_slope.detach().exp())

    def score_bias(self, T: int) -> Tensor:
        return _alibi(T, self.log_slope.exp().view(1))[0]  # (T, T)


# ---------------------------------------------------------------- the tiny model of lesson 02, by scheme

def positions_for(kind: str, config: ModelConfig, base: float = 10000.0, alibi_slope: float = 0.5,
                  learned_slope: bool = False) -> Positions | None:
    """The position scheme named `kind` for a model of this config (None: DecoderOnly builds its own)."""
    require_choice("kind", kind, POSITION_KINDS)
    require_instance("config", config, ModelConfig)
    base = require_number("base", base, positive=True)
    alibi_slope = require_number("alibi_slope", alibi_slope, positive=True)
    require_bool("learned_slope", learned_slope)
    if kind in ("none", "learned"):
        return None  # lesson 02's DecoderOnly builds these itself, seeded by config.seed
    if kind == "sinusoidal":
        return SinusoidalPositionalEncoding(config.max_len, config.d_model, base)
    if kind == "rope":
        _require_even_width("d_model", config.d_model)
        return RotaryPositions(base)
    return ALiBiPositions(alibi_slope, learned=learned_slope)


def tiny_model(kind: str, base: float = 10000.0, alibi_slope: float = 0.5, learned_slope: bool = False,
               **config: object) -> DecoderOnly:
    """model.DecoderOnly with the position scheme `kind`; **config are ModelConfig fields.

    ids: (B, T) -> logits (B, T, V). kind: "none", "learned", "sinusoidal", "rope" or "alibi".
    """
    require_choice("kind", kind, POSITION_KINDS)
    require_number("base", base, positive=True)
    require_number("alibi_slope", alibi_slope, positive=True)
    require_bool("learned_slope", learned_slope)
    settings = ModelConfig(**config, positions=kind)  # the name; the scheme itself is passed below
    return DecoderOnly(settings, positions=positions_for(kind, settings, base, alibi_slope, learned_slope))


def previous_token_batch(n_sequences: int, length: int, vocab_size: int) -> Callable[[torch.Generator],
                                                                                      tuple[Tensor, Tensor]]:
    """make_batch for train_tiny_model: random ids (B, T), target at t >= 1 is the token at t - 1."""
    require_count("n_sequences", n_sequences)
    require_count("length", length, minimum=2)  # position 0 has no previous token: one more is needed
    require_count("vocab_size", vocab_size)

    def make_batch(generator: torch.Generator) -> tuple[Tensor, Tensor]:
        ids = torch.randint(vocab_size, (n_sequences, length), generator=generator)  # (B, T)
        targets = ids.roll(1, dims=-1)
        targets[:, 0] = IGNORE  # position 0 has no previous token
        return ids, targets

    return make_batch


def _require_fits(name: str, length: object, model: DecoderOnly) -> None:
    """A sequence length of 2 or more; at most the model's max_len when its positions are a table."""
    require_count(name, length, minimum=2)
    if model.config.positions in ("learned", "sinusoidal") and length > model.config.max_len:
        raise ValueError(f"{name}={length} must be at most the model's max_len={model.config.max_len}: "
                         f"its {model.config.positions} table has no rows beyond")


def train_previous_token(model: DecoderOnly, train_length: int = 8, steps: int = 100, lr: float = 0.02,
                         batch: int = 64, seed: int = 0) -> float:
    """Train `model` (in place) to output, at each position t >= 1, the token at t - 1.

    Training sequences have exactly `train_length` tokens, so a learned table's rows past
    train_length never get a gradient. Returns the final training loss. previous_token_runs checks
    train_length; the model's forward refuses one longer than its max_len.
    """
    require_instance("model", model, DecoderOnly)
    _require_fits("train_length", train_length, model)
    require_count("batch", batch)
    make_batch = previous_token_batch(batch, train_length, model.config.vocab_size)
    return train_tiny_model(model, make_batch, steps, lr, seed)[-1]


@torch.no_grad()
def measure_previous_token(model: DecoderOnly, length: int, n_sequences: int = 256,
                           seed: int = 1) -> tuple[Tensor, Tensor]:
    """On fresh random sequences: accuracy at predicting token t-1, and attention weight on it.

    Returns two (length - 1,) tensors; entry i is position t = i + 1: the share of sequences
    whose token t-1 is the model's top answer (chance is 1 / V), and the mean attention
    weight that query t puts on key t-1 (the mean over the heads too, if the model has several).
    """
    require_instance("model", model, DecoderOnly)
    _require_fits("length", length, model)
    require_count("seed", seed, minimum=0)
    ids, targets = previous_token_batch(n_sequences, length, model.config.vocab_size)(
        torch.Generator().manual_seed(seed))
    predicted = model(ids).argmax(-1)  # (B, T)
    accuracy = (predicted[:, 1:] == targets[:, 1:]).double().mean(0)  # (T-1,)
    weights = model.last_weights  # (B, H, T, T), the first block's
    on_previous = torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1)  # (B, H, T-1): query t on key t-1
    on_previous = on_previous.double().mean((0, 1))  # (T-1,): over the sequences and the heads
    return accuracy, on_previous


class PreviousTokenRun(NamedTuple):
    """One trained model and what measure_previous_token read from it on the test length."""

    model: DecoderOnly
    accuracy: Tensor  # (test_length - 1,): position t = index + 1
    on_previous: Tensor  # (test_length - 1,): attention weight of query t on key t - 1


def previous_token_runs(kinds: Iterable[str], seeds: Iterable[int], train_length: int,
                        test_length: int, progress: bool | str = False, workers: int = 1,
                        **model_args: object) -> dict[tuple[str, int], PreviousTokenRun]:
    """For every kind and seed: tiny_model(kind, seed=seed, **model_args), trained and measured.

    The seed draws both the initial weights and the training data (train_previous_token), so
    each seed is an independent run. Returns {(kind, seed): PreviousTokenRun} measured on fresh
    sequences of test_length tokens. progress=True shows one bar counting runs, labelled
    "previous token" (a string names the task otherwise), with the step and loss of each run
    going on. workers > 1 trains that many runs at once (runs.run_each): the same numbers,
    run for run.
    """
    kinds, seeds = list(require_items("kinds", list(kinds))), list(require_items("seeds", list(seeds)))
    for kind in kinds:
        require_choice("kinds", kind, POSITION_KINDS)
    pairs = [(kind, seed) for kind in kinds for seed in seeds]
    require_count("train_length", train_length, minimum=2)
    require_count("test_length", test_length, minimum=2)
    job = functools.partial(_previous_token_run, train_length=train_length, test_length=test_length,
                            model_args=model_args)
    names = [f"{kind}, seed {seed}" for kind, seed in pairs]
    label = "previous token" if progress is True else progress
    return dict(zip(pairs, run_each(job, pairs, workers, label, names)))


def _previous_token_run(pair: tuple[str, int], train_length: int, test_length: int,
                        model_args: dict) -> PreviousTokenRun:
    kind, seed = pair
    model = tiny_model(kind, seed=seed, **model_args)
    train_previous_token(model, train_length, seed=seed)
    return PreviousTokenRun(model, *measure_previous_token(model, test_length))
