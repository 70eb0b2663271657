"""Lesson 05: BatchNorm, LayerNorm and RMSNorm against PyTorch's own, bad input, widgets."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_lib.normalization import (COMPOSITIONS, PAD, BatchNorm, LayerNorm, RMSNorm, batch_norm,
                                      batch_statistics, dependence_mask, expected_slice, layer_norm,
                                      normalize_tokens, rms_norm, sigmoid_layer_gradient, sigmoid_slope,
                                      toy_batch)

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
    mean, var, _ = batch_statistics(x)
    torch.testing.assert_close(batch_norm(x, None, None, torch.sqrt(var + 1e-5), mean), x)


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
    mean_clean = batch_statistics(clean)[0]
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
    with pytest.raises(ValueError, match="marks no token as real"):
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


def test_saturated_sigmoid_layer_has_a_small_gradient_and_batchnorm_restores_it():
    raw_share, raw_slope, raw_grad = sigmoid_layer_gradient(1.0, 5.0, normalized=False)
    norm_share, norm_slope, norm_grad = sigmoid_layer_gradient(1.0, 5.0, normalized=True)
    assert raw_share > 0.5 and norm_share < 0.01
    assert raw_slope < norm_slope / 10 and raw_grad < norm_grad / 10
    assert abs(sigmoid_layer_gradient(16.0, 0.0, True)[2] - norm_grad) < 1e-4 * norm_grad  # equal up to eps


# ---------------------------------------------------------------- bad input

def test_bad_inputs_raise_errors_naming_the_argument_and_shape():
    x = torch.randn(2, 3, 4)
    with pytest.raises(TypeError, match="x must be a torch.Tensor, got list"):
        layer_norm([[1.0, 2.0]])
    with pytest.raises(TypeError, match="x must be a floating-point tensor, got dtype torch.int64"):
        batch_norm(torch.ones(3, 4, dtype=torch.long), None, None)
    with pytest.raises(ValueError, match=r"x must have at least 2 dimensions, got shape \(4,\)"):
        batch_norm(torch.randn(4), None, None)
    with pytest.raises(ValueError, match=r"weight must have shape \(D,\) = \(4,\).*weight has shape \(3,\), x has shape \(2, 3, 4\)"):
        layer_norm(x, torch.ones(3))
    with pytest.raises(ValueError, match=r"running_var must have shape \(D,\) = \(4,\).*\(4, 1\)"):
        batch_norm(x, torch.zeros(4), torch.ones(4, 1))
    with pytest.raises(TypeError, match="bias has dtype torch.float64 but x has dtype torch.float32"):
        layer_norm(x, None, torch.zeros(4, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"mask must have x's shape without the feature axis, \(2, 3\): mask has shape \(2, 4\)"):
        batch_statistics(x, torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match="mask must be a boolean tensor.*torch.float32"):
        batch_statistics(x, torch.ones(2, 3))
    with pytest.raises(ValueError, match="give both running_mean and running_var"):
        batch_norm(x, torch.zeros(4), None)
    with pytest.raises(ValueError, match="eval mode .* needs running_mean and running_var"):
        batch_norm(x, None, None, training=False)
    with pytest.raises(ValueError, match=r"momentum must be in \[0, 1\], got 1.5"):
        batch_norm(x, torch.zeros(4), torch.ones(4), momentum=1.5)
    with pytest.raises(ValueError, match="eps must be >= 0, got -1.0"):
        rms_norm(x, eps=-1.0)
    with pytest.raises(ValueError, match="kind must be one of"):
        normalize_tokens("group", x)
    with pytest.raises(ValueError, match=r"index \(0, 5, 0\) does not address one entry of x with shape \(2, 3, 4\)"):
        dependence_mask(layer_norm, x, (0, 5, 0))
    with pytest.raises(ValueError, match="length must be between 1 and 8"):
        toy_batch([], 9)
    with pytest.raises(ValueError, match="num_features must be >= 1, got 0"):
        BatchNorm(0)


def test_module_rejects_a_dtype_mismatch_before_touching_its_buffers():
    layer = BatchNorm(3)  # float32 parameters and buffers
    with pytest.raises(TypeError, match="running_mean has dtype torch.float32 but x has dtype torch.float64"):
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
    view.controls["masked"].value, view.controls["padding"].value, view.controls["length"].value = True, 3, 1
    assert "at least 2 tokens" in view.view.value


# ---------------------------------------------------------------- exercise set 05: the checks are tested too

SET = "05_normalization"

MUTANTS = {
    "batch_stats": {
        "unbiased variance": "def batch_stats(x):\n    flat = x.reshape(-1, x.shape[-1])\n    return flat.mean(0), flat.var(0)",
        "over the features (LayerNorm's axis)": "def batch_stats(x):\n    return x.mean(-1), x.var(-1, unbiased=False)",
        "over the batch axis only": "def batch_stats(x):\n    return x.mean(0), x.var(0, unbiased=False)",
        "calls the course reference": "from course_lib.normalization import batch_statistics as stats\n"
                                      "def batch_stats(x):\n    return stats(x)[:2]",
    },
    "batch_norm_forward": {
        "batch statistics in eval mode": "def batch_norm_forward(x, gamma, beta, running_mean, running_var, training, eps=1e-5):\n"
                                         "    mean, var = batch_stats(x)\n"
                                         "    return (x - mean) / torch.sqrt(var + eps) * gamma + beta",
        "eps outside the square root": "def batch_norm_forward(x, gamma, beta, running_mean, running_var, training, eps=1e-5):\n"
                                       "    mean, var = batch_stats(x) if training else (running_mean, running_var)\n"
                                       "    return (x - mean) / (torch.sqrt(var) + eps) * gamma + beta",
        "unbiased variance": "def batch_norm_forward(x, gamma, beta, running_mean, running_var, training, eps=1e-5):\n"
                             "    flat = x.reshape(-1, x.shape[-1])\n"
                             "    mean, var = (flat.mean(0), flat.var(0)) if training else (running_mean, running_var)\n"
                             "    return (x - mean) / torch.sqrt(var + eps) * gamma + beta",
        "gamma and beta swapped": "def batch_norm_forward(x, gamma, beta, running_mean, running_var, training, eps=1e-5):\n"
                                  "    mean, var = batch_stats(x) if training else (running_mean, running_var)\n"
                                  "    return (x - mean) / torch.sqrt(var + eps) * beta + gamma",
        "calls F.batch_norm": "import torch.nn.functional as F\n"
                              "def batch_norm_forward(x, gamma, beta, running_mean, running_var, training, eps=1e-5):\n"
                              "    xt = x.transpose(1, 2) if x.dim() == 3 else x\n"
                              "    y = F.batch_norm(xt, running_mean.clone(), running_var.clone(), gamma, beta, training, 0.0, eps)\n"
                              "    return y.transpose(1, 2) if x.dim() == 3 else y",
    },
    "update_running": {
        "biased variance averaged": "def update_running(running_mean, running_var, x, momentum):\n"
                                    "    mean, var = batch_stats(x)\n"
                                    "    return (1 - momentum) * running_mean + momentum * mean, (1 - momentum) * running_var + momentum * var",
        "momentum on the wrong side": "def update_running(running_mean, running_var, x, momentum):\n"
                                      "    mean, var = batch_stats(x)\n    n = x.numel() // x.shape[-1]\n"
                                      "    return momentum * running_mean + (1 - momentum) * mean, "
                                      "momentum * running_var + (1 - momentum) * var * n / (n - 1)",
        "calls nn.BatchNorm1d": "def update_running(running_mean, running_var, x, momentum):\n"
                                "    bn = torch.nn.BatchNorm1d(x.shape[-1], momentum=momentum).to(x.dtype)\n"
                                "    bn.running_mean.copy_(running_mean); bn.running_var.copy_(running_var)\n"
                                "    bn(x.reshape(-1, x.shape[-1]))\n"
                                "    return bn.running_mean.clone(), bn.running_var.clone()",
    },
    "layer_norm_rows": {
        "unbiased variance (torch.var's default)": "def layer_norm_rows(x, gamma, beta, eps=1e-5):\n"
                                                   "    mean, var = x.mean(-1, keepdim=True), x.var(-1, keepdim=True)\n"
                                                   "    return (x - mean) / torch.sqrt(var + eps) * gamma + beta",
        "statistics over the batch axis": "def layer_norm_rows(x, gamma, beta, eps=1e-5):\n"
                                          "    mean, var = x.mean(0), x.var(0, unbiased=False)\n"
                                          "    return (x - mean) / torch.sqrt(var + eps) * gamma + beta",
        "eps outside the square root": "def layer_norm_rows(x, gamma, beta, eps=1e-5):\n"
                                       "    mean, var = x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)\n"
                                       "    return (x - mean) / (torch.sqrt(var) + eps) * gamma + beta",
        "calls F.layer_norm": "import torch.nn.functional as F\n"
                              "def layer_norm_rows(x, gamma, beta, eps=1e-5):\n"
                              "    return F.layer_norm(x, (x.shape[-1],), gamma, beta, eps)",
    },
    "rms_norm_rows": {
        "subtracts the mean (LayerNorm)": "def rms_norm_rows(x, gamma, eps=1e-6):\n"
                                          "    c = x - x.mean(-1, keepdim=True)\n"
                                          "    return c / torch.sqrt((c ** 2).mean(-1, keepdim=True) + eps) * gamma",
        "no square root": "def rms_norm_rows(x, gamma, eps=1e-6):\n"
                          "    return x / ((x ** 2).mean(-1, keepdim=True) + eps) * gamma",
        "mean absolute value": "def rms_norm_rows(x, gamma, eps=1e-6):\n"
                               "    return x / (x.abs().mean(-1, keepdim=True) + eps) * gamma",
        "eps outside the square root": "def rms_norm_rows(x, gamma, eps=1e-6):\n"
                                       "    return x / ((x ** 2).mean(-1, keepdim=True).sqrt() + eps) * gamma",
        "calls torch's RMSNorm": "def rms_norm_rows(x, gamma, eps=1e-6):\n"
                                 "    return torch.nn.functional.rms_norm(x, (x.shape[-1],), gamma, eps)",
    },
}
