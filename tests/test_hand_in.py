"""The hidden tests' hand-in and its judge (course_lib/checks/hand_in.py, grading/steps.py).

The kernel hands in plain data; the judge, in the grader's process, reads it as data only and
compares it with the answer key it kept (grading/answer_key.py). These tests hand the judge what
a kernel could send: right answers, wrong ones, forged and malformed records.
"""

from __future__ import annotations

import base64
import copy
import json
import math
import time

import nbformat
import pytest
import torch
from nbformat.v4 import new_code_cell, new_notebook, new_output

import course_lib.checks.attention_scores  # noqa: F401 (registers set 01's exercises)
from course_lib.checks import CheckFailed
from course_lib.checks.hand_in import (MIME, RECORDING_SECONDS, Malformed, Replay, answer, collect, decode, encode,
                                       encode_input, exercise, hand_in, judge)
from exercise_harness import ROOT
from grading.answer_key import DECOYS, plan, verdict
from grading.steps import JudgeHandIns

SEED = 12345


def softmax_rows(x):
    exps = torch.exp(x - x.amax(dim=-1, keepdim=True))
    return exps / exps.sum(dim=-1, keepdim=True)


def wrong_softmax_rows(x):
    return torch.exp(x) / torch.exp(x).sum(0)


@pytest.mark.parametrize("value", [
    torch.randn(3, 4), torch.randn(2, 3, dtype=torch.float64), torch.tensor([True, False]),
    torch.arange(6).reshape(2, 3), torch.empty(0, 3), torch.tensor(2.5), 3, 2.0**-60, True,
    (torch.ones(2), 1.5), [torch.zeros(1), (False, 7)],
])
def test_what_is_handed_in_reads_back_exactly(value):
    back = decode(encode(value))
    flat = lambda v: [v] if not isinstance(v, (tuple, list)) else [x for item in v for x in flat(item)]
    for got, want in zip(flat(back), flat(value), strict=True):
        if isinstance(want, torch.Tensor):
            assert got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want)
        else:
            assert type(got) is type(want) and got == want


@pytest.mark.parametrize("record, why", [
    ({"tensor": {"dtype": "float32", "shape": [2], "bytes": base64.b64encode(b"\0" * 4).decode()}}, "do not fit"),
    ({"tensor": {"dtype": "object", "shape": [1], "bytes": ""}}, "known dtype"),
    ({"tensor": {"dtype": "float32", "shape": [10**9], "bytes": ""}}, "shape"),
    ({"tensor": {"dtype": "float32", "shape": [-1], "bytes": ""}}, "shape"),
    ({"pickle": "gASV"}, "unknown kind"),
    ({"int": 1, "float": "0x1p0"}, "not a result"),
    ("1.0", "not a result"),
])
def test_a_malformed_record_is_refused_never_trusted(record, why):
    with pytest.raises(Malformed, match=why):
        decode(record)


def test_right_answers_pass_and_wrong_ones_are_named_case_by_case():
    spec = exercise("softmax_rows")
    assert judge(spec, collect(spec, softmax_rows, SEED), SEED) == []
    problems = judge(spec, collect(spec, wrong_softmax_rows, SEED), SEED)
    # Over the last axis of a 1-D input the wrong axis is the right one: that case passes.
    assert len(problems) == 4 and problems[0].startswith("scores of shape (3, 7): wrong values"), problems


def test_results_computed_from_other_inputs_fail():
    """A kernel whose random numbers were tampered with hands in answers to other questions."""
    spec = exercise("softmax_rows")
    assert judge(spec, collect(spec, softmax_rows, SEED + 1), SEED)


def test_a_tensor_subclass_is_not_a_plain_result():
    class Agreeable(torch.Tensor):
        pass

    spec = exercise("softmax_rows")
    record = collect(spec, lambda x: softmax_rows(x).as_subclass(Agreeable), SEED)
    assert "got Agreeable (a subclass of torch.Tensor)" in judge(spec, record, SEED)[0]


def test_forbidden_operators_are_refused_in_any_thread():
    from concurrent.futures import ThreadPoolExecutor

    spec = exercise("softmax_rows")
    with ThreadPoolExecutor(1) as pool:
        record = collect(spec, lambda x: pool.submit(getattr(torch.special, "soft" + "max"), x, -1).result(), SEED)
    assert "ready-made `softmax`" in judge(spec, record, SEED)[0]


def _resident_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 2**20


def test_a_loop_past_the_recording_limit_costs_that_exercise_only_and_no_more_memory(monkeypatch):
    """An honest bug: softmax_rows loops on torch operations (here until the recording has been
    cut and read, and 1.5 s more, then answers right). The profiler keeps about 1 kB per operator,
    so a loop that never ended filled the kernel's 3 GiB and cost the whole notebook; the
    recording now stops at the limit, and the kernel's memory with it."""
    import course_lib.checks.hand_in as hand_in_module

    spec = exercise("softmax_rows")
    recordings, grown = [], []

    class Watched(hand_in_module._operators):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            recordings.append(self)

    monkeypatch.setattr(hand_in_module, "_operators", Watched)

    def looping(x):
        if not grown:  # the first call only
            start, y, after = time.monotonic(), torch.zeros(4), None
            while time.monotonic() - start < 60:
                y = y + 1
                # cut, and its events read (ops are filled last): from here on nothing is recorded
                if after is None and recordings[-1].cut and recordings[-1].ops:
                    after = (_resident_mb(), time.monotonic())
                if after is not None and time.monotonic() - after[1] > 1.5:
                    break
            grown.append(None if after is None else _resident_mb() - after[0])
        return softmax_rows(x)

    record = collect(spec, looping, SEED)
    assert grown[0] is not None, "the recording was not cut in the loop's 60 s"
    assert grown[0] < 30, f"the kernel grew {grown[0]:.0f} MB in the 1.5 s after the cut (bound: 30 MB)"
    assert record["ops_cut"] is True
    assert judge(spec, record, SEED) == [f"softmax_rows ran for more than {RECORDING_SECONDS:g} s while the grader "
                                         "recorded which of torch's operators it used, so ready-made code cannot be "
                                         "ruled out (a loop that never ends?)"]
    # the next recording starts afresh: a right answer is recorded and judged as ever
    again = collect(spec, softmax_rows, SEED)
    assert again["ops_cut"] is False and "aten::exp" in again["ops"] and judge(spec, again, SEED) == []


def test_a_forged_record_is_judged_on_its_numbers():
    spec = exercise("softmax_rows")
    record = collect(spec, softmax_rows, SEED)
    record["ops"] = ["aten::exp"]  # no refused operator
    record["results"][0] = {"value": encode(torch.zeros(5))}
    assert judge(spec, record, SEED)[0].startswith("scores of shape (5,): wrong values")
    assert judge(spec, {"exercise": "softmax_rows"}, SEED) == ["the record of operators that ran is missing"]
    assert judge(spec, {**record, "results": record["results"][:2]}, SEED) == ["expected results for 5 cases"]
    assert judge(spec, [], SEED) == ["no results were handed in for softmax_rows"]


def test_a_record_with_the_operators_switched_off_is_refused():
    """Code that empties the kernel's copy of the refused operators records none: that is refused."""
    import dataclasses

    spec = exercise("softmax_rows")
    emptied = dataclasses.replace(spec, forbidden_ops=frozenset())  # what a patched kernel would hold
    record = collect(emptied, lambda x: torch.softmax(x, -1), SEED)
    assert record["ops"] == [] and judge(emptied, record, SEED) == []
    assert judge(spec, record, SEED) == ["no operators were recorded while softmax_rows ran, so ready-made "
                                         "code cannot be ruled out"]


def test_an_in_place_change_of_an_input_is_wrong():
    def in_place(x):
        x -= x.amax(-1, keepdim=True)
        return softmax_rows(x)

    spec = exercise("softmax_rows")
    assert "changed one of its input tensors" in judge(spec, collect(spec, in_place, SEED), SEED)[0]


def test_outside_grading_hand_in_judges_at_once():
    hand_in("softmax_rows", softmax_rows)
    with pytest.raises(CheckFailed, match="softmax_rows, hidden tests: scores of shape"):
        hand_in("softmax_rows", wrong_softmax_rows)


# ---------------------------------------------------------------- the judge as nbgrader runs it
PLAN = plan(ROOT / "solutions", "01_attention_scores", "softmax_rows", SEED)


def graded_notebook(*outputs) -> nbformat.NotebookNode:
    source = ('check_softmax_rows(softmax_rows)\n### BEGIN HIDDEN TESTS\n'
              'hand_in("softmax_rows", softmax_rows)\n### END HIDDEN TESTS')
    cell = new_code_cell(source, metadata={"nbgrader": {"grade": True, "grade_id": "softmax_rows_tests"}})
    cell.outputs = list(outputs)
    return new_notebook(cells=[cell])


def kernel_inputs(plan_) -> dict:
    """What the kernel reads from its hand_in line."""
    return json.loads(base64.b64decode(plan_.line()))


def record_output(fn) -> dict:
    return new_output("display_data", data={MIME: answer(fn, kernel_inputs(PLAN)), "text/plain": "hand-in"})


def judged(nb) -> list[str]:
    nb, _ = JudgeHandIns().preprocess(nb, {"hand_in_plans": {"softmax_rows": PLAN}})
    return [f"{o.ename}: {o.evalue}" for o in nb.cells[0].outputs if o.output_type == "error"]


def test_the_judge_keeps_the_points_of_a_right_record_only():
    assert judged(graded_notebook(record_output(softmax_rows))) == []
    # The visible check runs in the grader, on the kernel's results, before the hidden cases.
    assert judged(graded_notebook(record_output(wrong_softmax_rows)))[0].startswith(
        "CheckFailed: softmax_rows(LOGITS): the answer contains NaN")
    right_on_the_check_only = lambda x: softmax_rows(x) if x.shape == (2, 3) else torch.zeros_like(x)
    assert judged(graded_notebook(record_output(right_on_the_check_only)))[0].startswith(
        "HiddenTestFailed: softmax_rows: scores of shape (5,): wrong values")


def test_a_failed_visible_check_keeps_its_hint_ladder_in_feedback():
    """The grader's replay of the check shows what the notebook shows: the symptom as the error,
    the likely bug after it, folded in a <details> element (and as the hint's line in text)."""
    from course_lib.checks import HINT_BELOW

    nb, _ = JudgeHandIns().preprocess(graded_notebook(record_output(wrong_softmax_rows)),
                                      {"hand_in_plans": {"softmax_rows": PLAN}})
    error, folded = nb.cells[0].outputs[-2:]
    assert error.output_type == "error" and error.traceback[-1] == HINT_BELOW
    assert error.traceback[0].startswith("CheckFailed: softmax_rows(LOGITS): the answer contains NaN")
    assert "Likely bug" not in "\n".join(error.traceback)
    assert folded.output_type == "display_data" and folded.data["text/plain"].startswith("Likely bug: exp() overflow")
    assert folded.data["text/html"].startswith("<details") and "Show the likely bug" in folded.data["text/html"]
    # the feedback's cleaner, which shortens a test cell's error to its name and value, keeps step 1 alone
    from grading.steps import HideHiddenTests

    error = copy.deepcopy(error)
    HideHiddenTests._clean(nbformat.v4.new_code_cell("### BEGIN HIDDEN TESTS\n### END HIDDEN TESTS",
                                                     outputs=[error]), set())
    assert "Likely bug" not in "\n".join(error.traceback) and error.traceback[0].endswith(HINT_BELOW)


def test_a_cell_whose_hidden_tests_were_not_planned_earns_nothing():
    nb = graded_notebook(record_output(softmax_rows))
    nb, _ = JudgeHandIns().preprocess(nb, {"hand_in_plans": {}})
    assert [o.ename for o in nb.cells[0].outputs if o.output_type == "error"] == ["NotGraded"]


def test_no_record_or_two_records_earn_nothing():
    for outputs in [(), (record_output(softmax_rows), record_output(softmax_rows))]:
        errors = judged(graded_notebook(*outputs))
        assert len(errors) == 1 and errors[0].startswith("NotGraded: softmax_rows: the hidden tests handed in"), errors


def test_a_cell_that_failed_in_the_kernel_keeps_its_own_error():
    error = new_output("error", ename="CheckFailed", evalue="wrong", traceback=[])
    assert judged(graded_notebook(record_output(softmax_rows), error)) == ["CheckFailed: wrong"]


def test_printed_text_saying_passed_earns_nothing():
    printed = new_output("stream", name="stdout", text="softmax_rows: hidden tests passed (4 cases)\n")
    assert judged(graded_notebook(printed))[0].startswith("NotGraded")


# ---------------------------------------------------------------- the answer key stays in the grader
def test_the_kernel_gets_inputs_and_replay_tables_only():
    """What the hand_in line holds: no seed, no code, no reference answer for the exercise's own cases."""
    attend = plan(ROOT / "solutions", "01_attention_scores", "attend", SEED)
    inputs = kernel_inputs(attend)
    assert set(inputs) == {"exercise", "calls", "replays", "uses", "forbidden_ops", "forbidden_names"}
    assert str(SEED) not in attend.line() and "lambda" not in json.dumps(inputs)
    assert len(inputs["calls"]) == attend.visible + sum(attend.per_case)
    # The earlier answer the solution's attend calls answers for the inputs a right attend gives it,
    # each row beside decoy rows (DECOYS per input of attend that changes it), in a shuffled order.
    assert set(inputs["uses"]) == {"score_matrix"}
    calls = attend.visible + sum(attend.per_case)
    assert len(inputs["uses"]["score_matrix"]) >= calls * (1 + DECOYS)
    # No row of any table is an answer of attend itself.
    wanted = [encode(case.want()[0]) for case in attend.cases]
    rows = [row[1] for table in inputs["uses"].values() for row in table]
    assert not [w for w in wanted if w in rows]


# cross_attend that computes no score: it finds, among the rows of masked_softmax's table, the one
# whose mask is the real padding mask, and reads the attention weights off it (it scored 8 of 8 on
# 33 of 40 seeds when the decoys' masks were random).
MASK_PICKER = """import base64

def padding(lengths, n):  # the student's earlier answers: the grader puts its replays in their place
    raise NotImplementedError()

def masked_softmax(scores, mask):
    raise NotImplementedError()

def cross_attend(target, source, w_q, w_k, w_v, lengths):
    B, m, n = target.shape[0], target.shape[1], source.shape[1]
    mask = padding(lengths, n)
    rows = [out["tensor"] for _, (args, kwargs), out in masked_softmax.table
            if args[0].shape == (B, m, n) and torch.equal(args[1], mask)]
    weights = torch.frombuffer(bytearray(base64.b64decode(rows[0]["bytes"])),
                               dtype=getattr(torch, rows[0]["dtype"])).reshape(rows[0]["shape"])
    return weights @ (source @ w_v), weights
"""


def test_the_decoy_rows_of_a_table_do_not_give_the_answer_away():
    namespace = {"torch": torch}
    exec(MASK_PICKER, namespace)
    full = 0
    for seed in range(10):
        cross = plan(ROOT / "solutions", "02_masks", "cross_attend", seed)
        table = kernel_inputs(cross)["uses"]["masked_softmax"]
        record = json.loads(json.dumps(answer(namespace["cross_attend"], kernel_inputs(cross))))
        full += verdict(cross, record) == []
        # every row of a real call has decoys with its mask and other scores, which only the
        # exercise's own computation tells apart
        masks = [json.dumps(inputs["list"][0]["list"][1]) for inputs, _ in table]
        assert all(masks.count(mask) >= 1 + DECOYS for mask in masks), seed
    assert full <= 1, f"the mask picker scored full marks on {full} of 10 seeds (bound: 1)"


def test_a_replay_answers_prepared_inputs_to_rounding_and_nothing_else():
    x = torch.randn(3, 4, dtype=torch.float64)
    replay = Replay("f", [[encode_input([[x], {}]), encode(x * 2)]])
    assert torch.equal(replay(x.clone()), x * 2)
    assert torch.equal(replay(x + 1e-15), x * 2)  # another order of the same additions
    with pytest.raises(LookupError, match="no right answer gives it"):
        replay(x + 1e-3)
    fallback = Replay("f", [[encode_input([[x], {}]), encode(x * 2)]], fallback=lambda t: t * 3)
    assert torch.equal(fallback(x + 1), (x + 1) * 3)  # the learner's own earlier answer


def test_a_visible_check_that_calls_back_sees_the_learners_calls():
    """greedy_tokens' check counts the prefixes its decoder saw: the grader calls it again with
    the inputs the kernel's decoder was asked for, so the check's hints stay the same."""
    greedy = plan(ROOT / "solutions", "09_transformer", "greedy_tokens", SEED)
    namespace = {"torch": torch}
    exec("def greedy_tokens(decoder, bos, steps):\n"
         "    prefix = bos\n"
         "    for _ in range(steps):\n"
         "        token = decoder(prefix[:, :1])[:, -1].argmax(-1, keepdim=True)\n"
         "        prefix = torch.cat([prefix, token], 1)\n"
         "    return prefix[:, 1:]", namespace)
    record = json.loads(json.dumps(answer(namespace["greedy_tokens"], kernel_inputs(greedy))))
    problems = verdict(greedy, record)
    assert problems and "only ever saw a prefix of length 1" in problems[0], problems


def test_numbers_are_compared_with_tolerance_and_nan_is_never_right():
    from course_lib.checks.hand_in import compare_values

    assert compare_values(1.0 + 1e-9, 1.0, 1e-6, 0) == ""
    assert compare_values(torch.tensor(1.5), 1.5, 1e-6, 0) == ""
    assert compare_values(math.nan, 1.0, 1e-6, 0) != ""
    assert compare_values(torch.tensor([math.nan]), torch.tensor([1.0]), 1e-6, 0).startswith("wrong values")
    assert compare_values(1, True, 0, 0) == "expected True, got 1"


# ---------------------------------------------------------------- fair to honest work
def test_a_namedtuple_counts_as_the_tuple_it_is():
    from collections import namedtuple

    from course_lib.attention_scores import scaled_dot_product_attention

    AttentionResult = namedtuple("AttentionResult", "output weights")
    spec = exercise("attend")
    named = lambda q, k, v, mask=None: AttentionResult(*scaled_dot_product_attention(q, k, v, mask))
    assert judge(spec, collect(spec, named, SEED), SEED) == []
    swapped = lambda q, k, v, mask=None: AttentionResult(*scaled_dot_product_attention(q, k, v, mask)[::-1])
    assert judge(spec, collect(spec, swapped, SEED), SEED)  # the names do not make a wrong order right


def offset_rotation_float32(k: int, d_model: int, sign: float = 1.0):
    """offset_rotation computed in float32 throughout, as the exercise allows; sign=-1 turns the wrong way."""
    angles = k * 10000.0 ** (-2 * torch.arange(d_model // 2, dtype=torch.float32) / d_model)
    cos, sin = angles.cos(), sign * angles.sin()
    m = torch.zeros(d_model, d_model)
    m[0::2, 0::2], m[0::2, 1::2] = torch.diag(cos), torch.diag(sin)
    m[1::2, 0::2], m[1::2, 1::2] = -torch.diag(sin), torch.diag(cos)
    return m


def test_a_float32_answer_is_judged_at_float32_precision_and_a_wrong_one_still_fails():
    import course_lib.checks.positional_encoding  # noqa: F401 (registers set 04's exercises)
    from course_lib.positional_encoding import shift_matrix

    spec = exercise("offset_rotation")
    # At k = 100 float32 is farther from the float64 answer than the exercise's atol (1e-6):
    # the case is one that an exact comparison would fail.
    gap = (offset_rotation_float32(100, 64).double() - shift_matrix(100, 64)).abs().max().item()
    assert spec.atol < gap < 1e-5, gap
    assert judge(spec, collect(spec, offset_rotation_float32, SEED), SEED) == []
    wrong = lambda k, d_model: offset_rotation_float32(k, d_model, sign=-1.0)
    assert "wrong values" in judge(spec, collect(spec, wrong, SEED), SEED)[0]
    off_by_one = lambda k, d_model: offset_rotation_float32(k + 1, d_model)
    assert judge(spec, collect(spec, off_by_one, SEED), SEED)


def add_learned_positions_raising(error: type[Exception]):
    def add_learned_positions(x, table):
        if x.shape[-2] > table.shape[0]:
            raise error(f"{x.shape[-2]} positions, but the table has {table.shape[0]} rows")
        return x + table[:x.shape[-2]]
    return add_learned_positions


def test_an_error_counts_if_it_is_an_instance_of_the_wanted_type():
    import course_lib.checks.positional_encoding  # noqa: F401 (registers set 04's exercises)

    class TooLong(ValueError):
        pass

    spec = exercise("add_learned_positions")
    for fine in (ValueError, TooLong):
        assert judge(spec, collect(spec, add_learned_positions_raising(fine), SEED), SEED) == [], fine
    problems = judge(spec, collect(spec, add_learned_positions_raising(TypeError), SEED), SEED)
    assert problems and "expected ValueError, got TypeError" in problems[0]
    # A kernel that claims a subclass under the wanted class's bare name, without it among the
    # classes the error is an instance of, is not believed.
    record = collect(spec, add_learned_positions_raising(TypeError), SEED)
    for result in record["results"]:
        if "raised" in result:
            result["raised"] = "ValueError"
    assert judge(spec, record, SEED)


RENAMED = """
import math
import torch

def heads_of(x, n_heads):  # wrong: the heads' columns are interleaved, not consecutive
    B, T, D = x.shape
    return x.reshape(B, T, D // n_heads, n_heads).permute(0, 3, 1, 2)

split_into_heads = heads_of

def multi_head_attend(q, k, v, n_heads, mask=None):
    B, T, D = q.shape
    qh, kh, vh = (heads_of(t, n_heads) for t in (q, k, v))
    scores = qh @ kh.transpose(-2, -1) / math.sqrt(D // n_heads)
    if mask is not None:
        scores = scores.masked_fill(~(mask.unsqueeze(-3) if mask.dim() == 3 else mask), float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return (weights @ vh).transpose(1, 2).reshape(B, T, D), weights
"""


def test_an_earlier_answer_is_replaced_under_every_name_it_has_and_a_copy_is_not():
    import course_lib.checks.multi_head  # noqa: F401 (registers set 08's exercises)

    split, attend = exercise("split_into_heads"), exercise("multi_head_attend")
    renamed: dict = {}
    exec(RENAMED, renamed)
    assert judge(split, collect(split, renamed["split_into_heads"], SEED), SEED)  # its own mistake costs here
    assert judge(attend, collect(attend, renamed["multi_head_attend"], SEED), SEED) == []  # and only there
    assert renamed["heads_of"] is renamed["split_into_heads"]  # put back afterwards
    copied: dict = {}
    exec(RENAMED.replace("split_into_heads = heads_of", "split_into_heads = lambda x, n: heads_of(x, n)"), copied)
    assert judge(attend, collect(attend, copied["multi_head_attend"], SEED), SEED)  # another function: not replaced


def test_an_exercise_without_an_entry_says_where_the_entry_goes():
    """What an instructor adding an exercise meets first, if the check module lacks its Exercise."""
    for ask in (lambda: exercise("invert_permutation", "03_permutation"), lambda: exercise("invert_permutation")):
        with pytest.raises(KeyError, match="add an Exercise.* to EXERCISES in course_lib/checks/<set>.py"):
            ask()
