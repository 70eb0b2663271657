"""`claim` and `demonstrate`: how a lesson states a fact, checks it, and shows its number.

Every claim prints what was measured next to the bound it was checked against:

    checked: the trained copier copies held-out sequences
      bound:    at least 99% of tokens
      measured: 99.8% of 1,792 tokens

The `measured:` block is the one place where a lesson's volatile digits live: the last digits
of a float reduction or of a short training run differ between CPUs (AVX2 or not), so the
nbval sanitizer (`tests/sanitize.cfg`) blanks exactly that block, and nothing else, before it
compares outputs. The claim itself still asserts its bound on every machine, and the bound is
compared as printed.

`demonstrate` is for statements that hold by construction (a matrix built as the identity
is the identity): it checks them the same way but says so, so a learner does not mistake
them for evidence.

A claim about a measured number passes its test as a `Bound`, `at_least(value, limit)` or
`at_most(value, limit)`, instead of a bare bool: it is true exactly when the bool would be, and
it also knows how far inside its limit the value is. `scripts/claim_stability.py` reruns every
lesson with other seeds and CPU kernels and reports each claim's smallest margin, so a claim
that holds only by a hair shows up before another CPU flips it. Join two with `&`.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from .guards import require_number

WIDTH = 96  # the notebook shows about 125 characters; keep lines well inside it
_INDENT = "  "

Number = int | float
Measured = Number | str | Mapping[str, object] | Sequence[Number]


def fmt(value: object) -> str:
    """A number as a lesson prints it: ints whole, floats to 3 significant digits. A tensor must
    hold one number."""
    if isinstance(value, Tensor):
        if value.numel() != 1:
            raise ValueError(f"value must be one number; got a tensor of shape {tuple(value.shape)} "
                             "(fmt each element, or reduce it first, e.g. value.max())")
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    if 1e-3 <= abs(value) < 1e5:
        return f"{value:.3g}"
    return f"{value:.2e}"


def rounding(value: float | Tensor) -> str:
    """A difference at rounding level as a lesson prints it: "0", or the power of ten above it
    ("below 1e-15" for 2.44e-16). Its digits are the CPU's (which kernel, which order of sums),
    not the lesson's, so only their size is shown."""
    value = abs(_require_real("value", value))
    if value == 0 or not math.isfinite(value):
        return fmt(value)
    return f"below 1e{math.floor(math.log10(value)) + 1}"


def _measured_text(measured: Measured) -> str:
    if isinstance(measured, str):
        return measured
    if isinstance(measured, Mapping):
        return ", ".join(f"{name}: {fmt(v)}" for name, v in measured.items())
    if isinstance(measured, Sequence):
        return ", ".join(fmt(v) for v in measured)
    return fmt(measured)


def _block(label: str, text: str) -> str:
    head = f"{_INDENT}{label:<10}"
    return textwrap.fill(text, WIDTH, initial_indent=head,
                         subsequent_indent=" " * len(head), break_on_hyphens=False)


@dataclass(frozen=True)
class Bound:
    """A test `value >= limit` (sense +1) or `value <= limit` (sense -1) that keeps its margin.

    `margin` is how far the value is inside the limit, as a fraction of the limit's size
    (negative when the test fails): 1.0 against "at least 0.99" is 0.0101. Against a limit of
    0 the margin is the plain difference.
    """

    value: float
    limit: float
    sense: int

    @property
    def margin(self) -> float:
        return self.sense * (self.value - self.limit) / (abs(self.limit) or 1.0)

    def __bool__(self) -> bool:
        return self.margin >= 0

    def __and__(self, other: Bound | Bounds) -> Bounds:
        return Bounds((self,)) & other


@dataclass(frozen=True)
class Bounds:
    """Several bounds that must all hold; the margin is the smallest of theirs."""

    parts: tuple[Bound, ...]

    @property
    def margin(self) -> float:
        return min(part.margin for part in self.parts)

    def __bool__(self) -> bool:
        return all(self.parts)

    def __and__(self, other: Bound | Bounds) -> Bounds:
        return Bounds(self.parts + (other.parts if isinstance(other, Bounds) else (other,)))


def _require_real(name: str, value: object) -> float:
    """A number or a one-element tensor, as a float; NaN and infinities stay what they are."""
    if isinstance(value, Tensor):
        if value.numel() != 1 or value.dtype == torch.bool:
            raise TypeError(f"{name} must be a number or a one-element tensor, got a tensor of shape "
                            f"{tuple(value.shape)} and dtype {value.dtype}")
        return value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):  # float("0.9") would pass a string
        raise TypeError(f"{name} must be a number or a one-element tensor, got {type(value).__name__} {value!r}")
    return float(value)


def at_least(value: float | Tensor, limit: float) -> Bound:
    """The test value >= limit, with its margin (see `Bound`). A NaN value fails the test (and
    the claim, which shows it); the limit must be a finite number."""
    return Bound(_require_real("value", value), require_number("limit", limit), +1)


def at_most(value: float | Tensor, limit: float) -> Bound:
    """The test value <= limit, with its margin (see `Bound`)."""
    return Bound(_require_real("value", value), require_number("limit", limit), -1)


Holds = bool | Tensor | Bound | Bounds


def _report(verdict: str, statement: str, holds: Holds, measured: Measured,
            bound: str) -> None:
    lines = [textwrap.fill(f"{verdict}: {statement}", WIDTH, subsequent_indent=_INDENT * 2,
                           break_on_hyphens=False)]
    if bound:
        lines.append(_block("bound:", bound))
    lines.append(_block("measured:", _measured_text(measured)))
    text = "\n".join(lines)
    if not bool(holds):
        raise AssertionError(f"claim is FALSE\n{text}")
    print(text)


def _require_holds(holds: object) -> None:
    """holds must be True or False, a one-element bool tensor, or a Bound(s). Not a string
    ("False" is true), a number (is 0.5 true?), NaN (true in Python) or None."""
    if isinstance(holds, (bool, Bound, Bounds)):
        return
    if isinstance(holds, Tensor):
        if holds.dtype == torch.bool and holds.numel() == 1:
            return
        raise TypeError(f"holds must be a one-element bool tensor, got a tensor of shape {tuple(holds.shape)} "
                        f"and dtype {holds.dtype} (use .all() or .any() to say which)")
    raise TypeError(f"holds must be True or False, a one-element bool tensor, or at_least(...) / at_most(...), "
                    f"got {type(holds).__name__} {holds!r}")


def _require_measured_value(name: str, value: object, text: bool = True) -> None:
    """One measured value: a number (a one-element tensor is one: lessons measure with tensor
    reductions, and .item() on each would only add noise) or, if `text`, a string. A NaN is
    shown as it is: it is what was measured, and the claim's test says whether it holds."""
    if isinstance(value, str) and text:
        return
    kinds = "a number, a one-element tensor or a string" if text else "a number or a one-element tensor"
    if isinstance(value, Tensor) and value.numel() != 1:
        raise TypeError(f"{name} must be {kinds}, got a tensor of shape {tuple(value.shape)}: "
                        f"reduce it to the number the claim is about")
    if isinstance(value, bool) or not isinstance(value, (int, float, Tensor)) or (
            isinstance(value, Tensor) and value.dtype == torch.bool):
        raise TypeError(f"{name} must be {kinds}, got {type(value).__name__} {value!r}")


def _require_measured(measured: object) -> None:
    """measured must be a number, a string, a mapping of label -> number (or string), or a list of
    numbers (a curve, one value per setting): what the lesson prints as evidence."""
    if isinstance(measured, Mapping):
        for label, value in measured.items():
            if not isinstance(label, str):
                raise TypeError(f"measured's labels must be strings, got {type(label).__name__} {label!r}")
            _require_measured_value(f"measured[{label!r}]", value)
    elif isinstance(measured, (list, tuple)):
        if not measured:
            raise ValueError("measured must not be an empty list: it is what the claim shows")
        for i, value in enumerate(measured):
            _require_measured_value(f"measured[{i}]", value, text=False)
    else:
        _require_measured_value("measured", measured)


def _check_claim(statement: object, holds: object, measured: object, bound: object) -> None:
    """What claim and demonstrate take; each wrong kind is named before anything prints."""
    if not isinstance(statement, str) or not statement.strip():
        raise TypeError(f"statement must be a non-empty string (what is claimed), got {statement!r}")
    if not isinstance(bound, str):
        raise TypeError(f"bound must be a string (what the measured value was held to), got {bound!r}")
    _require_holds(holds)
    _require_measured(measured)


def claim(statement: str, holds: Holds, *, measured: Measured, bound: str = "") -> None:
    """Print `statement` with its bound and measured value, or raise if `holds` is false.

    `holds` is True or False, a one-element bool tensor, or a `Bound` (`at_least`, `at_most`)
    when the claim compares a measured number with a limit. `measured` is what the computation
    found: a finite number (or one-element tensor), a short string built with `fmt`, a mapping
    of label -> number, or a list of numbers; `bound` says what it was held to.
    """
    _check_claim(statement, holds, measured, bound)
    _report("checked", statement, holds, measured, bound)


def demonstrate(statement: str, holds: Holds, *, measured: Measured,
                bound: str = "") -> None:
    """Like `claim`, for a statement true by construction: shown, not evidence."""
    _check_claim(statement, holds, measured, bound)
    _report("by construction", statement, holds, measured, bound)
