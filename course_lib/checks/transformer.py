"""Visible checks for exercise set 09 (the Transformer's pieces)."""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from ..normalization import LayerNorm
from . import call, compare, exercise_check, passed

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
    got = call("feed_forward(x, w1, b1, w2, b2)", feed_forward, X_FFN, W1, B1, W2, B2)
    hidden = X_FFN @ W1 + B1  # (2, 3)
    compare("feed_forward(x, w1, b1, w2, b2) on x = [[1, -1], [0.5, 2]]", got, _relu(hidden) @ W2 + B2, {
        "no ReLU: the hidden layer must be max(0, x w1 + b1)": hidden @ W2 + B2,
        "a ReLU on the output too: only the hidden layer has one": _relu(_relu(hidden) @ W2 + B2),
        "b1 added after the ReLU: it belongs inside, max(0, x w1 + b1)": (_relu(X_FFN @ W1) + B1) @ W2 + B2,
        "b2 forgotten": _relu(hidden) @ W2,
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


def _greedy_with(decoder: Callable, bos: Tensor, steps: int, row: str = "last", keep_bos: bool = False,
                 grow: bool = True) -> Tensor:
    prefix = bos
    out = []
    for _ in range(steps):
        logits = decoder(prefix)
        token = (logits[:, -1] if row == "last" else logits[:, 0]).argmax(-1, keepdim=True)
        out.append(token)
        prefix = torch.cat([prefix, token], 1) if grow else prefix
    tokens = torch.cat(out, 1)
    return torch.cat([bos, tokens], 1)[:, : steps] if keep_bos else tokens


@exercise_check
def check_greedy_tokens(greedy_tokens: Callable) -> None:
    bos = torch.tensor([[0], [2]])  # two sequences with different first tokens
    got = call("greedy_tokens(decoder, bos, 4)", greedy_tokens, _toy_decoder, bos, 4)
    compare("greedy_tokens(toy_decoder, bos=[[0], [2]], steps=4)", got, _greedy_with(_toy_decoder, bos, 4), {
        "the logits of the FIRST row were used: the next token is read from the last row, logits[:, -1]":
            _greedy_with(_toy_decoder, bos, 4, row="first"),
        "the start token is in the answer: return only the `steps` new tokens":
            _greedy_with(_toy_decoder, bos, 4, keep_bos=True),
        "the prefix never grows: append each chosen token before the next step":
            _greedy_with(_toy_decoder, bos, 4, grow=False),
    })
    passed("greedy_tokens")


@exercise_check
def check_exact_match_rate(exact_match_rate: Callable) -> None:
    predicted = torch.tensor([[1, 2, 3], [1, 2, 4], [3, 2, 1], [0, 0, 0]])
    answer = torch.tensor([[1, 2, 3], [1, 2, 3], [3, 2, 1], [1, 1, 1]])
    got = call("exact_match_rate(predicted, answer)", exact_match_rate, predicted, answer)
    got = torch.as_tensor(got, dtype=torch.float64) if not isinstance(got, Tensor) else got.double()
    compare("exact_match_rate on 4 rows, 2 exactly right", got, torch.tensor(0.5, dtype=torch.float64), {
        "this is the share of right TOKENS (8 of 12); count a row only if all of it is right":
            torch.tensor(8 / 12, dtype=torch.float64),
        "a row counts if ANY token is right (3 of 4); it must be all": torch.tensor(0.75, dtype=torch.float64),
        "the number of right rows, not their share": torch.tensor(2.0, dtype=torch.float64),
    })
    passed("exact_match_rate")
