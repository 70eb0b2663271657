"""Visible checks for exercise set 04 (position encodings)."""

from __future__ import annotations

import re
from typing import Callable

import torch
from torch import Tensor

from ..positional_encoding import (LearnedPositionalEmbedding, RotaryPositions, SinusoidalPositionalEncoding,
                                   apply_rope, block_rotation, frequencies, rotate_pairs, shift_matrix,
                                   sinusoidal_encoding)
from . import call, compare, exercise_check, passed
from .bug_hints import BROADCAST_ERROR, call_naming
from .hand_in import Case, Exercise, Raises

# Tiny inputs the learner can follow by hand.
X_ROPE = torch.tensor([[1.0, 0.0, 1.0, 0.0], [1.0, 0.0, 1.0, 0.0], [0.0, 2.0, 0.0, 2.0]])  # (T=3, d=4)
X_SEQ = torch.arange(12, dtype=torch.float32).reshape(2, 3, 2)  # (B=2, T=3, D=2)
TABLE = torch.tensor([[100.0, 200.0], [300.0, 400.0], [500.0, 600.0]])  # (max_len=3, D=2)


def _table_with(n_positions: int, d_model: int, layout: str = "interleaved", swap: bool = False,
                per_coordinate: bool = False, multiplied: bool = False) -> Tensor:
    """Sinusoidal tables with the usual mistakes, for naming them."""
    pos = torch.arange(n_positions, dtype=torch.float64)[:, None]
    if multiplied:  # pos * 10000^(2j/d): the frequencies grow instead of shrinking
        angles = pos / frequencies(d_model)
        return torch.stack([angles.sin(), angles.cos()], -1).flatten(-2).float()
    if per_coordinate:  # exponent i/d with i the coordinate index: right for sin, wrong for cos
        freq = 10000.0 ** (-torch.arange(d_model, dtype=torch.float64) / d_model)
        angles = pos * freq
        table = torch.where(torch.arange(d_model) % 2 == 0, angles.sin(), angles.cos())
        return table.float()
    angles = pos * frequencies(d_model)
    first, second = (angles.cos(), angles.sin()) if swap else (angles.sin(), angles.cos())
    if layout == "halves":
        return torch.cat([first, second], -1).float()
    return torch.stack([first, second], -1).flatten(-2).float()


def _named_loosely(failure: AssertionError, name: str, got: object, likely_bugs: dict[str, Tensor],
                   atol: float) -> AssertionError:
    """compare's failure, or, if it named no likely bug, the one `got` matches within `atol`.

    For mistakes whose angles are large: float32 rounds an angle of 1392 radians by about 1e-4,
    more than compare's tolerance, so a learner's float32 table misses the float64 one there."""
    if "Likely bug" not in str(failure) and isinstance(got, Tensor) and got.is_floating_point():
        for hint, wrong in likely_bugs.items():
            if got.shape == wrong.shape and torch.allclose(got.double(), wrong.double(), atol=atol, rtol=0.0):
                return AssertionError(f"{name}: wrong values. Likely bug: {hint}")
    return failure


@exercise_check
def check_sinusoidal_table(sinusoidal_table: Callable) -> None:
    got = call("sinusoidal_table(4, 6)", sinusoidal_table, 4, 6)
    name = "sinusoidal_table(4, 6)  (rows: positions 0..3; columns: sin0, cos0, sin1, cos1, sin2, cos2)"
    multiplied = {"multiplied by 10000^(2j/d) instead of dividing by it": _table_with(4, 6, multiplied=True)}
    try:
        compare(name, got, sinusoidal_encoding(4, 6), {
            "sin and cos swapped: coordinate 2j is sin, 2j+1 is cos (row 0 must be 0, 1, 0, 1, 0, 1)":
                _table_with(4, 6, swap=True),
            "all sines first, then all cosines: interleave them, sin0, cos0, sin1, cos1, ...":
                _table_with(4, 6, layout="halves"),
            "the exponent uses the coordinate index i; both coordinates of pair j use 2j/d":
                _table_with(4, 6, per_coordinate=True),
            "the exponent is 2j/d, not j/d: pair j turns at c_j = 10000^(-2j/d) (torch.arange(0, d, 2) / d)":
                sinusoidal_encoding(4, 6, base=100.0),  # 100^(-2j/d) = 10000^(-j/d)
            "positions start at 0: the first row is position 0, (0, 1, 0, 1, 0, 1)":
                sinusoidal_encoding(torch.arange(1, 5), 6),
            **multiplied,
        })
    except AssertionError as failure:
        raise _named_loosely(failure, name, got, multiplied, atol=1e-3) from None
    passed("sinusoidal_table")


@exercise_check
def check_offset_rotation(offset_rotation: Callable) -> None:
    got = _any_float(call("offset_rotation(2, 4)", offset_rotation, 2, 4))
    want = shift_matrix(2, 4)
    one_speed = torch.block_diag(*[shift_matrix(2, 2)] * 2)
    forgot_k = shift_matrix(1, 4)
    compare("offset_rotation(2, 4)  (a 4 x 4 matrix of two 2 x 2 blocks)", got, want, {
        "the rotation turns the wrong way: this is M_(-k); PE(pos+k, 2j) = sin a cos b + cos a sin b": want.T,
        "every block uses the angle of pair 0; block j turns by c_j * k": one_speed,
        "the angle is c_j, not c_j * k: did you forget to multiply by k?": forgot_k,
        "the exponent is 2j/d, not j/d: block j turns by k c_j, c_j = 10000^(-2j/d)":
            shift_matrix(2, 4, base=100.0),  # 100^(-2j/d) = 10000^(-j/d)
        "block j goes at rows and columns 2j and 2j + 1 (m[2*j:2*j+2, 2*j:2*j+2]); at j, j + 1 the blocks overlap":
            _blocks_at_j(want),
    })
    table = sinusoidal_encoding(12, 8, dtype=torch.float64)
    pos = torch.tensor([0, 4, 8])
    got = call("offset_rotation(3, 8)", offset_rotation, 3, 8)
    if not isinstance(got, Tensor) or got.shape != (8, 8):
        raise AssertionError(f"offset_rotation(3, 8) must return an (8, 8) tensor, got {type(got).__name__} "
                             f"of shape {tuple(getattr(got, 'shape', ()))}")
    moved = table[pos] @ got.to(torch.float64).T  # row-wise M_3 @ PE(pos)
    compare("offset_rotation(3, 8) @ PE(pos) for pos = 0, 4, 8, against PE(pos + 3)", moved, table[pos + 3], {
        "turns the wrong way: you produced PE(pos - 3)": table[pos] @ shift_matrix(-3, 8).T,
    })
    passed("offset_rotation")


def _blocks_at_j(matrix: Tensor) -> Tensor:
    """`matrix`'s 2 x 2 diagonal blocks written at rows and columns j, j + 1 instead of 2j, 2j + 1."""
    wrong = torch.zeros_like(matrix)
    for j in range(matrix.shape[0] // 2):
        wrong[j:j + 2, j:j + 2] = matrix[2 * j:2 * j + 2, 2 * j:2 * j + 2]
    return wrong


def _rope_half_split(x: Tensor) -> Tensor:
    """The GPT-NeoX layout: pair j is (x_j, x_(j + d/2)) instead of (x_2j, x_2j+1)."""
    d = x.shape[-1]
    interleaved = torch.stack([x[..., : d // 2], x[..., d // 2:]], -1).flatten(-2)
    turned = apply_rope(interleaved)
    return torch.cat([turned[..., 0::2], turned[..., 1::2]], -1)


@exercise_check
def check_rope_rotate(rope_rotate: Callable) -> None:
    got = call("rope_rotate(X_ROPE)", rope_rotate, X_ROPE.clone())
    want = apply_rope(X_ROPE)
    compare("rope_rotate(X_ROPE)  (X_ROPE: rows at positions 0, 1, 2; d = 4)", got, want, {
        "rotated by -m c_j instead of +m c_j: (x0, x1) -> (x0 cos - x1 sin, x0 sin + x1 cos)":
            _rope_with(X_ROPE, sign=-1.0),
        "positions start at 0: the first row must come out unchanged": apply_rope(X_ROPE, torch.arange(1, 4)),
        "pairs are (x_2j, x_2j+1), next to each other, not (x_j, x_j+d/2)": _rope_half_split(X_ROPE),
        "every pair turns at c_0 = 1; pair j turns at c_j = 10000^(-2j/d)": _rope_with(X_ROPE, one_speed=True),
        "the exponent is 2j/d, not j/d: pair j turns at c_j = 10000^(-2j/d)":
            apply_rope(X_ROPE, base=100.0),  # 100^(-2j/d) = 10000^(-j/d)
        "the turned pairs went back as all first coordinates, then all second ones: interleave them again, "
        "(x'_0, x'_1, x'_2, ...), e.g. torch.stack([first, second], -1).flatten(-2)":
            torch.cat([want[..., 0::2], want[..., 1::2]], -1),
    })
    batch = torch.arange(2 * 5 * 6, dtype=torch.float32).reshape(2, 5, 6) / 10
    got = call("rope_rotate on a batch of shape (2, 5, 6)", rope_rotate, batch.clone(),
                hint="positions are the second-to-last axis; any leading dimensions are batch")
    compare("rope_rotate(batch) for a batch of shape (2, 5, 6), row 1 of the first sequence", got[0, 1]
            if isinstance(got, Tensor) and got.shape == batch.shape else got, apply_rope(batch)[0, 1])
    passed("rope_rotate")


def _rope_with(x: Tensor, sign: float = 1.0, one_speed: bool = False) -> Tensor:
    """RoPE with a wrong sign of the angle, or with every pair at frequency c_0 = 1."""
    d = x.shape[-1]
    freqs = torch.ones(d // 2, dtype=torch.float64) if one_speed else frequencies(d)
    angles = sign * torch.arange(x.shape[-2], dtype=torch.float64)[:, None] * freqs  # (T, d/2)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], -1).flatten(-2)


@exercise_check
def check_add_learned_positions(add_learned_positions: Callable) -> None:
    got = call_naming("add_learned_positions(X_SEQ, TABLE)", add_learned_positions, X_SEQ.clone(), TABLE.clone(),
                      bugs={"ValueError": "a sequence as long as the table fits (3 positions, 3 rows): "
                                            "refuse only T > max_len",
                              BROADCAST_ERROR: "add the first T rows of the table, T = x.shape[-2]: positions are "
                                               "the second-to-last axis of x, after any batch dimensions"})
    compare("add_learned_positions(X_SEQ, TABLE)  (X_SEQ: (2, 3, 2), TABLE: 3 rows)", got, X_SEQ + TABLE, {
        "every position got row 0 of the table; position t gets row t": X_SEQ + TABLE[0],
        "added along the wrong axis: the batch axis got the rows": X_SEQ + TABLE[:2, None, :],
    })
    short = X_SEQ[:, :2]
    got = call("add_learned_positions(X_SEQ[:, :2], TABLE)", add_learned_positions, short.clone(), TABLE.clone(),
                hint="a sequence shorter than the table uses its first T rows, TABLE[:T]")
    compare("add_learned_positions on 2 positions with a 3-row table", got, short + TABLE[:2], {
        "used the last rows of the table; position t gets row t": short + TABLE[1:],
    })
    long = torch.zeros(1, 5, 2)
    asked = ("  add_learned_positions(a sequence of 5 positions, TABLE of 3 rows)\n"
             "  expected: ValueError whose message contains 5 (the length) and 3 (the rows)\n")
    try:
        result = add_learned_positions(long, TABLE.clone())
    except ValueError as error:
        numbers = set(re.findall(r"\d+", str(error)))
        if not {"5", "3"} <= numbers:
            raise AssertionError("the ValueError must name the sequence length (5) and the table's rows (3), "
                                 f"got the message {str(error)!r}\n{asked}  got:      ValueError: {error}\n"
                                 "Likely bug: a message without the numbers; put both in it, e.g. with an "
                                 "f-string") from None
    except Exception as error:
        raise AssertionError(f"got {type(error).__name__} instead of ValueError. Likely bug: no length check, so the "
                             "error comes from deep inside torch; compare T with the table's rows first\n"
                             f"{asked}  got:      {type(error).__name__}: {error}") from None
    else:
        raise AssertionError("a sequence longer than the table was accepted. Likely bug: positions wrapped "
                             "around (t % max_len) or rows reused; there is no row for position 3 or 4\n"
                             f"{asked}  got:      no error, a result of shape "
                             f"{tuple(getattr(result, 'shape', ()))}") from None
    passed("add_learned_positions")


# ---------------------------------------------------------------- hidden tests (see hand_in.py)
def _sinusoidal_cases(gen: torch.Generator) -> list[Case]:
    # The inputs are sizes: the old ones, and one drawn from the seed.
    drawn = (int(torch.randint(1, 61, (), generator=gen)), 2 * int(torch.randint(1, 65, (), generator=gen)))
    return [Case(f"n_positions={T}, d_model={d}", lambda T=T, d=d: sinusoidal_encoding(T, d, dtype=torch.float64).float(),
                 (T, d)) for T, d in [(1, 2), (10, 8), (50, 64), (7, 130), drawn]]


def _offset_cases(gen: torch.Generator) -> list[Case]:
    # M_k entry by entry: PE(pos + k) = M_k PE(pos) on a table of positions (the old check) follows.
    # |k| <= 100 as before: past it, angles k c_j computed in float32 are off by more than float32's
    # tolerance. Any float dtype is allowed (any_float): each is judged at its own precision.
    drawn = (int(torch.randint(-100, 101, (), generator=gen)), 2 * int(torch.randint(1, 33, (), generator=gen)))
    return [Case(f"k={k}, d_model={d}", lambda k=k, d=d: shift_matrix(k, d), (k, d))
            for k, d in [(1, 2), (-5, 6), (17, 16), (100, 64), (0, 10), drawn]]


def _any_float(matrix: object) -> object:
    """The exercise allows any float dtype: a float tensor is compared as float64."""
    return matrix.double() if isinstance(matrix, Tensor) and matrix.is_floating_point() else matrix


def _rotated(x: Tensor, positions: Tensor) -> Tensor:
    """x (..., T, d) with pair j of each row turned by position * c_j (positions may be negative), float64."""
    angles = positions.to(torch.float64)[..., None] * frequencies(x.shape[-1])  # (..., T, d/2)
    return rotate_pairs(x.double(), angles)


def _is_tensor_of(result: object, dtype: torch.dtype) -> bool:
    """The judge compares float values whatever their dtype, so keeping x's dtype is a case of its own."""
    return isinstance(result, Tensor) and result.dtype == dtype


def _rope_cases(gen: torch.Generator) -> list[Case]:
    cases = []
    for shape, dtype in [((6, 2), torch.float32), ((3, 9, 8), torch.float64), ((2, 2, 20, 16), torch.float32)]:
        x = torch.randn(*shape, generator=gen, dtype=dtype)
        label = f"x of shape {shape}, {str(dtype).removeprefix('torch.')}"
        cases.append(Case(label, lambda x=x: _rotated(x, torch.arange(x.shape[-2])).to(x.dtype), (x,)))
        cases.append(Case(f"{label}: the result keeps that dtype", lambda: True, (x,),
                          run=lambda fn, x=x: _is_tensor_of(fn(x), x.dtype)))
    # The point of RoPE: q at position m and k at position n score q . R((n - m) c) k, a function of n - m only.
    q, k = torch.randn(16, generator=gen, dtype=torch.float64), torch.randn(16, generator=gen, dtype=torch.float64)
    offsets = torch.arange(12)[None, :] - torch.arange(12)[:, None]  # n - m
    cases.append(Case("scores of one q and one k at positions 0..11 (x: q or k repeated, expanded to (12, 16))",
                      lambda: _rotated(k.expand(12, 12, 16), offsets) @ q, (q, k),
                      run=lambda fn: fn(q.expand(12, 16)) @ fn(k.expand(12, 16)).T))
    return cases


def _learned_cases(gen: torch.Generator) -> list[Case]:
    table, cases = torch.randn(7, 4, generator=gen), []
    for shape in [(1, 4), (7, 4), (3, 5, 4), (2, 2, 6, 4)]:
        x = torch.randn(*shape, generator=gen)
        cases.append(Case(f"x of shape {shape}, a table of shape (7, 4)",
                          lambda x=x: x + torch.nn.functional.embedding(torch.arange(x.shape[-2]), table), (x, table)))
    long = torch.randn(2, 11, 4, generator=gen)
    cases.append(Case("x of shape (2, 11, 4), a table of 7 rows: a ValueError naming 11 and 7",
                      lambda: Raises(ValueError, ("11", "7")), (long, table)))
    return cases


EXERCISES = {spec.name: spec for spec in [
    Exercise("sinusoidal_table", _sinusoidal_cases, rtol=0.0,
             forbidden_names=("sinusoidal_encoding", "SinusoidalPositionalEncoding"),
             forbidden_objects=(sinusoidal_encoding, SinusoidalPositionalEncoding)),
    Exercise("offset_rotation", _offset_cases, atol=1e-6, rtol=0.0, forbidden_names=("shift_matrix", "block_rotation"),
             forbidden_objects=(shift_matrix, block_rotation), any_float=True),
    Exercise("rope_rotate", _rope_cases, rtol=1e-5,
             forbidden_names=("apply_rope", "RotaryPositionalEmbeddings", "rotate_pairs", "RotaryPositions"),
             forbidden_objects=(apply_rope, rotate_pairs, RotaryPositions)),
    Exercise("add_learned_positions", _learned_cases, atol=1e-8, rtol=1e-5,
             forbidden_names=("LearnedPositionalEmbedding", "LearnedPositions"),
             forbidden_objects=(LearnedPositionalEmbedding,)),
]}
