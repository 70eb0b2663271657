"""Helpers that let a visible check name the likely bug where `call` and `compare` alone cannot.

- `call_naming`: a wrong answer often raises instead of returning. `call(..., hint=)` adds one
  fixed hint to any error; this one adds the hint whose key the error's own message contains
  (Python's `max(0, h)` on a tensor raises "Boolean value of Tensor ... is ambiguous"), so an
  error it does not know gets no hint rather than a wrong one.
- `name_shape_bug`: `compare` says only "expected shape (2, 4), got (2, 5)"; some wrong shapes
  are the mark of one mistake (the start token kept: one column too many), and this names it.
- `compare_quietly`: an extra case that tells two mistakes apart. It prints nothing when the
  answer is right, so a right answer's output stays what it was; a wrong one gets `compare`'s
  expected, got and likely bug.
"""

from __future__ import annotations

from typing import Callable, Mapping

import torch
from torch import Tensor

from . import call, compare


def call_naming(label: str, fn: Callable, *args, bugs: Mapping[str, str]) -> object:
    """`call(label, fn, *args)`; when it fails, add the hint of the first key of `bugs` its message contains."""
    try:
        return call(label, fn, *args)
    except AssertionError as error:  # call's own message: "<label> raised <Type>: <message>"
        hint = next((hint for words, hint in bugs.items() if words in str(error)), None)
        if hint is None:
            raise
        raise AssertionError(f"{error}. Likely bug: {hint}") from None


def name_shape_bug(name: str, got: object, expected: tuple[int, ...], bugs: Mapping[tuple[int, ...], str]) -> None:
    """Raise, naming the bug, when `got` is a tensor whose shape is one of `bugs`' keys (and not `expected`)."""
    shape = tuple(got.shape) if isinstance(got, Tensor) else None
    if shape != tuple(expected) and shape in bugs:
        raise AssertionError(f"{name}: expected shape {tuple(expected)}, got {shape}. Likely bug: {bugs[shape]}")


def compare_quietly(name: str, got: object, expected: Tensor, likely_bugs: Mapping[str, Tensor] | None = None,
                    atol: float = 1e-5) -> None:
    """`compare`, printing only when `got` is wrong (a shape, a dtype or a value)."""
    right = (isinstance(got, Tensor) and got.shape == expected.shape and got.dtype == expected.dtype
             and torch.allclose(got, expected, atol=atol, rtol=1e-4))
    if not right:
        compare(name, got, expected, likely_bugs, atol)
