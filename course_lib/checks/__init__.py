"""Visible checks for the exercise notebooks (one module per exercise set).

A check runs the learner's function on a tiny input. A right answer prints one green line,
"✔ <exercise>: passed". A wrong one raises CheckFailed (an AssertionError, so nbgrader's tests
fail too), whose message is a hint ladder:
1. the symptom: what is wrong, the inputs the check used (spelled out, since the learner cannot
   see the check's constants) and the expected vs the got values;
2. last, on a line of its own, the likely bug ("Likely bug: ..."), when the answer matches a
   known mistake.
In a notebook the learner sees step 1 as the error (its `_render_traceback_`: only that, not the
check's internals, wrapped to fit nbgrader's Validate dialog), in red; under it, small and grey,
the inputs, then step 2, only on request: an HTML <details> element, "Stuck? Show the likely bug",
that opens on a click (`CheckAside`; its text/plain, for text-only readers, is the inputs and the
hint). Validate shows the error's text alone, no rich output: there the inputs follow the symptom
in plain text, and a line says where the likely bug is (`HINT_IN_NOTEBOOK`), since the dialog has
no fold to open. An unanswered stub (`raise NotImplementedError()`) gets a message saying what to do.

Each check cell imports its own check, so a check cell run before the notebook's setup cell
reaches this module; it then asks IPython to answer the NameError that follows with the cell to
run first (`_explain_missing_names`).
"""

from __future__ import annotations

import builtins
import contextlib
import dis
import functools
import html
import inspect
import os
import re
import sys
import textwrap
import threading
import traceback
import weakref
from types import CodeType, TracebackType
from typing import Callable, Iterable, Iterator, Mapping

import torch
from torch import Tensor
from torch.overrides import TorchFunctionMode


# nbgrader's Validate prints each line of a failure after a 4-space indent and cuts what passes
# 87 characters; 80 leaves a margin, and fits a notebook's output area too.
WIDTH = 80
RED, GREEN, PLAIN = "\x1b[31m", "\x1b[32m", "\x1b[0m"


def wrap(text: str, width: int = WIDTH) -> list[str]:
    """The lines of `text`, each wrapped at word boundaries to `width`, keeping its indent."""
    lines = []
    for line in text.splitlines():
        indent = line[:len(line) - len(line.lstrip())]
        lines += textwrap.wrap(line, width, subsequent_indent=indent, break_long_words=False,
                               break_on_hyphens=False) or [""]
    return lines


# How a message's second step starts: the named likely bug, or the list of things to check.
HINT_STARTS = ("Likely bug: ", "Things to check: ")
# The fold's label, the step the learner takes to see the likely bug.
SHOW_HINT = "Stuck? Show the likely bug"
# What the grader's feedback says under a symptom whose likely bug it folds under it (grading/steps.py).
HINT_BELOW = "The likely bug is folded under this message, behind “Stuck? Show the likely bug”."
# What Validate says instead: its dialog shows the error's text only, so it has no fold to open.
HINT_IN_NOTEBOOK = "Stuck? Run this check's cell in the notebook: the likely bug is folded under it."


def ladder(message: str) -> tuple[str, str]:
    """(symptom, hint) of a check's message: the hint is its first "Likely bug: ..." or "Things to
    check: ..." sentence, up to the end of that line (empty if none); the symptom is the rest."""
    starts = [i for i in (message.find(start) for start in HINT_STARTS) if i >= 0]
    if not starts:
        return message, ""
    start = min(starts)
    end = message.find("\n", start)
    end = len(message) if end < 0 else end
    return (message[:start].rstrip() + message[end:]).rstrip(), message[start:end].strip()


class CheckFailed(AssertionError):
    """A failed check: IPython shows its symptom alone (no traceback through course_lib).

    The message keeps each sentence on one line (tests and hints search it whole); only what
    IPython shows is wrapped. `inputs` are the message's lines that spell out the check's inputs
    (`_with_inputs`). In a notebook `_show_hint` sets `aside_shown` and shows the inputs and the
    likely bug under the error (`CheckAside`), so the error is the symptom alone; anywhere else
    (Validate's dialog) the error is all there is, so it holds the inputs too, in plain text.
    """

    def __init__(self, message: str = "", inputs: Iterable[str] = ()) -> None:
        super().__init__(message)
        self.inputs = tuple(inputs)
        self.aside_shown = False

    def _render_traceback_(self) -> list[str]:
        symptom, hint = ladder(str(self))
        if self.aside_shown:
            symptom = "\n".join(line for line in symptom.splitlines() if line not in self.inputs)
            return [f"{RED}{line}{PLAIN}" for line in wrap(symptom)]
        # Red says what is wrong; the inputs and the pointer are context, in the plain colour.
        lines = [(line, line in self.inputs) for line in symptom.splitlines()]
        lines += [(HINT_IN_NOTEBOOK, True)] if hint else []
        return [piece if quiet else f"{RED}{piece}{PLAIN}" for line, quiet in lines for piece in wrap(line)]


class FoldedHint:
    """Step 2 of the ladder, as a notebook shows it: closed until clicked (text/html), or the
    hint's plain line (text/plain: nbgrader's feedback text, nbval). The hint may quote the
    learner's values, so its HTML is escaped."""

    def __init__(self, hint: str) -> None:
        self.hint = hint

    def __repr__(self) -> str:
        return self.hint

    def _repr_html_(self) -> str:
        return (f'<details class="tr-hint"><summary>{SHOW_HINT}</summary>'
                f'<pre style="white-space:pre-wrap;margin:4px 0 0 0">{html.escape(self.hint)}</pre></details>')


# The inputs under a failed check, as a notebook shows them: smaller than the message and grey (the
# theme's secondary text colour), context rather than a second error.
QUIET = "font-size:85%;color:var(--jp-content-font-color2,#616161);white-space:pre-wrap;margin:2px 0 4px 0"


class CheckAside:
    """What a notebook shows under a failed check's symptom: the check's inputs, small and quiet
    (the learner cannot see the check's constants), then the likely bug, folded (`FoldedHint`).
    text/plain, for text-only readers: the inputs' lines, then the hint's line. Escaped: inputs
    and hints may quote the learner's values."""

    def __init__(self, inputs: Iterable[str], hint: str) -> None:
        self.inputs, self.hint = tuple(inputs), hint

    def __repr__(self) -> str:
        return "\n".join([*self.inputs, self.hint] if self.hint else self.inputs)

    def _repr_html_(self) -> str:
        label = "The check's input:" if len(self.inputs) == 1 else "The check's inputs:"
        shown = "\n".join(wrap("\n".join([label, *self.inputs]))) if self.inputs else ""
        quiet = f'<pre class="tr-inputs" style="{QUIET}">{html.escape(shown)}</pre>' if shown else ""
        return f'<div class="tr-aside">{quiet}{FoldedHint(self.hint)._repr_html_() if self.hint else ""}</div>'


def _where_in_your_code(error: BaseException) -> str:
    """' (line N of your cell)' for the innermost frame of the learner's own code, if any."""
    frames = [f for f in traceback.extract_tb(error.__traceback__)
              if "course_lib" not in f.filename and "site-packages" not in f.filename and "/torch/" not in f.filename]
    if not frames:
        return ""
    frame = frames[-1]
    return f" (line {frame.lineno} of your cell: `{(frame.line or '').strip()}`)"


# What actually ran inside the learner's function during its last visible check: torch function
# names and Python code objects. written_by_hand refuses credit from it, whatever the alias.
_RAN: "weakref.WeakKeyDictionary[Callable, tuple[set[str], set[CodeType]]]" = weakref.WeakKeyDictionary()


class _TorchCalls(TorchFunctionMode):
    """Records the name of every torch function, Tensor method and functional op that runs."""

    def __init__(self, names: set[str]) -> None:
        super().__init__()
        self.names = names

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.names.add(getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def _recording(names: set[str], codes: set[CodeType]) -> Iterator[None]:
    """Record torch calls (TorchFunctionMode) and Python functions entered (sys.setprofile, and
    threading.setprofile for threads started meanwhile)."""
    previous, previous_threads = sys.getprofile(), threading.getprofile()

    def profile(frame, event, arg):  # 'call' is a Python function starting: note its code object
        if event == "call":
            codes.add(frame.f_code)

    sys.setprofile(profile)
    threading.setprofile(profile)
    try:
        with _TorchCalls(names):
            yield
    finally:
        sys.setprofile(previous)
        threading.setprofile(previous_threads)


# What a check says of an answer that changed its input (here, and in the grader's replay of it).
IN_PLACE = ("(the caller's tensor is modified). Likely bug: an in-place operation such as `x -= ...`, "
            "`x[...] = ...` or `.add_()`; compute a new tensor instead, e.g. `x = x - ...`")


def _recorded(fn: Callable) -> Callable:
    """`fn`, recording into _RAN what runs while it runs."""
    if not inspect.isfunction(fn):
        return fn
    names, codes = set(), set()
    _RAN[fn] = (names, codes)

    @functools.wraps(fn)
    def run(*args, **kwargs):
        inputs = _tensor_arguments(fn, args, kwargs)
        before = {name: x.detach().clone() for name, x in inputs.items()}
        with _recording(names, codes):
            result = fn(*args, **kwargs)
        for name, x in inputs.items():
            if x.shape != before[name].shape or not torch.equal(x.nan_to_num(0.123), before[name].nan_to_num(0.123)):
                raise CheckFailed(f"`{fn.__name__}` changed its input `{name}` in place {IN_PLACE}")
        return result

    return run


def _tensor_arguments(fn: Callable, args: tuple, kwargs: dict) -> dict[str, Tensor]:
    """The tensors passed to `fn`, by parameter name (to say which one was changed)."""
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs).arguments
    except (TypeError, ValueError):
        bound = {f"argument {i + 1}": a for i, a in enumerate(args)}
    return {name: value for name, value in bound.items() if isinstance(value, Tensor)}


def exercise_check(check: Callable) -> Callable:
    """Decorate a visible check `check_<fn>(fn)`: every failure becomes a short CheckFailed.

    - the learner's stub still raises NotImplementedError: say it is not written yet;
    - an AssertionError from the check: the same message, without the check's traceback;
    - any other exception from the learner's code: its type, message and the line in their cell.
    """

    @functools.wraps(check)
    def run(fn: Callable, *args, **kwargs) -> None:
        name = getattr(fn, "__name__", "your function")
        try:
            check(_recorded(fn), *args, **kwargs)
        except NotImplementedError:
            raise CheckFailed(f"`{name}` is not written yet: replace `raise NotImplementedError()` "
                              "with your code, run that cell, then run this check again") from None
        except AssertionError as error:  # CheckFailed too: each becomes a ladder, the inputs shown
            symptom, hint = ladder(str(error))
            inputs = _input_lines(symptom, check)
            raise CheckFailed(_with_inputs(symptom, inputs) + (f"\n{hint}" if hint else ""), inputs) from None
        except Exception as error:  # the learner's code raised: name it, and where, in one line
            raise CheckFailed(f"`{name}` raised {type(error).__name__}: {error}{_where_in_your_code(error)}") from None

    run.is_exercise_check = True  # a cell that calls it is a check cell (see _missing_name_advice)
    return run


# A check's constant named in a message (X, PERM, LOGITS): upper case, not a call.
_CONSTANT = re.compile(r"(?<![\w.`])([A-Z][A-Z0-9_]*)(?![\w(])")
# An input is shown whole up to about three lines of a notebook (wrapped there), cut beyond.
INPUT_ROOM = 3 * WIDTH - 20
_WORD = re.compile(r"(?<![\w.])([a-z_][a-z0-9_]*)(?!\w)")


def _spelled_out(name: str, value: object) -> str | None:
    """One line showing a check's input `name` to the learner, cut to WIDTH; None if not an input."""
    if isinstance(value, Tensor):
        shape = f", shape {tuple(value.shape)}" if value.dim() >= 2 else ""
        prefix = f"  {name}{shape}: "
        return prefix + _cut(_fmt(value), INPUT_ROOM - len(prefix))
    if isinstance(value, (list, tuple, dict, int, float)) and not isinstance(value, bool):
        prefix = f"  {name}: "
        return prefix + _cut(repr(value), INPUT_ROOM - len(prefix))
    if inspect.isfunction(value) and value.__doc__:  # a function the check applies: its docstring's first sentence
        summary = value.__doc__.strip().splitlines()[0].split(". ")[0].rstrip(".")
        return f"  {name}({', '.join(inspect.signature(value).parameters)}): {summary}"
    return None


def _input_lines(symptom: str, check: Callable) -> list[str]:
    """The check's inputs that `symptom` names, one line each: the learner cannot see the check's
    module, so `X` or `sums_with_all` alone would mean nothing to them.

    Inputs are the check module's upper-case constants (tensors, lists, numbers) and its own
    helper functions (not the checks, not private ones), each named in the symptom."""
    namespace, module = check.__globals__, check.__module__
    names = list(dict.fromkeys(_CONSTANT.findall(symptom)))
    names += [w for w in dict.fromkeys(_WORD.findall(symptom)) if inspect.isfunction(namespace.get(w))
              and namespace[w].__module__ == module and not w.startswith(("check_", "_"))]
    return [line for line in (_spelled_out(n, namespace[n]) for n in names if n in namespace) if line]


def _with_inputs(symptom: str, lines: list[str]) -> str:
    """`symptom` with the input `lines` after its first line, before the expected and got values
    (if any): what went in, then what came out."""
    if not lines:
        return symptom
    at = symptom.find("\n  expected: ")
    at = len(symptom) if at < 0 else at
    return "\n".join([symptom[:at], *lines]) + symptom[at:]


def call(label: str, fn: Callable, *args, hint: str = ""):
    """Run the learner's function; turn an exception into a check failure that names it."""
    try:
        return fn(*args)
    except (NotImplementedError, CheckFailed):
        raise  # an unanswered stub, or an input changed in place: exercise_check says so
    except Exception as error:  # the learner sees their own error, plus the likely cause
        raise AssertionError(f"{label} raised {type(error).__name__}: {error}"
                             + (f". Likely bug: {hint}" if hint else "")) from None


def _fmt(x: object) -> str:
    if isinstance(x, Tensor):
        return str(x.detach().to(torch.float64).numpy().round(4).tolist()) if x.is_floating_point() else str(x.tolist())
    return repr(x)


def _cut(text: str, room: int) -> str:
    """`text` if it fits in `room` characters, else its start up to an element boundary, then '...'."""
    if len(text) <= room:
        return text
    cut = text.rfind(", ", 0, room - 5)
    return (text[:cut + 1] if cut > 0 else text[:room - 4]) + " ..."


def _expected_and_got(got: Tensor, expected: Tensor, atol: float) -> str:
    """Two lines, expected and got, each cut to fit WIDTH; when cut, a third names the first wrong entry."""
    room = WIDTH - len("  expected: ")
    lines = [f"  expected: {_cut(_fmt(expected), room)}", f"  got:      {_cut(_fmt(got), room)}"]
    wrong = ~torch.isclose(got.to(expected.dtype), expected, atol=atol, rtol=1e-4)
    if any(line.endswith("...") for line in lines) and wrong.any():
        index = tuple(int(i) for i in wrong.nonzero()[0])
        lines.append(f"  first wrong entry, at {list(index)}: expected {_fmt(expected[index])}, "
                     f"got {_fmt(got[index])}")
    return "\n".join(lines)


def compare(name: str, got: object, expected: Tensor, likely_bugs: Mapping[str, Tensor] | None = None,
            atol: float = 1e-5) -> None:
    """Return quietly if `got` is close to `expected`; else raise CheckFailed with the matching known bug
    and expected vs got."""
    if not isinstance(got, Tensor):
        raise CheckFailed(f"{name}: expected a torch.Tensor, got {type(got).__name__}")
    if got.shape != expected.shape:
        raise CheckFailed(f"{name}: expected shape {tuple(expected.shape)}, got {tuple(got.shape)}")
    if torch.allclose(got.to(expected.dtype), expected, atol=atol, rtol=1e-4, equal_nan=False):
        # Right numbers: only the dtype can still be wrong (it decides the hidden tests' comparisons).
        if got.is_floating_point() and expected.is_floating_point() and got.dtype != expected.dtype:
            raise CheckFailed(f"{name}: right values but dtype {got.dtype}, expected {expected.dtype}. Likely bug: "
                              "a new tensor made without dtype=x.dtype (torch.tensor, torch.zeros and torch.arange "
                              "give float32 otherwise), or a .double() or .float(); keep the input's dtype")
        return
    values = _expected_and_got(got, expected, atol)
    for hint, wrong in (likely_bugs or {}).items():
        if wrong.shape == got.shape and torch.allclose(got.to(wrong.dtype), wrong, atol=atol, rtol=1e-4, equal_nan=True):
            raise CheckFailed(f"{name}: wrong values. Likely bug: {hint}\n{values}")
    if torch.isnan(got).any():
        raise CheckFailed(f"{name}: the answer contains NaN. Likely bug: exp() overflow or 0/0 on a masked row\n"
                          f"{values}")
    hints = "; ".join(likely_bugs or {}) or "compare your formula with the text above"
    raise CheckFailed(f"{name}: wrong values. Things to check: {hints}\n{values}")


@contextlib.contextmanager
def earlier_answers(fn: Callable, **references: Callable) -> Iterator[None]:
    """While `fn` is checked, the learner's earlier answers it calls are the references.

    An exercise that builds on an earlier one (attend calls score_matrix) is graded on its own:
    a mistake in the earlier answer costs that exercise's points only, not this one's too.
    Only names the learner defined are replaced, and they are put back afterwards. An earlier
    answer is replaced under every name it has: after `split_into_heads = heads_of`, a later
    answer that calls `heads_of` gets the reference too (it is the same function). A copy of
    the code under another name is another function, and keeps its own behaviour.
    """
    namespace = inspect.unwrap(fn).__globals__
    answers = {name: namespace[name] for name in references if inspect.isfunction(namespace.get(name))
               and namespace[name].__globals__ is namespace}
    aliases = {alias: references[name] for name, answer in answers.items()
               for alias, value in list(namespace.items()) if value is answer}
    saved = {name: namespace[name] for name in aliases}
    namespace.update(aliases)
    try:
        yield
    finally:
        namespace.update(saved)


def passed(name: str) -> None:
    """The one line a right answer prints, green in the notebook."""
    print(f"{GREEN}✔ {name}: passed{PLAIN}")


def _code_objects(code: CodeType) -> Iterator[CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, CodeType):
            yield from _code_objects(const)


def written_by_hand(fn: Callable, forbidden_names: Iterable[str] = (), forbidden_objects: Iterable[object] = (),
                    _seen: set | None = None) -> None:
    """Fail if `fn` calls a ready-made implementation that the exercise asks the learner to write.

    Forbidden: an attribute lookup of a forbidden name (`torch.softmax`, `x.softmax`, `F.softmax`),
    a global that is a forbidden object (course_lib's reference under any name), a global of a
    forbidden name that is not the learner's own function, or anything of course_lib (a graded
    kernel does not have it). The learner's own helper functions
    (defined in the same notebook) are inspected the same way.
    """
    if not inspect.isfunction(fn):
        raise CheckFailed(f"expected a function you wrote, got {type(fn).__name__}")
    forbidden_names, forbidden_objects = set(forbidden_names), list(forbidden_objects)
    seen = _seen if _seen is not None else set()
    seen.add(fn)

    def refuse(name: str) -> None:
        raise CheckFailed(f"{fn.__name__} uses a ready-made `{name}`: this exercise asks you to write it "
                             "yourself, so it earns no credit")

    for code in _code_objects(fn.__code__):
        for instruction in dis.get_instructions(code):
            name = instruction.argval
            if instruction.opname in ("LOAD_ATTR", "LOAD_METHOD") and name in forbidden_names:
                refuse(name)
            if instruction.opname != "LOAD_GLOBAL":
                continue
            target = fn.__globals__.get(name, getattr(builtins, name, None))
            own = inspect.isfunction(target) and target.__globals__ is fn.__globals__
            if _of_the_course(target):
                raise CheckFailed(f"{fn.__name__} uses the course's own `{name}` (course_lib): when your work is "
                                  "graded, course_lib is not there, so write it with torch")
            if any(target is obj for obj in forbidden_objects) or (name in forbidden_names and not own):
                refuse(name)
            if own and target not in seen:
                written_by_hand(target, forbidden_names, forbidden_objects, seen)
    if _seen is None:
        _refuse_what_ran(fn, forbidden_names, forbidden_objects)


def _of_the_course(obj: object) -> bool:
    """A module, function or class of course_lib: not there when grading, except the checks' plumbing."""
    module = obj.__name__ if inspect.ismodule(obj) else getattr(obj, "__module__", None)
    return isinstance(module, str) and module.split(".")[0] == "course_lib"


def _code_of(obj: object) -> set[CodeType]:
    """Code objects that mean `obj` ran: a function's, or every method of a class."""
    obj = getattr(obj, "__func__", obj)
    if inspect.isfunction(obj):
        return {obj.__code__}
    if inspect.isclass(obj):
        return {f.__code__ for klass in obj.__mro__ if klass.__module__.startswith("course_lib")
                for f in vars(klass).values() if inspect.isfunction(f)}
    return set()


def _refuse_what_ran(fn: Callable, forbidden_names: set[str], forbidden_objects: list[object]) -> None:
    """Refuse credit if a ready-made implementation ran during the visible check of `fn`.

    This catches what no reading of the code can: an alias bound as a default argument, in a
    closure, through getattr or at module level. Building blocks (exp, sum, matmul) stay allowed.
    """
    names, codes = _RAN.get(fn, (set(), set()))
    for name in sorted(names & forbidden_names):
        raise CheckFailed(f"{fn.__name__} runs torch's ready-made `{name}` (under whatever name it was called): "
                          "this exercise asks you to write it yourself, so it earns no credit")
    for obj in forbidden_objects:
        if _code_of(obj) & codes:
            raise CheckFailed(f"{fn.__name__} runs the course's own `{getattr(obj, '__name__', obj)}` (under whatever "
                              "name it was called): this exercise asks you to write it yourself, so it earns no credit")


# ---------------------------------------------------------------- a check cell run before the setup cell
# In a fresh kernel nothing of the course has run, so nothing can catch a NameError, except code
# in the cell itself. So each check cell imports its own check: in a fresh kernel that import runs,
# then `check_x(x)` raises NameError for the learner's function. On import, this module asks
# IPython (set_custom_exc, its documented hook) to pass NameErrors to _answer_name_error, which
# shows a cell's own NameError as one line naming the cell to run first. The check cell stays two
# plain lines; a try/except in it would be plumbing for every learner to read, and IPython startup
# files, which could also do this, are not on a learner's machine.
SETUP_NAMES = ("torch", "Tensor")  # what every set's setup cell (its first code cell) imports


def _missing_name_advice(namespace: dict, error: NameError, tb: TracebackType | None) -> str | None:
    """One line saying which cell to run first, or None to show the usual traceback.

    Only a NameError raised by a cell's own top-level code is answered: inside a function (the
    learner's own code), the usual traceback points at the line to fix.
    """
    frame = None
    while tb is not None:
        frame, tb = tb.tb_frame, tb.tb_next
    if error.name is None or frame is None or frame.f_globals is not namespace or frame.f_code.co_name != "<module>":
        return None
    setup_ran = all(name in namespace for name in SETUP_NAMES)
    check_cell = any(getattr(namespace.get(name), "is_exercise_check", False) for name in frame.f_code.co_names)
    if check_cell:  # the only name a check cell needs from other cells is the learner's function
        if setup_ran:
            return f"Run the cell with your `{error.name}` first: it is not defined yet."
        return f"Run the first code cell (setup) first, then your `{error.name}` cell."
    if not setup_ran:
        return f"`{error.name}` is not defined: run the first code cell (setup) first."
    return None


def _answer_name_error(shell, etype: type, value: BaseException, tb: TracebackType | None,
                       tb_offset: int | None = None) -> None:
    """IPython's custom handler for NameError: the advice as the whole traceback, when there is advice.

    It also handles CheckFailed (IPython takes one handler): see _show_hint."""
    if isinstance(value, CheckFailed):
        return _show_hint(shell, etype, value, tb, tb_offset)
    advice = _missing_name_advice(shell.user_ns, value, tb)
    if advice is not None:  # IPython shows an exception's _render_traceback_ instead of a traceback
        value._render_traceback_ = lambda: [f"{RED}{line}{PLAIN}" for line in wrap(advice)]
    shell.showtraceback((etype, value, tb), tb_offset=tb_offset)


def _show_hint(shell, etype: type, value: CheckFailed, tb: TracebackType | None, tb_offset: int | None = None) -> None:
    """A failed check in a notebook: the symptom as the error, then under it the inputs, small, and
    the likely bug, folded, so that the learner opens it only when they want it.

    Validate (nbgrader sets NBGRADER_VALIDATING in the kernel it runs) lists errors only, as text:
    there the error keeps the inputs, and says where the likely bug is."""
    hint = ladder(str(value))[1]
    aside = os.environ.get("NBGRADER_VALIDATING") != "1" and bool(value.inputs or hint)
    value.aside_shown = aside
    shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
    if aside:
        from IPython.display import display  # only reached inside IPython
        display(CheckAside(value.inputs, hint))


def _explain_missing_names() -> None:
    """Register _answer_name_error in the IPython kernel this module is imported into, if any."""
    ipython = sys.modules.get("IPython")  # not loaded: not in a notebook (nbgrader's judge, tests)
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is not None and not shell.custom_exceptions:  # never replace someone else's handler
        shell.set_custom_exc((NameError, CheckFailed), _answer_name_error)


_explain_missing_names()
