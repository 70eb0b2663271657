"""course_lib.claims: what a claim prints, what it refuses, and what the sanitizer blanks."""

import re
from pathlib import Path

import pytest
import torch

from course_lib.claims import WIDTH, claim, demonstrate, fmt

SANITIZE = Path(__file__).with_name("sanitize.cfg")


def sanitized(text: str) -> str:
    pairs = re.findall(r"^regex: (.*)$\n^replace: (.*)$", SANITIZE.read_text(), re.M)
    for regex, replace in pairs:
        text = re.sub(regex, replace, text)
    return text


def test_fmt_keeps_ints_whole_and_floats_to_three_digits():
    assert fmt(17920) == "17,920"
    assert fmt(0.99123) == "0.991"
    assert fmt(1.5e-14) == "1.50e-14"
    assert fmt(torch.tensor(0.25)) == "0.25"
    assert fmt("text") == "text"


def test_a_false_claim_raises_with_its_measurement(capsys):
    with pytest.raises(AssertionError, match=r"FALSE(.|\n)*measured: 0.5"):
        claim("accuracy is high", 0.5 > 0.9, measured=0.5, bound="above 0.9")
    assert capsys.readouterr().out == ""


def test_a_true_claim_prints_bound_and_measured_within_the_width(capsys):
    long = "a statement " * 20
    claim(long, torch.tensor(True), measured={f"L = {n}": n / 7 for n in range(20)},
          bound="at least 99%")
    out = capsys.readouterr().out
    assert out.startswith("checked: a statement")
    assert "  bound:    at least 99%" in out
    assert "L = 1: 0.143" in out
    assert max(len(line) for line in out.splitlines()) <= WIDTH


def test_demonstrate_says_by_construction(capsys):
    demonstrate("the identity is the identity", True, measured=0.0)
    assert capsys.readouterr().out.startswith("by construction: the identity")


def test_the_sanitizer_blanks_the_measured_digits_and_nothing_else(capsys):
    for value in (0.9912345, 0.9987):  # two CPUs, two last digits
        claim("the model copies repeats", True, measured=[value] * 30, bound="above 0.99")
    first, second = capsys.readouterr().out.split("checked:")[1:]
    assert first != second
    assert sanitized(first) == sanitized(second)
    assert "above 0.99" in sanitized(first)
    assert "0.99123" not in sanitized(first)


def test_a_bound_is_true_exactly_when_its_comparison_is_and_keeps_its_margin():
    from course_lib.claims import at_least, at_most
    assert at_least(1.0, 0.99) and not at_least(0.955, 0.99)
    assert at_most(0.2, 0.25) and not at_most(0.3, 0.25)
    assert at_least(1.0, 0.99).margin == pytest.approx(0.01 / 0.99)
    assert at_least(0.955, 0.99).margin == pytest.approx(-0.035 / 0.99)
    assert at_most(0.5, 0.0).margin == pytest.approx(-0.5)  # a limit of 0: the plain difference
    both = at_least(1.0, 0.99) & at_most(0.3, 0.25)
    assert not both and both.margin == pytest.approx(-0.05 / 0.25)
    assert not at_least(float("nan"), 0.0)
    with pytest.raises(AssertionError, match="FALSE"):
        claim("copies", at_least(0.955, 0.99), measured=0.955, bound="at least 0.99")
