"""Lesson 07: the relation world, the hand-set heads, trained models and the capacity curve,
checked against independent computations (plain Python loops over the rule table)."""

from __future__ import annotations

import itertools
import math
import re
from pathlib import Path

import pytest
import torch

from course_lib.logic_rules import (
    ANSWER_KINDS, FRIEND_RULES, HELD_RULES, KINSHIP_RULES, NEW_PEOPLE, PEOPLE, RELATIONS, RULES, TOKEN,
    TRAIN_PEOPLE, TRAIN_RULES, VOCAB, all_sentences, answer_kind, answer_lead, capacity_curve,
    composition_answers, composition_head, composition_lookup, composition_readout, decode, encode, fano_bits,
    fit_power_law, friend_enemy_model, handset_layout, handset_model, nearby_answers, random_layer_features,
    rule_model_run, rule_targets, rules_right, sentence_batch, slot_accuracy, slot_lead, strictly_right,
    symmetric_gram, train_rule_model, train_rule_models, trained_rules_right, xor_residue)
from course_lib.model import DecoderOnly, ModelConfig
from course_lib.training import IGNORE
from course_lib.runs import run_each


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models run fastest on one thread (and on a busy machine, far faster)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def targets_by_loop(sentence: list[str], rules: dict) -> list[str | None]:
    """X r1 r2 Y -> X, r1 o r2, Y, None, read from the dict one sentence at a time."""
    x, r1, r2, y = sentence
    return [x, rules[(r1, r2)], y, None]


# ---------------------------------------------------------------- the relation world

def test_the_rule_table_has_at_least_a_dozen_kinship_rules_and_order_matters():
    assert len(KINSHIP_RULES) >= 12
    assert KINSHIP_RULES[("father", "sister")] == "aunt" and KINSHIP_RULES[("sister", "father")] == "father"
    assert KINSHIP_RULES[("church", "sister")] == "nun" and KINSHIP_RULES[("father", "father")] == "grandfather"
    assert set(FRIEND_RULES.values()) == {"friend", "enemy"}
    assert VOCAB == PEOPLE + RELATIONS and len(set(VOCAB)) == len(VOCAB)
    assert set(HELD_RULES) | set(TRAIN_RULES) == set(RULES) and not set(HELD_RULES) & set(TRAIN_RULES)
    assert set(TRAIN_PEOPLE) | set(NEW_PEOPLE) == set(PEOPLE) and not set(TRAIN_PEOPLE) & set(NEW_PEOPLE)
    # every held-out answer is still an answer of a training rule (else no model could know it)
    assert set(HELD_RULES.values()) <= set(TRAIN_RULES.values())


def test_encode_and_decode_are_inverse():
    words = ["John", "father", "sister", "Mary"]
    assert decode(encode(words)) == words
    assert encode(words).tolist() == [VOCAB.index(w) for w in words]


def test_rule_targets_match_the_dict_for_every_sentence():
    ids = all_sentences(RULES, PEOPLE[:5])
    got = rule_targets(ids)
    for row, target in zip(ids, got):
        want = targets_by_loop(decode(row), RULES)
        assert [VOCAB[i] for i in target[:3].tolist()] == want[:3]
        assert int(target[3]) == IGNORE


def test_all_sentences_lists_every_rule_and_pair_of_people_once():
    people = PEOPLE[:4]
    ids = all_sentences(KINSHIP_RULES, people)
    seen = {tuple(decode(row)) for row in ids}
    want = {(x, a, b, y) for (a, b) in KINSHIP_RULES for x in people for y in people}
    assert len(ids) == len(want) and seen == want


def test_composition_lookup_holds_every_rule_and_minus_one_elsewhere():
    lookup = composition_lookup(RULES)
    for a, b in itertools.product(VOCAB, VOCAB):
        want = TOKEN[RULES[(a, b)]] if (a, b) in RULES else -1
        assert int(lookup[TOKEN[a], TOKEN[b]]) == want


def test_sentence_batch_draws_valid_sentences_with_their_targets():
    make = sentence_batch(TRAIN_RULES, TRAIN_PEOPLE, batch=50)
    ids, targets = make(torch.Generator().manual_seed(3))
    assert ids.shape == targets.shape == (50, 4)
    for row, target in zip(ids, targets):
        x, r1, r2, y = decode(row)
        assert x in TRAIN_PEOPLE and y in TRAIN_PEOPLE and (r1, r2) in TRAIN_RULES
        assert [VOCAB[i] for i in target[:3].tolist()] == targets_by_loop([x, r1, r2, y], RULES)[:3]
    again, _ = make(torch.Generator().manual_seed(3))
    assert torch.equal(ids, again)  # seeded


# ---------------------------------------------------------------- hand-set heads

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_handset_model_is_right_at_every_slot_of_every_sentence(dtype):
    model = handset_model(KINSHIP_RULES, dtype=dtype)
    ids = all_sentences(KINSHIP_RULES, PEOPLE)  # every rule, every X, every Y
    with torch.no_grad():
        predicted = model(ids).argmax(-1)
    wanted = rule_targets(ids, KINSHIP_RULES)
    assert bool((predicted[:, :3] == wanted[:, :3]).all())


def test_handset_logits_are_membership_counts_computed_by_loop():
    """logit(r) at r1's slot = [r1 in A_r] + [r2 in B_r], A_r / B_r the rules' first / second relations."""
    model = handset_model(KINSHIP_RULES, dtype=torch.float64)
    ids = all_sentences(KINSHIP_RULES, PEOPLE[:2])
    with torch.no_grad():
        logits = model(ids)[:, 1]  # (N, V)
    for row, got in zip(ids, logits):
        _, r1, r2, _ = decode(row)
        for out in set(KINSHIP_RULES.values()):
            firsts = {a for (a, b), c in KINSHIP_RULES.items() if c == out}
            seconds = {b for (a, b), c in KINSHIP_RULES.items() if c == out}
            assert abs(float(got[TOKEN[out]]) - ((r1 in firsts) + (r2 in seconds))) < 1e-6


def test_composition_head_writes_half_of_each_relation_code_into_mix():
    head = composition_head().double()
    layout = handset_layout()
    D, mix = layout["copied"].stop, layout["mix"]
    ids = all_sentences(KINSHIP_RULES, PEOPLE[:3])
    x = torch.zeros(len(ids), 4, D, dtype=torch.float64)
    x[torch.arange(len(ids))[:, None], torch.arange(4), ids] = 1.0  # one-hot tokens
    x[:, torch.arange(4), layout["positions"].start + torch.arange(4)] = 1.0  # one-hot positions
    out, weights = head(x)  # weights (N, 1, 4, 4): one head
    for row, got in zip(ids, out[:, 1, mix]):
        want = torch.zeros(len(RELATIONS), dtype=torch.float64)
        for word in decode(row)[1:3]:
            want[RELATIONS.index(word)] += 0.5
        torch.testing.assert_close(got, want, atol=1e-8, rtol=0)
    assert float((weights[:, 0, 1, 1:3] - 0.5).abs().max()) < 1e-8


def test_a_broken_handset_model_fails():
    ids = all_sentences(KINSHIP_RULES, PEOPLE)
    wanted = rule_targets(ids, KINSHIP_RULES)
    flat = handset_model(KINSHIP_RULES, gap=0.0)  # no score gap: uniform attention, no copy
    assert float((flat(ids).argmax(-1)[:, 2] == wanted[:, 2]).double().mean()) < 0.5
    swapped = handset_model(KINSHIP_RULES)  # read r2 as the first relation: order is lost
    with torch.no_grad():
        reversed_rules = {(b, a): c for (a, b), c in KINSHIP_RULES.items() if (b, a) not in KINSHIP_RULES}
        swapped.readout.weight.copy_(composition_readout({**reversed_rules}))
    assert float((swapped(ids).argmax(-1)[:, 1] == wanted[:, 1]).double().mean()) < 0.5


def test_the_handset_readout_cannot_fit_the_xor_but_the_content_head_can():
    ids = all_sentences(FRIEND_RULES, PEOPLE)
    wanted = rule_targets(ids, FRIEND_RULES)[:, 1]
    additive = handset_model(RULES)
    with torch.no_grad():
        at_r = additive(ids)[:, 1]
    assert not bool(strictly_right(at_r, wanted).any())  # friend and enemy tie everywhere
    assert float((at_r[:, TOKEN["friend"]] - at_r[:, TOKEN["enemy"]]).abs().max()) < 1e-6
    content = friend_enemy_model()
    assert bool((content(ids).argmax(-1)[:, 1] == wanted).all())
    weak = friend_enemy_model(gap=0.1)  # scores too close: the weights barely depend on the tokens
    assert float((weak(ids).argmax(-1)[:, 1] == wanted).double().mean()) < 1


def test_xor_residue_is_zero_for_a_fixed_mix_and_matches_a_direct_computation():
    model = DecoderOnly(ModelConfig(vocab_size=len(VOCAB), max_len=4, d_model=8, causal=False, seed=4)).double()
    with torch.no_grad():
        for linear in (model.attention.query, model.attention.key):
            linear.weight.zero_()
            linear.bias.zero_()
    assert float(xor_residue(model).abs().max()) < 1e-10
    content = friend_enemy_model()
    got = xor_residue(content, PEOPLE[:3])
    gaps = {}
    for a, b in FRIEND_RULES:
        with torch.no_grad():
            logits = content(encode(["John", a, b, "John"])[None])[0, 1]
        gaps[(a, b)] = float(logits[TOKEN["friend"]] - logits[TOKEN["enemy"]])
    want = gaps[("friend", "friend")] + gaps[("enemy", "enemy")] - gaps[("friend", "enemy")] - gaps[("enemy", "friend")]
    assert abs(float(got[0]) - want) < 1e-9 and want > 1


# ---------------------------------------------------------------- trained models

def test_attention_plus_mlp_learns_every_training_sentence_and_no_new_person():
    model = train_rule_model(d_ff=96, n_heads=4, steps=80)  # lesson 07's recipe
    with torch.no_grad():
        model(encode(["John", "father", "sister", "Mary"])[None])
    assert model.last_weights.shape == (1, 4, 4, 4)  # (B, H, T, S): four heads
    assert bool((slot_accuracy(model, TRAIN_RULES, TRAIN_PEOPLE) == 1).all())
    assert bool((slot_lead(model, TRAIN_RULES, TRAIN_PEOPLE) > 0).all())
    new = slot_accuracy(model, TRAIN_RULES, NEW_PEOPLE)
    assert float(new[1]) > 0.95 and float(new[0]) < 0.05 and float(new[2]) < 0.05
    assert float(slot_accuracy(model, HELD_RULES, TRAIN_PEOPLE)[1]) < 0.7


def test_a_fixed_mix_with_an_mlp_learns_the_xor_in_lesson_07s_steps():
    # lesson 07's recipe: the friend/enemy table only, rows of 48, 128 sentences a step at 0.012
    model = train_rule_model(FRIEND_RULES, d_model=48, d_ff=96, content=False, steps=80, lr=0.012,
                             batch=128)
    assert float(model.attention.query.weight.abs().max()) == 0  # still a fixed mix
    assert float(slot_lead(model, FRIEND_RULES, TRAIN_PEOPLE)[1]) > 0  # every sentence right
    assert float(xor_residue(model, TRAIN_PEOPLE).min()) > 1  # not a sum F(r1) + G(r2)


def test_a_fixed_mix_keeps_its_zero_query_and_key_and_gets_at_most_three_xor_rules():
    model = train_rule_model(d_ff=0, content=False, steps=60)
    assert float(model.attention.query.weight.abs().max()) == 0 and float(model.attention.key.weight.abs().max()) == 0
    assert float(xor_residue(model, TRAIN_PEOPLE).abs().max()) < 1e-9
    assert float(slot_accuracy(model, FRIEND_RULES, TRAIN_PEOPLE)[1]) <= 0.75


def _handset_without_even_copies():
    """The hand-set model with the copy of Y broken for the people whose id is even."""
    model = handset_model(KINSHIP_RULES)
    with torch.no_grad():
        model.readout.weight[[TOKEN[p] for p in PEOPLE[::2]]] = 0.0
    return model


def test_slot_accuracy_counts_right_answers_by_loop():
    model = _handset_without_even_copies()
    got = slot_accuracy(model, KINSHIP_RULES, PEOPLE[:4])
    ids = all_sentences(KINSHIP_RULES, PEOPLE[:4])
    with torch.no_grad():
        logits = model(ids).tolist()
    right = [0, 0, 0]
    for row, scores in zip(ids, logits):
        want = targets_by_loop(decode(row), KINSHIP_RULES)
        for slot in range(3):  # right: the wanted token strictly above every other
            w = VOCAB.index(want[slot])
            right[slot] += all(scores[slot][w] > v for j, v in enumerate(scores[slot]) if j != w)
    torch.testing.assert_close(got, torch.tensor(right, dtype=torch.float64) / len(ids))
    assert float(got[2]) == 0.5


def test_strictly_right_counts_a_tie_as_wrong_and_ignores_ignore():
    logits = torch.tensor([[1.0, 2.0, 2.0], [3.0, 1.0, 0.0], [0.0, 5.0, 1.0]])
    got = strictly_right(logits, torch.tensor([1, 0, IGNORE]))
    assert got.tolist() == [False, True, False]
    assert answer_lead(logits, torch.tensor([1, 0, IGNORE])).tolist() == [0.0, 2.0, -math.inf]
    assert answer_lead(logits, torch.tensor([0, 2, 2])).tolist() == [-1.0, -3.0, -4.0]


def test_slot_lead_is_the_smallest_lead_by_loop_and_positive_exactly_when_all_right():
    model = _handset_without_even_copies()
    got = slot_lead(model, KINSHIP_RULES, PEOPLE[:4])
    ids = all_sentences(KINSHIP_RULES, PEOPLE[:4])
    with torch.no_grad():
        logits = model(ids).tolist()
    want = [math.inf] * 3
    for row, scores in zip(ids, logits):
        targets = targets_by_loop(decode(row), KINSHIP_RULES)
        for slot in range(3):
            w = VOCAB.index(targets[slot])
            lead = scores[slot][w] - max(v for j, v in enumerate(scores[slot]) if j != w)
            want[slot] = min(want[slot], lead)
    assert got.tolist() == pytest.approx(want, abs=1e-6)
    accuracy = slot_accuracy(model, KINSHIP_RULES, PEOPLE[:4])
    assert ((got > 0) == (accuracy == 1)).all() and float(got[2]) < 0 < float(got[1])


def test_answer_kind_sorts_answers_into_right_borrowed_and_other():
    pair = ("husband", "mother")  # held out: mother-in-law; wife mother and father mother are seen
    assert answer_kind(pair, "mother-in-law") == "right"
    assert answer_kind(pair, "grandmother") == "borrowed"  # father mother -> grandmother shares r2
    assert answer_kind(pair, "father-in-law") == "borrowed"  # husband father shares r1
    assert answer_kind(pair, "aunt") == "other" and answer_kind(pair, "John") == "other"
    assert ANSWER_KINDS == ("right", "borrowed", "other")
    by_loop = set()
    for (a, b), out in TRAIN_RULES.items():
        if a == "husband" or b == "mother":
            by_loop.add(out)
    assert nearby_answers(pair) == by_loop
    # every held-out composition's answer is seen from a rule sharing r1 or r2 (its twin)
    assert all(out in nearby_answers(p) for p, out in HELD_RULES.items())


def test_composition_answers_say_the_rule_tables_answer_for_the_handset_model():
    model = handset_model(KINSHIP_RULES)
    rules = dict(list(KINSHIP_RULES.items())[:4])
    got = composition_answers(model, rules, PEOPLE[:3])
    assert got == {pair: (out, 1.0) for pair, out in rules.items()}
    tied = composition_answers(handset_model(RULES), FRIEND_RULES, PEOPLE[:2])
    assert all(share == 0 for _, share in tied.values())  # friend and enemy tie: no answer


def test_train_rule_models_trains_one_model_per_seed():
    models = train_rule_models([0, 1], d_ff=0, content=False, steps=3)
    assert len(models) == 2
    again = train_rule_model(d_ff=0, content=False, steps=3, seed=1)
    torch.testing.assert_close(models[1].readout.weight, again.readout.weight)
    assert not torch.equal(models[0].readout.weight, models[1].readout.weight)


def test_rule_model_runs_of_two_settings_in_one_pool_are_the_models_one_by_one():
    # lesson 07 trains its fixed-mix and its attention models, with an MLP, in one pool
    fixed, free = dict(d_ff=8, content=False, steps=3), dict(d_ff=8, steps=4)
    runs = [(0, fixed), (1, fixed), (0, free)]
    pooled = run_each(rule_model_run, runs, workers=2)
    for (seed, settings), model in zip(runs, pooled):
        alone = train_rule_model(seed=seed, **settings)
        assert all(torch.equal(a, b) for a, b in zip(model.parameters(), alone.parameters()))


# ---------------------------------------------------------------- capacity

def test_capacity_with_more_hidden_units_than_rules_stores_every_rule():
    right, table = rules_right(64, n_relations=8)  # 65 columns, 64 rules: solved exactly
    assert table == 64 and right == 64


def test_rules_right_matches_a_float64_least_squares_count_by_loop_on_one_table():
    """The same table and features as rules_right, solved by float64 lstsq, counted by loop:
    the table is drawn first, so every width meets the same one."""
    n, answers = 20, 10
    gen = torch.Generator().manual_seed(3)
    wanted = torch.randint(answers, (n * n,), generator=gen)  # drawn before any width is known
    for d_ff in (16, 96):
        got, table = rules_right(d_ff, n, answers, seed=3)
        gen = torch.Generator().manual_seed(3)
        assert torch.equal(torch.randint(answers, (n * n,), generator=gen), wanted)
        hidden = random_layer_features(n, d_ff, gen).double()
        w = torch.linalg.lstsq(hidden, torch.nn.functional.one_hot(wanted, answers).double()).solution
        out = (hidden @ w).tolist()
        want = sum(all(row[a] > v for j, v in enumerate(row) if j != a)
                   for row, a in zip(out, wanted.tolist()))
        assert table == n * n and abs(got - want) <= 2 and got < table


def test_random_layer_features_are_relu_of_the_concatenated_embeddings():
    gen = torch.Generator().manual_seed(1)
    hidden = random_layer_features(5, 8, gen)
    gen = torch.Generator().manual_seed(1)
    embed = torch.randn(5, 2, generator=gen) / math.sqrt(2)
    w, b = torch.randn(4, 8, generator=gen), torch.randn(8, generator=gen)
    for r1 in range(5):
        for r2 in range(5):
            want = torch.relu(torch.cat([embed[r1], embed[r2]]) @ w + b)
            torch.testing.assert_close(hidden[5 * r1 + r2, :8], want)
    assert hidden.shape == (25, 9) and bool((hidden[:, 8] == 1).all())


def test_symmetric_gram_equals_the_full_product():
    x = torch.randn(50, 13, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    for blocks in (1, 3, 4):
        torch.testing.assert_close(symmetric_gram(x, blocks), x.T @ x)


def test_capacity_curve_counts_are_in_range_and_grow_with_width():
    counts = capacity_curve([8, 32, 128], n_relations=30)
    right, table = counts.unbind(-1)
    assert counts.dtype == torch.int64 and bool((table == 900).all())
    assert bool(((right >= 0) & (right <= table)).all())
    assert bool((right[1:] > right[:-1]).all()) and bool((right < table).all())
    assert torch.equal(counts, capacity_curve([8, 32, 128], n_relations=30))  # seeded
    assert capacity_curve([32], n_relations=30, seed=1).tolist() != counts[1:2].tolist()
    # each width's count is rules_right's on the seed's one table: lesson 07 reuses its d_ff = 192
    # counts instead of counting that table again
    curve = capacity_curve([16, 8, 32], n_relations=30, seed=1).tolist()
    assert curve == [list(rules_right(d, 30, seed=1)) for d in (16, 8, 32)]


def test_trained_rules_right_trains_each_seed_and_width_as_it_would_alone():
    """All widths and seeds train in one run: no model may move another or read its table."""
    together = trained_rules_right([8, 16], n_relations=12, seeds=[0, 3], steps=15)
    alone = trained_rules_right([16], n_relations=12, seeds=[3], steps=15)
    assert together.shape == (2, 2) and together.dtype == torch.int64
    assert int(together[1, 1]) == int(alone[0, 0])
    assert together[0].tolist() != together[1].tolist()  # each seed its own table and layer
    split = trained_rules_right([8, 16], n_relations=12, seeds=[0, 3, 5], steps=15, workers=2)
    assert torch.equal(split[:2], together) and split.shape == (3, 2)


def test_trained_rules_right_checkpoints_are_the_counts_shorter_runs_end_with():
    """The curve of rules right against steps reads one run: its count after c steps is what a
    run of c steps ends with, for every seed and width."""
    curve = trained_rules_right([8, 16], n_relations=12, seeds=[0, 3], steps=30, checkpoints=[5, 12, 30])
    assert curve.shape == (2, 2, 3) and curve.dtype == torch.int64
    for i, steps in enumerate([5, 12, 30]):
        alone = trained_rules_right([8, 16], n_relations=12, seeds=[0, 3], steps=steps)
        assert torch.equal(curve[:, :, i], alone), steps
    split = trained_rules_right([8, 16], n_relations=12, seeds=[0, 3], steps=30, checkpoints=[5, 12, 30],
                                workers=2)
    assert torch.equal(split, curve)
    # a count read before the last step: the run goes on after it
    assert torch.equal(trained_rules_right([8], n_relations=12, steps=30, checkpoints=[12])[:, :, 0],
                       curve[:1, :1, 1])


def test_trained_rules_right_fits_a_table_it_can_hold_and_not_one_it_cannot():
    # 36 rules, 33 x 4 output weights and a 16 x 32 first layer: room for all of them
    assert trained_rules_right([32], n_relations=6, n_answers=4, steps=150).tolist() == [[36]]
    # 1,024 rules of 48 answers at d_ff = 8 (about 700 weights): most stay wrong
    right = int(trained_rules_right([8], n_relations=32, steps=40)[0, 0])
    assert 1024 / 48 < right < 1024 / 4


def test_training_every_weight_beats_least_squares_on_the_same_table_and_layer():
    """The lesson's comparison on a small case: the trained count is not the solved one."""
    trained = trained_rules_right([16], n_relations=20, seeds=[0, 1], steps=80)[:, 0]
    solved = torch.tensor([rules_right(16, 20, seed=s)[0] for s in (0, 1)])
    assert bool((trained > 1.1 * solved).all()), (trained, solved)


def test_fano_bits_match_the_formula_by_loop_and_its_ends():
    k = 48
    assert float(fano_bits(torch.tensor(100), torch.tensor(100), k)) == pytest.approx(100 * math.log2(k))
    assert float(fano_bits(torch.tensor(2), torch.tensor(96), k)) == pytest.approx(0, abs=1e-9)  # chance
    # every answer wrong still says which answer each rule does not have
    assert float(fano_bits(torch.tensor(0), torch.tensor(96), k)) == pytest.approx(96 * math.log2(k / (k - 1)))
    right, table = torch.tensor([10, 37, 90]), torch.tensor([100, 100, 100])
    for got, r in zip(fano_bits(right, table, k).tolist(), right.tolist()):
        e = 1 - r / 100
        h = -(e * math.log2(e) + (1 - e) * math.log2(1 - e))
        assert got == pytest.approx(100 * (math.log2(k) - h - e * math.log2(k - 1)), rel=1e-12)
    # fewer bits than the table holds unless every rule is right
    assert bool((fano_bits(right, table, k) < 100 * math.log2(k)).all())


def test_fit_power_law_recovers_a_and_p():
    x = torch.tensor([1.0, 2.0, 5.0, 10.0, 40.0], dtype=torch.float64)
    a, p = fit_power_law(x, 3.0 * x**0.7)
    assert a == pytest.approx(3.0, rel=1e-10) and p == pytest.approx(0.7, rel=1e-10)
    noisy = 2.0 * x**1.5 * torch.tensor([1.1, 0.9, 1.05, 0.95, 1.0], dtype=torch.float64)
    a, p = fit_power_law(x, noisy)
    logs = torch.stack([torch.ones(5, dtype=torch.float64), x.double().log()], 1)
    want = torch.linalg.pinv(logs) @ noisy.double().log()
    assert math.log(a) == pytest.approx(float(want[0]), abs=1e-10) and p == pytest.approx(float(want[1]), abs=1e-10)


# ---------------------------------------------------------------- bad input

@pytest.mark.parametrize("call,error,message", [
    (lambda: encode(["John", "cousin"]), ValueError, "words"),
    (lambda: encode("John father"), TypeError, "words"),
    (lambda: decode(torch.tensor([[1, 2]])), ValueError, "ids"),
    (lambda: decode(torch.tensor([1, 999])), ValueError, "ids"),
    (lambda: rule_targets(torch.tensor([[0, 1, 2, 999]])), ValueError, "ids"),
    (lambda: rule_targets(torch.tensor([[0, 1, 2]])), ValueError, "ids"),
    (lambda: rule_targets(torch.zeros(2, 4)), TypeError, "ids"),
    (lambda: rule_targets(encode(["John", "father", "cousin", "Mary"])[None]), ValueError, "words"),
    (lambda: rule_targets(encode(["John", "son", "church", "Mary"])[None]), ValueError, "not in the rules"),
    (lambda: rule_targets(encode(["John", "father", "sister", "Mary"])[None], {}), TypeError, "rules"),
    (lambda: all_sentences({("father", "cousin"): "aunt"}), ValueError, "rules"),
    (lambda: all_sentences(RULES, ["Bob"]), ValueError, "people"),
    (lambda: all_sentences(RULES, "John"), TypeError, "people"),
    (lambda: sentence_batch(RULES, PEOPLE, batch=0), ValueError, "batch"),
    (lambda: composition_head(gap=-1.0), ValueError, "gap"),
    (lambda: composition_readout(alpha=0), ValueError, "alpha"),
    (lambda: handset_model(dtype=torch.int64), TypeError, "dtype"),
    (lambda: friend_enemy_model(gap=0), ValueError, "gap"),
    (lambda: train_rule_model(content="yes"), TypeError, "content"),
    (lambda: train_rule_model(d_model=0), ValueError, "d_model"),
    (lambda: slot_accuracy("model"), TypeError, "model"),
    (lambda: xor_residue(None), TypeError, "model"),
    (lambda: capacity_curve([]), ValueError, "d_ffs must not be empty"),
    (lambda: rules_right(8, n_relations=1), ValueError, "n_relations"),
    (lambda: fano_bits(torch.tensor([5]), torch.tensor([4])), ValueError, "right and table"),
    (lambda: fano_bits(torch.tensor([1, 2]), torch.tensor([4])), ValueError, "right and table"),
    (lambda: answer_kind(("father", "son"), "grandson"), ValueError, "pair"),
    (lambda: train_rule_model(n_heads=5), ValueError, "n_heads"),
    (lambda: capacity_curve([8, 0]), ValueError, "d_ff"),
    (lambda: rules_right(10), ValueError, "multiple of 4"),
    (lambda: rules_right(8, n_answers=1), ValueError, "n_answers"),
    (lambda: train_rule_models([]), ValueError, "seeds must not be empty"),
    (lambda: trained_rules_right([8], steps=10, checkpoints=[5, 20]), ValueError, "checkpoints"),
    (lambda: trained_rules_right([8], steps=10, checkpoints=[5, 5]), ValueError, "checkpoints"),
    (lambda: trained_rules_right([8], steps=10, checkpoints=[0]), ValueError, "checkpoints"),
    (lambda: trained_rules_right([8], steps=10, checkpoints=5), TypeError, "checkpoints"),
    (lambda: fit_power_law(torch.tensor([1.0, 2.0]), torch.tensor([1.0, -2.0])), ValueError, "positive"),
    (lambda: fit_power_law(torch.tensor([1.0]), torch.tensor([1.0])), ValueError, "x and y"),
])
def test_bad_input_is_refused_by_name(call, error, message):
    with pytest.raises(error, match=message):
        call()


# ---------------------------------------------------------------- widget

def test_widget_redraws_fast_and_keeps_the_layer_in_range():
    from course_lib.widgets.logic_rules import sentence_widget

    fixed = train_rule_model(d_ff=0, content=False, steps=5)
    heads = train_rule_model(d_ff=8, n_heads=4, steps=5)
    view = sentence_widget({"hand-set": handset_model(), "fixed": fixed, "heads": heads},
                           [["John", "father", "sister", "Mary"], ["Tom", "enemy", "enemy", "Kate"]])
    controls = view.controls
    controls["layer"].value = 2
    controls["model"].value = "fixed"
    assert controls["layer"].max == 1 and controls["layer"].value == 1
    controls["sentence"].value = controls["sentence"].options[1]
    controls["model"].value = "hand-set"
    assert controls["layer"].max == 2
    controls["model"].value = "heads"  # one heatmap per head, and the colour bar
    assert view.view.value.count("<svg") == 5 and "head 4" in view.view.value
    assert view.first_view.count("<svg") == 2 and not view.errors.outputs
    assert "aunt" in view.first_view
    assert max(view.timings_ms) < 50


def test_widget_shows_a_layer_slider_only_where_it_moves_the_view():
    from course_lib.widgets.logic_rules import sentence_widget

    one_layer = {"fixed": train_rule_model(d_ff=0, content=False, steps=5),
                 "friend/enemy": friend_enemy_model()}
    sentences = [["Tom", "enemy", "enemy", "Kate"]]
    # Models of one layer only: a slider from 1 to 1 would move nothing, so none is shown.
    view = sentence_widget(one_layer, sentences)
    assert view.controls["layer"].layout.display == "none"
    # The hand-set model has two layers: the slider shows, and each position draws another
    # layer's attention; choosing a one-layer model hides it again.
    view = sentence_widget({"hand-set": handset_model(), **one_layer}, sentences)
    layer = view.controls["layer"]
    assert layer.layout.display is None and (layer.min, layer.max) == (1, 2)
    first = view.view.value
    layer.value = 2
    assert "layer 2 attention" in view.view.value and "layer 1" not in view.view.value
    assert _heatmap_cells(view.view.value) != _heatmap_cells(first)
    view.controls["model"].value = "fixed"
    assert layer.layout.display == "none" and layer.value == 1
    view.controls["model"].value = "hand-set"
    assert layer.layout.display is None and not view.errors.outputs


def _heatmap_cells(html: str) -> list[str]:
    """The fill of every 46 px heatmap cell in a widget view, in order."""
    return re.findall(r'width="46" height="46" fill="([^"]+)"', html)


def test_widget_colour_bar_is_the_heatmaps_scale():
    """The bar beside the heatmaps runs from white (0) at its foot to the colour of a weight of
    1 at its head, in the heatmaps' own colours, ticked 0 to 1."""
    from course_lib.plots import svg_heatmap
    from course_lib.widgets.logic_rules import sentence_widget

    view = sentence_widget({"hand-set": handset_model()}, [["John", "father", "sister", "Mary"]])
    bar = re.findall(r"<svg\b.*?</svg>", view.view.value, re.S)[-1]
    assert ">weight</text>" in bar
    ticks = re.findall(r"<text[^>]*>([-0-9.]+)</text>", bar)
    assert ticks[0] == "0" and ticks[-1] == "1" and len(ticks) >= 3, ticks
    stripes = re.findall(r'<rect x="4" y="[^"]+" width="16" height="[^"]+" fill="(rgb[^"]+)"', bar)
    # A heatmap with one cell of weight 1 and one of 0, drawn on the widget's scale.
    corners = _fills(svg_heatmap(torch.tensor([[1.0, 0.0]]), ["q"], ["a", "b"], limit=1.0))
    assert _rgb(stripes[0]) == pytest.approx(_rgb(corners[0]), abs=3)  # the head: weight 1
    assert _rgb(stripes[-1]) == pytest.approx(_rgb(corners[1]), abs=3)  # the foot: weight 0
    # It darkens all the way up, like the cells' colour with the weight.
    shades = [sum(_rgb(fill)) for fill in stripes]
    assert shades == sorted(shades)


def _fills(svg: str) -> list[str]:
    return re.findall(r'<rect x="[^"]+" y="[^"]+" width="\d+" height="\d+" fill="(rgb[^"]+)"', svg)


def _rgb(fill: str) -> tuple[int, ...]:
    return tuple(int(c) for c in re.findall(r"\d+", fill))




# ---------------------------------------------------------------- the lesson's ten-seed tables

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "07_logic_rules.ipynb"
TEN_SEEDS = list(range(10))
LONG_CHECKPOINTS = [80, 320, 2560, 5000]  # the steps of the lesson's table of long runs


def _markdown_cell(start: str) -> str:
    """The lesson's markdown cell whose text starts with `start`, its whitespace made single spaces."""
    import nbformat

    cells = [c.source for c in nbformat.read(NOTEBOOK, as_version=4).cells
             if c.cell_type == "markdown" and c.source.startswith(start)]
    assert len(cells) == 1, f"one markdown cell of lesson 07 must start with {start!r}"
    return cells[0]


def _table(text: str) -> dict[str, list[str]]:
    """The markdown table in `text`: each row's first column -> its other columns, as printed."""
    rows = [[col.strip() for col in line.strip().strip("|").split("|")]
            for line in text.splitlines() if line.strip().startswith("|")]
    return {row[0]: row[1:] for row in rows[2:]}  # past the header and the |---| line


def _span(values, form=None) -> str:
    """A range over seeds as the lesson's tables print it: "a to b", or "a" when both are the same."""
    from course_lib.claims import fmt

    values = [float(v) for v in values]
    low, high = (form or fmt)(min(values)), (form or fmt)(max(values))
    return low if low == high else f"{low} to {high}"


@pytest.fixture(scope="module")
def lesson_at_ten_seeds():
    """_lesson_at_ten_seeds in a new process, as a kernel runs the lesson (tests/fresh.py)."""
    from fresh import in_fresh_process

    return in_fresh_process("test_logic_rules", "_lesson_at_ten_seeds")


def _lesson_at_ten_seeds():
    """Lesson 07's code cells, top to bottom, with SEEDS = list(range(10)) in place of its
    setup cell's five (the widget cell left out): its variables, and every claim's margin.
    About 20 s on one free core, more on a busy machine."""
    import warnings

    import matplotlib
    import nbformat

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from course_lib import claims

    namespace: dict = {}
    margins: dict[str, float | None] = {}

    def recording_claim(statement, holds, *args, **kwargs):
        margins[statement] = getattr(holds, "margin", None)
        return claims.claim(statement, holds, *args, **kwargs)

    cells = [c.source for c in nbformat.read(NOTEBOOK, as_version=4).cells if c.cell_type == "code"]
    for source in cells:
        if "sentence_widget(" in source and "import" not in source:
            continue  # the widget: nothing measured
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Agg's "cannot show the figure"
            exec(compile(source, str(NOTEBOOK), "exec"), namespace)  # noqa: S102 (the lesson's own cells)
        plt.close("all")
        if "SEEDS" in namespace and namespace["SEEDS"] != TEN_SEEDS:  # the setup cell ran
            assert namespace["SEEDS"] == [0, 1, 2, 3, 4]
            namespace["SEEDS"] = TEN_SEEDS
            namespace["claim"] = recording_claim
    assert namespace["MORE_SEEDS"] == TEN_SEEDS and len(margins) >= 14
    return namespace, margins


@pytest.mark.slow
def test_the_lessons_ten_seed_table_is_what_seeds_0_to_9_measure(lesson_at_ten_seeds):
    """The table at the end of lesson 07 states every seed-dependent claim's range over seeds
    0 .. 9 (the lesson itself runs five, to stay within its 10 s): every range it prints is
    the one its own code measures at SEEDS = list(range(10)), every claim holds for each seed,
    and the smallest margin is the one the text states."""
    ns, margins = lesson_at_ten_seeds
    def percent(v: float) -> str:  # the table's percentages
        return f"{100 * v:.3g}"

    lead, ratio_64_4 = ns["lead"], ns["sweep_beyond"][:, ns["n64"]] / ns["sweep_beyond"][:, ns["n4"]]
    bits_64_4 = ns["sweep_bits"][:, ns["n64"]] / ns["sweep_bits"][:, ns["n4"]]
    at_80, at_320 = ns["at_80"], ns["at_320"]
    from course_lib.claims import fmt

    measured = {
        "fixed mix + MLP: lead; residue": f"{_span(ns['xor_lead'])}; {_span(ns['xor_mlp_residue'])}",
        "attention + MLP: lead": _span(ns["worst"]),
        "new people: relation right": _span(ns["new_people"][:, 1], percent) + "%",
        "new people: X or Y right": _span(ns["new_people"][:, [0, 2]].amax(1), percent) + "%",
        "new people: gap": _span(ns["gaps"]),
        "wrong answers borrowed": f"{ns['count']['borrowed']} of {ns['wrong']}",
        "new compositions right (mean)": percent(float(ns["new_rules"][:, 1].mean())) + "%",
        "one table: share right": _span(ns["share"].flatten(), percent) + "%",
        "exponent $p$; doubling gain": f"{_span(ns['exponents'])}; ≥ {fmt(ns['growth'])}",
        "12,321 / 784 rules: beyond chance; bits": f"≥ {fmt(float(ratio_64_4.min()))}; "
                                                   f"≤ {fmt(float(bits_64_4.max()))}",
        "bits per output weight": f"≤ {fmt(float(ns['rates'].max()))}",
        "trained / least squares: 16; 24; mean 24 / mean 16":
            f"{_span(lead[:, 1])}; {_span(lead[:, 2])}; {fmt(float(lead[:, 2].mean() / lead[:, 1].mean()))}",
        "rules per unit at 24: trained; least squares":
            f"{_span(ns['per_unit'][:, 2])}; {_span(ns['solved_per_unit'][:, 2])}",
        "320 / 80 steps at 24: means; each seed":
            f"{fmt(float(at_320.mean() / at_80.mean()))}; {_span(at_320 / at_80)}",
    }
    text = _markdown_cell("**Ten seeds.**")
    stated = {row: cols[-1] for row, cols in _table(text).items()}
    assert stated == measured
    assert all(margin is None or margin >= 0.05 for margin in margins.values()), margins
    closest = min(m for m in margins.values() if m is not None)
    assert f"the closest {100 * closest:.0f}% inside its bound" in " ".join(text.split()), margins


@pytest.mark.slow
def test_the_lessons_table_of_long_runs_is_what_5000_steps_measure(lesson_at_ten_seeds):
    """Section 5's table of d_ff 24 trained on to 5,000 steps (seeds 0 .. 9), measured here, with
    the numbers the text draws from it. About 15 s on two free cores."""
    ns, _ = lesson_at_ten_seeds
    curve = trained_rules_right([24], n_relations=32, seeds=TEN_SEEDS, steps=LONG_CHECKPOINTS[-1],
                                checkpoints=LONG_CHECKPOINTS, workers=2)[:, 0]  # (seeds, checkpoints)
    # the lesson's own 80- and 320-step counts are these runs' first two checkpoints
    assert torch.equal(curve[:, :2], ns["by_steps"][:, [ns["checkpoints"].index(80), -1]])
    text = _markdown_cell("Trained on to 5,000 steps")
    table = _table(text)
    assert table["rules right, fewest to most"] == [_span(c, lambda v: f"{v:,.0f}") for c in curve.T]
    assert table["mean"] == [f"{float(c.double().mean()):,.0f}" for c in curve.T]
    last = curve[:, -1].double()
    solved = ns["solved"][:, 2].double()  # least squares at d_ff 24, seeds 0 .. 9
    prose = " ".join(text.split())
    for stated in (f"about {round(float(last.mean()), -1):,.0f} of 1,024 rules",
                   f"{float(last.mean()) / 24:.0f} per hidden unit",
                   f"{_span(last / curve[:, 0], lambda v: f'{v:.1f}')} times each seed's 80-step count",
                   f"{float(last.mean() / solved.mean()):.2g} times least squares' {_span(solved)}"):
        assert stated in prose, stated
    after = " ".join(_markdown_cell('So "one layer stores').split())  # the section's conclusion
    assert f"{float(last.mean() / solved.mean()):.2g} times at $d_{{ff}} = 24$ after 5,000 steps" in after
