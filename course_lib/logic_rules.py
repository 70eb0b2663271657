"""Lesson 07: composing relations. "X father sister Y => X aunt Y", by hand and by training.

A sentence is four tokens, X r1 r2 Y ("X's r1's r2 is Y"); the model rewrites it as X r Y
with r = r1 o r2 from the rule table, left-aligned as in the seed:
    input    X   r1   r2   Y
    output   X   r    Y    -       (targets: X, the composed relation, Y, IGNORE)
The query at r1 attends to r1 and r2 and writes alpha V(r1) + beta V(r2): the composed relation is
read from that mix. The query at r2 copies Y from the next position (lesson 06's head).

Residual layout of the hand-set model (rows are vectors; slices of one width-D row):
    tokens     one-hot token (width V)        positions  one-hot position (width 4)
    mix        written by the composition head: alpha e(r1) + beta e(r2), one coordinate per
               relation
    copied     written by the copy head: the token one position to the right (width V)
Shapes use the course's names (course_lib/__init__.py): B, T, D, V.
"""

from __future__ import annotations

import functools
import math
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence

import torch
from torch import Tensor, nn

from .attention import Attention
from .copying import position_copy_head
from .guards import (require_bool, require_count, require_float, require_float_dtype, require_instance,
                     require_integer, require_items, require_number, require_token_ids)
from .model import DecoderOnly, ModelConfig
from .runs import run_each
from .training import IGNORE, train, train_tiny_model

# ---------------------------------------------------------------- the relation world

PEOPLE = ["John", "Pete", "Mary", "Anna", "Paul", "Lucy", "Mark", "Emma", "Tom", "Rose", "Jack",
          "Kate", "Ruth", "Hugo", "Otto", "Zoe"]
# X's r1's r2 is X's r: (r1, r2) -> r. Read "father sister" as "X's father's sister".
KINSHIP_RULES = {
    ("father", "father"): "grandfather", ("mother", "father"): "grandfather",
    ("father", "mother"): "grandmother", ("mother", "mother"): "grandmother",
    ("father", "sister"): "aunt", ("mother", "sister"): "aunt",
    ("father", "brother"): "uncle", ("mother", "brother"): "uncle",
    ("son", "son"): "grandson", ("daughter", "son"): "grandson",
    ("son", "daughter"): "granddaughter", ("daughter", "daughter"): "granddaughter",
    ("brother", "son"): "nephew", ("sister", "son"): "nephew",
    ("brother", "daughter"): "niece", ("sister", "daughter"): "niece",
    ("wife", "father"): "father-in-law", ("husband", "father"): "father-in-law",
    ("wife", "mother"): "mother-in-law", ("husband", "mother"): "mother-in-law",
    ("wife", "brother"): "brother-in-law", ("sister", "husband"): "brother-in-law",
    ("husband", "sister"): "sister-in-law", ("brother", "wife"): "sister-in-law",
    ("son", "wife"): "daughter-in-law", ("daughter", "husband"): "son-in-law",
    ("sister", "father"): "father", ("brother", "mother"): "mother",  # order matters: see aunt
    ("church", "sister"): "nun", ("church", "brother"): "monk", ("church", "father"): "priest",
}
# "The friend of my friend is my friend, the enemy of my enemy is my friend ...": an XOR.
FRIEND_RULES = {("friend", "friend"): "friend", ("enemy", "enemy"): "friend",
                ("friend", "enemy"): "enemy", ("enemy", "friend"): "enemy"}
RULES = {**KINSHIP_RULES, **FRIEND_RULES}
RELATIONS = list(dict.fromkeys([r for pair, out in RULES.items() for r in (*pair, out)]))
VOCAB = PEOPLE + RELATIONS
TOKEN = {word: i for i, word in enumerate(VOCAB)}
SENTENCE_LENGTH = 4  # X r1 r2 Y
Rules = dict[tuple[str, str], str]


def _require_rules(name: str, rules: object) -> Rules:
    """A non-empty dict {(r1, r2): r} over known relations."""
    if not isinstance(rules, dict) or not rules:
        raise TypeError(f"{name} must be a non-empty dict {{(r1, r2): r}}, got {type(rules).__name__}")
    for pair, out in rules.items():
        if not isinstance(pair, tuple) or len(pair) != 2 or not all(r in RELATIONS for r in (*pair, out)):
            raise ValueError(f"{name} must map (r1, r2) to r, relations of {RELATIONS}; got the entry "
                             f"{pair!r}: {out!r}")
    return rules


def _require_people(name: str, people: object) -> list[str]:
    if isinstance(people, str) or not isinstance(people, Sequence) or not people:
        raise TypeError(f"{name} must be a non-empty list of names from PEOPLE, got {people!r}")
    unknown = [p for p in people if p not in PEOPLE]
    if unknown:
        raise ValueError(f"{name} has names that are not in PEOPLE: {unknown}")
    return list(people)


def encode(words: Sequence[str]) -> Tensor:
    """Token ids of a sentence such as ["John", "father", "sister", "Mary"]: (T,), int64."""
    if isinstance(words, str) or not isinstance(words, Sequence):
        raise TypeError(f"words must be a list of words, got {type(words).__name__}")
    unknown = [w for w in words if w not in TOKEN]
    if unknown:
        raise ValueError(f"words must be words of the vocabulary (PEOPLE + RELATIONS), got unknown words {unknown}")
    return torch.tensor([TOKEN[w] for w in words])


def decode(ids: Tensor) -> list[str]:
    """The words of token ids (T,)."""
    require_integer("ids", ids, 1, 1)
    require_token_ids("ids", ids[None], len(VOCAB))
    return [VOCAB[int(i)] for i in ids]


def composition_lookup(rules: Rules = RULES) -> Tensor:
    """(V, V) table of token ids: [r1, r2] -> the id of r1 o r2, -1 where no rule applies."""
    _require_rules("rules", rules)
    lookup = torch.full((len(VOCAB), len(VOCAB)), -1)
    for (a, b), c in rules.items():
        lookup[TOKEN[a], TOKEN[b]] = TOKEN[c]
    return lookup


def rule_targets(ids: Tensor, rules: Rules = RULES) -> Tensor:
    """Targets for sentences X r1 r2 Y: (B, 4) -> (B, 4) = X, r1 o r2, Y, IGNORE."""
    require_token_ids("ids", ids, len(VOCAB))
    if ids.shape[-1] != SENTENCE_LENGTH:
        raise ValueError(f"ids must be sentences of {SENTENCE_LENGTH} tokens X r1 r2 Y, got shape {tuple(ids.shape)}")
    lookup = composition_lookup(rules)
    composed = lookup[ids[:, 1], ids[:, 2]]  # (B,)
    if bool((composed < 0).any()):
        r1, r2 = ids[composed < 0][0, 1:3].tolist()
        raise ValueError(f"ids has the pair {VOCAB[r1]!r} {VOCAB[r2]!r}, which is not in the rules")
    targets = ids.clone()
    targets[:, 1] = composed  # the composed relation at r1's slot
    targets[:, 2] = ids[:, 3]  # Y moves one to the left
    targets[:, 3] = IGNORE  # four tokens in, three out
    return targets


def all_sentences(rules: Rules = RULES, people: Sequence[str] = PEOPLE) -> Tensor:
    """Every sentence X r1 r2 Y over the rules and people: (len(rules) * P * P, 4), rule-major."""
    _require_rules("rules", rules)
    ids = torch.tensor([TOKEN[p] for p in _require_people("people", people)])
    pairs = torch.tensor([[TOKEN[a], TOKEN[b]] for a, b in rules])  # (R, 2)
    x, y = torch.cartesian_prod(ids, ids).unbind(-1)  # (P*P,) each
    n = len(x)
    return torch.cat([x.repeat(len(pairs))[:, None], pairs.repeat_interleave(n, 0),
                      y.repeat(len(pairs))[:, None]], dim=1)  # (R*P*P, 4)


def sentence_batch(rules: Rules, people: Sequence[str], batch: int = 128
                   ) -> Callable[[torch.Generator], tuple[Tensor, Tensor]]:
    """make_batch for train_tiny_model: `batch` random sentences (a rule, two people), targets."""
    _require_rules("rules", rules)
    ids = torch.tensor([TOKEN[p] for p in _require_people("people", people)])
    pairs = torch.tensor([[TOKEN[a], TOKEN[b]] for a, b in rules])  # (R, 2)
    require_count("batch", batch)
    composed = torch.tensor([TOKEN[c] for c in rules.values()])  # (R,): r1 o r2 of each rule
    ignore = torch.full((batch, 1), IGNORE)

    def make_batch(generator: torch.Generator) -> tuple[Tensor, Tensor]:
        rule = torch.randint(len(pairs), (batch,), generator=generator)
        x, y = ids[torch.randint(len(ids), (2, batch), generator=generator)]  # (B,) each
        sentences = torch.cat([x[:, None], pairs[rule], y[:, None]], dim=1)  # (B, 4)
        # rule_targets(sentences, rules), from the rule drawn: it runs every training step
        targets = torch.cat([x[:, None], composed[rule, None], y[:, None], ignore], dim=1)
        return sentences, targets

    return make_batch


# ---------------------------------------------------------------- the hand-set model

def handset_layout() -> dict[str, slice]:
    """The slices of the hand-set residual row: tokens, positions, mix, copied (see the top)."""
    V, P, R = len(VOCAB), SENTENCE_LENGTH, len(RELATIONS)
    return {"tokens": slice(0, V), "positions": slice(V, V + P), "mix": slice(V + P, V + P + R),
            "copied": slice(V + P + R, 2 * V + P + R)}


def composition_head(gap: float = 20.0) -> Attention:
    """The seed's head: the query at r1 (position 1) attends to positions 1 and 2 equally.

    Scores: query 1 -> key 1 and key 2: gap, every other key: 0; other queries score 0
    everywhere (uniform weights). The value of a relation token is its one-hot code in `mix`
    (people give 0), so the output at position 1 is alpha e(r1) + beta e(r2) with
    alpha = beta = e^gap / (2 e^gap + 2), about 1/2. Attention(D, bias=True), frozen.
    """
    gap = require_number("gap", gap, non_negative=True)
    layout = handset_layout()
    D = layout["copied"].stop
    head = Attention(D, bias=True)
    p0, m0 = layout["positions"].start, layout["mix"].start
    with torch.no_grad():
        for linear in (head.query, head.key, head.value, head.out):
            linear.weight.zero_()
            linear.bias.zero_()
        head.query.weight[p0 + 1, p0 + 1] = gap * math.sqrt(D)  # the layer divides by sqrt(d_k)
        head.key.weight[p0 + 1, p0 + 1] = head.key.weight[p0 + 1, p0 + 2] = 1.0  # "I am r1 or r2"
        for i, relation in enumerate(RELATIONS):
            head.value.weight[m0 + i, TOKEN[relation]] = 1.0  # a relation's value: its code in mix
            head.out.weight[m0 + i, m0 + i] = 1.0
    return head.requires_grad_(False)


def composition_readout(rules: Rules = RULES, alpha: float = 0.5) -> Tensor:
    """Hand-set unembedding (V, D): logit of relation r = [r1 in A_r] + [r2 in B_r].

    A_r, B_r: the first and second relations of the rules that give r. At position 1 the row
    holds e(r1) in `tokens` (the residual) and alpha e(r1) + alpha e(r2) in `mix`; so
    sum_b (mix_b / alpha - tokens_b) over b in B_r is [r2 in B_r]. People: 3 [copied = person]
    + 2 [token = person] (Y at position 2, X at position 0). Rows of unused relations are 0.
    """
    _require_rules("rules", rules)
    alpha = require_number("alpha", alpha, positive=True)
    layout = handset_layout()
    tok, mix, copied = (layout[k].start for k in ("tokens", "mix", "copied"))
    unembed = torch.zeros(len(VOCAB), layout["copied"].stop)
    for out in dict.fromkeys(rules.values()):
        firsts = {a for (a, b), c in rules.items() if c == out}
        seconds = {b for (a, b), c in rules.items() if c == out}
        for a in firsts:
            unembed[TOKEN[out], tok + TOKEN[a]] += 1.0
        for b in seconds:
            unembed[TOKEN[out], mix + RELATIONS.index(b)] += 1.0 / alpha
            unembed[TOKEN[out], tok + TOKEN[b]] -= 1.0
    for person in PEOPLE:
        unembed[TOKEN[person], copied + TOKEN[person]] = 3.0
        unembed[TOKEN[person], tok + TOKEN[person]] = 2.0
    return unembed


def handset_model(rules: Rules = RULES, gap: float = 20.0,
                  dtype: torch.dtype = torch.float32) -> DecoderOnly:
    """A two-layer DecoderOnly (no MLP) with every weight set by hand, no training.

    Layer 1: composition_head; layer 2: lesson 06's position_copy_head (query i copies the
    token at i + 1 into `copied`); one-hot token and position embeddings; read-out
    composition_readout(rules). ids (B, 4) -> logits (B, 4, V) in `dtype` (float32: every
    weight is 0, 1, a small integer or 1/alpha, so float32 gives the same answers, twice as fast).
    """
    require_float_dtype("dtype", dtype)
    layout = handset_layout()
    D = layout["copied"].stop
    model = DecoderOnly(ModelConfig(vocab_size=len(VOCAB), max_len=SENTENCE_LENGTH, d_model=D,
                                 causal=False, n_decoder_layers=2, d_ff=0))
    copy = position_copy_head(D, 1, layout["tokens"], layout["positions"], layout["copied"],
                              gap=gap, bias=True)
    with torch.no_grad():
        model.tokens.weight.copy_(torch.eye(len(VOCAB), D))  # token i -> coordinate i
        model.positions.table.weight.zero_()
        # position p -> coordinate V + p
        model.positions.table.weight[:, layout["positions"]] = torch.eye(SENTENCE_LENGTH)
        model.layers[0].attention.load_state_dict(composition_head(gap).state_dict())
        model.layers[1].attention.load_state_dict(copy.state_dict())
        model.readout.weight.copy_(composition_readout(rules))
        model.readout.bias.zero_()
    return model.to(dtype).requires_grad_(False)



def friend_enemy_model(gap: float = 10.0) -> DecoderOnly:
    """A one-layer attention-only DecoderOnly, set by hand, that fits the friend/enemy XOR.

    The weights of the query at r1 depend on the tokens: friend attends to r2; enemy attends
    to r2 when r2 is enemy and to itself when r2 is friend (scores 3 gap vs 2 gap vs gap). The
    value writes a vote (+1 friend, -1 enemy, -3 more from position 1) into the last coordinate;
    the read-out gives friend - enemy = vote + 2 [query is enemy], so the sign is the table's.
    Only the relation slot (position 1) is meaningful. Layout: tokens (V), positions (4), vote (1).
    ids (B, 4) -> logits (B, 4, V), float64.
    """
    gap = require_number("gap", gap, positive=True)
    V, P = len(VOCAB), SENTENCE_LENGTH
    D = V + P + 1
    vote, friend, enemy = D - 1, TOKEN["friend"], TOKEN["enemy"]
    model = DecoderOnly(ModelConfig(vocab_size=V, max_len=P, d_model=D, causal=False, n_decoder_layers=1,
                                 d_ff=0))
    head = model.attention
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.tokens.weight[:, :V] = torch.eye(V)
        model.positions.table.weight[:, V:V + P] = torch.eye(P)
        sharp = gap * math.sqrt(D)  # the layer divides by sqrt(d_k) = sqrt(D)
        # key feature 0: "I am at position 2"; key feature 1: "I am enemy"
        head.key.weight[0, V + 2] = head.key.weight[1, enemy] = 1.0
        # both ask for position 2
        head.query.weight[0, friend] = head.query.weight[0, enemy] = sharp
        head.query.weight[1, enemy] = 2 * sharp  # enemy also asks for enemy, twice as hard
        head.value.weight[0, friend], head.value.weight[0, enemy] = 1.0, -1.0
        head.value.weight[0, V + 1] = -3.0  # attending to position 1 (itself) votes -3 more
        head.out.weight[vote, 0] = 1.0
        model.readout.weight[friend, vote], model.readout.weight[enemy, vote] = 0.5, -0.5
        model.readout.weight[friend, enemy], model.readout.weight[enemy, enemy] = 1.0, -1.0
        model.readout.bias[[friend, enemy]] = 10.0  # above every other token
    return model.double().requires_grad_(False)

# ---------------------------------------------------------------- trained models

# Held out of training: five compositions (each output is still seen from its twin rule) and
# four people (never in a training sentence).
HELD_OUT_RULES = [("mother", "brother"), ("daughter", "daughter"), ("husband", "mother"),
                  ("sister", "daughter"), ("mother", "father")]
TRAIN_RULES = {pair: out for pair, out in RULES.items() if pair not in HELD_OUT_RULES}
HELD_RULES = {pair: RULES[pair] for pair in HELD_OUT_RULES}
TRAIN_PEOPLE, NEW_PEOPLE = PEOPLE[:12], PEOPLE[12:]


def train_rule_model(rules: Rules = TRAIN_RULES, people: Sequence[str] = TRAIN_PEOPLE,
                     d_model: int = 24, d_ff: int = 96, n_heads: int = 1,
                     content: bool = True, steps: int = 150, lr: float = 0.008, batch: int = 64,
                     seed: int = 0) -> DecoderOnly:
    """Train a one-layer bidirectional DecoderOnly (float64) to rewrite X r1 r2 Y as X r Y.

    d_ff = 0: attention only. n_heads: H heads of width d_model / H (lesson 08; one head is
    H = 1). Why lesson 07 trains four: with one head, a few seeds in a hundred leave a
    rule unlearned, often because the query of some relation has come to attend to itself, so
    it never sees r2, and its saturated softmax passes back almost no gradient; with four heads
    each of 150 seeds learned every training sentence. content=False freezes the query and key at
    zero: every query then gives every key the weight 1/4, whatever the tokens (the seed's mix
    with fixed alpha, beta; heads change nothing then). ids (B, 4) -> logits (B, 4, V).
    """
    require_bool("content", content)  # rules and people: sentence_batch checks them
    config = ModelConfig(vocab_size=len(VOCAB), max_len=SENTENCE_LENGTH, d_model=d_model,
                        n_heads=n_heads, causal=False, n_decoder_layers=1, d_ff=d_ff, seed=seed)
    model = DecoderOnly(config).double()
    if not content:
        for linear in (model.attention.query, model.attention.key):
            # zero buffers, not frozen parameters: the model's parameters are then all trained,
            # and Adam takes its one-call-for-all step (optimizers.Adam), the same numbers faster
            for name in ("weight", "bias"):
                zeros = torch.zeros_like(getattr(linear, name)).detach()
                delattr(linear, name)
                linear.register_buffer(name, zeros)
    train_tiny_model(model, sentence_batch(rules, people, batch), steps, lr, seed)
    return model


def train_rule_models(seeds: Sequence[int], progress: bool | str = False, workers: int = 1,
                      **kwargs) -> list[DecoderOnly]:
    """train_rule_model(seed=s, **kwargs) for each seed s; progress=True shows a bar counting
    the models, labelled "rule models" (a string names the task otherwise), with the step and
    loss of each one in training; workers > 1 trains that many at once (runs.run_each: the
    same models)."""
    require_items("seeds", seeds)
    label = "rule models" if progress is True else progress
    return run_each(functools.partial(_rule_model, kwargs=kwargs), list(seeds), workers, label,
                    [f"seed {seed}" for seed in seeds])


def _rule_model(seed: int, kwargs: dict) -> DecoderOnly:
    return train_rule_model(seed=seed, **kwargs)


def rule_model_run(run: tuple[int, dict]) -> DecoderOnly:
    """train_rule_model(seed=seed, **settings) for run = (seed, settings): one item for
    runs.run_each, so that models of different settings train in one pool (lesson 07)."""
    seed, settings = run
    return train_rule_model(seed=seed, **settings)


def answer_lead(logits: Tensor, targets: Tensor) -> Tensor:
    """How far the target's logit is above every other logit: (..., V), (...) -> (...), float.

    Positive exactly when the target is strictly the largest (a tie gives 0); -inf where the
    target is IGNORE.
    """
    require_float("logits", logits, min_rank=1)
    require_integer("targets", targets)
    if targets.shape != logits.shape[:-1]:
        raise ValueError(f"targets of shape {tuple(targets.shape)} must have logits' shape without its last "
                         f"dimension: logits have shape {tuple(logits.shape)}")
    if targets.numel() and int(targets.max()) >= logits.shape[-1]:
        raise ValueError(f"targets must be ids below V={logits.shape[-1]} (or IGNORE), got {int(targets.max())}")
    index = targets.clamp(min=0)[..., None]  # (..., 1)
    wanted = logits.gather(-1, index)  # (..., 1)
    others = logits.scatter(-1, index, -math.inf).max(-1, keepdim=True).values
    return (wanted - others)[..., 0].masked_fill(targets == IGNORE, -math.inf)


def strictly_right(logits: Tensor, targets: Tensor) -> Tensor:
    """Is the target's logit above every other logit? (..., V), (...) -> (...), bool.

    A tie with another token counts as wrong (argmax would pick one of them by its index);
    IGNORE targets are False.
    """
    return answer_lead(logits, targets) > 0


@torch.no_grad()
def slot_accuracy(model: DecoderOnly, rules: Rules = RULES, people: Sequence[str] = PEOPLE) -> Tensor:
    """Share of right answers at the output slots (X, r, Y) over every sentence: (3,), float64.

    Right means strictly above every other token (strictly_right: a tie is wrong).
    """
    require_instance("model", model, DecoderOnly)
    ids = all_sentences(rules, people)  # (N, 4)
    right = strictly_right(model(ids), rule_targets(ids, rules))  # (N, 4)
    return right[:, :3].double().mean(0)


@torch.no_grad()
def slot_lead(model: DecoderOnly, rules: Rules = RULES, people: Sequence[str] = PEOPLE) -> Tensor:
    """The smallest answer_lead at each output slot (X, r, Y) over every sentence: (3,), float64.

    Positive at a slot exactly when slot_accuracy is 1 there; its size says by how much.
    """
    require_instance("model", model, DecoderOnly)
    ids = all_sentences(rules, people)  # (N, 4)
    lead = answer_lead(model(ids).double(), rule_targets(ids, rules))  # (N, 4)
    return lead[:, :3].min(0).values


@torch.no_grad()
def composition_answers(model: DecoderOnly, rules: Rules, people: Sequence[str] = TRAIN_PEOPLE
                        ) -> dict[tuple[str, str], tuple[str, float]]:
    """For each rule (r1, r2): the relation the model says most often at the relation slot,
    and the share of sentences X r1 r2 Y in which that relation is strictly above every other
    token (a tie is not an answer)."""
    require_instance("model", model, DecoderOnly)
    answers = {}
    for pair, out in _require_rules("rules", rules).items():
        ids = all_sentences({pair: out}, people)  # (P*P, 4)
        logits = model(ids)[:, 1]  # (P*P, V)
        said = int(logits.argmax(-1).mode().values)
        share = strictly_right(logits, torch.full((len(ids),), said)).double().mean()
        answers[pair] = (VOCAB[said], float(share))
    return answers


ANSWER_KINDS = ("right", "borrowed", "other")


def _require_pair(pair: object) -> None:
    """pair must be (r1, r2), two relations of the rule table."""
    if not (isinstance(pair, tuple) and len(pair) == 2 and all(r in RELATIONS for r in pair)):
        raise ValueError(f"pair must be (r1, r2), two relations of {RELATIONS}, got {pair!r}")


def nearby_answers(pair: tuple[str, str], rules: Rules = TRAIN_RULES) -> set[str]:
    """The answers of the rules in `rules` that share r1 or r2 with pair = (r1, r2)."""
    _require_pair(pair)
    r1, r2 = pair
    return {out for (a, b), out in _require_rules("rules", rules).items() if a == r1 or b == r2}


def answer_kind(pair: tuple[str, str], answer: str, rules: Rules = TRAIN_RULES) -> str:
    """What an answer to the composition pair = (r1, r2) is, one of ANSWER_KINDS: "right" (the
    rule table's r1 o r2), "borrowed" (wrong, but the answer of a rule in `rules` that shares
    r1 or r2 with it: father mother -> grandmother lent to husband mother) or "other"."""
    if pair not in RULES:
        raise ValueError(f"pair must be a composition (r1, r2) of the rule table, got {pair!r}")
    if answer not in VOCAB:
        raise ValueError(f"answer must be a word of the vocabulary (a person or a relation), got {answer!r}")
    if answer == RULES[pair]:
        return "right"
    return "borrowed" if answer in nearby_answers(pair, rules) else "other"


@torch.no_grad()
def xor_residue(model: DecoderOnly, people: Sequence[str] = PEOPLE) -> Tensor:
    """D(f, f) + D(e, e) - D(f, e) - D(e, f) for every X, Y: (P * P,), float64.

    D(r1, r2) = logit(friend) - logit(enemy) at the relation slot. Where D is a sum
    F(r1) + G(r2) (any fixed mix of the two relations), the residue is 0; the friend/enemy
    table needs D(f, f), D(e, e) > 0 > D(f, e), D(e, f), so a residue > 0.
    """
    require_instance("model", model, DecoderOnly)
    ids = all_sentences(FRIEND_RULES, people)  # rules in order ff, ee, fe, ef
    logits = model(ids)[:, 1].double()  # (4 * P * P, V)
    gap = (logits[:, TOKEN["friend"]] - logits[:, TOKEN["enemy"]]).view(4, -1)  # (4, P*P)
    return gap[0] + gap[1] - gap[2] - gap[3]


# ---------------------------------------------------------------- capacity

N_ANSWERS = 48  # answers of a random rule table: each rule holds log2(48) = 5.6 bits
TABLE_RELATIONS = 111  # lesson 07's one table: 111^2 = 12,321 rules, 16 per unit of d_ff = 768


def _random_layer(n_relations: int, d_ff: int, generator: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
    """The random draw of a capacity layer, in this order: embeddings (n_relations, d_model),
    first-layer weights (2 d_model, d_ff) and biases (d_ff,), d_model = d_ff / 4. float32."""
    d_model = d_ff // 4
    embed = torch.randn(n_relations, d_model, generator=generator) / math.sqrt(d_model)
    w_in = torch.randn(2 * d_model, d_ff, generator=generator)
    b_in = torch.randn(d_ff, generator=generator)
    return embed, w_in, b_in


def random_layer_features(n_relations: int, d_ff: int, generator: torch.Generator) -> Tensor:
    """The hidden units of a random first layer for every pair (r1, r2): (n_relations^2, d_ff + 1).

    Its input is the mix with values that keep the two slots apart, [e(r1), e(r2)], random
    embeddings of width d_model = d_ff / 4 (r1-major pairs); the layer is ReLU(x W + b) with
    W, b random and fixed; the last column is 1 (the output layer's bias). float32.
    """
    require_count("n_relations", n_relations)
    require_count("d_ff", d_ff, minimum=4)
    require_instance("generator", generator, torch.Generator)
    embed, w_in, b_in = _random_layer(n_relations, d_ff, generator)
    d_model = embed.shape[1]
    first = embed @ w_in[:d_model] + b_in  # (n, d_ff): r1's part, the bias included
    second = embed @ w_in[d_model:]  # (n, d_ff): r2's part
    # written straight into the (n^2, d_ff + 1) result: at d_ff = 768 a concatenation would copy
    # 38 MB once more
    features = torch.ones(n_relations, n_relations, d_ff + 1)
    torch.add(first[:, None], second[None], out=features[..., :d_ff]).relu_()
    return features.view(-1, d_ff + 1)


def symmetric_gram(x: Tensor, blocks: int = 4) -> Tensor:
    """x.T @ x for x (N, F), computing only the blocks on and above the diagonal: (F, F).

    With `blocks` column blocks, blocks (blocks + 1) / 2 of the blocks^2 products are computed
    (10 of 16: about 40% less work). rules_right calls it. The products are independent, and
    torch releases Python's lock while it multiplies, so two threads compute them side by side
    on a 2-core machine, every entry the same number as one product after another.
    """
    require_float("x", x, 2, 2)
    require_count("blocks", blocks)
    edges = [round(i * x.shape[1] / blocks) for i in range(blocks + 1)]
    pairs = [(i, j) for i in range(blocks) for j in range(i, blocks)]  # (row block, column block)
    threads = torch.get_num_threads()  # the caller's setting (the lessons: 1)

    def product(pair: tuple[int, int]) -> Tensor:
        # A new thread would start with torch's default (every core): the two products would
        # then fight over the cores, and a product's digits depend on its number of threads.
        torch.set_num_threads(threads)
        i, j = pair
        return x[:, edges[i]:edges[i + 1]].T @ x[:, edges[j]:edges[j + 1]]

    gram = x.new_empty(x.shape[1], x.shape[1])
    with ThreadPoolExecutor(2) as pool:
        for (i, j), block in zip(pairs, pool.map(product, pairs)):
            rows, cols = slice(edges[i], edges[i + 1]), slice(edges[j], edges[j + 1])
            gram[rows, cols] = block
            if j > i:  # the block below the diagonal is this one's transpose
                gram[cols, rows] = block.T
    return gram


def rules_right(d_ff: int, n_relations: int = TABLE_RELATIONS, n_answers: int = N_ANSWERS,
                seed: int = 0) -> tuple[int, int]:
    """(rules right, rules in the table) for one layer of width d_ff and a random rule table.

    The table maps each of the n_relations^2 pairs (r1, r2) to one of n_answers answers, at
    random. It is drawn first from the seed, so it depends only on (n_relations, n_answers,
    seed): layers of every width meet the same table. The first layer is random and fixed
    (random_layer_features, drawn next); the output weights (d_ff + 1, n_answers) are solved
    by least squares for the one-hot answers (normal equations solved in float64; the Gram
    matrix and the outputs in float32, for speed: the count moves by a few rules at most). A
    rule is right when its answer's output is larger than every other (a tie counts as wrong).
    """
    require_count("d_ff", d_ff, minimum=4)
    if d_ff % 4:
        raise ValueError(f"d_ff must be a multiple of 4 (d_model = d_ff / 4), got {d_ff}")
    require_count("n_relations", n_relations, minimum=2)
    require_count("n_answers", n_answers, minimum=2)
    require_count("seed", seed, minimum=0)
    gen = torch.Generator().manual_seed(seed)
    n = n_relations
    wanted = torch.randint(n_answers, (n * n,), generator=gen)  # (N,): the random table
    hidden = random_layer_features(n, d_ff, gen)  # (N, d_ff + 1)
    one_hot = nn.functional.one_hot(wanted, n_answers).to(hidden.dtype)  # (N, n_answers)
    gram = symmetric_gram(hidden).double()  # (d_ff + 1, d_ff + 1)
    gram.diagonal().add_(1e-9 * float(gram.diagonal().mean()))  # keeps Cholesky defined
    w_out = torch.cholesky_solve((hidden.T @ one_hot).double(), torch.linalg.cholesky(gram))
    out = hidden @ w_out.to(hidden.dtype)  # (N, n_answers)
    answer = out.gather(1, wanted[:, None])  # (N, 1)
    others = out.scatter(1, wanted[:, None], -math.inf).max(1, keepdim=True).values
    return int((answer > others).sum()), n * n


def capacity_curve(d_ffs: Sequence[int], n_relations: int = TABLE_RELATIONS,
                   n_answers: int = N_ANSWERS, seed: int = 0) -> Tensor:
    """rules_right at each width, all on one table: (len(d_ffs), 2) int64, columns (rules
    right, table size)."""
    require_items("d_ffs", d_ffs)
    return torch.tensor([rules_right(d_ff, n_relations, n_answers, seed) for d_ff in d_ffs])


def _require_widths(d_ffs: object) -> None:
    require_items("d_ffs", d_ffs)
    for d_ff in d_ffs:
        require_count("d_ffs", d_ff, minimum=4)
        if d_ff % 4:
            raise ValueError(f"d_ffs must be multiples of 4 (d_model = d_ff / 4), got {d_ff} in {list(d_ffs)}")


def trained_rules_right(d_ffs: Sequence[int], n_relations: int = 32, n_answers: int = N_ANSWERS,
                        seeds: Sequence[int] = (0,), steps: int = 80, lr: float = 0.06,
                        workers: int = 1, checkpoints: Sequence[int] = ()) -> Tensor:
    """Rules right when every weight of the layer is trained: (len(seeds), len(d_ffs)) int64,
    or (len(seeds), len(d_ffs), len(checkpoints)) with checkpoints: the count after each of
    those numbers of steps (each in 1..steps, increasing) of the one run, a curve of rules
    right against steps. The count after c steps is the one a run of c steps ends with.

    For each seed and width, the layer, table and keys of rules_right(d_ff, n_relations,
    n_answers, seed): the table and the embeddings [e(r1), e(r2)] (the keys, fixed) drawn as
    there, the random first layer as the starting point, the output layer starting at zero.
    Then the first layer and the output layer both learn: the course's loop (training.train,
    Adam) on the cross-entropy of the answers, the whole table in every step. A rule is right
    as in rules_right (its answer strictly the largest). All widths and seeds train in one run:
    the loss is the sum of theirs and Adam moves each weight by its own gradient only, so each
    model ends as it would trained alone. workers > 1 splits the seeds into that many groups
    trained at once (runs.run_each): the same counts, in less wall time on as many cores.
    float32; keys (S, N, 2 d_model) -> outputs (S, N, n_answers), S seeds, N = n_relations^2
    rules.
    """
    _require_widths(d_ffs)
    require_count("n_relations", n_relations, minimum=2)
    require_count("n_answers", n_answers, minimum=2)
    require_items("seeds", seeds)
    for seed in seeds:
        require_count("seeds", seed, minimum=0)
    require_count("steps", steps)
    require_number("lr", lr, positive=True)
    require_count("workers", workers)
    if isinstance(checkpoints, (str, bytes)) or not isinstance(checkpoints, Sequence):
        raise TypeError(f"checkpoints must be a list of step counts, got {type(checkpoints).__name__}")
    for c in checkpoints:
        require_count("checkpoints", c)
    if list(checkpoints) != sorted(set(checkpoints)) or (checkpoints and checkpoints[-1] > steps):
        raise ValueError(f"checkpoints must increase and be at most steps = {steps}, got {list(checkpoints)}")
    if workers > 1 and len(seeds) > 1:
        size = math.ceil(len(seeds) / workers)
        groups = [list(seeds[i:i + size]) for i in range(0, len(seeds), size)]
        job = functools.partial(trained_rules_right, d_ffs, n_relations, n_answers, steps=steps, lr=lr,
                                checkpoints=checkpoints)
        return torch.cat(run_each(job, groups, workers))  # job(group): the group's seeds
    n, n_seeds = n_relations, len(seeds)
    layers = []  # per width: keys (S, N, 2 d_model), table (S, N), then the trained weights
    for d_ff in d_ffs:
        keys, tables, draws = [], [], []
        for seed in seeds:
            gen = torch.Generator().manual_seed(seed)
            tables.append(torch.randint(n_answers, (n * n,), generator=gen))  # rules_right's table
            embed, w_in, b_in = _random_layer(n, d_ff, gen)
            pairs = torch.cat([embed.repeat_interleave(n, 0), embed.repeat(n, 1)], dim=1)  # r1-major
            keys.append(pairs)
            draws.append((w_in, b_in))
        weights = [torch.stack([w for w, _ in draws]).requires_grad_(),  # (S, 2 d_model, d_ff)
                   torch.stack([b[None] for _, b in draws]).requires_grad_(),  # (S, 1, d_ff)
                   torch.zeros(n_seeds, d_ff, n_answers, requires_grad=True),
                   torch.zeros(n_seeds, 1, n_answers, requires_grad=True)]
        layers.append((torch.stack(keys), torch.stack(tables), weights))

    def outputs(keys: Tensor, weights: list[Tensor]) -> Tensor:
        w_in, b_in, w_out, b_out = weights
        return torch.relu(torch.baddbmm(b_in, keys, w_in)).bmm(w_out) + b_out  # (S, N, n_answers)

    counts = []  # per checkpoint: (S, W), the counts after that many steps

    def count() -> Tensor:
        with torch.no_grad():  # (S,) per width
            return torch.stack([strictly_right(outputs(keys, w), table).sum(1) for keys, table, w in layers], 1)

    def loss_of_step(step: int) -> Tensor:
        if step in checkpoints:  # `step` updates done so far
            counts.append(count())
        # each model's mean cross-entropy over its table, summed over the models
        return sum(nn.functional.cross_entropy(outputs(keys, w).reshape(-1, n_answers), table.reshape(-1),
                                               reduction="sum") for keys, table, w in layers) / (n * n)

    train(loss_of_step, [p for *_, weights in layers for p in weights], steps, lr)
    if not checkpoints:
        return count()
    if checkpoints[-1] == steps:
        counts.append(count())
    return torch.stack(counts, dim=2)


def _require_numbers(name: str, values: object) -> None:
    """values: a real tensor, or a list of numbers (what torch.as_tensor turns into one)."""
    if isinstance(values, Tensor):
        if values.dtype == torch.bool or values.is_complex():
            raise TypeError(f"{name} must hold real numbers, got dtype {values.dtype}")
        return
    if not isinstance(values, (list, tuple)) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        raise TypeError(f"{name} must be a tensor or a list of numbers, got {values!r}")


def fano_bits(right: Tensor, table: Tensor, n_answers: int = N_ANSWERS) -> Tensor:
    """The bits about a random table that answers with `right` of `table` rules right must hold.

    right, table: (...) counts -> (...) float64 bits. Each answer is uniform over n_answers,
    so the table holds table * log2(n_answers) bits. Fano's inequality bounds what is still
    unknown once the answers are read: at most h(e) + e log2(n_answers - 1) bits per rule, e
    the error rate and h the binary entropy. The rest, table * (log2(n_answers) - h(e) -
    e log2(n_answers - 1)), must be held by whatever produced the answers: 0 at chance
    (e = 1 - 1 / n_answers), table * log2(n_answers) when every rule is right.
    """
    require_count("n_answers", n_answers, minimum=2)
    _require_numbers("right", right)
    _require_numbers("table", table)
    right, table = torch.as_tensor(right, dtype=torch.float64), torch.as_tensor(table, dtype=torch.float64)
    if right.shape != table.shape or bool((table <= 0).any()) or bool(((right < 0) | (right > table)).any()):
        raise ValueError("right and table must be counts of one shape with 0 <= right <= table and table > 0")
    e = 1 - right / table  # the error rate
    unknown = -(torch.special.xlogy(e, e) + torch.special.xlogy(1 - e, 1 - e)) / math.log(2)
    unknown = unknown + e * math.log2(n_answers - 1)  # bits per rule the answers leave open
    return (table * (math.log2(n_answers) - unknown)).clamp(min=0)


def fit_power_law(x: Tensor, y: Tensor) -> tuple[float, float]:
    """(a, p) of the least-squares line log y = log a + p log x; x, y: (n,) positive, n >= 2."""
    _require_numbers("x", x)
    _require_numbers("y", y)
    x, y = torch.as_tensor(x, dtype=torch.float64), torch.as_tensor(y, dtype=torch.float64)
    if x.dim() != 1 or x.shape != y.shape or len(x) < 2:
        raise ValueError(f"x and y must be 1-D, of one length >= 2, got shapes {tuple(x.shape)} and {tuple(y.shape)}")
    if bool((x <= 0).any()) or bool((y <= 0).any()):
        raise ValueError("x and y must be positive (their logarithms are fitted)")
    design = torch.stack([torch.ones_like(x), x.log()], dim=1)  # (n, 2)
    intercept, slope = torch.linalg.lstsq(design, y.log()[:, None]).solution[:, 0].tolist()
    return math.exp(intercept), slope
