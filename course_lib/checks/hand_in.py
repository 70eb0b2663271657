"""Hidden tests that code in the learner's kernel cannot fool: the kernel computes, the grader judges.

A graded cell's hidden tests are one line, `hand_in("<exercise>", <function>)`.

- While grading, the grader (another process, outside the sandbox) keeps the answer key: the
  cases, their seed, the reference answers and the visible checks' expectations. It writes each
  cell's inputs into its line, `hand_in("<exercise>", <function>, "<inputs>")`, so the kernel
  gets them only when that cell runs, and nothing that computes an answer (see
  grading/answer_key.py). `hand_in` calls the learner's function on each input and hands in
  what came back as plain data: tensors as their raw bytes, numbers, tuples of those, or the
  error raised; the grader compares. Patching torch, IPython or this module inside the kernel
  can change what is handed in, never how it is judged.
- Anywhere else (the learner's own run, nbval, the tests) it draws the cases from a fixed seed
  and judges right away, in this process, with the same `judge`, and prints "passed" or raises
  CheckFailed.

Each exercise set's module (course_lib/checks/<concept>.py) lists its exercises in `EXERCISES`.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import importlib
import inspect
import json
import math
import numbers
import os
import re
import sys
import threading
from dataclasses import dataclass, field
from typing import Callable, Iterator, Mapping

import numpy
import torch
from torch import Tensor

from . import CheckFailed, _TorchCalls, earlier_answers, written_by_hand

MIME = "application/vnd.transformer-roots.hand-in+json"
# The operators an exercise's calls run are recorded for at most this long: the profiler keeps
# about 1 kB per operator, so a loop that never ends would fill the kernel's memory in seconds and
# cost the whole notebook. Past it the recording stops, and the exercise earns nothing.
RECORDING_SECONDS = 1.0
DEFAULT_SEED = 20261125  # the learner's own runs; grading draws a fresh one, outside, per notebook

# torch's ready-made kernels, by the name the dispatcher gives them, whatever Python name reached them.
SOFTMAX_OPS = frozenset({"aten::softmax", "aten::_softmax", "aten::_safe_softmax", "aten::special_softmax",
                         "aten::log_softmax", "aten::_log_softmax", "aten::special_log_softmax"})
ATTENTION_OPS = frozenset({"aten::scaled_dot_product_attention", "aten::_scaled_dot_product_attention_math",
                           "aten::_scaled_dot_product_flash_attention_for_cpu",
                           "aten::_scaled_dot_product_efficient_attention", "aten::_native_multi_head_attention",
                           "aten::_transformer_encoder_layer_fwd"})
NORM_OPS = frozenset({"aten::layer_norm", "aten::native_layer_norm", "aten::group_norm", "aten::native_group_norm",
                      "aten::rms_norm", "aten::_fused_rms_norm", "aten::batch_norm", "aten::native_batch_norm",
                      "aten::_native_batch_norm_legit", "aten::_native_batch_norm_legit_no_training",
                      "aten::_batch_norm_impl_index", "aten::instance_norm"})


@dataclass(frozen=True)
class Raises:
    """The reference answer is an error: of this type, with a message that names these numbers."""

    error: type[Exception]
    names: tuple[str, ...] = ()


@dataclass
class Case:
    """One call of the learner's function: `label` names its inputs in the feedback.

    `args` are what the function gets; `run`, when given, calls it instead (for cases that pass
    the function around or call it twice). `want` computes the reference answer; only the judge
    calls it.
    """

    label: str
    want: Callable[[], object]
    args: tuple = ()
    run: Callable[[Callable], object] | None = None


@dataclass(frozen=True)
class Exercise:
    """What the hidden tests of one exercise draw, compare and refuse.

    - `cases(generator)` draws the inputs; the same seed gives the same cases in the kernel and
      in the grader.
    - `forbidden_ops`: aten operators the answer may not run (in any thread), e.g. SOFTMAX_OPS.
    - `forbidden_names`, `forbidden_objects`: what `written_by_hand` refuses in the source.
    - `uses`: the learner's earlier answers this one may call, replaced by references while it is
      graded, so that one mistake costs once.
    - `any_float`: the exercise lets the learner pick the float dtype; a float answer is then
      compared as float64, within what its own dtype can hold (FLOAT_TOLERANCE) or `atol`.
    """

    name: str
    cases: Callable[[torch.Generator], list[Case]]
    atol: float = 1e-5
    rtol: float = 1e-4
    forbidden_ops: frozenset[str] = frozenset()
    forbidden_names: tuple[str, ...] = ()
    forbidden_objects: tuple[object, ...] = ()
    uses: Mapping[str, Callable] = field(default_factory=dict)
    any_float: bool = False


# ------------------------------------------------------------------ in the kernel
def exercise(name: str, set_name: str | None = None) -> Exercise:
    """The Exercise called `name`: of exercise set `set_name` ("01_attention_scores"), or of
    whichever set's checks the notebook imported."""
    # An instructor who adds an exercise meets this first: say where its entry goes.
    fix = "add an Exercise(...) for it to EXERCISES in course_lib/checks/<set>.py (docs/new-exercise.md)"
    if set_name is not None:
        module = importlib.import_module(f"course_lib.checks.{set_name.split('_', 1)[1]}")
        if name not in module.EXERCISES:
            raise KeyError(f"no exercise called {name!r} in {module.__name__}.EXERCISES: {fix}")
        return module.EXERCISES[name]
    for module_name, module in list(sys.modules.items()):
        if module_name.startswith("course_lib.checks.") and name in getattr(module, "EXERCISES", {}):
            return module.EXERCISES[name]
    raise KeyError(f"no exercise called {name!r} in the exercise sets imported so far: {fix}")


def hand_in(name: str, fn: Callable, inputs: str | None = None) -> None:
    """Run the hidden tests of exercise `name` on the learner's `fn`: judge here, or hand in.

    `inputs` is what the grader wrote into the line (grading); without it the cases are drawn
    here from DEFAULT_SEED and judged at once (the learner's own run).
    """
    if inputs is not None:
        record = answer(fn, json.loads(base64.b64decode(inputs)))
        from IPython.display import display
        display({MIME: record, "text/plain": f"hand-in of {name}: {len(record['results'])} results"}, raw=True)
        return
    spec = exercise(name)
    written_by_hand(fn, spec.forbidden_names, spec.forbidden_objects)
    record = collect(spec, fn, DEFAULT_SEED)
    problems = judge(spec, record, DEFAULT_SEED)
    if problems:
        raise CheckFailed(f"{name}, hidden tests: " + problems[0])
    print(f"{name}: hidden tests passed ({len(record['results'])} cases)")


def answer(fn: Callable, inputs: dict) -> dict:
    """The learner's `fn` on each call the grader prepared (`inputs`, see grading/answer_key.py).

    Functions handed to `fn` (a decoder, a sublayer) and the earlier answers it may call are
    `Replay`s of the grader's answers for exactly the inputs a right answer gives them.
    """
    written_by_hand(fn, inputs["forbidden_names"])
    replays = [Replay("the function handed in", table) for table in inputs["replays"]]
    namespace = inspect.unwrap(fn).__globals__
    uses = {name: Replay(name, table, fallback=namespace.get(name)) for name, table in inputs["uses"].items()}
    results, ops, names = [], set(), set()
    recording = _operators(ops) if inputs["forbidden_ops"] else _operators.off()
    # torch functions by their Python name (F.multi_head_attention_forward runs only bmm and softmax)
    with earlier_answers(fn, **uses), recording, _TorchCalls(names):
        for call in inputs["calls"]:
            for replay in replays:
                replay.asked.clear()
            result = _call(fn, Case("", lambda: None, tuple(decode_input(call, replays))))
            result["asked"] = [[i, asked] for i, replay in enumerate(replays) for asked in replay.asked][:MAX_ASKED]
            results.append(result)
    return {"exercise": inputs["exercise"], "results": results, "ops": sorted(ops), "ops_cut": recording.cut,
            "refused": sorted(names & set(inputs["forbidden_names"]))}


MAX_ASKED = 64  # calls of a handed-in function reported back per call (a greedy decoder makes ~10)


def encode_input(value: object, callables: list | None = None) -> dict:
    """An input as plain JSON, written the same way in the grader and in the kernel.

    Tensors, numbers, strings, None, and lists, tuples and dicts of those; a function (a decoder
    handed to the learner's, say) becomes {"replay": i}, its index in `callables` (the grader's).
    """
    if isinstance(value, Tensor) or isinstance(value, (bool, numbers.Real, numpy.bool_)):
        return encode(value)
    if value is None or isinstance(value, str):
        return {"none": True} if value is None else {"str": value}
    if type(value) in (list, tuple):
        return {type(value).__name__: [encode_input(v, callables) for v in value]}
    if type(value) is dict:
        return {"dict": [[encode_input(k, callables), encode_input(v, callables)] for k, v in value.items()]}
    if callable(value) and callables is not None:
        callables.append(value)
        return {"replay": len(callables) - 1}
    return {"other": type(value).__name__}


def decode_input(data: dict, replays: list) -> object:
    """The value encode_input wrote (the grader wrote it: trusted), with replays for functions."""
    (kind, body), = data.items()
    if kind in ("list", "tuple"):
        items = [decode_input(v, replays) for v in body]
        return items if kind == "list" else tuple(items)
    if kind == "dict":
        return {decode_input(k, replays): decode_input(v, replays) for k, v in body}
    if kind == "replay":
        return replays[body]
    if kind in ("none", "str"):
        return None if kind == "none" else body
    return decode(data)


def input_key(args: tuple, kwargs: dict) -> str:
    """A call's inputs as one short string: equal inputs, equal keys, in the grader and the kernel."""
    text = json.dumps(encode_input([list(args), kwargs]), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


class Replay:
    """A function the grader ran: its answers for the inputs a right answer gives it, and no code.

    An input equal to a prepared one, or as close as float rounding (an answer that adds in another
    order), gets that answer. Any other input gets `fallback` (the learner's own earlier answer) or
    a LookupError that says so.
    """

    def __init__(self, name: str, table: list, fallback: Callable | None = None) -> None:
        self.name, self.fallback, self.asked = name, fallback, []
        prepared = [(decode_input(inputs, []), output) for inputs, output in table]
        self.table = [(input_key(*values), values, output) for values, output in prepared]

    def __call__(self, *args, **kwargs):
        if len(self.asked) < MAX_ASKED:
            self.asked.append(encode_input([list(args), kwargs]) if _small(args) else {"other": "large"})
        key = input_key(args, kwargs)
        exact = [output for prepared_key, _, output in self.table if prepared_key == key]
        near = exact or [output for _, prepared, output in self.table if same_inputs(prepared, [list(args), kwargs])]
        if near:
            return decode(near[0])
        if self.fallback is not None:
            return self.fallback(*args, **kwargs)
        raise LookupError(f"{self.name} was called with inputs that no right answer gives it, so the grader has no "
                          "answer for them")


def _small(value: object) -> bool:
    return sum(t.numel() for t in _tensors_in(value)) <= 100_000


def same_inputs(a: object, b: object) -> bool:
    """Equal inputs: tensors of one shape and dtype, equal to float rounding (another order of the
    same additions); functions of one kind; anything else equal.

    In the kernel, the learner's code may have patched torch.allclose or torch.equal (it only
    hurts itself), so tensors are compared by their bytes, or by plain arithmetic."""
    if isinstance(a, Tensor) or isinstance(b, Tensor):
        if not (type(a) is Tensor and type(b) is Tensor and a.shape == b.shape and a.dtype == b.dtype):
            return False
        if encode(a) == encode(b):
            return True
        if not a.is_floating_point() or a.numel() == 0:
            return False
        rounding = 64 * torch.finfo(a.dtype).eps
        x, y = a.detach().double().nan_to_num(0.5), b.detach().double().nan_to_num(0.5)
        return bool(((x - y).abs() <= rounding * (1 + y.abs())).all()) and bool((a.isnan() == b.isnan()).all())
    if type(a) in (list, tuple) and type(b) in (list, tuple):
        return len(a) == len(b) and all(same_inputs(x, y) for x, y in zip(a, b))
    if type(a) is dict and type(b) is dict:
        return list(a) == list(b) and all(same_inputs(a[k], b[k]) for k in a)
    if callable(a) and callable(b):
        return type(a).__name__ == type(b).__name__
    return type(a) is type(b) and a == b


def collect(spec: Exercise, fn: Callable, seed: int) -> dict:
    """Call `fn` on every case drawn from `seed`; the results as plain data, and the aten ops that ran."""
    cases = spec.cases(torch.Generator().manual_seed(seed))
    results, ops = [], set()
    # Recording costs about 20 us per operator, so an exercise with nothing to refuse skips it.
    recording = _operators(ops) if spec.forbidden_ops else _operators.off()
    with earlier_answers(fn, **spec.uses), recording:
        for case in cases:
            results.append(_call(fn, case))
    return {"exercise": spec.name, "results": results, "ops": sorted(ops), "ops_cut": recording.cut}


def _tensors_in(args: object) -> list[Tensor]:
    """Every tensor an argument holds, inside lists, tuples and dicts too (rollout takes a list)."""
    if isinstance(args, Tensor):
        return [args]
    if isinstance(args, dict):
        args = list(args.values())
    if isinstance(args, (list, tuple)):
        return [t for a in args for t in _tensors_in(a)]
    return []


def _call(fn: Callable, case: Case) -> dict:
    before = [a.detach().clone() for a in _tensors_in(case.args)]
    try:
        got = case.run(fn) if case.run is not None else fn(*case.args)
    except Exception as error:  # a wrong answer may raise: that is its result
        return {"raised": type(error).__name__, "message": str(error)[:300], "kinds": _kinds(type(error))}
    after = _tensors_in(case.args)
    if any(x.shape != y.shape or not torch.equal(x.nan_to_num(0.5), y.nan_to_num(0.5)) for x, y in zip(before, after)):
        return {"changed_input": True}
    return {"value": encode(got)}


def _kinds(error: type) -> list[str]:
    """Every class an error is an instance of, by qualified name ("builtins.ValueError")."""
    return [f"{klass.__module__}.{klass.__qualname__}" for klass in error.__mro__]


class _operators:
    """Record the aten operators that run, in every thread, with torch's profiler, for at most
    `seconds`: then a timer stops it and sets `cut` (the block itself goes on).

    The profiler's own engine is used directly: torch.profiler.profile would first import
    torch._inductor, seconds of work for nothing here.
    """

    def __init__(self, ops: set[str], seconds: float = RECORDING_SECONDS) -> None:
        from torch.autograd import ProfilerConfig
        from torch._C._profiler import ProfilerActivity, ProfilerState, _ExperimentalConfig

        self.ops, self.activities, self.seconds = ops, {ProfilerActivity.CPU}, seconds
        self.config = ProfilerConfig(ProfilerState.KINETO, False, False, False, False, False,
                                     _ExperimentalConfig(profile_all_threads=True))
        self.on, self.cut, self.lock = False, False, threading.Lock()
        self.timer = threading.Timer(seconds, self._stop, kwargs={"cut": True})
        self.timer.daemon = True

    @classmethod
    def off(cls) -> "_operators":
        """What an exercise with no operator to refuse uses: records nothing, and is never cut."""
        nothing = cls.__new__(cls)
        nothing.on, nothing.cut, nothing.timer = False, False, None
        return nothing

    def __enter__(self) -> "_operators":
        from torch.autograd import _enable_profiler, _prepare_profiler

        if self.timer is not None:
            with _quiet_stderr():
                _prepare_profiler(self.config, self.activities)
                _enable_profiler(self.config, self.activities)
            self.on = True
            self.timer.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self._stop()

    def _stop(self, cut: bool = False) -> None:
        from torch.autograd import _disable_profiler

        with self.lock:  # the timer's thread and the block's end may both get here
            if not self.on:
                return
            self.on, self.cut = False, cut
            with _quiet_stderr():
                events = _disable_profiler().events()
        self.ops.update(name for name in (event.name() for event in events) if name.startswith("aten::"))


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """The profiler's C++ side logs a line to file descriptor 2 as it starts and stops: drop them."""
    sys.stderr.flush()
    saved, null = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved), os.close(null)


def encode(value: object) -> dict:
    """A result as plain JSON: a tensor as dtype, shape and raw bytes; numbers; tuples (named ones
    too) and lists of those."""
    if type(value) is Tensor:
        x = value.detach().cpu().contiguous()
        raw = x.reshape(-1).view(torch.uint8).numpy().tobytes() if x.numel() else b""
        return {"tensor": {"dtype": str(x.dtype).removeprefix("torch."), "shape": list(x.shape),
                           "bytes": base64.b64encode(raw).decode()}}
    if isinstance(value, (bool, numpy.bool_)):
        return {"bool": bool(value)}
    if isinstance(value, numbers.Integral):  # int, numpy's integers
        return {"int": int(value)}
    if isinstance(value, numbers.Real):  # float, numpy's floats
        return {"float": float(value).hex()}
    if isinstance(value, tuple) or type(value) is list:  # a namedtuple is a tuple with names
        return {"tuple": [encode(v) for v in value]}
    kind = type(value).__name__
    if isinstance(value, Tensor):
        kind += " (a subclass of torch.Tensor)"
    return {"other": kind}


# ------------------------------------------------------------------ in the grader
DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16, "bfloat16": torch.bfloat16,
          "int64": torch.int64, "int32": torch.int32, "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8,
          "bool": torch.bool}
MAX_ELEMENTS = 1_000_000


class Malformed(ValueError):
    """A record that is not what hand_in writes: judged wrong, never trusted."""


def decode(data: object) -> object:
    """The value `encode` wrote, checked field by field: anything else raises Malformed."""
    if not isinstance(data, dict) or len(data) != 1:
        raise Malformed("not a result")
    (kind, body), = data.items()
    if kind == "tensor":
        if not isinstance(body, dict) or body.get("dtype") not in DTYPES or not isinstance(body.get("shape"), list):
            raise Malformed("a tensor without a known dtype and shape")
        shape = body["shape"]
        if not all(type(n) is int and 0 <= n for n in shape) or math.prod(shape) > MAX_ELEMENTS:
            raise Malformed(f"a tensor of shape {shape}")
        dtype = DTYPES[body["dtype"]]
        raw = base64.b64decode(body.get("bytes", ""), validate=True)
        if len(raw) != math.prod(shape) * dtype.itemsize:
            raise Malformed("a tensor whose bytes do not fit its shape")
        if not raw:
            return torch.empty(shape, dtype=dtype)
        return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype).reshape(shape)
    if kind == "bool" and type(body) is bool or kind == "int" and type(body) is int:
        return body
    if kind == "float" and isinstance(body, str):
        return float.fromhex(body)
    if kind == "tuple" and isinstance(body, list):
        return tuple(decode(v) for v in body)
    if kind == "other" and isinstance(body, str):
        return _Other(body[:100])
    raise Malformed(f"an unknown kind of result {kind!r}")


@dataclass(frozen=True)
class _Other:
    kind: str


def judge(spec: Exercise, record: object, seed: int) -> list[str]:
    """What is wrong with a handed-in record, case by case: [] when every case is right.

    Runs in the grader's own process: the cases and reference answers are drawn here again from
    the seed, and the record is read as data only.
    """
    refused = refusals(spec, record)
    if refused:
        return refused
    cases, results = spec.cases(torch.Generator().manual_seed(seed)), record.get("results")
    if not isinstance(results, list) or len(results) != len(cases):
        return [f"expected results for {len(cases)} cases"]
    problems = []
    for case, result in zip(cases, results):
        problem = _judge_one(case, result, spec)
        if problem:
            problems.append(f"{case.label}: {problem}")
    return problems


def refusals(spec: Exercise, record: object) -> list[str]:
    """Why a record earns nothing whatever its results: not a record of this exercise, or
    ready-made code ran (by the operators, or the torch functions by name, that it lists)."""
    if not isinstance(record, dict) or record.get("exercise") != spec.name:
        return [f"no results were handed in for {spec.name}"]
    ops = record.get("ops")
    if not isinstance(ops, list):
        return ["the record of operators that ran is missing"]
    if spec.forbidden_ops and record.get("ops_cut") is not False:
        return [f"{spec.name} ran for more than {RECORDING_SECONDS:g} s while the grader recorded which of torch's "
                "operators it used, so ready-made code cannot be ruled out (a loop that never ends?)"]
    if spec.forbidden_ops and not ops:  # every answer runs some operator: the recording was switched off
        return [f"no operators were recorded while {spec.name} ran, so ready-made code cannot be ruled out"]
    refused = sorted(spec.forbidden_ops.intersection(map(str, ops)), key=lambda op: (op.startswith("aten::_"), op))
    refused += [str(name)[:60] for name in record.get("refused") or [] if isinstance(record.get("refused"), list)]
    if refused:
        return [f"{spec.name} runs torch's ready-made `{refused[0].removeprefix('aten::')}` (under whatever name "
                "it was called): this exercise asks you to write it yourself, so it earns no credit"]
    return []


def _judge_one(case: Case, result: object, spec: Exercise) -> str:
    want = case.want()
    if not isinstance(result, dict):
        return "no result"
    if result.get("changed_input") is True:
        return "your function changed one of its input tensors in place"
    if "raised" in result:
        error, message = str(result.get("raised")), str(result.get("message", ""))
        if isinstance(want, Raises):
            kinds = result.get("kinds")
            kinds = [str(k) for k in kinds] if isinstance(kinds, list) else [f"builtins.{error}"]
            if _kinds(want.error)[0] not in kinds:  # a subclass of the wanted error is one
                return f"expected {want.error.__name__}, got {error}: {message}"
            missing = [n for n in want.names if not re.search(rf"(?<!\d){n}(?!\d)", message)]
            return f"the message must name {', '.join(missing)}: {message}" if missing else ""
        return f"raised {error}: {message}"
    if isinstance(want, Raises):
        return f"expected {want.error.__name__}, but it returned a result"
    try:
        got = decode(result.get("value"))
    except (Malformed, ValueError, TypeError, RecursionError) as error:
        return f"the result could not be read ({error})"
    return compare_values(got, want, spec.atol, spec.rtol, spec.any_float)


# What a float dtype can hold (torch.testing's defaults): an answer computed in float32, which an
# exercise with any_float allows, is right when it is as close as float32 can be.
FLOAT_TOLERANCE = {torch.float16: (1e-3, 1e-5), torch.bfloat16: (1.6e-2, 1e-5), torch.float32: (1e-5, 1.3e-6)}


def compare_values(got: object, want: object, atol: float, rtol: float, any_float: bool = False) -> str:
    """'' when `got` equals `want` within tolerance, else what differs.

    With `any_float`, a float tensor of any float dtype is compared as float64, within the larger
    of (atol, rtol) and what its own dtype can hold."""
    if isinstance(got, _Other):
        return f"expected a plain torch.Tensor or a number, got {got.kind}"
    if isinstance(want, tuple):
        if not isinstance(got, tuple) or len(got) != len(want):
            return f"expected a tuple of {len(want)} results"
        for i, (g, w) in enumerate(zip(got, want)):
            problem = compare_values(g, w, atol, rtol, any_float)
            if problem:
                return f"result {i + 1}: {problem}"
        return ""
    if isinstance(want, bool):
        got = bool(got.item()) if isinstance(got, Tensor) and got.numel() == 1 else got
        return "" if type(got) is bool and got == want else f"expected {want}, got {_show(got)}"
    if isinstance(want, (int, float)):
        if isinstance(got, Tensor) and got.numel() == 1 and got.dtype != torch.bool:
            got = got.item()
        if type(got) not in (int, float):
            return f"expected a number, got {_show(got)}"
        return "" if abs(got - want) <= atol + rtol * abs(want) else f"expected {want:.6g}, got {got:.6g}"
    if not isinstance(got, Tensor):
        return f"expected a torch.Tensor, got {_show(got)}"
    if tuple(got.shape) != tuple(want.shape):
        return f"expected shape {tuple(want.shape)}, got {tuple(got.shape)}"
    kind = lambda x: "bool" if x.dtype == torch.bool else "float" if x.is_floating_point() else "integer"
    if kind(got) != kind(want):
        return f"expected a {kind(want)} tensor ({want.dtype}), got {got.dtype}"
    if kind(want) != "float":
        return "" if torch.equal(got.to(want.dtype), want) else "wrong values"
    if any_float:
        floor_atol, floor_rtol = FLOAT_TOLERANCE.get(got.dtype, (0.0, 0.0))
        atol, rtol = max(atol, floor_atol), max(rtol, floor_rtol)
    elif got.dtype != want.dtype:  # float64 for float32 inputs: the checks ask to keep the input's dtype
        return f"expected dtype {want.dtype}, got {got.dtype}"
    g, w = got.double(), want.double()
    if torch.allclose(g, w, atol=atol, rtol=rtol):
        return ""
    gap = (g - w).abs().nan_to_num(math.inf).max().item()
    return f"wrong values (they differ by up to {gap:.3g})"


def _show(value: object) -> str:
    return type(value).__name__ if isinstance(value, (tuple, Tensor, _Other)) else repr(value)
