"""Visible checks for exercise set 09 (the Transformer's pieces)."""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from ..normalization import LayerNorm
from ..model import EncoderDecoder
from ..transformer import BOS, Block, FeedForward, exact_match, greedy_decode, transformer, transformer_config
from . import call, compare, exercise_check, passed
from .bug_hints import call_naming, name_shape_bug
from .hand_in import Case, Exercise

# Tiny inputs the learner can follow by hand.
X_FFN = torch.tensor([[1.0, -1.0], [0.5, 2.0]])  # (T=2, D=2)
W1 = torch.tensor([[1.0, -1.0, 0.5], [0.0, 1.0, -2.0]])  # (D=2, d_ff=3)
B1 = torch.tensor([0.0, 0.5, -1.0])
W2 = torch.tensor([[1.0, 0.0], [-1.0, 2.0], [0.5, 0.5]])  # (d_ff=3, D=2)
B2 = torch.tensor([0.1, -0.1])
X_SUB = torch.tensor([[1.0, 2.0, 3.0], [0.0, -1.0, 4.0]])  # (T=2, D=3)


def _relu(x: Tensor) -> Tensor:
    return x.clamp(min=0)


@exercise_check
def check_feed_forward(feed_forward: Callable) -> None:
    got = call_naming("feed_forward(x, w1, b1, w2, b2)", feed_forward, X_FFN, W1, B1, W2, B2, bugs={
        "Boolean value of Tensor": "Python's max(0, h) compares whole tensors: use torch.clamp(h, min=0) or "
                                   "torch.relu(h)",
        # x is (2, 2) and w1 (2, 3): these are the shapes of x @ w1.T and of w1 @ x
        "(2x2 and 3x2)": "w1 is (D, d_ff) here, so the hidden layer is x @ w1: the .T is for nn.Linear's (out, in) "
                         "weights",
        "(2x3 and 2x2)": "the rows of x are the tokens: the hidden layer is x @ w1, x on the left",
    })
    hidden = X_FFN @ W1 + B1  # (2, 3)
    compare("feed_forward(x, w1, b1, w2, b2) on x = [[1, -1], [0.5, 2]]", got, _relu(hidden) @ W2 + B2, {
        "no ReLU: the hidden layer must be max(0, x w1 + b1)": hidden @ W2 + B2,
        "a ReLU on the output too: only the hidden layer has one": _relu(_relu(hidden) @ W2 + B2),
        "b1 added after the ReLU: it belongs inside, max(0, x w1 + b1)": (_relu(X_FFN @ W1) + B1) @ W2 + B2,
        "b2 forgotten: the output is max(0, x w1 + b1) w2 + b2": _relu(hidden) @ W2,
    })
    row = call("feed_forward on one row", feed_forward, X_FFN[1:], W1, B1, W2, B2)
    compare("the same on row 1 alone (the FFN acts on each token by itself)", row, got[1:])
    passed("feed_forward")


def _norm() -> LayerNorm:
    norm = LayerNorm(3)
    with torch.no_grad():
        norm.weight.copy_(torch.tensor([1.0, 2.0, 0.5]))
        norm.bias.copy_(torch.tensor([0.0, 1.0, -1.0]))
    return norm.requires_grad_(False)


def _square(h: Tensor) -> Tensor:
    """The sublayer in the check: f(h) = h^2, entry by entry (a stand-in for attention or the FFN;
    not affine, since LayerNorm would erase an affine f's effect)."""
    return h * h


@exercise_check
def check_sublayer(sublayer: Callable) -> None:
    norm, f, x = _norm(), _square, X_SUB
    got = call("sublayer(x, f, norm, norm_first=False)", sublayer, x, f, norm, False)
    compare("post-LN: sublayer(x, f, norm, norm_first=False) with f(h) = h * h", got, norm(x + f(x)), {
        "no residual: post-LN is norm(x + f(x)), with x added": norm(f(x)),
        "this is pre-LN, x + f(norm(x)); post-LN is norm(x + f(x))": x + f(norm(x)),
        "the norm is applied to x before adding: post-LN normalises the sum, norm(x + f(x))": norm(x) + f(x),
    })
    got = call("sublayer(x, f, norm, norm_first=True)", sublayer, x, f, norm, True)
    compare("pre-LN: sublayer(x, f, norm, norm_first=True)", got, x + f(norm(x)), {
        "the sum is normalised too: pre-LN is x + f(norm(x)), nothing after": norm(x + f(norm(x))),
        "norm(x) is added instead of x: the residual carries x itself": norm(x) + f(norm(x)),
        "this is post-LN, norm(x + f(x)); pre-LN is x + f(norm(x))": norm(x + f(x)),
        "no residual: pre-LN is x + f(norm(x))": f(norm(x)),
    })
    passed("sublayer")


def _toy_decoder(prefix: Tensor) -> Tensor:
    """A stand-in decoder: row i of the logits favours token (3 * prefix[:, i] + i + 1) % 5.

    prefix: (B, t) -> logits (B, t, 5); like a real decoder, row i depends on tokens 0..i only.
    """
    favourite = (3 * prefix + torch.arange(prefix.shape[1]) + 1) % 5  # (B, t)
    return torch.nn.functional.one_hot(favourite, 5).double() * 4.0  # (B, t, 5)


def _greedy_with(decoder: Callable, bos: Tensor, steps: int, row: str = "last", keep_bos: bool = False) -> Tensor:
    """(B, steps) greedy tokens, or what reading the first row or keeping bos returns."""
    prefix = bos
    out = []
    for _ in range(steps):
        logits = decoder(prefix)
        token = (logits[:, -1] if row == "last" else logits[:, 0]).argmax(-1, keepdim=True)
        out.append(token)
        prefix = torch.cat([prefix, token], 1)
    tokens = torch.cat(out, 1)
    return torch.cat([bos, tokens], 1)[:, : steps] if keep_bos else tokens


@exercise_check
def check_greedy_tokens(greedy_tokens: Callable) -> None:
    bos = torch.tensor([[0], [2]])  # two sequences with different first tokens
    lengths: list[int] = []  # the length of every prefix the decoder was run on

    def toy_decoder(prefix: Tensor) -> Tensor:
        logits = _toy_decoder(prefix)
        lengths.append(prefix.shape[1])
        return logits

    label = "greedy_tokens(toy_decoder, bos=[[0], [2]], steps=4)"
    got = call_naming(label, greedy_tokens, toy_decoder, bos, 4, bugs={
        "must have same number of dimensions": "the chosen tokens have shape (B,): append them as a (B, 1) column, "
                                               "argmax(-1, keepdim=True)"})
    starts_with_bos = isinstance(got, Tensor) and got.dim() == 2 and torch.equal(got[:, :1], bos)
    name_shape_bug(label, got, (2, 4), {
        (2, 5): "the start token is in the answer: return only the `steps` new tokens, prefix[:, 1:]"
        if starts_with_bos else "one token too many: run the decoder `steps` times",
        (2, 3): "one token short: run the decoder `steps` times, one new token each",
    })
    # Reading row 0 and never growing the prefix give the same tokens: what the decoder saw tells them apart.
    bugs = {}
    if isinstance(got, Tensor) and max(lengths, default=0) <= 1:
        bugs["the decoder only ever saw a prefix of length 1: append each chosen token to the prefix and run "
             "the decoder on the whole prefix"] = got
    bugs["the start token is in the answer: return only the `steps` new tokens"] = _greedy_with(
        _toy_decoder, bos, 4, keep_bos=True)
    if max(lengths, default=0) > 1:
        bugs["the logits of the FIRST row were used: the next token is read from the last row, logits[:, -1]"] = (
            _greedy_with(_toy_decoder, bos, 4, row="first"))
    compare(label, got, _greedy_with(_toy_decoder, bos, 4), bugs)
    passed("greedy_tokens")


# Not printed when right: rows 0 and 1 all right, rows 2 and 3 wrong in their first token only, so each
# usual mistake gives a number of its own (rows: 0.5, tokens: 10/12, columns: 2/3, any token: 1, count: 2).
PROBE_PREDICTED = torch.tensor([[1, 2, 3], [1, 2, 3], [0, 2, 3], [0, 2, 3]])
PROBE_ANSWER = torch.tensor([[1, 2, 3], [1, 2, 3], [1, 2, 3], [1, 2, 3]])


def _as_share(got: object) -> object:
    """A float, a 0-d tensor or a numpy number as a float64 tensor, for compare."""
    return torch.as_tensor(got, dtype=torch.float64) if not isinstance(got, Tensor) else got.double()


@exercise_check
def check_exact_match_rate(exact_match_rate: Callable) -> None:
    predicted = torch.tensor([[1, 2, 3], [1, 2, 4], [3, 2, 1], [0, 0, 0]])
    answer = torch.tensor([[1, 2, 3], [1, 2, 3], [3, 2, 1], [1, 1, 1]])
    label = "exact_match_rate on 4 rows, 2 all right and 2 wrong in their first token"
    got = call_naming(label, exact_match_rate, PROBE_PREDICTED, PROBE_ANSWER, bugs={
        "could not infer output dtype": "the mean of a bool tensor: convert it first, e.g. .double().mean()"})
    compare(label, _as_share(got), torch.tensor(0.5, dtype=torch.float64), {
        "this is the share of right TOKENS (10 of 12); count a row only if all of it is right":
            torch.tensor(10 / 12, dtype=torch.float64),
        "all(0) asks whether each COLUMN (position) is right in every row; a row is right when .all(-1)":
            torch.tensor(2 / 3, dtype=torch.float64),
        "a row counts if ANY token is right (4 of 4); it must be all": torch.tensor(1.0, dtype=torch.float64),
        "the number of right rows, not their share": torch.tensor(2.0, dtype=torch.float64),
        "only a batch right in every token counts (torch.equal, or .all() with no axis): count the rows, .all(-1)":
            torch.tensor(0.0, dtype=torch.float64),
        "a percentage: return the share, from 0 to 1": torch.tensor(50.0, dtype=torch.float64),
    })
    got = call("exact_match_rate(predicted, answer)", exact_match_rate, predicted, answer)
    got = _as_share(got)
    compare("exact_match_rate on 4 rows, 2 exactly right", got, torch.tensor(0.5, dtype=torch.float64), {
        "this is the share of right TOKENS (8 of 12); count a row only if all of it is right":
            torch.tensor(8 / 12, dtype=torch.float64),
        "a row counts if ANY token is right (3 of 4); it must be all": torch.tensor(0.75, dtype=torch.float64),
        "the number of right rows, not their share": torch.tensor(2.0, dtype=torch.float64),
    })
    passed("exact_match_rate")


# ---------------------------------------------------------------- hidden tests (see hand_in.py)
LINEAR_OPS = frozenset({"aten::linear"})  # what F.linear and nn.Linear run, under whatever name


def _feed_forward_cases(gen: torch.Generator) -> list[Case]:
    cases = []
    for d, d_ff in [(2, 3), (8, 32), (16, 5)]:
        x = torch.randn(3, 4, d, generator=gen, dtype=torch.float64)
        # nn.Linear's scale, 1 / sqrt(fan_in), keeps the hidden layer's ReLU half on, half off
        w1, w2 = (torch.randn(n, m, generator=gen, dtype=torch.float64) / n ** 0.5 for n, m in ((d, d_ff), (d_ff, d)))
        b1, b2 = (torch.randn(n, generator=gen, dtype=torch.float64) for n in (d_ff, d))
        cases.append(Case(f"x of shape (3, 4, {d}), D={d}, d_ff={d_ff}",
                          lambda x=x, w1=w1, b1=b1, w2=w2, b2=b2: _torch_feed_forward(x, w1, b1, w2, b2),
                          (x, w1, b1, w2, b2)))
    return cases


def _torch_feed_forward(x: Tensor, w1: Tensor, b1: Tensor, w2: Tensor, b2: Tensor) -> Tensor:
    """torch's linear layers, as nn.Linear computes them: its weight is (out, in), hence the .T."""
    linear = torch.nn.functional.linear
    return linear(torch.relu(linear(x, w1.T, b1)), w2.T, b2)


def _encoder_layer(gen: torch.Generator, norm_first: bool) -> torch.nn.TransformerEncoderLayer:
    """torch's own encoder layer (D=8, H=2, d_ff=16), every weight drawn from `gen`."""
    layer = torch.nn.utils.skip_init(torch.nn.TransformerEncoderLayer, 8, 2, 16, dropout=0.0, batch_first=True,
                                     norm_first=norm_first, dtype=torch.float64).requires_grad_(False)
    for p in layer.parameters():  # biases and LayerNorm gains near 1, so none of them hides a mistake
        p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * 0.5 + (p.dim() == 1))
    return layer


def _two_sublayers(sublayer: Callable, layer: torch.nn.TransformerEncoderLayer, x: Tensor) -> Tensor:
    """The learner's sublayer twice, self-attention then the FFN: what the encoder layer computes."""
    attention = lambda h: layer.self_attn(h, h, h, need_weights=False)[0]
    ffn = lambda h: layer.linear2(torch.relu(layer.linear1(h)))
    h = sublayer(x, attention, layer.norm1, layer.norm_first)
    return sublayer(h, ffn, layer.norm2, layer.norm_first)


def _sublayer_cases(gen: torch.Generator) -> list[Case]:
    cases = []
    for norm_first in (False, True, False, True):
        layer, x = _encoder_layer(gen, norm_first), torch.randn(2, 5, 8, generator=gen, dtype=torch.float64)
        cases.append(Case(f"two sublayers against nn.TransformerEncoderLayer(norm_first={norm_first})",
                          lambda layer=layer, x=x: layer(x), (x,),
                          run=lambda fn, layer=layer, x=x: _two_sublayers(fn, layer, x)))
    return cases


def _decoding_model(gen: torch.Generator, src_shape: tuple[int, int], steps: int) -> tuple[EncoderDecoder, Tensor]:
    """An untrained Transformer (initial weights from a seed drawn from `gen`) and a source batch.

    An untrained model's greedy answer is often one token repeated (about one model in eight):
    then reading the first row, or never growing the prefix, gives the right answer too. Draw
    again until some row of the answer changes token.
    """
    for _ in range(100):
        seed = int(torch.randint(2 ** 31, (), generator=gen))
        model = transformer(transformer_config(vocab_size=7, d_model=16, n_heads=2, d_ff=16, seed=seed))
        src = torch.randint(1, 7, src_shape, generator=gen)
        tokens = greedy_decode(model.requires_grad_(False), src, steps).tokens
        if (tokens != tokens[:, :1]).any():
            return model, src
    raise RuntimeError("no model with a changing greedy answer in 100 draws")


def _greedy_cases(gen: torch.Generator) -> list[Case]:
    cases = []
    for batch, length, steps in [(4, 6, 6), (3, 6, 4), (5, 8, 9)]:
        model, src = _decoding_model(gen, (batch, length), steps)
        memory = model.encode(model.embed(src))  # (B, S, D): the decoder reads it at every step
        decoder = lambda prefix, model=model, memory=memory: model.readout(model.decode(model.embed(prefix), memory)[0])
        cases.append(Case(f"an untrained Transformer, {batch} sources of length {length}, {steps} steps",
                          lambda model=model, src=src, steps=steps: greedy_decode(model, src, steps).tokens,
                          (decoder, torch.full((batch, 1), BOS), steps)))
    return cases


def _exact_match_cases(gen: torch.Generator) -> list[Case]:
    cases = []
    for _ in range(4):
        answer = torch.randint(0, 3, (50, 4), generator=gen)
        # 80% of the tokens right: some rows are all right, most are not
        predicted = torch.where(torch.rand(50, 4, generator=gen) < 0.8, answer, (answer + 1) % 3)
        # float(...): a share given as a tensor, a numpy number or a float counts alike
        cases.append(Case("50 rows of 4 tokens, 80% of the tokens right",
                          lambda p=predicted, a=answer: exact_match(p, a), (predicted, answer),
                          run=lambda fn, p=predicted, a=answer: float(fn(p, a))))
    return cases


EXERCISES = {spec.name: spec for spec in [
    Exercise("feed_forward", _feed_forward_cases, atol=1e-10, rtol=1e-5, forbidden_ops=LINEAR_OPS,
             forbidden_names=("FeedForward", "linear"), forbidden_objects=(FeedForward, torch.nn.functional.linear)),
    Exercise("sublayer", _sublayer_cases, atol=1e-10, rtol=1e-5,
             forbidden_names=("Block",), forbidden_objects=(Block,)),
    Exercise("greedy_tokens", _greedy_cases, forbidden_names=("greedy_decode",), forbidden_objects=(greedy_decode,)),
    Exercise("exact_match_rate", _exact_match_cases, atol=1e-9, rtol=0.0, forbidden_names=("exact_match",),
             forbidden_objects=(exact_match,)),
]}
