"""Every exercise set's checks are tested too, with the known answers in tests/mutants/<set>.py.

The reference must pass its visible check and its hidden tests; every known-wrong answer
(MUTANTS) must fail the hidden tests on their own, and every one that computes wrong numbers
must fail the visible check too; each likely one is told its bug (HINTS). Right answers
written another way keep full credit (ACCEPTED); ready-made code is refused (READY_MADE); an
answer that changes its input in place is named (IN_PLACE). tests/mutants/__init__.py says
what each holds.
"""

from __future__ import annotations

import re

import nbformat
import pytest

from course_lib import exercise_notebook
from exercise_harness import (ROOT, accepted, exercise_names, hints, in_place, mutants, outcome, ready_made,
                              solution_sets)

SETS = solution_sets()
CASES = [(s, e, m) for s in SETS for e, ms in mutants(s).items() for m in ms]


@pytest.mark.parametrize("set_name", SETS)
def test_every_exercise_has_known_wrong_answers(set_name):
    names, known = exercise_names(set_name), mutants(set_name)
    assert set(names) == set(known), f"exercises without MUTANTS: {set(names) ^ set(known)}"
    assert all(len(m) >= 2 for m in known.values())


def test_every_module_of_known_answers_is_a_set():
    """tests/mutants/ has one module per exercise set and no other (no set's answers left unread)."""
    assert sorted(p.stem for p in (ROOT / "tests" / "mutants").glob("[0-9]*.py")) == SETS


@pytest.mark.parametrize("set_name,exercise", [(s, e) for s in SETS for e in exercise_names(s)])
def test_reference_passes_its_check_and_hidden_tests(set_name, exercise):
    result = outcome(set_name, exercise)
    assert result.check_passed and result.hidden_passed, result.messages


@pytest.mark.parametrize("set_name,exercise,mutant", CASES)
def test_wrong_answer_fails_hidden_tests(set_name, exercise, mutant):
    result = outcome(set_name, exercise, mutants(set_name)[exercise][mutant])
    assert not result.hidden_passed, f"hidden tests of {exercise} accept the wrong answer '{mutant}'"


@pytest.mark.parametrize("set_name,exercise,mutant", [c for c in CASES if not c[2].startswith("calls")])
def test_wrong_answer_fails_visible_check(set_name, exercise, mutant):
    result = outcome(set_name, exercise, mutants(set_name)[exercise][mutant])
    assert not result.check_passed, f"the visible check of {exercise} accepts the wrong answer '{mutant}'"


@pytest.mark.parametrize("set_name,exercise", [(s, e) for s in SETS for e in exercise_names(s)])
def test_unanswered_stub_gets_a_short_not_written_yet_message(set_name, exercise):
    stub = f"def {exercise}(*args, **kwargs):\n    raise NotImplementedError()"
    result = outcome(set_name, exercise, stub)
    assert not result.check_passed
    assert f"CheckFailed: `{exercise}` is not written yet: replace `raise NotImplementedError()`" in result.messages[0]


def uncoloured(lines: list[str]) -> list[str]:
    from course_lib.checks import PLAIN, RED
    return [line.removeprefix(RED).removesuffix(PLAIN) for line in lines]


def test_a_failed_check_renders_as_its_symptom_alone():
    """Step 1 of the ladder: the symptom, with the check's inputs spelled out; the likely bug itself
    is the message's last line, and is not shown. In a notebook (the aside shown under it) the error
    is the symptom alone, in red; elsewhere (Validate's dialog, text only) the inputs follow in the
    plain colour, and a line says where the likely bug is, not a fold the dialog does not have."""
    from course_lib.checks import HINT_IN_NOTEBOOK, RED, SHOW_HINT, WIDTH, CheckFailed, ladder
    from course_lib.checks.attention_scores import check_softmax_rows

    with pytest.raises(CheckFailed) as caught:
        check_softmax_rows(lambda x: (x - x.amax(0)).exp() / (x - x.amax(0)).exp().sum(0))
    assert isinstance(caught.value, AssertionError)  # nbgrader still counts it as a failure
    message = str(caught.value)
    symptom, hint = ladder(message)
    assert message == f"{symptom}\n{hint}" and hint.startswith("Likely bug: softmax over the wrong axis")
    # The input the learner cannot see, LOGITS, is spelled out before the expected and got values.
    logits = "  LOGITS, shape (2, 3): [[1.0, 2.0, 3.0], [1000.0, 1000.0, 0.0]]"
    assert f"\n{logits}\n  expected: [[" in symptom and "\n  got:      [[" in symptom
    assert caught.value.inputs == (logits,)
    # As text (Validate): the symptom's own words, then the pointer, and nothing else (no traceback,
    # no hint), in lines that fit; red for what is wrong, the plain colour for the input and pointer.
    rendered = caught.value._render_traceback_()
    shown = uncoloured(rendered)
    assert " ".join(shown).split() == f"{symptom} {HINT_IN_NOTEBOOK}".split()
    assert [line.startswith(RED) for line in rendered] == [True, False, True, True, False]
    assert "Likely bug" not in " ".join(shown) and "axis" not in " ".join(shown) and SHOW_HINT not in " ".join(shown)
    assert max(len(line) for line in shown) <= WIDTH
    # In a notebook: the symptom without the input (shown under it, small) and without the pointer.
    caught.value.aside_shown = True
    rendered = caught.value._render_traceback_()
    assert all(line.startswith(RED) for line in rendered)
    assert " ".join(uncoloured(rendered)).split() == symptom.replace(logits, "").split()


def test_the_aside_shows_the_inputs_small_then_the_folded_hint():
    from course_lib.checks import SHOW_HINT, CheckAside

    aside = CheckAside(["  X: [1, 2]", "  PERM: [1, 0]"], "Likely bug: the rows")
    shown = aside._repr_html_()
    assert shown.index('class="tr-inputs"') < shown.index("The check&#x27;s inputs:") < shown.index("  PERM: [1, 0]") \
        < shown.index(f"<summary>{SHOW_HINT}</summary>") < shown.index("Likely bug: the rows")
    assert "font-size:85%" in shown and "--jp-content-font-color2" in shown
    assert repr(aside) == "  X: [1, 2]\n  PERM: [1, 0]\nLikely bug: the rows"
    # Either part alone: no empty box, no empty fold.
    assert "tr-inputs" not in CheckAside([], "Likely bug: x")._repr_html_()
    assert "<details" not in CheckAside(["  X: [1]"], "")._repr_html_() and repr(CheckAside(["  X: [1]"], "")) == "  X: [1]"


def test_the_folded_hint_escapes_what_it_shows():
    """A hint can quote a learner's values: in HTML it is text, never markup."""
    from course_lib.checks import FoldedHint

    attack = 'Likely bug: </pre></details><img src=x onerror="alert(1)"><script>alert(2)</script>'
    shown = FoldedHint(attack)._repr_html_()
    assert "<img" not in shown and "<script" not in shown and "&lt;/pre&gt;&lt;/details&gt;&lt;img" in shown
    assert shown.startswith("<details") and shown.count("</details>") == 1 and repr(FoldedHint(attack)) == attack


@pytest.mark.parametrize("set_name", SETS)
def test_every_failure_fits_the_validate_dialog(set_name):
    """nbgrader's Validate indents each line of a failure by 4 and cuts it at 87 characters: every
    known-wrong answer's symptom, as the notebook shows it, fits in WIDTH = 80, cut at word boundaries."""
    from course_lib.checks import HINT_IN_NOTEBOOK, WIDTH, CheckFailed, ladder

    for exercise, known in mutants(set_name).items():
        for mutant, answer in known.items():
            result = outcome(set_name, exercise, answer)
            if result.check_passed:
                continue
            kind, message = result.messages[0].split(": ", 1)
            assert kind == "CheckFailed", result.messages
            symptom, hint = ladder(message)
            shown = uncoloured(CheckFailed(message)._render_traceback_())
            assert " ".join(shown).split() == (symptom + (f" {HINT_IN_NOTEBOOK}" if hint else "")).split()
            assert max(len(line) for line in shown) <= WIDTH, f"{exercise} [{mutant}]:\n" + "\n".join(shown)


@pytest.mark.parametrize("set_name", SETS)
def test_a_passing_check_prints_one_green_line(set_name):
    """The committed outputs of the solutions (nbval makes them reproduce): each check cell prints
    exactly its green success line, and nothing of the tensors compared."""
    from exercise_harness import solution_notebook

    nb = nbformat.read(solution_notebook(set_name), as_version=4)
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
        if grade_id.endswith("_check"):
            printed = "".join(o.get("text", "") for o in cell.outputs)
            assert printed == f"\x1b[32m✔ {grade_id.removesuffix('_check')}: passed\x1b[0m\n", (grade_id, printed)


def test_check_and_graded_cells_say_which_one_to_run():
    """Every exercise shows two cells that call its check: the one to run says so in its first
    line; the graded one says first that it is the instructor's and need not be run. The setup
    cell binds the names by which a NameError handler tells whether it ran."""
    from course_lib.checks import SETUP_NAMES
    for set_name in SETS:
        nb = nbformat.read(ROOT / "exercises" / set_name / exercise_notebook(set_name), as_version=4)
        setup: dict = {}
        exec(nb.cells[1].source, setup)  # the first code cell
        assert nb.cells[1].metadata["nbgrader"]["grade_id"] == "setup" and set(SETUP_NAMES) <= set(setup)
        for cell in nb.cells:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
            if grade_id.endswith("_check"):
                assert cell.source.startswith("# Run this cell to check your answer.\n"), (set_name, grade_id)
            if grade_id.endswith("_tests"):
                assert cell.source.startswith("# Graded cell: when your work is graded, the instructor's hidden "
                                              "tests run here.\n# You need not run it: it only repeats the check "
                                              "above.\n"), (set_name, grade_id)
            if grade_id.endswith(("_check", "_tests")):  # each imports its own check: see the next test
                exercise = grade_id.rsplit("_", 1)[0]
                assert f"import check_{exercise}\n\ncheck_{exercise}({exercise})" in cell.source


def _run_in(kernel, source: str) -> tuple[str, list[str]]:
    """Run `source` in a kernel as a notebook cell; what it printed, and its error's traceback lines."""
    printed, traceback = [], []

    def output(message: dict) -> None:
        if message["msg_type"] == "stream":
            printed.append(message["content"]["text"])
        elif message["msg_type"] == "error":
            traceback.extend(message["content"]["traceback"])

    kernel.execute_interactive(source, output_hook=output, timeout=60)
    return "".join(printed), traceback


def test_a_check_run_before_the_setup_cell_says_which_cell_to_run():
    """A learner who skips the setup cell, in a real kernel: each NameError of a cell's own code
    names, in one line, the cell to run first; other NameErrors keep Python's usual traceback."""
    from jupyter_client.manager import start_new_kernel

    nb = nbformat.read(ROOT / "exercises" / "01_attention_scores" / exercise_notebook("01_attention_scores"), as_version=4)
    cell = {c.metadata["nbgrader"]["grade_id"]: c.source for c in nb.cells}
    answer = ("def softmax_rows(x: Tensor) -> Tensor:\n    e = torch.exp(x - x.amax(-1, keepdim=True))\n"
              "    return e / e.sum(-1, keepdim=True)")
    manager, kernel = start_new_kernel(kernel_name="python3", cwd=str(ROOT / "exercises" / "01_attention_scores"))
    try:
        red = "\x1b[31m{}\x1b[0m".format
        assert _run_in(kernel, cell["softmax_rows_check"])[1] == [
            red("Run the first code cell (setup) first, then your `softmax_rows` cell.")]
        assert _run_in(kernel, answer)[1] == [red("`Tensor` is not defined: run the first code cell (setup) first.")]
        assert _run_in(kernel, cell["setup"]) == ("", [])
        assert _run_in(kernel, cell["softmax_rows_tests"])[1] == [
            red("Run the cell with your `softmax_rows` first: it is not defined yet.")]
        assert _run_in(kernel, answer) == ("", [])
        assert _run_in(kernel, cell["softmax_rows_check"]) == ("\x1b[32m✔ softmax_rows: passed\x1b[0m\n", [])
        # Not a check cell, and the setup ran: Python's own traceback, which points at the line.
        usual = "\n".join(_run_in(kernel, "print(an_undefined_name)")[1])
        assert "NameError" in usual and "an_undefined_name" in usual and "setup" not in usual
    finally:
        kernel.stop_channels()
        manager.shutdown_kernel(now=True)


def test_a_failed_check_in_a_notebook_shows_the_symptom_then_the_folded_hint():
    """In a real kernel (what JupyterLab runs), set 03 with the features permuted instead of the
    rows: the error output is the symptom alone, then a display output holds the inputs (PERM and X
    spelled out, small) and the likely bug, folded in a <details> element (text/plain: the inputs'
    and the hint's lines)."""
    from jupyter_client.manager import start_new_kernel

    from course_lib.checks import HINT_BELOW, HINT_IN_NOTEBOOK, SHOW_HINT

    set_name = "03_permutation"
    nb = nbformat.read(ROOT / "exercises" / set_name / exercise_notebook(set_name), as_version=4)
    cell = {c.metadata["nbgrader"]["grade_id"]: c.source for c in nb.cells}
    outputs: list[dict] = []
    manager, kernel = start_new_kernel(kernel_name="python3", cwd=str(ROOT / "exercises" / set_name))
    try:
        for source in (cell["setup"], mutants(set_name)["permute_rows"]["permutes the features"]):
            assert _run_in(kernel, source) == ("", [])
        kernel.execute_interactive(cell["permute_rows_check"], output_hook=lambda m: outputs.append(m), timeout=60)
    finally:
        kernel.stop_channels()
        manager.shutdown_kernel(now=True)
    shown = [(m["msg_type"], m["content"]) for m in outputs if m["msg_type"] in ("error", "display_data", "stream")]
    assert [kind for kind, _ in shown] == ["error", "display_data"], shown
    symptom = "\n".join(uncoloured(shown[0][1]["traceback"]))
    assert symptom.startswith("permute_rows(X, PERM)") and "PERM: [2, 0" not in symptom, symptom
    assert "Likely bug" not in symptom and "features" not in symptom, symptom
    assert "Stuck?" not in symptom and HINT_BELOW not in symptom and HINT_IN_NOTEBOOK not in symptom
    data = shown[1][1]["data"]
    plain = data["text/plain"].splitlines()
    assert "  PERM: [2, 0, 3, 1]" in plain and any(line.startswith("  X, shape (4, 4): [[1.0, 0.0, 2.0, 0.0]")
                                                  for line in plain), plain
    assert plain[-1] == "Likely bug: you permuted the columns (features); permute the rows (tokens)"
    page = data["text/html"]
    assert page.startswith('<div class="tr-aside"><pre class="tr-inputs"') and "  PERM: [2, 0, 3, 1]" in page
    assert page.index("PERM: [2, 0") < page.index(f'<details class="tr-hint"><summary>{SHOW_HINT}</summary>')
    assert "you permuted the columns (features)" in page


def test_validate_prints_every_failure_whole(tmp_path):
    """`nbgrader validate`, which the Validate button runs, on set 01 with two wrong answers and a
    stub: each failure is shown whole, in lines that Validate does not cut (it cuts at 87 characters,
    after a 4-space indent, and ends the line with '...')."""
    import os
    import subprocess
    import sys

    from course_lib.checks import HINT_IN_NOTEBOOK, SHOW_HINT, WIDTH
    from exercise_harness import solution_notebook

    set_name = "01_attention_scores"
    solution = {c.metadata["nbgrader"]["grade_id"]: c.source
                for c in nbformat.read(solution_notebook(set_name), as_version=4).cells}
    nb = nbformat.read(ROOT / "exercises" / set_name / exercise_notebook(set_name), as_version=4)
    wrong = {"softmax_rows": mutants(set_name)["softmax_rows"]["wrong axis"],
             "attend": mutants(set_name)["attend"]["mask applied after softmax"]}
    for cell in nb.cells:
        grade_id = cell.metadata["nbgrader"]["grade_id"]
        if cell.metadata["nbgrader"].get("solution") and grade_id != "row_entropy":  # row_entropy stays a stub
            cell.source = wrong.get(grade_id, re.sub(r" *### (BEGIN|END) SOLUTION\n", "", solution[grade_id]))
    nbformat.write(nb, tmp_path / exercise_notebook(set_name))
    env = dict(os.environ, PATH=f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}",
               PYTHONPATH=str(ROOT))
    run = subprocess.run([sys.executable, "-m", "nbgrader", "validate", exercise_notebook(set_name)], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=300)
    printed = run.stdout
    assert "VALIDATION FAILED ON 3 CELL(S)" in " ".join(printed.split()), printed
    lines = [line for line in printed.splitlines() if set(line) != {"="}]
    assert max(len(line) for line in lines) <= 4 + WIDTH, printed
    words = " ".join(printed.split())
    for whole in ("softmax_rows(LOGITS): wrong values. LOGITS, shape (2, 3): [[1.0, 2.0, 3.0], [1000.0, 1000.0, "
                  "0.0]] expected: [[0.09, 0.2447, 0.6652], [0.5, 0.5, 0.0]]", "`row_entropy` is not written yet",
                  "weights of attend(Q, K, V, MASK): wrong values.", HINT_IN_NOTEBOOK):
        assert whole in words, printed
    # Validate shows no fold: nothing tells the learner to open one there.
    assert SHOW_HINT not in words and "Open “Show" not in words, printed
    # The likely bugs are the second step: Validate shows the symptoms only.
    assert "Likely bug" not in words and "wrong axis" not in words and "after the softmax" not in words, printed


@pytest.mark.parametrize("set_name,exercise,answer", [(s, e, a) for s in SETS for e, ans in ready_made(s).items() for a in ans])
def test_ready_made_code_is_refused_under_any_name(set_name, exercise, answer):
    result = outcome(set_name, exercise, ready_made(set_name)[exercise][answer])
    assert not result.hidden_passed and any("ready-made" in m or "the course's own" in m for m in result.messages), \
        result.messages


@pytest.mark.parametrize("set_name,exercise,answer", [(s, e, a) for s in SETS for e, ans in accepted(s).items() for a in ans])
def test_right_answers_written_another_way_pass(set_name, exercise, answer):
    result = outcome(set_name, exercise, accepted(set_name)[exercise][answer])
    assert result.check_passed and result.hidden_passed, result.messages


@pytest.mark.parametrize("set_name,exercise,answer", [(s, e, a) for s in SETS for e, ans in in_place(s).items() for a in ans])
def test_in_place_change_of_an_input_is_named(set_name, exercise, answer):
    """The visible check names it, and the hidden tests count it wrong on their own (the judge
    compares every tensor the arguments hold, inside lists too, before and after the call)."""
    result = outcome(set_name, exercise, in_place(set_name)[exercise][answer])
    assert not result.check_passed and not result.hidden_passed, result.messages
    assert re.search(r"changed (its input|the matrices in) `\w+` in place", result.messages[0]), result.messages


def test_a_result_of_another_dtype_gets_a_message_naming_both_dtypes():
    """float64 for float32 input: the check (and so the graded cell) says so, not torch's 'Double did not match Float'."""
    result = outcome("01_attention_scores", "softmax_rows", mutants("01_attention_scores")["softmax_rows"]["returns float64"])
    assert not result.check_passed and not result.hidden_passed
    assert "right values but dtype torch.float64, expected torch.float32" in result.messages[0]


@pytest.mark.parametrize("set_name,exercise,mutant,words",
                         [(s, e, m, w) for s in SETS for e, ms in hints(s).items() for m, w in ms.items()])
def test_visible_check_names_the_likely_bug(set_name, exercise, mutant, words):
    """Each likely wrong answer is told its bug (HINTS in tests/mutants/<set>.py), at the ladder's
    second step: the hint a notebook folds until asked, not the symptom it shows first."""
    from course_lib.checks import ladder

    result = outcome(set_name, exercise, mutants(set_name)[exercise][mutant])
    assert any(words in ladder(message)[1] for message in result.messages), result.messages


@pytest.mark.parametrize("set_name", SETS)
def test_every_exercise_has_five_likely_wrong_answers_named(set_name):
    named = hints(set_name)
    assert {e: len(named.get(e, {})) for e in exercise_names(set_name)} == {
        e: max(5, len(named.get(e, {}))) for e in exercise_names(set_name)}
