"""Helpers that let a visible check name the likely bug where `call` and `compare` alone cannot.

- `call_naming`: a wrong answer often raises instead of returning. `call(..., hint=)` adds one
  fixed hint to any error; this one adds the hint whose key the error's own message contains
  (Python's `max(0, h)` on a tensor raises "Boolean value of Tensor ... is ambiguous"), so an
  error it does not know gets no hint rather than a wrong one.
- `results_in_order`: (weights, output) returned for (output, weights), told by their shapes.
- `integer_ids`: token ids returned as floats, named with where floats usually come from.
- `name_shape_bug`: `compare` says only "expected shape (2, 4), got (2, 5)"; some wrong shapes
  are the mark of one mistake (the start token kept: one column too many), and this names it.
"""

from __future__ import annotations

from typing import Callable, Mapping

from torch import Tensor



# torch's error when a row statistic lost its axis, e.g. (2, 3) - (2,): "The size of tensor a (3) must match ..."
BROADCAST_ERROR = "must match the size of tensor"


def call_naming(label: str, fn: Callable, *args, bugs: Mapping[str, str]) -> object:
    """Run the learner's function; an exception whose "Type: message" contains a key of `bugs`
    fails the check naming that key's likely bug. Any other exception is left to exercise_check,
    which names it and its line, so a hint is given only for the mistake it describes."""
    try:
        return fn(*args)
    except (NotImplementedError, AssertionError):
        raise  # a stub, or a check failure from inside (an input changed in place): already named
    except Exception as error:
        text = f"{type(error).__name__}: {error}"
        hint = next((hint for words, hint in bugs.items() if words in text), None)
        if hint is None:
            raise
        raise AssertionError(f"{label} raised {text}. Likely bug: {hint}") from None


def integer_ids(label: str, got: object) -> None:
    """Raise when `got` is a float tensor where token ids (dtype long) belong."""
    if isinstance(got, Tensor) and got.is_floating_point():
        raise AssertionError(f"{label} must return integer token ids (dtype long), got {got.dtype}. Likely bug: "
                             "a float tensor where ids belong (torch.full or torch.zeros without dtype=torch.long, "
                             "or a division); build them from the ids, e.g. with torch.full_like(ids, ...)")


def name_shape_bug(name: str, got: object, expected: tuple[int, ...], bugs: Mapping[tuple[int, ...], str]) -> None:
    """Raise, naming the bug, when `got` is a tensor whose shape is one of `bugs`' keys (and not `expected`)."""
    shape, expected = (tuple(got.shape) if isinstance(got, Tensor) else None), tuple(expected)
    if shape != expected and shape in bugs:
        raise AssertionError(f"{name}: expected shape {expected}, got {shape}. Likely bug: {bugs[shape]}")


def results_in_order(name: str, got: object, ref_out: Tensor, ref_weights: Tensor) -> None:
    """Name a (weights, output) returned for (output, weights): each has the other's shape.

    The shapes alone decide (they differ in every check that uses this), so an answer that also
    has another bug still learns the order first."""
    if not (isinstance(got, tuple) and len(got) == 2 and all(isinstance(x, Tensor) for x in got)):
        return
    if got[0].shape == ref_weights.shape and got[1].shape == ref_out.shape and ref_out.shape != ref_weights.shape:
        raise AssertionError(f"{name} returned (weights, output): the first result has the weights' shape "
                             f"{tuple(ref_weights.shape)}, the second the output's {tuple(ref_out.shape)}. "
                             "Likely bug: the results in the wrong order; return (output, weights)")
