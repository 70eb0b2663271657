"""course_lib.claims: what a claim prints, what it refuses, and what the sanitizer blanks."""

import re
from pathlib import Path

import pytest
import torch

from course_lib.claims import WIDTH, at_least, at_most, claim, demonstrate, fmt

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


@pytest.mark.parametrize("holds, message", [
    ("False", r"holds must be True or False.*got str 'False'"),  # a non-empty string is true
    (float("nan"), r"holds must be True or False.*got float nan"),  # NaN is true in Python
    (1, r"holds must be True or False.*got int 1"),
    (0.5, r"holds must be True or False.*got float 0.5"),
    (None, r"holds must be True or False.*got NoneType None"),
    ([True], r"holds must be True or False.*got list"),
    (torch.ones(3, dtype=torch.bool), r"holds must be a one-element bool tensor, got a tensor of shape \(3,\)"),
    (torch.tensor(1.0), r"holds must be a one-element bool tensor, got .* dtype torch.float32"),
    (torch.tensor([], dtype=torch.bool), r"holds must be a one-element bool tensor, got a tensor of shape \(0,\)"),
])
@pytest.mark.parametrize("say", [claim, demonstrate])
def test_holds_that_is_not_a_truth_value_is_refused_by_name(say, holds, message, capsys):
    with pytest.raises(TypeError, match=message):
        say("the model copies", holds, measured=0.5)
    assert capsys.readouterr().out == ""  # refused before anything prints


@pytest.mark.parametrize("measured, error, message", [
    (None, TypeError, r"measured must be a number, a one-element tensor or a string, got NoneType"),
    (True, TypeError, r"measured must be a number.*got bool"),
    (torch.ones(3), TypeError, r"measured must be a number.*got a tensor of shape \(3,\)"),
    ({"loss": None}, TypeError, r"measured\['loss'\] must be a number"),
    ({"loss": torch.tensor(True)}, TypeError, r"measured\['loss'\] must be a number"),
    ({1: 0.5}, TypeError, r"measured's labels must be strings, got int 1"),
    (["a", "b"], TypeError, r"measured\[0\] must be a number or a one-element tensor, got str"),
    ([], ValueError, r"measured must not be an empty list"),
    ({0.5}, TypeError, r"measured must be a number.*got set"),
    (object(), TypeError, r"measured must be a number.*got object"),
])
def test_measured_that_is_not_a_number_string_or_mapping_is_refused_by_name(measured, error, message, capsys):
    with pytest.raises(error, match=message):
        claim("the model copies", True, measured=measured)
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("statement, bound, message", [
    ("", "", "statement must be a non-empty string"),
    (3, "", "statement must be a non-empty string"),
    ("it holds", 0.5, "bound must be a string"),
])
def test_statement_and_bound_must_be_text(statement, bound, message):
    with pytest.raises(TypeError, match=message):
        claim(statement, True, measured=0.5, bound=bound)


def test_what_a_claim_takes_prints(capsys):
    """The kinds that are taken: a bool tensor of one element (any shape), Bounds, a one-element
    tensor as the measured number, a mapping, a list, a string."""
    claim("a", torch.tensor([[True]]), measured=torch.tensor(0.25))
    claim("b", at_least(0.9, 0.5) & at_most(torch.tensor(0.1), 0.2), measured={"x": 0.9, "y": torch.tensor(0.1)})
    claim("c", True, measured=[1, 2.5, torch.tensor(3.0)])
    claim("d", False is False, measured="all 5 rows", bound="every row")
    out = capsys.readouterr().out
    assert "measured: 0.25" in out and "x: 0.9, y: 0.1" in out and "1, 2.5, 3" in out and "all 5 rows" in out


@pytest.mark.parametrize("bound_of, value, limit, error, message", [
    (at_least, "0.9", 0.5, TypeError, "value must be a number"),  # float() would have taken it
    (at_least, torch.ones(3), 0.5, TypeError, r"value must be a number or a one-element tensor, got .* \(3,\)"),
    (at_most, None, 0.5, TypeError, "value must be a number"),
    (at_most, 0.5, float("nan"), ValueError, "limit must be finite"),
    (at_most, 0.5, True, TypeError, "limit must be a number"),
])
def test_a_bound_of_something_other_than_a_finite_number_is_refused(bound_of, value, limit, error, message):
    with pytest.raises(error, match=message):
        bound_of(value, limit)


def test_rounding_shows_only_the_size_of_a_rounding_level_difference():
    from course_lib.claims import rounding
    assert [rounding(v) for v in (0.0, 2.44e-16, -2.44e-16, 9.9e-16, 1e-15, torch.tensor(5.96e-8))] == [
        "0", "below 1e-15", "below 1e-15", "below 1e-15", "below 1e-14", "below 1e-7"]
    with pytest.raises(TypeError, match="value must be a number"):
        rounding("2e-16")
