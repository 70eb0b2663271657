"""Visible checks for exercise set 03 (permutation symmetry and biases)."""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from ..attention_scores import attention_scores, scaled_dot_product_attention, softmax
from ..masks import causal_mask
from ..permutation import bias_after_norm, random_block
from ..permutation import equivariance_gap as reference_gap
from ..permutation import inverse_permutation, match_rows, permute_tokens, self_attention
from . import call, compare, earlier_answers, exercise_check, passed
from .bug_hints import results_in_order
from .hand_in import ATTENTION_OPS, Case, Exercise


def reference_permute_rows(x: Tensor, perm: Tensor) -> Tensor:
    """What exercise 1's permute_rows returns: row i of the answer is row perm[i] of x, (..., T, D)."""
    return x[..., perm, :]

# Tiny inputs the learner can follow by hand. PERM is not its own inverse, so using the
# inverse by mistake shows up.
X = torch.tensor([[1.0, 0.0, 2.0, 0.0], [0.0, 1.0, 0.0, 3.0], [3.0, 1.0, 1.0, 0.0], [0.0, 2.0, 1.0, 1.0]])  # (T=4, D=4)
XB = torch.arange(24, dtype=torch.float32).reshape(2, 4, 3)  # (B=2, T=4, D=3)
PERM = torch.tensor([2, 0, 3, 1])
W_Q = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, -1.0]])  # (D=4, d_k=2)
W_K = torch.tensor([[0.0, 1.0], [1.0, 0.0], [1.0, -1.0], [0.5, 0.5]])
W_V = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 1.0, 1.0]])  # (D=4, d_v=3)
B_Q, B_K, B_V = torch.tensor([1.0, -1.0]), torch.tensor([2.0, 0.5]), torch.tensor([10.0, 20.0, 30.0])
BIAS = torch.tensor([1.0, 2.0, 6.0])


def sums_with_all(x: Tensor) -> Tensor:
    """Equivariant: each row plus the sum of all rows. (..., T, D) -> (..., T, D)."""
    return 2 * x + x.sum(-2, keepdim=True)


def running_sum(x: Tensor) -> Tensor:
    """Not equivariant: row t is the sum of rows 0..t (a causal mask in miniature)."""
    return x.cumsum(-2)


def minus_last_row(x: Tensor) -> Tensor:
    """Not equivariant: every row minus the row in the last slot."""
    return x - x[..., -1:, :]


@exercise_check
def check_permute_rows(permute_rows: Callable) -> None:
    got = call("permute_rows(X, PERM)", permute_rows, X.clone(), PERM.clone())
    compare("permute_rows(X, PERM)  (row i of the answer is row PERM[i] of X)", got, X[PERM], {
        "you used the inverse permutation: row PERM[i] of the answer is row i of X, the wrong way round":
            X[inverse_permutation(PERM)],
        "you permuted the columns (features); permute the rows (tokens)": X[:, PERM],
    })
    got = call("permute_rows(XB, PERM) with a batch dimension", permute_rows, XB.clone(), PERM.clone(),
                hint="tokens are the second-to-last axis, x[..., perm, :], whatever the batch dimensions")
    compare("permute_rows(XB, PERM), XB of shape (2, 4, 3): the batch stays, tokens move", got, XB[:, PERM])
    passed("permute_rows")


def _gap(f: Callable, x: Tensor, perm: Tensor, kind: str) -> float:
    permuted, plain = f(x[..., perm, :]), f(x)
    if kind == "invariance":
        return float((permuted - plain).abs().max())
    if kind == "inverse":
        return float((permuted - plain[..., inverse_permutation(perm), :]).abs().max())
    if kind == "mean":
        return float((permuted - plain[..., perm, :]).abs().mean())
    if kind == "signed":
        return float((permuted - plain[..., perm, :]).max())
    if kind == "norm":
        return float((permuted - plain[..., perm, :]).norm())
    return float((permuted - plain[..., perm, :]).abs().max())


@exercise_check
def check_equivariance_gap(equivariance_gap: Callable) -> None:
    # One mistake costs once: the earlier exercises\' answers are the references here.
    with earlier_answers(equivariance_gap, permute_rows=reference_permute_rows):
        functions = (sums_with_all, running_sum, minus_last_row)
        got = []
        for f in functions:
            gap = call(f"equivariance_gap({f.__name__}, X, PERM)", equivariance_gap, f, X.clone(), PERM.clone())
            if not isinstance(gap, (float, int, Tensor)) or (isinstance(gap, Tensor) and gap.numel() != 1):
                raise AssertionError(f"equivariance_gap must return one number, got {type(gap).__name__}")
            got.append(float(gap))

        def gaps(kind: str) -> Tensor:
            return torch.tensor([_gap(f, X, PERM, kind) for f in functions])

        compare("[equivariance_gap(f, X, PERM) for f in (sums_with_all, running_sum, minus_last_row)]\n"
                "  (the first f is equivariant, the other two are not)", torch.tensor(got), gaps(""), {
                    "you compared f(permuted x) with f(x) itself; compare with permute(f(x))": gaps("invariance"),
                    "you permuted f(x) with the inverse permutation": gaps("inverse"),
                    "you took the mean of the differences; the gap is the largest one": gaps("mean"),
                    "you forgot the absolute value": gaps("signed"),
                    "you took the norm of the differences (the root of the sum of squares); the gap is the largest "
                    "absolute entry, .abs().max()": gaps("norm"),
                })
        passed("equivariance_gap")


@exercise_check
def check_biased_attention(biased_attention: Callable) -> None:
    # float64, so that the expected and the learner's numbers agree to every printed digit
    x, w_q, w_k, w_v, b_q, b_k, b_v = (t.double() for t in (X, W_Q, W_K, W_V, B_Q, B_K, B_V))
    got = call("biased_attention(X, W_Q, W_K, W_V, B_Q, B_K, B_V)", biased_attention,
                x.clone(), w_q.clone(), w_k.clone(), w_v.clone(), b_q.clone(), b_k.clone(), b_v.clone())
    if not (isinstance(got, tuple) and len(got) == 2):
        raise AssertionError(f"biased_attention must return (output, weights), got {type(got).__name__}")
    ref_out, ref_weights = self_attention(x, w_q, w_k, w_v, b_q, b_k, b_v)
    results_in_order("biased_attention(...)", got, ref_out, ref_weights)
    out, weights = got
    q, k, v = x @ w_q + b_q, x @ w_k + b_k, x @ w_v + b_v
    compare("weights of biased_attention(...)", weights, ref_weights, {
        "the query bias is missing (it is the one bias that changes the weights)":
            self_attention(x, w_q, w_k, w_v, None, b_k, b_v)[1],
        "did you divide the scores by sqrt(d_k)? d_k = 2 here":
            scaled_dot_product_attention(q, k, v, scale=1.0)[1],
        "divided by sqrt(D), the width of x (4 here)? d_k is the width of q and k, 2 here":
            scaled_dot_product_attention(q, k, v, scale=0.5)[1],
        "softmax over the wrong axis: each row (one query, all keys) must sum to 1":
            softmax(attention_scores(q, k), dim=-2),
    })
    compare("output of biased_attention(...)", out, ref_out, {
        "the value bias is missing: every output row should be B_V = [10, 20, 30] higher":
            self_attention(x, w_q, w_k, w_v, b_q, b_k, None)[0],
    })
    passed("biased_attention")


# (a, b, atol, expected answer, the likely bug if the answer is the other one)
MULTISET_CASES = [
    (X, X[PERM], 1e-6, True, "the same rows in another order are the same multiset"),
    (X, X[PERM] + 1e-9, 1e-6, True, "compare within atol (torch.allclose), not with =="),
    (torch.tensor([[1.0, 2.0], [3.0, 4.0]]), torch.tensor([[2.0, 1.0], [4.0, 3.0]]), 1e-6, False,
     "you compared all numbers sorted together; rows must match as whole rows"),
    (torch.tensor([[1.0, 0.0], [1.0, 0.0], [2.0, 2.0]]), torch.tensor([[1.0, 0.0], [2.0, 2.0], [2.0, 2.0]]), 1e-6, False,
     "each row of b may be used once: [1, 0] appears twice in a but once in b"),
    (torch.tensor([[0.0, 0.0], [2.0, 2.0]]), torch.tensor([[1.0, 1.0], [1.0, 1.0]]), 1e-6, False,
     "equal means (mean-pooled rows) do not make equal multisets"),
    (X, X[:3], 1e-6, False, "a and b have different numbers of rows"),
]


@exercise_check
def check_same_multiset(same_multiset: Callable) -> None:
    for index, (a, b, atol, expected, bug) in enumerate(MULTISET_CASES):
        got = call(f"same_multiset(case {index})", same_multiset, a.clone(), b.clone(), atol)
        case = (f"  case {index}: a = {a.tolist()}, b = {[[round(v, 4) for v in r] for r in b.tolist()]}, "
                f"atol = {atol}\n  expected: {expected}\n  got:      {got!r}")
        if not isinstance(got, (bool, Tensor)) or (isinstance(got, Tensor) and got.numel() != 1):
            raise AssertionError(f"same_multiset must return True or False, got {type(got).__name__}\n{case}")
        if bool(got) != expected:
            raise AssertionError(f"same_multiset case {index}: expected {expected}. Likely bug: {bug}\n{case}")
    passed("same_multiset")


@exercise_check
def check_bias_left_by_norm(bias_left_by_norm: Callable) -> None:
    layer = BIAS - BIAS.mean()
    got = call('bias_left_by_norm(BIAS, "batch")', bias_left_by_norm, BIAS.clone(), "batch")
    compare('bias_left_by_norm(BIAS, "batch")  (BIAS = [1, 2, 6])', got, bias_after_norm(BIAS, "batch"), {
        "BatchNorm subtracts each feature's mean over the batch, and the bias is the same for every "
        "example: all of it cancels": layer,
        "BatchNorm cancels the bias completely (return zeros)": BIAS,
    })
    got = call('bias_left_by_norm(BIAS, "layer")', bias_left_by_norm, BIAS.clone(), "layer")
    compare('bias_left_by_norm(BIAS, "layer")', got, bias_after_norm(BIAS, "layer"), {
        "LayerNorm removes only the mean of the bias over the features, not all of it": torch.zeros(3),
        "LayerNorm subtracts each row's mean over the features, so mean(b) is removed": BIAS,
        "LayerNorm divides the whole row xW + b by its std, not the bias alone: what survives is b - mean(b)":
            layer / layer.std(unbiased=False),
        "mean(b) is the part LayerNorm removes; what is left is b - mean(b)": torch.full((3,), float(BIAS.mean())),
    })
    passed("bias_left_by_norm")


# ---------------------------------------------------------------- hidden tests (see hand_in.py)
def _randperm(n: int, gen: torch.Generator) -> Tensor:
    """A random permutation of 0..n-1 that is not its own inverse (n >= 3), so using the inverse shows."""
    while True:
        perm = torch.randperm(n, generator=gen)
        if n < 3 or not torch.equal(perm[perm], torch.arange(n)):
            return perm


def _permute_cases(gen: torch.Generator) -> list[Case]:
    cases = []
    for shape in [(5, 3), (2, 6, 4), (2, 3, 7, 2), (1, 1)]:
        x, perm = torch.randn(*shape, generator=gen), _randperm(shape[-2], gen)
        cases.append(Case(f"x of shape {shape}, perm {perm.tolist()}", lambda x=x, perm=perm: x[..., perm, :],
                          (x, perm)))
    return cases


def _sequence_functions(gen: torch.Generator) -> dict[str, Callable[[Tensor], Tensor]]:
    """Two equivariant functions of the rows and two that are not, each built from `gen`."""
    block = random_block(6, 12, gen, torch.float64)
    return {
        "an encoder block": lambda x: block(x)[0],
        "a causally masked block": lambda x: block(x, causal_mask(x.shape[-2]))[0],
        "a running sum": running_sum,
        "a position-weighted sum": lambda x: x * torch.arange(1, x.shape[-2] + 1, dtype=x.dtype)[:, None],
    }


def _gap_case(name: str, f: Callable[[Tensor], Tensor], x: Tensor, perm: Tensor) -> Case:
    return Case(f"{name}, x of shape {tuple(x.shape)}, perm {perm.tolist()}",
                lambda: reference_gap(f, x, perm), (f, x, perm))


def _gap_cases(gen: torch.Generator) -> list[Case]:
    cases = []
    for name, f in _sequence_functions(gen).items():
        for shape in [(5, 6), (2, 7, 6)]:
            x = torch.randn(*shape, generator=gen, dtype=torch.float64)
            cases.append(_gap_case(name, f, x, _randperm(shape[-2], gen)))
    # A linear f's difference f(Px) - P f(x) changes sign with x: the largest one is negative for x or for -x.
    x = torch.randn(5, 6, generator=gen, dtype=torch.float64)
    perm = _randperm(5, gen)
    return cases + [_gap_case("a running sum", running_sum, x, perm),
                    _gap_case("a running sum, -x", running_sum, -x, perm)]


def _biased_attention_cases(gen: torch.Generator) -> list[Case]:
    cases = []
    for batch, T, D, d_k, d_v in [((), 4, 6, 3, 5), ((2,), 7, 4, 4, 2), ((2, 3), 1, 5, 8, 3)]:
        x = torch.randn(*batch, T, D, generator=gen)
        ws = [torch.randn(D, n, generator=gen) for n in (d_k, d_k, d_v)]
        bs = [torch.randn(n, generator=gen) * 2 for n in (d_k, d_k, d_v)]
        cases.append(Case(f"x of shape {tuple(x.shape)}, d_k={d_k}, d_v={d_v}",
                          lambda x=x, ws=ws, bs=bs: _torch_biased_attention(x, ws, bs), (x, *ws, *bs)))
    return cases


def _torch_biased_attention(x: Tensor, ws: list[Tensor], bs: list[Tensor]) -> tuple[Tensor, Tensor]:
    """torch's attention on the biased projections, and the course's weights (torch does not return them)."""
    q, k, v = (x @ w + b for w, b in zip(ws, bs))
    return F.scaled_dot_product_attention(q, k, v), self_attention(x, *ws, *bs)[1]


def _multiset_cases(gen: torch.Generator) -> list[Case]:
    cases = []
    for t, d in [(3, 2), (6, 4), (8, 1)]:
        a = torch.randn(t, d, generator=gen)
        shuffled = a[torch.randperm(t, generator=gen)]
        moved, twice = shuffled.clone(), a.clone()
        moved[0] += 0.1
        twice[1] = a[0]
        for label, x, y, same in [
            ("b: the rows of a in another order", a, shuffled, True),
            # 4e-7 changes every float32 entry below 8 in size (1e-8 would leave most unchanged)
            ("b: the rows of a in another order, + 4e-7 (within atol=1e-6)", a, shuffled + 4e-7, True),
            ("b: the rows of a in another order, one moved by 0.1", a, moved, False),
            ("b: a with row 1 replaced by row 0 (a row used twice)", a, twice, False),
            ("a with row 1 replaced by row 0, b: a (a row used twice)", twice, a, False),
            ("b: every row the mean of a's rows", a, a.mean(0, keepdim=True).expand(t, d), False),
        ]:
            cases.append(Case(f"a of shape ({t}, {d}), {label}", lambda same=same: same, (x, y)))
    a = torch.randn(2, 3, generator=gen)
    cases.append(Case("a of shape (2, 3), b: a with each row's entries reversed", lambda: False, (a, a.flip(-1))))
    cases.append(Case("a of shape (2, 3), b: its first row only (another shape)", lambda: False, (a, a[:1])))
    return cases


def _bias_cases(gen: torch.Generator) -> list[Case]:
    cases = []
    for d in [1, 4, 9]:
        b = torch.randn(d, generator=gen, dtype=torch.float64) * 3
        for norm in ("batch", "layer"):
            cases.append(Case(f'b of size {d}, norm="{norm}"', lambda b=b, norm=norm: bias_after_norm(b, norm),
                              (b, norm)))
    return cases


EXERCISES = {spec.name: spec for spec in [
    # Rows are copied, never computed: exactly equal.
    Exercise("permute_rows", _permute_cases, atol=0.0, rtol=0.0, forbidden_objects=(permute_tokens,)),
    Exercise("equivariance_gap", _gap_cases, atol=1e-9, rtol=0.0, forbidden_objects=(reference_gap,),
             uses={"permute_rows": reference_permute_rows}),
    Exercise("biased_attention", _biased_attention_cases, rtol=1e-5, forbidden_ops=ATTENTION_OPS,
             forbidden_names=("scaled_dot_product_attention", "MultiheadAttention", "multi_head_attention_forward",
                              "self_attention"),
             forbidden_objects=(self_attention, scaled_dot_product_attention)),
    Exercise("same_multiset", _multiset_cases, forbidden_names=("match_rows",), forbidden_objects=(match_rows,)),
    Exercise("bias_left_by_norm", _bias_cases, atol=1e-12, rtol=0.0, forbidden_names=("bias_after_norm",),
             forbidden_objects=(bias_after_norm,)),
]}
