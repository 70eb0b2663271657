"""`claim`: the lessons' way of stating a mathematical fact and checking it at once."""

from __future__ import annotations

from torch import Tensor


def claim(statement: str, holds: bool | Tensor, measured: str = "") -> None:
    """Print `statement` as checked, or raise AssertionError if it is false.

    `measured` is a short string of the numbers behind the verdict, shown either way.
    """
    detail = f" [{measured}]" if measured else ""
    if not bool(holds):
        raise AssertionError(f"claim is FALSE: {statement}{detail}")
    print(f"checked: {statement}{detail}")
