"""Visible checks for exercise set 07 (composing relations)."""

from __future__ import annotations

import itertools
import math
from typing import Callable

import torch
from torch import Tensor

from ..logic_rules import (KINSHIP_RULES, PEOPLE, RELATIONS, RULES, composition_lookup, composition_readout,
                           fit_power_law, handset_model, rule_targets, sentence_batch)
from ..training import IGNORE
from . import call, compare, exercise_check, passed
from .bug_hints import integer_ids, name_shape_bug
from .hand_in import Case, Exercise

# A vocabulary of 6 tokens: people A = 0, B = 1; relations p = 2, q = 3; answers s = 4, t = 5.
# The table says p q -> s and q p -> t: the order of the two relations matters.
LOOKUP = torch.full((6, 6), -1)
LOOKUP[2, 3], LOOKUP[3, 2], LOOKUP[2, 2] = 4, 5, 4
IDS = torch.tensor([[0, 2, 3, 1], [1, 3, 2, 0], [1, 2, 2, 1]])  # A p q B, B q p A, B p p B

# A small relation world for the unembedding: "X's father's sister is X's aunt", ...
SMALL_RELATIONS = ["father", "sister", "aunt", "grandfather"]
SMALL_RULES = {("father", "sister"): "aunt", ("father", "father"): "grandfather", ("sister", "father"): "father"}


def _targets(ids: Tensor, lookup: Tensor, swap: bool = False, move_y: bool = True,
             ignore: bool = True) -> Tensor:
    """The targets X, r1 o r2, Y, IGNORE, or one of the usual mistakes."""
    out = ids.clone()
    out[:, 1] = lookup[ids[:, 2], ids[:, 1]] if swap else lookup[ids[:, 1], ids[:, 2]]
    if move_y:
        out[:, 2] = ids[:, 3]
    if ignore:
        out[:, 3] = IGNORE
    return out


@exercise_check
def check_compose_targets(compose_targets: Callable) -> None:
    got = call("compose_targets(IDS, LOOKUP)", compose_targets, IDS.clone(), LOOKUP.clone())
    integer_ids("compose_targets(IDS, LOOKUP)", got)
    name_shape_bug("compose_targets(IDS, LOOKUP)", got, IDS.shape, {
        (len(IDS), 3): "position 3 was dropped: keep four columns, with -100 (no target) at position 3"})
    compare("compose_targets(IDS, LOOKUP)  (rows: A p q B, B q p A, B p p B; p q -> 4, q p -> 5, p p -> 4)",
            got, _targets(IDS, LOOKUP), {
                "the relations are looked up in the wrong order: the answer is lookup[r1, r2]":
                    _targets(IDS, LOOKUP, swap=True),
                "Y stays at position 3: it moves one to the left, to position 2 (r2's slot)":
                    _targets(IDS, LOOKUP, move_y=False, ignore=False),
                "position 3 must be IGNORE (-100): four tokens in, three out": _targets(IDS, LOOKUP, ignore=False),
            })
    passed("compose_targets")


def _unembedding(rules: dict, relations: list[str], alpha: float, mistake: str = "") -> Tensor:
    """Rows: relations; columns: token codes (n), then mix codes (n); or one of the usual mistakes."""
    n = len(relations)
    out = torch.zeros(n, 2 * n, dtype=torch.float64)
    for c in dict.fromkeys(rules.values()):
        row = relations.index(c)
        firsts = {a for (a, b), o in rules.items() if o == c}
        seconds = {b for (a, b), o in rules.items() if o == c}
        if mistake == "swap":
            firsts, seconds = seconds, firsts
        for a in firsts:
            out[row, relations.index(a)] += 1.0
        for b in seconds:
            out[row, n + relations.index(b)] += alpha if mistake == "alpha" else 1.0 / alpha
            if mistake == "assign":
                out[row, relations.index(b)] = -1.0
            elif mistake != "no correction":
                out[row, relations.index(b)] -= 1.0
    return out


def _readout_answers(unembedding: Tensor, rules: dict, relations: list[str], alpha: float) -> list[str]:
    """The relation with the largest logit for each rule's row [e(r1), alpha e(r1) + alpha e(r2)]."""
    n = len(relations)
    answers = []
    for a, b in rules:
        row = torch.zeros(2 * n, dtype=torch.float64)
        row[relations.index(a)] = 1.0
        row[n + relations.index(a)] += alpha
        row[n + relations.index(b)] += alpha
        answers.append(relations[int((unembedding.to(torch.float64) @ row).argmax())])
    return answers


@exercise_check
def check_composition_unembedding(composition_unembedding: Callable) -> None:
    got = call("composition_unembedding(SMALL_RULES, SMALL_RELATIONS, 0.5)", composition_unembedding,
                dict(SMALL_RULES), list(SMALL_RELATIONS), 0.5)
    want = _unembedding(SMALL_RULES, SMALL_RELATIONS, 0.5)
    compare("composition_unembedding(SMALL_RULES, SMALL_RELATIONS, 0.5)  (rows: father, sister, aunt, "
            "grandfather; columns: 4 token codes, then 4 mix codes)", got, want, {
                "the mix holds alpha e(b): divide by alpha (multiply by 1/alpha), do not multiply by it":
                    _unembedding(SMALL_RULES, SMALL_RELATIONS, 0.5, "alpha"),
                "the mix also holds alpha e(r1): subtract 1 from the token code of each b in B_r":
                    _unembedding(SMALL_RULES, SMALL_RELATIONS, 0.5, "no correction"),
                "A_r (first relations) and B_r (second relations) are swapped":
                    _unembedding(SMALL_RULES, SMALL_RELATIONS, 0.5, "swap"),
                "an entry was set (=) where it must be added to (+=): father father adds +1 and -1 "
                "to the same token column": _unembedding(SMALL_RULES, SMALL_RELATIONS, 0.5, "assign"),
                "the mix columns come first: the token codes are columns 0 .. n-1, the mix codes n .. 2n-1":
                    want.roll(len(SMALL_RELATIONS), dims=1),
            })
    answers = _readout_answers(got, SMALL_RULES, SMALL_RELATIONS, 0.5)
    if answers != ["aunt", "grandfather", "father"]:
        raise AssertionError("the unembedding does not read the composed relation from the mix\n"
                             "  nearest relation for father sister, father father, sister father\n"
                             f"  expected: ['aunt', 'grandfather', 'father']\n  got:      {answers}")
    passed("composition_unembedding")


def _xor_squares(table: Tensor, ordered: bool = False, loose: bool = False, ordered_columns: bool = False,
                 same_answers: bool = False, neighbours: bool = False) -> int:
    """The number of XOR squares of `table`, or what one of the usual mistakes counts:
    `ordered` (every square 4 times), `ordered_columns` (twice), `loose` (off-diagonal cells not
    compared), `same_answers` (c = d allowed), `neighbours` (adjacent rows and columns only)."""
    n_rows, n_cols = table.shape
    count = 0
    pairs = itertools.permutations if ordered else itertools.combinations
    column_pairs = itertools.permutations if ordered or ordered_columns else itertools.combinations
    for i, k in pairs(range(n_rows), 2):
        for j, m in column_pairs(range(n_cols), 2):
            if neighbours and (k != i + 1 or m != j + 1):
                continue
            diagonal = table[i, j] == table[k, m]
            other = same_answers or (table[i, m] != table[i, j] and table[k, j] != table[i, j])
            crossed = loose or table[i, m] == table[k, j]
            count += int(bool(diagonal and other and crossed))
    return count


TABLES = {
    "friend/enemy [[0, 1], [1, 0]]": torch.tensor([[0, 1], [1, 0]]),
    "nested [[0, 0], [0, 1]]": torch.tensor([[0, 0], [0, 1]]),
    "three answers [[0, 1], [2, 0]]": torch.tensor([[0, 1], [2, 0]]),
    "3 x 3 [[0, 1, 0], [1, 0, 0], [0, 1, 1]]": torch.tensor([[0, 1, 0], [1, 0, 0], [0, 1, 1]]),
}


def _xor_count(xor_squares: Callable, label: str, table: Tensor) -> Tensor:
    """The learner's count for `table`, as a 0-d tensor for compare."""
    got = call(label, xor_squares, table.clone())
    if isinstance(got, Tensor) and got.numel() == 1:
        got = int(got)
    if not isinstance(got, int):
        raise AssertionError(f"xor_squares must return an int, got {type(got).__name__}")
    return torch.tensor(got)


def _xor_mistakes(table: Tensor) -> dict[str, Tensor]:
    return {
        "each square was counted 4 times: take rows i < k and columns j < m, each pair once":
            torch.tensor(_xor_squares(table, ordered=True)),
        "each square was counted twice: take columns j < m, not every ordered pair j != m":
            torch.tensor(_xor_squares(table, ordered_columns=True)),
        "the two off-diagonal cells must hold the same answer (table[i, m] == table[k, j])":
            torch.tensor(_xor_squares(table, loose=True)),
        "only neighbouring rows and columns were paired: every i < k and j < m count, however far apart":
            torch.tensor(_xor_squares(table, neighbours=True)),
        "a square whose cells all hold one answer was counted: the two answers must differ (c != d)":
            torch.tensor(_xor_squares(table, same_answers=True)),
    }


# Not printed when right: two relations that always give the same answer hold no XOR square.
SAME_ANSWER = torch.tensor([[2, 2], [2, 2]])


@exercise_check
def check_xor_squares(xor_squares: Callable) -> None:
    for name, table in TABLES.items():
        label = f"xor_squares({name})"
        compare(label, _xor_count(xor_squares, label, table), torch.tensor(_xor_squares(table)), _xor_mistakes(table))
    label = f"xor_squares(one answer everywhere {SAME_ANSWER.tolist()})"
    compare(label, _xor_count(xor_squares, label, SAME_ANSWER), torch.tensor(0), _xor_mistakes(SAME_ANSWER))
    passed("xor_squares")


def _fit(x: list[float], y: list[float], mistake: str = "") -> Tensor:
    """(a, p) of log y = log a + p log x by the normal equations, or a usual mistake."""
    if mistake == "endpoints":
        p = math.log(y[-1] / y[0]) / math.log(x[-1] / x[0])
        return torch.tensor([y[0] / x[0] ** p, p], dtype=torch.float64)
    u = [math.log(v) for v in x] if mistake != "linear" else list(x)
    w = [math.log(v) for v in y] if mistake != "linear" else list(y)
    if mistake == "no intercept":  # the line through the origin: log a = 0
        return torch.tensor([1.0, sum(a * b for a, b in zip(u, w)) / sum(a * a for a in u)], dtype=torch.float64)
    n, su, sw = len(u), sum(u), sum(w)
    p = (n * sum(a * b for a, b in zip(u, w)) - su * sw) / (n * sum(a * a for a in u) - su**2)
    c = (sw - p * su) / n
    a = c if mistake in ("linear", "log a") else math.exp(c)
    return torch.tensor([p, a] if mistake == "swapped" else [a, p], dtype=torch.float64)


POWER_CASES = [([1.0, 2.0, 4.0, 8.0], [3.0, 6.0, 12.0, 24.0]), ([1.0, 2.0, 4.0], [1.0, 4.0, 8.0])]


@exercise_check
def check_power_law_fit(power_law_fit: Callable) -> None:
    for x, y in POWER_CASES:
        got = call(f"power_law_fit({x}, {y})", power_law_fit, torch.tensor(x, dtype=torch.float64),
                    torch.tensor(y, dtype=torch.float64))
        if not (isinstance(got, tuple) and len(got) == 2):
            raise AssertionError(f"power_law_fit must return a tuple (a, p), got {got!r}")
        got = torch.tensor([float(v) for v in got], dtype=torch.float64)
        compare(f"power_law_fit(x={x}, y={y})  as (a, p)", got, _fit(x, y), {
            "fit log y against log x, not y against x": _fit(x, y, "linear"),
            "return (a, p) in that order": _fit(x, y, "swapped"),
            "a is exp(intercept): the line fits log a": _fit(x, y, "log a"),
            "the slope through the two end points is not the least-squares line": _fit(x, y, "endpoints"),
            "the line was forced through the origin: the design needs a column of ones for log a":
                _fit(x, y, "no intercept"),
        }, atol=1e-6)
    passed("power_law_fit")


# ---------------------------------------------------------------- hidden tests (see hand_in.py)
# The course's references here (rule_targets, composition_readout, fit_power_law) are plain
# indexing, loops and least squares: they run no aten operator of their own that a correct answer
# would not run too, so these exercises refuse them by name only.
def _compose_cases(gen: torch.Generator) -> list[Case]:
    lookup = composition_lookup(RULES)
    cases = []
    for k in range(3):
        ids, _ = sentence_batch(RULES, PEOPLE, batch=40)(gen)
        cases.append(Case(f"batch {k + 1} of 40 random sentences X r1 r2 Y of the lesson's rules",
                          lambda ids=ids: rule_targets(ids, RULES), (ids, lookup)))
    return cases


def _unembedding_cases(gen: torch.Generator) -> list[Case]:
    # The old tests also asked that each rule's row reads out its composed relation: with the
    # entries right within 1e-9, it does exactly when the reference's does.
    kinship = list(KINSHIP_RULES.items())
    cases = []
    for alpha in (0.5, 0.25, 0.8):
        rules = dict(kinship[i] for i in torch.randperm(len(kinship), generator=gen)[:20].tolist())
        cases.append(Case(f"20 kinship rules drawn at random, alpha={alpha}",
                          lambda rules=rules, alpha=alpha: _unembedding(rules, RELATIONS, alpha),
                          (rules, list(RELATIONS), alpha)))
    return cases


def _nested_table(gen: torch.Generator) -> Tensor:
    """A table whose rows' sets of 1s are nested, in shuffled columns: it holds no XOR square."""
    rows, cols = (int(n) for n in torch.randint(3, 6, (2,), generator=gen))
    thresholds = torch.randint(cols + 1, (rows,), generator=gen)
    table = (torch.arange(cols) >= thresholds[:, None]).long()  # row i: 1 from column threshold_i on
    return table[:, torch.randperm(cols, generator=gen)]


def _xor_cases(gen: torch.Generator) -> list[Case]:
    cases = []
    for rows, cols, answers in [(2, 2, 2), (3, 5, 2), (6, 4, 3), (5, 5, 4), (1, 4, 2)]:
        table = torch.randint(answers, (rows, cols), generator=gen)
        cases.append(Case(f"table {table.tolist()}", lambda table=table: _xor_squares(table), (table,)))
    nested = _nested_table(gen)
    cases.append(Case(f"nested rows {nested.tolist()}", lambda: 0, (nested,)))
    return cases


def _least_squares_power_law(x: Tensor, y: Tensor) -> tuple[float, float]:
    """(a, p) by the normal equations in Python floats, independent of torch.linalg."""
    a, p = _fit(x.tolist(), y.tolist()).tolist()
    return a, p


def _power_law_cases(gen: torch.Generator) -> list[Case]:
    cases = []
    for n in (3, 5, 9):
        x = torch.rand(n, generator=gen, dtype=torch.float64) * 100 + 1
        y = 2.5 * x**0.8 * torch.exp(0.3 * torch.randn(n, generator=gen, dtype=torch.float64))
        cases.append(Case(f"{n} points (x, y) scattered around y = 2.5 x^0.8",
                          lambda x=x, y=y: _least_squares_power_law(x, y), (x, y)))
    return cases


EXERCISES = {spec.name: spec for spec in [
    Exercise("compose_targets", _compose_cases, atol=0.0, rtol=0.0,
             forbidden_names=("rule_targets", "composition_lookup", "sentence_batch"),
             forbidden_objects=(rule_targets, composition_lookup, sentence_batch)),
    Exercise("composition_unembedding", _unembedding_cases, atol=1e-9, rtol=1e-5,
             forbidden_names=("composition_readout", "handset_model"),
             forbidden_objects=(composition_readout, handset_model)),
    Exercise("xor_squares", _xor_cases, atol=0.0, rtol=0.0),
    # the old tests: a within 1e-6 of a, p within 1e-6
    Exercise("power_law_fit", _power_law_cases, atol=1e-9, rtol=1e-6,
             forbidden_names=("fit_power_law", "polyfit"), forbidden_objects=(fit_power_law,)),
]}
