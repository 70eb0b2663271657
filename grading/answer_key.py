"""The answer key, kept in the grader's process: what a graded kernel never sees.

For each graded cell, `plan` draws the exercise's hidden cases from a fresh seed (its entry in
EXERCISES) and runs the instructor's solution (solutions/<set>/<set>_exercises.ipynb, run here) through the
exercise's visible check and on every case, recording:
- each call the learner's function will get: the visible check's calls, then each case's;
- what each function handed to it (a decoder, a sublayer, a norm) answers for the inputs a right
  answer gives it, and what each earlier answer it may call (`uses`) answers for them, each
  beside answers for decoy inputs (`_decoy_calls`), so that reading a table is no shortcut past
  the exercise.
The kernel gets the inputs and those tables in the cell's hand_in line (`Plan.line`), and no
code that computes an answer. `verdict` judges what the kernel handed back: the visible check
runs here on the learner's results, then each case is compared with the reference answer.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import importlib
import io
import json
import numbers
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import nbformat
import torch
from torch import Tensor

from course_lib import exercise_notebook
from course_lib.checks import IN_PLACE, CheckFailed
from course_lib.checks.hand_in import (Case, Exercise, Malformed, Raises, _judge_one, _kinds, _Other, compare_values,
                                       decode, decode_input, encode, encode_input, exercise,
                                       refusals, same_inputs)

DECOYS = 2  # answers for made-up inputs beside each real one in a table
VISIBLE = "visible check: "  # how a verdict starts when the visible check fails


@functools.lru_cache(maxsize=None)
def solution(solutions: Path, set_name: str) -> dict:
    """The namespace of the instructor's solution notebook: its setup cell and answer cells, run here."""
    nb = nbformat.read(solutions / set_name / exercise_notebook(set_name), as_version=4)
    namespace: dict = {"__name__": "__answer_key__"}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and (meta.get("solution") or meta.get("grade_id") == "setup"):
            exec(compile(cell.source, f"<{set_name}: {meta.get('grade_id')}>", "exec"), namespace)
    return namespace


class _Recorder:
    """A function, run here: each call's inputs and answer become a row of the kernel's table.

    While `decoying`, a call's row is a decoy's: the answer to an input that a right answer would
    give it had one of the exercise's own inputs been other (see `_decoy_calls`)."""

    def __init__(self, fn: Callable) -> None:
        self.fn, self.table, self.decoys, self.decoying = fn, [], [], False

    def __call__(self, *args, **kwargs):
        inputs = encode_input([list(args), kwargs])
        out = self.fn(*args, **kwargs)
        (self.decoys if self.decoying else self.table).append([inputs, encode(out)])
        return out

    def rows(self, gen: torch.Generator) -> list:
        """The table, with its decoys, each input once, in a shuffled order."""
        unique = {json.dumps(inputs, sort_keys=True): [inputs, out] for inputs, out in self.decoys + self.table}
        rows = list(unique.values())
        return [rows[i] for i in torch.randperm(len(rows), generator=gen).tolist()]


def _tensor_places(value: object, place: tuple = ()) -> list[tuple]:
    """Where the tensors of more than one element are in `value` (nested lists and tuples)."""
    if isinstance(value, Tensor):
        return [place] if value.numel() > 1 else []
    if type(value) in (list, tuple):
        return [p for i, v in enumerate(value) for p in _tensor_places(v, (*place, i))]
    return []


def _shuffled_at(value: object, place: tuple, gen: torch.Generator) -> object:
    """`value` with the tensor at `place` shuffled: the same values, so the same distribution, elsewhere."""
    if not place:
        flat = value.reshape(-1)
        return flat[torch.randperm(flat.numel(), generator=gen)].reshape(value.shape).clone()
    head, *rest = place
    return type(value)(_shuffled_at(v, tuple(rest), gen) if i == head else v for i, v in enumerate(value))


def _swap_callables(value: object, recorders: list) -> object:
    """`value` with each function in it replaced by the next recorder, in encode_input's order."""
    if type(value) in (list, tuple):
        return type(value)(_swap_callables(v, recorders) for v in value)
    if type(value) is dict:
        return {_swap_callables(k, recorders): _swap_callables(v, recorders) for k, v in value.items()}
    if callable(value) and not isinstance(value, (Tensor, str, numbers.Number)):
        return recorders.pop(0)
    return value


@dataclass
class Plan:
    """One graded cell's exercise: the calls the kernel makes, and what the grader keeps to judge them."""

    spec: Exercise
    check: Callable
    cases: list[Case]
    calls: list[dict] = field(default_factory=list)  # encoded inputs, the visible check's first
    args: list[tuple] = field(default_factory=list)  # the same inputs, here
    visible: int = 0  # how many of the calls are the visible check's
    per_case: list[int] = field(default_factory=list)  # how many calls each case makes
    callables: list[Callable] = field(default_factory=list)  # the functions handed in, here
    tables: list[list] = field(default_factory=list)
    uses: dict[str, list] = field(default_factory=dict)

    def line(self) -> str:
        """What the kernel's hand_in line gets: inputs and tables, as base64 JSON."""
        inputs = {"exercise": self.spec.name, "calls": self.calls, "replays": self.tables, "uses": self.uses,
                  "forbidden_ops": sorted(self.spec.forbidden_ops), "forbidden_names": list(self.spec.forbidden_names)}
        return base64.b64encode(json.dumps(inputs).encode()).decode()


def plan(solutions: Path, set_name: str, name: str, seed: int) -> Plan:
    """Run the solution of exercise `name` (in the folder `solutions`) through its visible check and
    on its cases drawn from `seed`."""
    spec = exercise(name, set_name)
    namespace, gen = solution(solutions, set_name), torch.Generator().manual_seed(seed)
    check = getattr(importlib.import_module(f"course_lib.checks.{set_name.split('_', 1)[1]}"), f"check_{name}")
    result = Plan(spec, check, spec.cases(gen))
    recorders: list[_Recorder] = []
    uses = {n: _Recorder(reference) for n, reference in spec.uses.items()}
    handed: list[list[_Recorder]] = []  # per call: the recorders of the functions handed to it

    def reference(args: tuple, fresh: list[_Recorder]):
        saved = {n: namespace[n] for n in uses if n in namespace}
        namespace.update({n: uses[n] for n in saved})
        try:
            return namespace[name](*_swap_callables(args, list(fresh)))
        finally:
            namespace.update(saved)

    def learner(*args):
        result.calls.append(encode_input(list(args), result.callables))
        result.args.append(tuple(a.clone() if isinstance(a, Tensor) else a for a in args))
        fresh = [_Recorder(f) for f in result.callables[len(recorders):]]
        recorders.extend(fresh)
        handed.append(fresh)
        return reference(args, fresh)

    learner.__name__, learner.__wrapped__ = name, namespace[name]  # the visible check reads both
    with contextlib.redirect_stdout(io.StringIO()):
        check(learner)
    result.visible = len(result.calls)
    for case in result.cases:
        before = len(result.calls)
        with contextlib.suppress(Exception):  # a case whose right answer is an error
            case.run(learner) if case.run is not None else learner(*case.args)
        result.per_case.append(len(result.calls) - before)
    _decoy_calls(result.args, handed, list(uses.values()), reference, gen)
    result.tables = [r.rows(gen) for r in recorders]
    result.uses = {n: r.rows(gen) for n, r in uses.items() if r.table}
    return result


def _decoy_calls(calls: list[tuple], handed: list[list[_Recorder]], uses: list[_Recorder],
                 reference: Callable, gen: torch.Generator) -> None:
    """Run the solution again on each call with one of its tensors shuffled, DECOYS times per
    tensor, so that every table holds, beside each real row, rows for what a right answer asks
    when that input is other. A decoy then differs from the real row only where the answer works
    on that input, and its values are drawn as the real ones are: telling the real row apart (by
    a mask handed through as it is, or by any statistic of the values) takes the exercise's own
    computation. A decoy input the solution refuses makes no row."""
    for args, fresh in zip(calls, handed):
        if not fresh and not uses:  # no table to hide its rows in
            continue
        for recorder in (*fresh, *uses):
            recorder.decoying = True
        for place in _tensor_places(args):
            for _ in range(DECOYS):
                with contextlib.suppress(Exception), contextlib.redirect_stdout(io.StringIO()):
                    reference(_shuffled_at(args, place, gen), fresh)
        for recorder in (*fresh, *uses):
            recorder.decoying = False


# ------------------------------------------------------------------ judging what came back
MAX_REPLAYED = 200  # calls of the check's own functions made again here, per call of the learner's


class _Answers:
    """The learner's function, as the grader sees it: the kernel's results for the planned calls, in order.

    A call whose inputs are not the planned ones (an earlier result was wrong, so the next input
    differs) has no result: it raises LookupError, which makes that case wrong.
    """

    def __init__(self, results: list, planned: list[tuple], name: str) -> None:
        self.results, self.planned, self.next = results, planned, 0
        self.__name__ = name

    def __call__(self, *args):
        if self.next >= len(self.results) or not same_inputs(self.planned[self.next], args):
            raise LookupError("it was called on inputs that follow from a wrong earlier result")
        result = self.results[self.next]
        self.next += 1
        self._ask_again(result, args)
        if not isinstance(result, dict):
            raise Malformed("no result")
        if result.get("changed_input") is True:
            raise CheckFailed(f"`{self.__name__}` changed one of its input tensors in place {IN_PLACE}")
        if "raised" in result:
            raise _error_like(result)
        got = decode(result.get("value"))
        if isinstance(got, _Other):
            return got.kind  # a string: every comparison with it fails and names the type
        return got

    def _ask_again(self, result: dict, args: tuple) -> None:
        """Call the check's own functions here as the learner's did in the kernel (the check may count them)."""
        asked = result.get("asked") if isinstance(result, dict) else None
        handed = [a for a in _flatten(args) if callable(a) and not isinstance(a, Tensor)]
        for i, inputs in (asked if isinstance(asked, list) else [])[:MAX_REPLAYED]:
            with contextlib.suppress(Exception):
                call_args, call_kwargs = decode_input(inputs, [])
                if type(i) is int and 0 <= i < len(handed):
                    handed[i](*call_args, **call_kwargs)


def _flatten(value: object) -> list:
    if type(value) in (list, tuple):
        return [x for v in value for x in _flatten(v)]
    if type(value) is dict:
        return [x for k, v in value.items() for x in (*_flatten(k), *_flatten(v))]
    return [value]


def _error_like(result: dict) -> Exception:
    """An exception with the name and message of the one the learner's code raised, of its builtin kind."""
    import builtins
    name, message = str(result.get("raised"))[:100], str(result.get("message", ""))[:300]
    kinds = result.get("kinds") if isinstance(result.get("kinds"), list) else []
    found = [getattr(builtins, str(k).removeprefix("builtins."), None) for k in kinds if str(k).startswith("builtins.")]
    base = next((k for k in found if isinstance(k, type) and issubclass(k, Exception)), Exception)
    return base(message) if name == base.__name__ else type(name, (base,), {})(message)


def verdict(plan_: Plan, record: object) -> list[str]:
    """What is wrong with what the kernel handed in: the visible check's failure, then each wrong case."""
    spec = plan_.spec
    refused = refusals(spec, record)
    if refused:
        return refused
    results = record.get("results")
    if not isinstance(results, list) or len(results) != len(plan_.calls):
        return [f"expected results for {len(plan_.calls)} calls"]
    seen = _visible_check(plan_, results[:plan_.visible])
    if seen:
        return [seen]
    problems, start = [], plan_.visible
    for case, n in zip(plan_.cases, plan_.per_case):
        mine, planned = results[start:start + n], plan_.args[start:start + n]
        start += n
        problem = (_judge_one(case, mine[0], spec) if case.run is None and n == 1
                   else _judge_run(case, _Answers(mine, planned, spec.name), spec))
        if problem:
            problems.append(f"{case.label}: {problem}")
    return problems


def _visible_check(plan_: Plan, results: list) -> str:
    """The visible check, run here on the learner's results: its message, or '' if it passes."""
    answers = _Answers(results, plan_.args[:plan_.visible], plan_.spec.name)
    # A plain function in an empty namespace: the check may inspect it, and its earlier_answers
    # finds nothing to replace there (the kernel's replays did that).
    proxy = eval("lambda *args: answers(*args)", {"answers": answers})
    proxy.__name__ = plan_.spec.name
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            plan_.check(proxy)
    except CheckFailed as failure:
        return f"{VISIBLE}{failure}"
    except Exception as failure:  # a record that does not fit the check's calls
        return f"{VISIBLE}{type(failure).__name__}: {failure}"
    return ""


def _judge_run(case: Case, fn: _Answers, spec: Exercise) -> str:
    """A case that calls the learner's function its own way: run it here on the kernel's results."""
    want = case.want()
    try:
        got = case.run(fn) if case.run is not None else fn(*case.args)
    except CheckFailed:
        return "your function changed one of its input tensors in place"
    except Exception as error:  # the learner's error, or a call that follows a wrong result
        if isinstance(want, Raises):
            kinds = _kinds(type(error))
            if _kinds(want.error)[0] not in kinds:
                return f"expected {want.error.__name__}, got {type(error).__name__}: {error}"
            return ""
        return f"raised {type(error).__name__}: {error}"
    if isinstance(want, Raises):
        return f"expected {want.error.__name__}, but it returned a result"
    if isinstance(got, str):
        return f"expected a plain torch.Tensor or a number, got {got}"
    return compare_values(got, want, spec.atol, spec.rtol, spec.any_float)
