"""Lesson 05: BatchNorm, LayerNorm and RMSNorm against PyTorch's own, bad input, widgets."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_lib.normalization import (COMPOSITIONS, PAD, BatchNorm, LayerNorm, RMSNorm, residual_block,
                                      batch_norm, batch_statistics, block_stack, dependence_mask,
                                      depth_profile, expected_slice, layer_norm, normalize, normalize_tokens,
                                      rms_norm, sigmoid_layer_gradient, sigmoid_slope, toy_batch)

DTYPES = [torch.float32, torch.float64]
TOL = {torch.float32: dict(atol=1e-5, rtol=1e-4), torch.float64: dict(atol=1e-10, rtol=1e-9)}


def random_shapes(seed: int, count: int = 6) -> list[tuple[int, ...]]:
    """(N, D) and (B, T, D) shapes with at least 2 tokens."""
    gen = torch.Generator().manual_seed(seed)
    shapes = []
    for i in range(count):
        b, t, d = (int(v) for v in torch.randint(1, 7, (3,), generator=gen))
        shapes.append((b + 1, d) if i % 2 == 0 else (b, t + 1, d))
    return shapes


def to_torch_layout(x: torch.Tensor) -> torch.Tensor:
    """Features last (B, T, D) -> torch's BatchNorm1d layout (B, D, T); (N, D) stays."""
    return x.transpose(1, 2) if x.dim() == 3 else x


def paired_batchnorm(d: int, dtype: torch.dtype, momentum: float | None, seed: int) -> tuple[BatchNorm, nn.BatchNorm1d]:
    gen = torch.Generator().manual_seed(seed)
    ours, ref = BatchNorm(d, momentum=momentum).to(dtype), nn.BatchNorm1d(d, momentum=momentum).to(dtype)
    with torch.no_grad():
        ours.weight.copy_(torch.randn(d, generator=gen, dtype=dtype))
        ours.bias.copy_(torch.randn(d, generator=gen, dtype=dtype))
        ref.weight.copy_(ours.weight)
        ref.bias.copy_(ours.bias)
    return ours, ref


# ---------------------------------------------------------------- BatchNorm vs nn.BatchNorm1d

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("momentum", [0.1, 0.5, None])
def test_batchnorm_matches_torch_in_training_and_eval_with_running_stats(dtype, momentum):
    for k, shape in enumerate(random_shapes(seed=1)):
        ours, ref = paired_batchnorm(shape[-1], dtype, momentum, seed=k)
        gen = torch.Generator().manual_seed(100 + k)
        for step in range(3):
            x = torch.randn(shape, generator=gen, dtype=dtype) * 2 + step
            got = ours(x)
            want = to_torch_layout(ref(to_torch_layout(x)))
            torch.testing.assert_close(got, want, **TOL[dtype])
            torch.testing.assert_close(ours.running_mean, ref.running_mean, **TOL[dtype])
            torch.testing.assert_close(ours.running_var, ref.running_var, **TOL[dtype])
            assert int(ours.num_batches_tracked) == int(ref.num_batches_tracked) == step + 1
        ours.eval(), ref.eval()
        x = torch.randn(shape, generator=gen, dtype=dtype)
        torch.testing.assert_close(ours(x), to_torch_layout(ref(to_torch_layout(x))), **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_batchnorm_gradients_match_torch(dtype):
    for k, shape in enumerate(random_shapes(seed=2)):
        ours, ref = paired_batchnorm(shape[-1], dtype, 0.1, seed=k)
        gen = torch.Generator().manual_seed(k)
        x = torch.randn(shape, generator=gen, dtype=dtype)
        upstream = torch.randn(shape, generator=gen, dtype=dtype)
        x_ours, x_ref = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
        (ours(x_ours) * upstream).sum().backward()
        (to_torch_layout(ref(to_torch_layout(x_ref))) * upstream).sum().backward()
        torch.testing.assert_close(x_ours.grad, x_ref.grad, **TOL[dtype])
        torch.testing.assert_close(ours.weight.grad, ref.weight.grad, **TOL[dtype])
        torch.testing.assert_close(ours.bias.grad, ref.bias.grad, **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("training", [True, False])
def test_functional_batch_norm_matches_F_batch_norm_and_updates_buffers_the_same(dtype, training):
    for k, shape in enumerate(random_shapes(seed=3)):
        gen = torch.Generator().manual_seed(k)
        d = shape[-1]
        x = torch.randn(shape, generator=gen, dtype=dtype) * 3 - 1
        weight, bias = torch.randn(d, generator=gen, dtype=dtype), torch.randn(d, generator=gen, dtype=dtype)
        mean0, var0 = torch.randn(d, generator=gen, dtype=dtype), torch.rand(d, generator=gen, dtype=dtype) + 0.5
        ours_mean, ours_var, ref_mean, ref_var = mean0.clone(), var0.clone(), mean0.clone(), var0.clone()
        got = batch_norm(x, ours_mean, ours_var, weight, bias, training=training, momentum=0.3, eps=1e-3)
        want = to_torch_layout(F.batch_norm(to_torch_layout(x), ref_mean, ref_var, weight, bias,
                                            training=training, momentum=0.3, eps=1e-3))
        torch.testing.assert_close(got, want, **TOL[dtype])
        torch.testing.assert_close(ours_mean, ref_mean, **TOL[dtype])
        torch.testing.assert_close(ours_var, ref_var, **TOL[dtype])


def test_running_var_is_fed_the_unbiased_variance():
    x = torch.tensor([[0.0], [2.0], [4.0]], dtype=torch.float64)  # mean 2, biased var 8/3, unbiased 4
    mean, var = torch.zeros(1, dtype=torch.float64), torch.ones(1, dtype=torch.float64)
    batch_norm(x, mean, var, training=True, momentum=0.5)
    assert torch.allclose(mean, torch.tensor([1.0], dtype=torch.float64))
    assert torch.allclose(var, torch.tensor([0.5 * 1 + 0.5 * 4.0], dtype=torch.float64))


def test_batch_statistics_normalize_with_the_biased_variance():
    x = torch.tensor([[0.0], [2.0], [4.0]], dtype=torch.float64)
    mean, var, count = batch_statistics(x)
    assert count == 3 and float(mean) == 2.0 and torch.isclose(var, torch.tensor([8 / 3], dtype=torch.float64))


def test_eval_mode_uses_running_statistics_and_changes_no_buffer():
    layer = BatchNorm(3)
    with torch.no_grad():
        layer.running_mean.copy_(torch.tensor([1.0, 2.0, 3.0]))
        layer.running_var.copy_(torch.tensor([4.0, 1.0, 0.25]))
    layer.eval()
    x = torch.randn(5, 3)
    want = (x - layer.running_mean) / torch.sqrt(layer.running_var + 1e-5)
    torch.testing.assert_close(layer(x), want)
    assert torch.equal(layer.running_mean, torch.tensor([1.0, 2.0, 3.0]))
    assert int(layer.num_batches_tracked) == 0


def test_gamma_and_beta_are_learnable_parameters_that_can_undo_the_normalization():
    layer = BatchNorm(4)
    assert {name for name, _ in layer.named_parameters()} == {"weight", "bias"}
    x = torch.randn(10, 4, dtype=torch.float64) * 3 + 1
    (layer.double()(x) ** 3).sum().backward()
    assert layer.weight.grad.abs().min() > 0 and layer.bias.grad.abs().min() > 0
    mean, var = x.mean(0), x.var(0, unbiased=False)  # torch's own statistics of this batch
    torch.testing.assert_close(batch_norm(x, None, None, torch.sqrt(var + 1e-5), mean), x)
    other = torch.randn(10, 4, dtype=torch.float64) * 3 + 1  # the same gamma and beta on another batch
    assert (batch_norm(other, None, None, torch.sqrt(var + 1e-5), mean) - other).abs().max() > 0.1


def test_masked_batch_statistics_equal_those_of_the_real_tokens_only():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, 4, generator=gen, dtype=torch.float64)
    mask = torch.rand(3, 5, generator=gen) > 0.4
    mean, var, count = batch_statistics(x, mask)
    real = x[mask]  # (n, D)
    assert count == real.shape[0]
    torch.testing.assert_close(mean, real.mean(0))
    torch.testing.assert_close(var, real.var(0, unbiased=False))


# ---------------------------------------------------------------- coupling, padding, batch size 1

def test_batchnorm_output_for_one_sequence_depends_on_the_others_layernorm_does_not():
    a, _, _ = toy_batch(COMPOSITIONS["+3 similar sentences"], 6)
    b, _, _ = toy_batch(COMPOSITIONS["+3 lines of code"], 6)
    assert torch.equal(a[0], b[0])
    assert (normalize_tokens("batch", a)[0] - normalize_tokens("batch", b)[0]).abs().max() > 0.5
    for kind in ("layer", "rms"):
        assert torch.equal(normalize_tokens(kind, a)[0], normalize_tokens(kind, b)[0])


def test_padding_shifts_batchnorm_statistics_unless_masked():
    others = COMPOSITIONS["+3 similar sentences"]
    clean, _, _ = toy_batch(others, 4, 0)
    padded, mask, rows = toy_batch(others, 4, 3)
    assert rows[0][-1] == PAD and int((~mask).sum()) == 4 * 3
    mean_clean = clean.reshape(-1, clean.shape[-1]).mean(0)  # (D,), computed without course_lib
    assert (batch_statistics(padded)[0] - mean_clean).abs().max() > 0.3
    torch.testing.assert_close(batch_statistics(padded, mask)[0], mean_clean)
    torch.testing.assert_close(normalize_tokens("batch", padded, mask)[:, :4], normalize_tokens("batch", clean))
    torch.testing.assert_close(normalize_tokens("layer", padded)[:, :4], normalize_tokens("layer", clean))


def test_batch_of_one_token_in_training_raises_a_clear_error_like_torch():
    x = torch.randn(1, 4)
    with pytest.raises(ValueError, match="Expected more than 1 value per channel"):
        nn.BatchNorm1d(4)(x)
    with pytest.raises(ValueError, match=r"at least 2 tokens.*x of shape \(1, 4\) gives 1 token"):
        BatchNorm(4)(x)
    with pytest.raises(ValueError, match=r"shape \(1, 1, 4\)"):
        batch_norm(torch.randn(1, 1, 4), None, None, training=True)


def test_mask_leaving_one_real_token_raises_and_counts_no_batch():
    layer = BatchNorm(2)
    mask = torch.tensor([[True, False, False]])
    with pytest.raises(ValueError, match=r"gives 1 real \(mask\) token"):
        layer(torch.randn(1, 3, 2), mask)
    assert int(layer.num_batches_tracked) == 0 and torch.equal(layer.running_mean, torch.zeros(2))
    with pytest.raises(ValueError, match="mask must mark at least one token as real, but marks none"):
        batch_statistics(torch.randn(1, 3, 2), torch.zeros(1, 3, dtype=torch.bool))


def test_one_sequence_of_several_tokens_is_fine_in_training_and_one_token_is_fine_in_eval():
    ours, ref = paired_batchnorm(4, torch.float64, 0.1, seed=0)
    x = torch.randn(1, 6, 4, dtype=torch.float64)
    torch.testing.assert_close(ours(x), ref(x.transpose(1, 2)).transpose(1, 2))
    ours.eval(), ref.eval()
    single = torch.randn(1, 4, dtype=torch.float64)
    torch.testing.assert_close(ours(single), ref(single))


# ---------------------------------------------------------------- LayerNorm and RMSNorm

@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_norm_matches_F_layer_norm_values_and_gradients(dtype):
    for k, shape in enumerate(random_shapes(seed=4) + [(7,)]):
        gen = torch.Generator().manual_seed(k)
        d = shape[-1]
        x = (torch.randn(shape, generator=gen, dtype=dtype) * 2 + 1).requires_grad_(True)
        x_ref = x.detach().clone().requires_grad_(True)
        weight, bias = torch.randn(d, generator=gen, dtype=dtype), torch.randn(d, generator=gen, dtype=dtype)
        upstream = torch.randn(shape, generator=gen, dtype=dtype)
        got, want = layer_norm(x, weight, bias, 1e-4), F.layer_norm(x_ref, (d,), weight, bias, 1e-4)
        torch.testing.assert_close(got, want, **TOL[dtype])
        (got * upstream).sum().backward()
        (want * upstream).sum().backward()
        torch.testing.assert_close(x.grad, x_ref.grad, **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_layernorm_module_matches_nn_layernorm_and_has_no_running_statistics(dtype):
    ours, ref = LayerNorm(5).to(dtype), nn.LayerNorm(5).to(dtype)
    with torch.no_grad():
        ours.weight.normal_(), ours.bias.normal_()
        ref.weight.copy_(ours.weight), ref.bias.copy_(ours.bias)
    x = torch.randn(3, 4, 5, dtype=dtype)
    torch.testing.assert_close(ours(x), ref(x), **TOL[dtype])
    assert list(ours.buffers()) == [] and list(ref.buffers()) == []
    torch.testing.assert_close(ours.eval()(x), ours.train()(x), atol=0, rtol=0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("eps", [None, 1e-6, 0.1])
def test_rms_norm_matches_nn_rmsnorm_and_F_rms_norm(dtype, eps):
    for k, shape in enumerate(random_shapes(seed=5) + [(9,)]):
        gen = torch.Generator().manual_seed(k)
        d = shape[-1]
        ref = nn.RMSNorm(d, eps=eps).to(dtype)
        ours = RMSNorm(d, eps=eps).to(dtype)
        with torch.no_grad():
            ref.weight.copy_(torch.randn(d, generator=gen, dtype=dtype))
            ours.weight.copy_(ref.weight)
        x = torch.randn(shape, generator=gen, dtype=dtype) * 3 + 0.5
        torch.testing.assert_close(ours(x), ref(x), **TOL[dtype])
        torch.testing.assert_close(rms_norm(x, ref.weight, eps), F.rms_norm(x, (d,), ref.weight, eps), **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_is_layer_norm_without_centering(dtype):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4, 6, 8, generator=gen, dtype=dtype) + 2
    centred = x - x.mean(-1, keepdim=True)
    torch.testing.assert_close(rms_norm(centred, eps=1e-5), layer_norm(x, eps=1e-5), **TOL[dtype])
    assert (rms_norm(x, eps=1e-5) - layer_norm(x, eps=1e-5)).abs().max() > 0.1


# ---------------------------------------------------------------- which entries share statistics

@pytest.mark.parametrize("kind", ["batch", "layer", "rms"])
def test_dependence_mask_is_the_textbook_slice(kind):
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(3, 4, 5, generator=gen, dtype=torch.float64)
    for entry in [(0, 0, 0), (2, 3, 4), (1, 2, 0)]:
        got = dependence_mask(lambda z: normalize_tokens(kind, z), x, entry)
        assert torch.equal(got, expected_slice(kind, (3, 4, 5), *entry))


# ---------------------------------------------------------------- sigmoid saturation

def test_sigmoid_slope_is_sigmoid_times_one_minus_sigmoid():
    z = torch.linspace(-10, 10, 101, dtype=torch.float64)
    torch.testing.assert_close(sigmoid_slope(z), torch.sigmoid(z) * (1 - torch.sigmoid(z)))


def test_a_shift_saturates_the_raw_sigmoid_layer_and_batchnorm_removes_it():
    raw, normed = sigmoid_layer_gradient(1.0, 5.0, normalized=False), sigmoid_layer_gradient(1.0, 5.0, normalized=True)
    assert raw.saturated > 0.5 and normed.saturated < 0.01
    assert raw.slope < normed.slope / 10 and raw.grad_z < normed.grad_z / 10 and raw.grad_w < normed.grad_w / 10
    unshifted = sigmoid_layer_gradient(1.0, 0.0, normalized=True)
    assert abs(normed.grad_z - unshifted.grad_z) < 1e-9 * unshifted.grad_z  # BatchNorm subtracts the shift exactly


def test_batchnorm_makes_the_gradient_at_z_and_w_shrink_as_one_over_the_weight_scale():
    base = sigmoid_layer_gradient(1.0, 0.0, normalized=True)
    for scale in (2.0, 4.0, 16.0):
        got = sigmoid_layer_gradient(scale, 0.0, normalized=True)
        assert got.saturated == base.saturated  # the sigmoid sees the same inputs at every scale
        assert abs(got.grad_z * scale / base.grad_z - 1) < 1e-3 and abs(got.grad_w * scale / base.grad_w - 1) < 1e-3
    raw = sigmoid_layer_gradient(16.0, 0.0, normalized=False)  # without a norm there is no such law:
    assert raw.saturated > 0.5 and raw.grad_z * 16 > 3 * base.grad_z  # saturation, not 1/scale, cuts it


def test_the_gradient_is_read_before_the_norm_so_batchnorm_s_division_counts():
    """Independent computation: d loss / dz through F.batch_norm, with z built the same way."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(256, 32, generator=gen, dtype=torch.float64)
    w = torch.randn(32, 32, generator=gen, dtype=torch.float64) * 4.0 / 32 ** 0.5
    upstream = torch.randn(256, 32, generator=gen, dtype=torch.float64)
    z = (x @ w).requires_grad_(True)
    (torch.sigmoid(F.batch_norm(z, None, None, training=True)) * upstream).sum().backward()
    want = z.grad.norm(dim=-1).mean().item()
    assert abs(sigmoid_layer_gradient(4.0, 0.0, normalized=True).grad_z - want) < 1e-9 * want


# ---------------------------------------------------------------- where the norm goes

def residual_input(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(4, 8, 32, generator=gen, dtype=torch.float64),
            torch.randn(4, 8, 32, generator=gen, dtype=torch.float64))


def test_residual_block_is_the_textbook_post_ln_and_pre_ln_formula():
    x, _ = residual_input()
    post, pre = block_stack("post", 1, 32, 64, seed=3)[0], block_stack("pre", 1, 32, 64, seed=3)[0]
    ln = lambda v: F.layer_norm(v, (32,))  # torch's own, with gamma = 1 and beta = 0 as at initialisation
    attend = lambda v: post.attention(v)[0]
    mid = ln(x + attend(x))
    torch.testing.assert_close(post(x)[0], ln(mid + post.ffn(mid)))  # a block returns (x, weights, None)
    mid = x + pre.attention(ln(x))[0]
    torch.testing.assert_close(pre(x)[0], mid + pre.ffn(ln(mid)))
    assert all(torch.equal(p, q) for p, q in zip(post.parameters(), pre.parameters()))  # same seed, same weights


def test_post_ln_stream_keeps_norm_sqrt_d_and_pre_ln_stream_grows():
    x, upstream = residual_input()
    post_norms, post_grads = depth_profile(block_stack("post", 12, 32, 64), x, upstream)
    pre_norms, pre_grads = depth_profile(block_stack("pre", 12, 32, 64), x, upstream)
    assert (post_norms[1:] - 32 ** 0.5).abs().max() < 1e-3
    assert pre_norms[-1] > 1.3 * pre_norms[0] and bool((pre_norms[4::4] > pre_norms[:-4:4]).all())
    assert post_grads.shape == pre_grads.shape == (12,) and bool((post_grads > 0).all())


def test_depth_profile_gradients_match_autograd_by_hand():
    x, upstream = residual_input()
    blocks = block_stack("pre", 3, 32, 64)
    _, grads = depth_profile(blocks, x, upstream)
    blocks.zero_grad(set_to_none=True)
    out = x
    for block in blocks:
        out = block(out)[0]
    (F.layer_norm(out, (32,)) * upstream).sum().backward()
    want = torch.stack([torch.cat([p.grad.flatten() for p in b.parameters()]).norm() for b in blocks])
    torch.testing.assert_close(grads, want)


def test_block_stack_leaves_the_global_random_state_alone():
    before = torch.random.get_rng_state()
    block_stack("post", 2, 16, 32)
    assert torch.equal(before, torch.random.get_rng_state())


# ---------------------------------------------------------------- bad input

def test_bad_inputs_raise_errors_naming_the_argument_and_shape():
    x = torch.randn(2, 3, 4)
    with pytest.raises(TypeError, match="x must be a torch.Tensor, got list"):
        layer_norm([[1.0, 2.0]])
    with pytest.raises(ValueError, match=r"x must have at least 2 dimensions, got shape \(4,\)"):
        batch_norm(torch.randn(4), None, None)
    with pytest.raises(ValueError, match=r"weight must have last dimension 4, got shape \(3,\)"):
        layer_norm(x, torch.ones(3))
    with pytest.raises(ValueError, match=r"running_var must have 1 dimensions, got shape \(4, 1\)"):
        batch_norm(x, torch.zeros(4), torch.ones(4, 1))
    with pytest.raises(TypeError, match="x, bias must share one dtype, got x torch.float32, bias torch.float64"):
        layer_norm(x, None, torch.zeros(4, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"mask of shape \(2, 4\) must have x's shape without the feature axis: x has shape \(2, 3, 4\)"):
        batch_statistics(x, torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match="mask must be a boolean tensor.*torch.float32"):
        batch_statistics(x, torch.ones(2, 3))
    with pytest.raises(ValueError, match="give both running_mean and running_var"):
        batch_norm(x, torch.zeros(4), None)
    with pytest.raises(ValueError, match="eval mode .* needs running_mean and running_var"):
        batch_norm(x, None, None, training=False)
    with pytest.raises(ValueError, match="kind must be one of"):
        normalize_tokens("group", x)
    with pytest.raises(ValueError, match="mask must be None unless kind='batch'"):
        normalize_tokens("layer", x, torch.ones(2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"index \(0, 5, 0\) must be a tuple of 3 ints addressing one entry of x of shape \(2, 3, 4\)"):
        dependence_mask(layer_norm, x, (0, 5, 0))
    with pytest.raises(ValueError, match=r"d=6 is out of range for 4 entries along D of the block of shape \(2, 3, 4\)"):
        expected_slice("layer", (2, 3, 4), 0, 0, 6)
    with pytest.raises(ValueError, match="length must be between 1 and 8"):
        toy_batch([], 9)
    with pytest.raises(ValueError, match="padding must be >= 0, got padding=-1"):
        toy_batch([], 4, -1)


@pytest.mark.parametrize("call, error, message", [
    (lambda x: batch_norm(x, None, None, eps="0.1"), TypeError, "eps must be a number, got str '0.1'"),
    (lambda x: layer_norm(x, eps=float("nan")), ValueError, "eps must be finite, got nan"),
    (lambda x: rms_norm(x, eps=-1.0), ValueError, "eps must be >= 0, got -1.0"),
    (lambda x: rms_norm(x, eps=True), TypeError, "eps must be a number, got bool True"),
    (lambda x: normalize(x, x.mean(), x.var(), "tiny"), TypeError, "eps must be a number, got str"),
    (lambda x: batch_norm(x, torch.zeros(4), torch.ones(4), momentum=None), TypeError,
     "momentum must be a number, got NoneType"),
    (lambda x: batch_norm(x, torch.zeros(4), torch.ones(4), momentum="fast"), TypeError,
     "momentum must be a number, got str 'fast'"),
    (lambda x: batch_norm(x, torch.zeros(4), torch.ones(4), momentum=1.5), ValueError,
     "momentum must be at most 1.0, got 1.5"),
    (lambda x: batch_norm(x, torch.zeros(4), torch.tensor([1.0, -0.5, 1.0, 1.0]), training=False), ValueError,
     "running_var must be >= 0 .*variance.*-0.5"),
    (lambda x: batch_norm(x, None, None, training="yes"), TypeError, "training must be True or False, got str"),
    (lambda x: batch_norm(x.long(), None, None), TypeError, "x must be a floating-point tensor, got dtype torch.int64"),
    (lambda x: layer_norm(x.int()), TypeError, "x must be a floating-point tensor, got dtype torch.int32"),
    (lambda x: rms_norm(x.long()), TypeError, "x must be a floating-point tensor, got dtype torch.int64"),
    (lambda x: batch_statistics(x.long()), TypeError, "x must be a floating-point tensor, got dtype torch.int64"),
    (lambda x: layer_norm(x, torch.ones(4, dtype=torch.long)), TypeError,
     "weight must be a floating-point tensor, got dtype torch.int64"),
    (lambda x: sigmoid_slope(torch.arange(3)), TypeError, "z must be a floating-point tensor"),
    (lambda x: sigmoid_layer_gradient("big", 0.0, True), TypeError, "scale must be a number, got str"),
    (lambda x: sigmoid_layer_gradient(0.0, 0.0, True), ValueError, "scale must be positive, got 0.0"),
    (lambda x: sigmoid_layer_gradient(1.0, float("inf"), True), ValueError, "shift must be finite"),
    (lambda x: sigmoid_layer_gradient(1.0, 0.0, 1), TypeError, "normalized must be True or False, got int"),
    (lambda x: sigmoid_layer_gradient(1.0, 0.0, True, n_tokens=1), ValueError, "n_tokens must be >= 2"),
])
def test_functions_name_the_argument_and_the_problem(call, error, message):
    with pytest.raises(error, match=message):
        call(torch.randn(2, 3, 4))


@pytest.mark.parametrize("build, error, message", [
    (lambda: BatchNorm(2.5), TypeError, "num_features must be an int, got float 2.5"),
    (lambda: BatchNorm(0), ValueError, "num_features must be >= 1, got num_features=0"),
    (lambda: LayerNorm(0), ValueError, "num_features must be >= 1, got num_features=0"),
    (lambda: LayerNorm(torch.tensor(4)), TypeError, "num_features must be an int, got Tensor"),
    (lambda: RMSNorm(True), TypeError, "num_features must be an int, got bool True"),
    (lambda: RMSNorm(-3), ValueError, "num_features must be >= 1, got num_features=-3"),
    (lambda: BatchNorm(4, eps="small"), TypeError, "eps must be a number, got str 'small'"),
    (lambda: LayerNorm(4, eps=-1e-5), ValueError, "eps must be >= 0"),
    (lambda: RMSNorm(4, eps=float("inf")), ValueError, "eps must be finite, got inf"),
    (lambda: BatchNorm(4, momentum="0.1"), TypeError, "momentum must be a number, got str '0.1'"),
    (lambda: BatchNorm(4, momentum=-0.1), ValueError, "momentum must be >= 0, got -0.1"),
    (lambda: residual_block(0, 8, "pre"), ValueError, "d_model must be >= 1"),
    (lambda: residual_block(8, 8.0, "pre"), TypeError, "d_ff must be an int, got float"),
    (lambda: block_stack("middle", 2), ValueError, r"placement must be one of \('post', 'pre'\), got 'middle'"),
    (lambda: block_stack("pre", 0), ValueError, "depth must be >= 1, got depth=0"),
    (lambda: block_stack("pre", 2, seed=-1), ValueError, "seed must be >= 0"),
])
def test_modules_reject_sizes_and_settings_that_are_not_what_they_need(build, error, message):
    with pytest.raises(error, match=message):
        build()


def test_module_inputs_are_checked_at_the_entry_point():
    with pytest.raises(TypeError, match="x must be a floating-point tensor, got dtype torch.int64"):
        BatchNorm(4)(torch.ones(3, 4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"x must have last dimension 4, got shape \(2, 5\)"):
        LayerNorm(4)(torch.randn(2, 5))
    with pytest.raises(ValueError, match=r"x must have last dimension 3, got shape \(2, 4\)"):
        BatchNorm(3)(torch.randn(2, 4))
    with pytest.raises(TypeError, match="x must be a floating-point tensor, got dtype torch.bool"):
        RMSNorm(4)(torch.ones(2, 4, dtype=torch.bool))
    blocks = block_stack("pre", 2, 16, 32)
    x = torch.randn(2, 3, 16, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"x must have last dimension 16, got shape \(2, 3, 8\)"):
        depth_profile(blocks, x[..., :8], x[..., :8])
    with pytest.raises(ValueError, match=r"upstream of shape \(3, 16\) must have the shape of x, \(2, 3, 16\)"):
        depth_profile(blocks, x, x[0])
    with pytest.raises(TypeError, match="x, upstream, blocks_weights must share one dtype"):
        depth_profile(blocks, x, x.float())
    with pytest.raises(TypeError, match="blocks must be a non-empty nn.ModuleList of post-LN or pre-LN Blocks"):
        depth_profile([blocks[0]], x, x)
    with pytest.raises(TypeError, match="blocks must be a non-empty nn.ModuleList"):
        depth_profile(nn.ModuleList(), x, x)
    with pytest.raises(ValueError, match="blocks mix post-LN and pre-LN"):
        depth_profile(nn.ModuleList([blocks[0], block_stack("post", 1, 16, 32)[0]]), x, x)
    with pytest.raises(TypeError, match="x torch.float32, upstream torch.float32, blocks_weights torch.float64"):
        depth_profile(blocks, x.float(), x.float())


def test_module_rejects_a_dtype_mismatch_before_touching_its_buffers():
    layer = BatchNorm(3)  # float32 parameters and buffers
    with pytest.raises(TypeError, match="x, running_mean, running_var, weight, bias must share one dtype, "
                                        "got x torch.float64, running_mean torch.float32"):
        layer(torch.randn(4, 3, dtype=torch.float64))
    assert int(layer.num_batches_tracked) == 0 and torch.equal(layer.running_var, torch.ones(3))


# ---------------------------------------------------------------- widget

def test_normalization_widget_renders_every_setting_without_errors():
    from course_lib.widgets.normalization import normalization_widget

    view = normalization_widget()
    for composition in COMPOSITIONS:
        view.controls["composition"].value = composition
        for length, padding, masked in [(1, 0, False), (1, 0, True), (1, 4, False), (1, 4, True), (8, 8, False)]:
            view.controls["masked"].value = masked
            view.controls["length"].value = length
            view.controls["padding"].value = padding
            assert "<svg" in view.view.value
    assert view.errors.outputs == ()
    view.controls["composition"].value = "alone (B = 1)"
    view.controls["masked"].value, view.controls["padding"].value, view.controls["length"].value = False, 0, 1
    assert "B = 1 sequence x 1 position = 1 real token + 0 pad tokens" in view.view.value
    assert "come from <b>1 token</b>" in view.view.value
    view.controls["composition"].value, view.controls["length"].value = "+1 similar sentence", 3
    assert "B = 2 sequences x 3 positions = 6 real tokens" in view.view.value
    for name in ("length", "padding"):  # the sliders cannot leave the precomputed table
        slider = view.controls[name]
        slider.value = slider.max + 5
        assert slider.value == slider.max
    assert view.errors.outputs == ()
    view.controls["composition"].value = "alone (B = 1)"
    view.controls["masked"].value, view.controls["padding"].value, view.controls["length"].value = True, 3, 1
    assert "at least 2 tokens" in view.view.value




# ---------------------------------------------------------------- convergence and biases (section 11)

from course_lib.normalization import (SeedMLP, labelled_inputs, shifted_accuracy, steps_to_reach,  # noqa: E402
                                      train_seed_mlps, train_shifted)


@pytest.mark.parametrize("norm", ["none", "batch", "layer", "rms"])
def test_seeds_trained_together_learn_what_each_learns_alone(norm):
    """Training seeds [3, 5] at once must give seed 5 the losses it gets alone: a norm (BatchNorm
    above all) that pooled statistics over the seeds, or a loss that mixed them, would differ."""
    _, together = train_seed_mlps([3, 5], norm, 12)
    _, alone = train_seed_mlps([5], norm, 12)
    torch.testing.assert_close(together[1], alone[0], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(together[0], together[1])  # the two seeds are different runs


def test_the_shift_moves_the_inputs_and_keeps_every_label():
    x, y = labelled_inputs([0, 1], 500)
    moved, moved_y = labelled_inputs([0, 1], 500, shift=8.0)
    assert torch.equal(y, moved_y)  # the teacher ignores the direction of the shift
    step = moved - x  # (S, n, d_in): the same vector for every input of a seed
    torch.testing.assert_close(step.norm(dim=-1), torch.full((2, 500), 8.0), atol=1e-4, rtol=0)
    assert float((step - step[:, :1]).abs().max()) < 1e-5
    test_x, _ = labelled_inputs([0, 1], 500, test=True)
    assert not torch.allclose(test_x, x)  # the test draw is not the training draw


def test_without_bias_the_mlp_has_no_additive_parameter_and_maps_zero_to_zero():
    for norm in ["none", "layer", "rms"]:
        model = SeedMLP([0, 1], norm, bias=False)
        assert len(model.biases) == 0 and len(model.betas) == 0
        # sigmoid(0) = 1/2 feeds the last layer, so zero input gives W3^T (1/2 ...) exactly, no offset
        if norm == "none":
            hidden = torch.sigmoid(torch.sigmoid(torch.zeros(2, 1, 32)) @ model.weights[1])
            torch.testing.assert_close(model(torch.zeros(2, 1, 16)), hidden @ model.weights[2])
    assert len(SeedMLP([0], "batch", bias=True).betas) == 2
    assert len(SeedMLP([0], "rms", bias=True).betas) == 0  # RMSNorm has no beta to keep


def test_batchnorm_beats_no_norm_on_the_lessons_task_in_a_short_run():
    """The lesson's claim on two more seeds, in 40 steps: BatchNorm is under 0.8, no norm is not."""
    _, batch = train_seed_mlps([11, 12], "batch", 40)
    _, none = train_seed_mlps([11, 12], "none", 40)
    assert int(steps_to_reach(batch, 0.8).max()) <= 25
    assert float(none[:, -10:].mean()) > 1.1


def test_steps_to_reach_counts_from_the_first_window_below_the_level():
    losses = torch.tensor([[3.0, 2.0, 1.0, 0.5, 0.4], [3.0, 3.0, 3.0, 3.0, 3.0]])
    # windows of 2: means 2.5, 1.5, 0.75, 0.45 -> first below 1.0 at step 2; never -> 4
    assert steps_to_reach(losses, 1.0, window=2).tolist() == [2, 4]


def test_shifted_accuracy_is_the_share_of_right_answers_on_the_test_draw():
    model, _ = train_seed_mlps([0, 1], "layer", 30)
    x, y = labelled_inputs([0, 1], 64, shift=2.0, test=True)
    expected = (model(x).argmax(-1) == y).double().mean(-1)
    assert torch.equal(shifted_accuracy(model, [0, 1], 2.0, n=64), expected)


def test_training_on_after_a_shift_of_zero_is_training_longer():
    """train_shifted continues the same stream of inputs: with shift 0, 20 + 10 steps are 30 steps."""
    model, _ = train_seed_mlps([2, 4], "layer", 20)
    continued = train_shifted(model, [2, 4], 10, trained=20, shift=0.0)
    longer, losses = train_seed_mlps([2, 4], "layer", 30)
    torch.testing.assert_close(continued, losses[:, 20:], atol=1e-6, rtol=0)
    torch.testing.assert_close(model.weights[0], longer.weights[0], atol=1e-6, rtol=0)
    trained, before = train_seed_mlps([2, 4], "layer", 60)
    moved = train_shifted(trained, [2, 4], 5, trained=60, shift=8.0)
    jump = moved.max(-1).values / before[:, -10:].mean(-1)  # (S,): the lesson's jump, on 2 other seeds
    assert float(jump.min()) > 2


def test_batchnorm_in_training_mode_does_not_see_a_shift():
    """Each batch is normalized with its own mean, and the shift moves every input of a batch alike."""
    model, _ = train_seed_mlps([1, 3], "batch", 20)
    twin = copy.deepcopy(model)
    torch.testing.assert_close(train_shifted(model, [1, 3], 10, 20, shift=8.0),
                               train_shifted(twin, [1, 3], 10, 20, shift=0.0), atol=1e-5, rtol=0)


@pytest.mark.parametrize("call, error, message", [
    (lambda: train_shifted(SeedMLP([0, 1], "none"), [0], 5, 5, 1.0), ValueError, "the 2 seeds the model was built"),
    (lambda: train_shifted(SeedMLP([0], "none"), [0], 5, -1, 1.0), ValueError, "trained must be >= 0"),
    (lambda: train_seed_mlps([0], "group", 5), ValueError, "norm must be one of"),
    (lambda: train_seed_mlps([], "batch", 5), ValueError, "seeds"),
    (lambda: train_seed_mlps([0, -1], "batch", 5), ValueError, "seed must be >= 0"),
    (lambda: train_seed_mlps([0], "batch", 0), ValueError, "steps must be >= 1"),
    (lambda: train_seed_mlps([0], "batch", 5, batch=1), ValueError, "batch must be >= 2"),
    (lambda: labelled_inputs([0], 10, d_in=4, n_classes=4), ValueError, "n_classes=4 must be below d_in=4"),
    (lambda: SeedMLP([0, 1], "layer")(torch.randn(3, 4, 16)), ValueError, r"x must be \(S=2, N, d_in=16\)"),
    (lambda: SeedMLP([0], "batch")(torch.randn(1, 1, 16)), ValueError, "at least 2 inputs"),
    (lambda: steps_to_reach(torch.ones(2, 3), 0.5, window=4), ValueError, "at least window=4 steps"),
    (lambda: shifted_accuracy(SeedMLP([0, 1], "none"), [0], 1.0), ValueError, "the 2 seeds the model was built"),
])
def test_bad_calls_to_the_convergence_helpers_say_what_is_wrong(call, error, message):
    with pytest.raises(error, match=message):
        call()


# ---------------------------------------------------------------- the lesson's ten-seed table

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "05_normalization.ipynb"


def _run_lesson() -> tuple[dict, dict[str, object]]:
    """Lesson 05's code cells as the lesson runs them, less the widget: fresh.run_lesson_cells.
    About 10 s on one free core."""
    from fresh import run_lesson_cells

    return run_lesson_cells(NOTEBOOK, lambda source: "normalization_widget()" in source and "import" not in source)


def _lesson_table(start: str) -> dict[str, list[str]]:
    """The markdown table of lesson 05's one markdown cell starting with `start`: each row's
    first column -> its other columns, as printed."""
    import nbformat

    cells = [c.source for c in nbformat.read(NOTEBOOK, as_version=4).cells
             if c.cell_type == "markdown" and c.source.startswith(start)]
    assert len(cells) == 1, f"one markdown cell of lesson 05 must start with {start!r}"
    rows = [[col.strip() for col in line.strip().strip("|").split("|")]
            for line in cells[0].splitlines() if line.strip().startswith("|")]
    return {row[0]: row[1:] for row in rows[2:]}  # past the header and the |---| line


@pytest.mark.slow
def test_the_lessons_ten_seed_table_is_what_seeds_0_to_9_measure():
    """The table at the end of lesson 05's section 11 (issue 41: ranges from 10 seeds) is typed
    in, and nbval blanks the `measured:` blocks it was copied from: here the lesson's own cells
    run (its sigmoid MLPs from seeds 0-9) and every bound, range and margin the table prints
    must be what they measure, each claim at least 5% inside its bound."""
    from course_lib.claims import fmt

    from fresh import in_fresh_process

    ns, tests = in_fresh_process("test_normalization", "_run_lesson")  # as a kernel runs it
    assert ns["SEEDS"] == list(range(10))
    level, after, last = ns["LEVEL"], ns["AFTER"], 10  # last: the lesson's "last 10 steps"
    reach, final, ratio, drops, difference = ns["reach"], ns["final"], ns["ratio"], ns["drops"], ns["difference"]
    rise = min(float(r.min()) for r in ns["rise"].values())
    later = min(float((ns["later"][name] / ns["before"][name]).min()) for name in ns["runs"])
    ratios = ns["ratios"]
    rows = {  # the table's first column -> (the claim it sums up, its parts' names, its range as computed)
        f"BatchNorm's steps to loss {level:g}; no norm's last-{last}-step loss": (
            (f"BatchNorm reaches a training loss of {level} within 25 steps; without a norm the loss "
             f"is still above 1.1 after {ns['STEPS']} (each of the 10 seeds)"),
            ("BatchNorm", "no norm"),
            (f"{int(reach['batch'].min())}-{int(reach['batch'].max())}; "
             f"{fmt(final['none'].min())}-{fmt(final['none'].max())}")),
        f"LayerNorm's steps / BatchNorm's; gap in last-{last}-step loss": (
            ("LayerNorm gets there too, but at least 1.5 times later than BatchNorm (each seed); "
             "after 100 steps the two losses are alike"),
            ("steps", "loss gap"),
            (f"{fmt(ratio.min())}-{fmt(ratio.max())}; "
             f"at most {fmt((final['layer'] - final['batch']).abs().max())}")),
        "accuracy fall under the shift, mean": (
            ("the shift hurts both: on average over the seeds, accuracy falls by more than 1 point "
             "with biases and LayerNorm, and without bias with RMSNorm"),
            (),
            (f"{100 * drops['biases, LayerNorm'].mean().item():.1f} (biases), "
             f"{100 * drops['no bias, RMSNorm'].mean().item():.1f} (no bias)")),
        "fall with biases minus fall without, mean": (
            ("and dropping the biases does not make the fall smaller: on average over the seeds the "
             "two falls are within 3 points of each other"),
            (),
            (f"{100 * difference.mean().item():.1f} (per seed {100 * difference.min().item():+.1f} "
             f"to {100 * difference.max().item():+.1f})")),
        "loss jump / loss before the shift": (
            ("training on the shifted inputs throws the loss up: within 10 steps it is more than 4 times "
             "its level before the shift, with and without biases"),
            (),
            f"at least {fmt(rise)}"),
        f"loss {after} steps later / loss before": (
            f"and {after} steps later it has not come back: still more than 1.5 times its level before",
            (),
            f"at least {fmt(later)}"),
        "jump with biases / jump without, mean": (
            ("dropping the biases does not calm it: on average over the seeds, the jump with biases is "
             "within a factor 1.33 of the jump without them, with LayerNorm and with RMSNorm"),
            (),
            f"{fmt(ratios['no bias, LayerNorm'])} (LayerNorm), {fmt(ratios['no bias, RMSNorm'])} (RMSNorm)"),
    }
    table = _lesson_table("**Seeds 0-9.**")
    assert set(table) == set(rows)

    def limits(row: str) -> list[float]:  # the limits the row's claim is tested against
        test = tests[rows[row][0]]
        return [part.limit for part in getattr(test, "parts", (test,))]

    def margin(row: str) -> str:  # as the table prints it: "14% (no norm)", "over 500%"
        statement, parts, _ = rows[row]
        test = tests[statement]
        if test.margin >= 5:
            return f"over {int(test.margin) * 100}%"
        text = f"{100 * test.margin:.0f}%"
        if parts:
            closest = min(range(len(parts)), key=lambda i: test.parts[i].margin)
            text += f" ({parts[closest]})"
        return text

    bounds = {  # the bounds as the table words them, from the limits the claims test
        "BatchNorm's steps to loss 0.8; no norm's last-10-step loss": "at most {:g}; above {:g}",
        "LayerNorm's steps / BatchNorm's; gap in last-10-step loss": "at least {:g}; below {:g}",
        "accuracy fall under the shift, mean": "above {:g} point",
        "fall with biases minus fall without, mean": "within {:g} points",
        "loss jump / loss before the shift": "above {:g}",
        "loss 30 steps later / loss before": "above {:g}",
        "jump with biases / jump without, mean": "{:g} to {:g}",
    }
    in_points = {"accuracy fall under the shift, mean", "fall with biases minus fall without, mean"}
    assert {row: cols[0] for row, cols in table.items()} == {
        row: bounds[row].format(*(100 * v if row in in_points else v for v in limits(row))) for row in rows}
    # After the shift, training is chaotic: runs of the same seeds in new processes printed 2.42, 2.44
    # and 2.47 for "30 steps later", so those rows are held to their numbers within 10%, the others
    # exactly as printed.
    chaotic = {"loss jump / loss before the shift", "loss 30 steps later / loss before",
               "jump with biases / jump without, mean"}
    for row in rows:
        for printed, measured in ((table[row][1], rows[row][2]), (table[row][2], margin(row))):
            if row not in chaotic:
                assert printed == measured, (row, printed, measured)
                continue
            numbers = [[float(n) for n in re.findall(r"-?\d+\.?\d*", text)] for text in (printed, measured)]
            assert len(numbers[0]) == len(numbers[1]) and all(
                abs(a - b) <= 0.1 * abs(b) for a, b in zip(*numbers)), (row, printed, measured)
    margins = {statement: test.margin for statement, test in tests.items() if hasattr(test, "margin")}
    assert {statement for statement, _, _ in rows.values()} <= set(margins)
    assert all(m >= 0.05 for m in margins.values()), margins
