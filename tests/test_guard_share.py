"""Checks at the boundary: a forward pass spends few of course_lib's calls on input checks.

scripts/guard_share.py measures it (and prints the calls by function and the checking lines);
this test keeps the share of guard calls in one forward pass of lesson 09's 2+2-block
Transformer at or below 10%, as issue 16 asks (609 of 753 calls were guards before it).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def guard_share_script():
    spec = importlib.util.spec_from_file_location("guard_share", ROOT / "scripts" / "guard_share.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_guards_are_at_most_a_tenth_of_the_calls_of_a_forward_pass():
    result = guard_share_script().measure(ROOT)
    assert result["course_lib calls"] > 50  # the pass was counted: blocks, attention, softmax
    assert result["guard share"] <= 0.10, (
        f"{result['guard calls']} of {result['course_lib calls']} course_lib calls are guards; "
        f"run scripts/guard_share.py to see which")


@pytest.mark.parametrize("name,guard", [("require_count", True), ("check_input", True), ("_require_head", True),
                                        ("_check_mask", True), ("attend", False), ("checked", False)])
def test_what_counts_as_a_guard(name, guard):
    assert guard_share_script().is_guard("course_lib/model.py", name) is guard
    assert guard_share_script().is_guard("course_lib/guards.py", "anything")
