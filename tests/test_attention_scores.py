"""Lesson 01: course_lib.attention_scores against torch, and its input checks."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from course_lib.attention_scores import (DEAD_GRADIENT, attention_scores, dot_product_moments, entropy,
                                  naive_softmax, project_qkv, scaled_dot_product_attention, softmax,
                                  softmax_saturation, train_alignment)
from tensors import DTYPES, TOL, random_qkv

# ------------------------------------------------------------------ agreement with torch

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 4, 9), (2, 3, 4, 5)])
@pytest.mark.parametrize("dim", [-1, 0])
def test_softmax_matches_torch(shape, dim, dtype):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(len(shape)), dtype=dtype) * 20
    assert torch.allclose(softmax(x, dim), torch.softmax(x, dim), atol=TOL[dtype])


def test_softmax_is_stable_where_the_naive_form_overflows():
    x = torch.tensor([1000.0, 999.0, -1000.0])
    assert torch.isnan(naive_softmax(x)).any()
    assert torch.allclose(softmax(x), torch.softmax(x, -1))


def test_softmax_of_a_fully_masked_row_is_zeros():
    x = torch.tensor([[0.0, 1.0], [-math.inf, -math.inf]])
    out = softmax(x)
    assert torch.equal(out[1], torch.zeros(2)) and torch.allclose(out[0], torch.softmax(x[0], -1))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("batch,t,s,d_k,d_v", [((), 4, 4, 8, 8), ((2,), 3, 7, 16, 5), ((2, 3), 5, 2, 4, 6), ((1,), 1, 9, 64, 3)])
def test_attention_matches_torch_sdpa(batch, t, s, d_k, d_v, dtype):
    gen = torch.Generator().manual_seed(t * 100 + s)
    q, k, v = random_qkv(gen, batch, t, s, d_k, d_v, dtype)
    out, weights = scaled_dot_product_attention(q, k, v)
    assert torch.allclose(out, F.scaled_dot_product_attention(q, k, v), atol=TOL[dtype])
    assert torch.allclose(weights.sum(-1), torch.ones(*batch, t, dtype=dtype), atol=TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mask_shape", ["full", "per_key", "causal"])
def test_masked_attention_matches_torch_sdpa(mask_shape, dtype):
    gen = torch.Generator().manual_seed(5)
    q, k, v = random_qkv(gen, (2, 3), 6, 6, 8, 4, dtype)
    mask = {"full": torch.rand(2, 3, 6, 6, generator=gen) > 0.5,
            "per_key": torch.rand(2, 1, 1, 6, generator=gen) > 0.5,
            "causal": torch.ones(6, 6, dtype=torch.bool).tril()}[mask_shape]
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert torch.allclose(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), atol=TOL[dtype])
    assert (weights.masked_select(~mask.expand_as(weights)) == 0).all()


def test_custom_scale_matches_torch_sdpa():
    q, k, v = random_qkv(torch.Generator().manual_seed(6), (2,), 4, 5, 8, 3, torch.float64)
    out, _ = scaled_dot_product_attention(q, k, v, scale=1.0)
    assert torch.allclose(out, F.scaled_dot_product_attention(q, k, v, scale=1.0))


def test_fully_masked_query_gets_zero_weights_and_output_like_torch_sdpa():
    q, k, v = random_qkv(torch.Generator().manual_seed(7), (), 3, 4, 8, 2, torch.float32)
    mask = torch.ones(3, 4, dtype=torch.bool)
    mask[1] = False
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert torch.equal(out[1], torch.zeros(2)) and torch.equal(weights[1], torch.zeros(4))
    assert not torch.isnan(out).any()
    # torch 2.13's scaled_dot_product_attention makes the same choice (nn.MultiheadAttention gives NaN)
    assert torch.allclose(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), atol=1e-6)


def test_attention_gradients_match_torch():
    q, k, v = (x.requires_grad_(True) for x in random_qkv(torch.Generator().manual_seed(8), (2,), 4, 5, 8, 3, torch.float64))
    scaled_dot_product_attention(q, k, v)[0].square().sum().backward()
    ours = [x.grad.clone() for x in (q, k, v)]
    for x in (q, k, v):
        x.grad = None
    F.scaled_dot_product_attention(q, k, v).square().sum().backward()
    assert all(torch.allclose(a, x.grad) for a, x in zip(ours, (q, k, v)))


def test_entropy_matches_torch_categorical():
    w = torch.softmax(torch.randn(4, 6, generator=torch.Generator().manual_seed(9)) * 3, -1)
    w[0] = F.one_hot(torch.tensor(2), 6).float()
    assert torch.allclose(entropy(w), torch.distributions.Categorical(probs=w).entropy(), atol=1e-6)


def test_project_qkv_matches_torch_linear_layers():
    gen = torch.Generator().manual_seed(10)
    x, w_q, w_k, w_v = torch.randn(2, 5, 8, generator=gen), *(torch.randn(8, d, generator=gen) for d in (4, 4, 3))
    ours = project_qkv(x, w_q, w_k, w_v)
    for got, w in zip(ours, (w_q, w_k, w_v)):
        layer = torch.nn.Linear(8, w.shape[1], bias=False)
        with torch.no_grad():
            layer.weight.copy_(w.T)  # nn.Linear stores (out, in) and computes x W^T
        assert torch.allclose(got, layer(x), atol=1e-6)


# ------------------------------------------------------------------ the lesson's measurements

@pytest.mark.parametrize("d_k", [4, 64, 512])
def test_dot_product_has_mean_0_and_variance_d_k(d_k):
    mean, variance = dot_product_moments(d_k)
    assert abs(mean) < 4 * math.sqrt(d_k / 20_000)  # 4 standard errors of the sample mean
    assert abs(variance / d_k - 1) < 0.05


def test_unscaled_softmax_saturates_and_starves_most_queries_of_gradient():
    scaled, unscaled = softmax_saturation(512, True), softmax_saturation(512, False)
    assert unscaled.entropy < scaled.entropy / 5
    # What stops learning: the typical query gets almost no gradient, many get none at all ...
    assert unscaled.median_gradient < scaled.median_gradient / 10
    assert unscaled.dead_share > 0.25 and scaled.dead_share == 0
    # ... even though the MEAN gradient is larger: a few unsaturated rows get huge gradients.
    assert unscaled.mean_gradient > scaled.mean_gradient


def test_saturation_gradient_is_the_autograd_gradient_with_respect_to_q():
    # An independent computation: the softmax Jacobian written out, w.r.t. q through the scores.
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(256, 8, generator=gen, dtype=torch.float64)
    k = torch.randn(16, 8, generator=gen, dtype=torch.float64)
    g = torch.randn(256, 16, generator=gen, dtype=torch.float64)
    w = torch.softmax(q @ k.T, -1)
    d_scores = w * (g - (w * g).sum(-1, keepdim=True))  # (diag(w) - w w^T) g, row by row
    norms = (d_scores @ k).norm(dim=-1)
    result = softmax_saturation(8, scaled=False)
    assert math.isclose(result.median_gradient, norms.median().item(), rel_tol=1e-9)
    assert math.isclose(result.mean_gradient, norms.mean().item(), rel_tol=1e-9)
    assert result.dead_share == (norms < DEAD_GRADIENT).double().mean().item()


def test_train_alignment_raises_the_chosen_weight_and_leaves_inputs_alone():
    gen = torch.Generator().manual_seed(11)
    x, w_q, w_k = torch.randn(5, 8, generator=gen), torch.randn(8, 4, generator=gen), torch.randn(8, 4, generator=gen)
    w_q_copy, w_k_copy = w_q.clone(), w_k.clone()
    new_q, new_k = train_alignment(x, w_q, w_k, query=1, key=3, steps=30)
    before = torch.softmax((x @ w_q) @ (x @ w_k).T / 2, -1)[1, 3]
    after = torch.softmax((x @ new_q) @ (x @ new_k).T / 2, -1)[1, 3]
    assert after > before + 0.3
    assert torch.equal(w_q, w_q_copy) and torch.equal(w_k, w_k_copy)


@pytest.mark.parametrize("make_bias", ["bool mask", "float bias"])
def test_gradient_through_a_fully_masked_row_is_zero_not_nan(make_bias):
    q, k, v = (x.requires_grad_(True) for x in random_qkv(torch.Generator().manual_seed(12), (), 3, 4, 8, 2,
                                                          torch.float64))
    allowed = torch.ones(3, 4, dtype=torch.bool)
    allowed[1] = False
    if make_bias == "bool mask":
        out, _ = scaled_dot_product_attention(q, k, v, mask=allowed)
    else:
        bias = torch.zeros(3, 4, dtype=torch.float64).masked_fill(~allowed, -math.inf).requires_grad_(True)
        out, _ = scaled_dot_product_attention(q, k, v, bias=bias)
    out.square().sum().backward()
    for x in (q, k, v) + ((bias,) if make_bias == "float bias" else ()):
        assert torch.isfinite(x.grad).all()
    assert torch.equal(q.grad[1], torch.zeros(8))  # the dead query learns nothing
    assert q.grad[0].abs().sum() > 0  # while a live one does (the check can fail)


def test_in_place_softmax_leaves_the_callers_logits_alone():
    x = torch.randn(4, 6)
    x_copy = x.clone()
    with torch.no_grad():
        softmax(x), softmax(x, stable=False), softmax(x, mask=torch.rand(4, 6) > 0.3)
    assert torch.equal(x, x_copy)


def test_attention_without_autograd_equals_attention_with_it():
    q, k, v = random_qkv(torch.Generator().manual_seed(13), (2,), 5, 6, 8, 3, torch.float64)
    mask = torch.rand(5, 6, generator=torch.Generator().manual_seed(14)) > 0.4
    bias = torch.randn(5, 6, dtype=torch.float64)
    with torch.no_grad():
        fast = scaled_dot_product_attention(q, k, v, mask, bias=bias)
    slow = scaled_dot_product_attention(q.requires_grad_(True), k, v, mask, bias=bias)
    assert all(torch.allclose(a, b.detach(), atol=1e-12) for a, b in zip(fast, slow))


# ------------------------------------------------------------------ bad input

def test_mismatched_d_k_names_both_shapes():
    with pytest.raises(ValueError, match=r"q has shape \(3, 8\).*k has shape \(4, 6\)"):
        scaled_dot_product_attention(torch.randn(3, 8), torch.randn(4, 6), torch.randn(4, 2))


def test_mismatched_key_and_value_lengths_name_both_shapes():
    with pytest.raises(ValueError, match=r"k has shape \(4, 8\).*v has shape \(5, 2\)"):
        scaled_dot_product_attention(torch.randn(3, 8), torch.randn(4, 8), torch.randn(5, 2))


def test_wrong_rank_is_rejected():
    with pytest.raises(ValueError, match=r"q must have at least 2 dimensions, got shape \(8,\)"):
        attention_scores(torch.randn(8), torch.randn(3, 8))


def test_non_broadcasting_batch_dimensions_are_rejected():
    with pytest.raises(ValueError, match=r"\(2,\) does not broadcast with .* \(3,\)"):
        attention_scores(torch.randn(2, 4, 8), torch.randn(3, 4, 8))


def test_float_mask_is_rejected_with_its_dtype():
    q = torch.randn(3, 8)
    with pytest.raises(TypeError, match=r"mask must be a boolean tensor.*torch.float32; "
                                        r"for a float \(additive\) mask, pass it as bias="):
        scaled_dot_product_attention(q, q, q, mask=torch.zeros(3, 3))


def test_wrong_mask_shape_names_mask_and_scores():
    q = torch.randn(3, 8)
    with pytest.raises(ValueError, match=r"mask of shape \(4, 3\) .* scores of shape \(3, 3\)"):
        scaled_dot_product_attention(q, q, q, mask=torch.ones(4, 3, dtype=torch.bool))


def test_integer_inputs_are_rejected():
    with pytest.raises(TypeError, match="logits must be a floating-point tensor, got dtype torch.int64"):
        softmax(torch.arange(4))


def test_out_of_range_dim_is_rejected():
    with pytest.raises(ValueError, match=r"dim=2 is out of range for logits of shape \(3, 4\)"):
        softmax(torch.randn(3, 4), dim=2)


def test_non_positive_scale_is_rejected():
    with pytest.raises(ValueError, match="scale must be positive, got 0.0"):
        attention_scores(torch.randn(2, 4), torch.randn(2, 4), scale=0.0)


def test_mixed_dtypes_are_rejected():
    with pytest.raises(TypeError, match="share one dtype"):
        attention_scores(torch.randn(2, 4), torch.randn(2, 4, dtype=torch.float64))


def test_projection_with_wrong_rows_names_the_shapes():
    with pytest.raises(ValueError, match=r"w_k of shape \(6, 4\) needs 8 rows.*x has shape \(5, 8\)"):
        project_qkv(torch.randn(5, 8), torch.randn(8, 4), torch.randn(6, 4), torch.randn(8, 4))


def test_alignment_token_out_of_range_is_rejected():
    with pytest.raises(ValueError, match="key=9 is out of range for 5 tokens"):
        train_alignment(torch.randn(5, 8), torch.randn(8, 4), torch.randn(8, 4), query=0, key=9)


BAD_INPUT = {
    "integer q": (lambda: attention_scores(torch.arange(6).view(2, 3), torch.randn(2, 3)),
                  TypeError, "q must be a floating-point tensor, got dtype torch.int64"),
    "integer v": (lambda: scaled_dot_product_attention(torch.randn(2, 3), torch.randn(2, 3), torch.ones(2, 3, dtype=torch.int32)),
                  TypeError, "v must be a floating-point tensor, got dtype torch.int32"),
    "zero keys": (lambda: scaled_dot_product_attention(torch.randn(2, 3), torch.randn(0, 3), torch.randn(0, 2)),
                  ValueError, r"same S >= 1 positions: k has shape \(0, 3\)"),
    "d_k = 0": (lambda: attention_scores(torch.randn(2, 0), torch.randn(3, 0)), ValueError, "d_k must be at least 1"),
    "text scale": (lambda: attention_scores(torch.randn(2, 4), torch.randn(3, 4), scale="0.5"),
                   TypeError, "scale must be a number, got str"),
    "bool scale": (lambda: attention_scores(torch.randn(2, 4), torch.randn(3, 4), scale=True),
                   TypeError, "scale must be a number, got bool"),
    "infinite scale": (lambda: scaled_dot_product_attention(torch.randn(2, 4), torch.randn(3, 4), torch.randn(3, 2),
                                                            scale=math.inf), ValueError, "scale must be finite, got inf"),
    "nan scale": (lambda: attention_scores(torch.randn(2, 4), torch.randn(3, 4), scale=math.nan),
                  ValueError, "scale must be finite, got nan"),
    "q and v batch": (lambda: scaled_dot_product_attention(torch.randn(2, 3, 8), torch.randn(1, 4, 8), torch.randn(3, 4, 2)),
                      ValueError, r"q's and k's batch dimensions of shape \(2,\) does not broadcast with v's batch "
                                  r"dimensions of shape \(3,\)"),
    "integer bias": (lambda: scaled_dot_product_attention(torch.randn(2, 4), torch.randn(3, 4), torch.randn(3, 2),
                                                          bias=torch.zeros(2, 3, dtype=torch.long)),
                     TypeError, "bias must be a floating-point tensor"),
    "bias too big": (lambda: scaled_dot_product_attention(torch.randn(2, 4), torch.randn(3, 4), torch.randn(3, 2),
                                                          bias=torch.zeros(2, 2, 3)),
                     ValueError, r"bias of shape \(2, 2, 3\) does not broadcast to the scores"),
    "empty softmax row": (lambda: softmax(torch.empty(3, 0)), ValueError, r"logits has no entries along dim=1"),
    "integer entropy": (lambda: entropy(torch.ones(3, dtype=torch.long)), TypeError,
                        "weights must be a floating-point tensor"),
    "zero-width projection": (lambda: project_qkv(torch.randn(5, 8), torch.randn(8, 0), torch.randn(8, 0), torch.randn(8, 2)),
                              ValueError, r"w_q of shape \(8, 0\) needs 8 rows .* and a column or more"),
    "integer x": (lambda: train_alignment(torch.ones(5, 8, dtype=torch.long), torch.randn(8, 4), torch.randn(8, 4), 0, 1),
                  TypeError, "x must be a floating-point tensor"),
    "alignment weights": (lambda: train_alignment(torch.randn(5, 8), torch.randn(6, 4), torch.randn(8, 4), 0, 1),
                          ValueError, r"w_q of shape \(6, 4\) needs 8 rows"),
    "alignment lr": (lambda: train_alignment(torch.randn(5, 8), torch.randn(8, 4), torch.randn(8, 4), 0, 1, lr=math.inf),
                     ValueError, "lr must be finite"),
    "d_k of the variance": (lambda: dot_product_moments(0), ValueError, "d_k must be >= 1, got d_k=0"),
    "n_keys of the saturation": (lambda: softmax_saturation(8, True, n_keys=2.5), TypeError, "n_keys must be an int"),
}


@pytest.mark.parametrize("case", BAD_INPUT)
def test_bad_input_names_the_argument_and_the_problem(case):
    call, error, message = BAD_INPUT[case]
    with pytest.raises(error, match=message):
        call()


def test_the_written_out_broadcast_rule_agrees_with_torch():
    """guards.broadcast_shape (used on every mask and bias) gives torch.broadcast_shapes' answer or error."""
    import random

    from course_lib.guards import broadcast_shape

    rng = random.Random(0)
    for _ in range(5000):
        a, b = (tuple(rng.choice([0, 1, 2, 3]) for _ in range(rng.randint(0, 4))) for _ in range(2))
        try:
            want = torch.broadcast_shapes(a, b)
        except RuntimeError:
            with pytest.raises(ValueError, match=r"x of shape .* does not broadcast with y of shape"):
                broadcast_shape("x", a, "y", b)
        else:
            assert broadcast_shape("x", a, "y", b) == want, (a, b)
