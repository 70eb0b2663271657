"""Lesson 03: permutation symmetry and biases, checked against PyTorch's own modules."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_lib.attention_scores import scaled_dot_product_attention, softmax
from course_lib.masks import causal_mask
from course_lib.model import Block, ModelConfig
from course_lib.torch_copy import from_torch
from course_lib.permutation import (ResPostBlock, TokenNorm, bias_after_norm, check_permutation, describe_gap,
                                    equivariance_gap, inverse_permutation, linear, match_rows, norm_over_tokens,
                                    permutation_matrix, permute_tokens, random_block, random_permutation, res_post,
                                    self_attention, with_token_norms, without_biases)

DTYPES = [torch.float32, torch.float64]
TOL = {torch.float32: 1e-5, torch.float64: 1e-12}


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def attention_inputs(seed: int, dtype: torch.dtype):
    """x: (B, T, D) and three (D, D) projections, plus the generator to draw biases from."""
    B, T, D = shapes(seed)
    g = gen(seed)
    x = torch.randn(B, T, D, generator=g, dtype=dtype)
    w_q, w_k, w_v = (torch.randn(D, D, generator=g, dtype=dtype) for _ in range(3))
    return x, w_q, w_k, w_v, g


def shapes(seed: int) -> tuple[int, int, int]:
    """A random (B, T, D) with even D and T >= 3 (so permutations can do something)."""
    g = gen(1000 + seed)
    return (int(torch.randint(1, 4, (1,), generator=g)), int(torch.randint(3, 8, (1,), generator=g)),
            2 * int(torch.randint(1, 5, (1,), generator=g)))


def position_table(T: int, D: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Any fixed per-slot vectors break the symmetry (lesson 04 builds the real ones)."""
    return torch.randn(T, D, generator=gen(99), dtype=dtype)


def non_identity_permutation(T: int, g: torch.Generator) -> torch.Tensor:
    while True:
        perm = random_permutation(T, g)
        if not torch.equal(perm, torch.arange(T)):
            return perm


def torch_layer(D: int, F_: int, nhead: int, dtype: torch.dtype, seed: int, norm_first: bool = False):
    torch.manual_seed(seed)
    layer = nn.TransformerEncoderLayer(D, nhead, F_, dropout=0.0, batch_first=True, norm_first=norm_first)
    with torch.no_grad():  # non-trivial LayerNorm gains and shifts, so they are tested too
        for norm in (layer.norm1, layer.norm2):
            norm.weight.add_(0.3 * torch.randn(D))
            norm.bias.add_(0.3 * torch.randn(D))
    return layer.to(dtype).eval()


# ---------------------------------------------------------------- permutations


@pytest.mark.parametrize("seed", range(5))
def test_permute_tokens_equals_multiplying_by_the_permutation_matrix(seed):
    B, T, D = shapes(seed)
    g = gen(seed)
    x, perm = torch.randn(B, T, D, generator=g, dtype=torch.float64), random_permutation(T, g)
    P = permutation_matrix(perm, torch.float64)
    assert torch.equal(permute_tokens(x, perm), P @ x)
    assert torch.equal(P @ P.T, torch.eye(T, dtype=torch.float64))


@pytest.mark.parametrize("seed", range(5))
def test_inverse_permutation_undoes_permute_tokens(seed):
    B, T, D = shapes(seed)
    g = gen(seed)
    x, perm = torch.randn(B, T, D, generator=g), random_permutation(T, g)
    inverse = inverse_permutation(perm)
    assert torch.equal(permute_tokens(permute_tokens(x, perm), inverse), x)
    assert torch.equal(permute_tokens(permute_tokens(x, inverse), perm), x)


def test_check_permutation_accepts_lists_and_returns_int64():
    assert check_permutation([2, 0, 1]).dtype == torch.long
    assert torch.equal(check_permutation(torch.tensor([1, 0], dtype=torch.int32), 2), torch.tensor([1, 0]))


# ---------------------------------------------------------------- attention symmetry


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("with_biases", [False, True])
def test_self_attention_without_positions_is_permutation_equivariant(dtype, seed, with_biases):
    B, T, D = shapes(seed)
    g = gen(seed)
    x = torch.randn(B, T, D, generator=g, dtype=dtype)
    w = [torch.randn(D, D, generator=g, dtype=dtype) for _ in range(3)]
    b = [torch.randn(D, generator=g, dtype=dtype) if with_biases else None for _ in range(3)]
    for _ in range(5):
        gap = equivariance_gap(lambda t: self_attention(t, *w, *b)[0], x, random_permutation(T, g))
        assert gap < TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", range(4))
def test_attention_is_invariant_to_permuting_keys_and_values_together(dtype, seed):
    B, T, D = shapes(seed)
    g = gen(seed)
    S = T + 2
    q = torch.randn(B, T, D, generator=g, dtype=dtype)
    k, v = torch.randn(B, S, D, generator=g, dtype=dtype), torch.randn(B, S, D + 1, generator=g, dtype=dtype)
    out, weights = scaled_dot_product_attention(q, k, v)
    perm = non_identity_permutation(S, g)
    out_p, weights_p = scaled_dot_product_attention(q, permute_tokens(k, perm), permute_tokens(v, perm))
    torch.testing.assert_close(out_p, out, atol=TOL[dtype], rtol=0)
    # The weights are the same numbers, attached to the moved keys.
    torch.testing.assert_close(weights_p, weights[..., perm], atol=TOL[dtype], rtol=0)
    # Permuting only the values (not the keys) is a different function: the pairing is lost.
    out_v, _ = scaled_dot_product_attention(q, k, permute_tokens(v, perm))
    assert (out_v - out).abs().max() > 1e-3


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", range(4))
def test_attention_matches_torch_multihead_attention_with_biases_and_mask(dtype, seed):
    B, T, D = shapes(seed)
    torch.manual_seed(seed)
    mha = nn.MultiheadAttention(D, 1, batch_first=True, bias=True).to(dtype).eval()
    with torch.no_grad():
        mha.in_proj_bias.normal_()
    x = torch.randn(B, T, D, dtype=dtype)
    w, b = mha.in_proj_weight.detach(), mha.in_proj_bias.detach()
    mask = causal_mask(T)
    for our_mask, torch_mask in ((None, None), (mask, ~mask)):  # torch: True = may NOT attend
        ours, weights = self_attention(x, w[:D].T, w[D:2 * D].T, w[2 * D:].T, b[:D], b[D:2 * D], b[2 * D:], our_mask)
        ours = linear(ours, mha.out_proj.weight.detach().T, mha.out_proj.bias.detach())
        theirs, their_weights = mha(x, x, x, attn_mask=torch_mask, need_weights=True)
        torch.testing.assert_close(ours, theirs.detach(), atol=10 * TOL[dtype], rtol=0)
        torch.testing.assert_close(weights, their_weights.detach(), atol=10 * TOL[dtype], rtol=0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", range(4))
def test_key_bias_changes_nothing(dtype, seed):
    x, w_q, w_k, w_v, g = attention_inputs(seed, dtype)
    D = x.shape[-1]
    b_k = 5 * torch.randn(D, generator=g, dtype=dtype)
    plain = self_attention(x, w_q, w_k, w_v)
    keyed = self_attention(x, w_q, w_k, w_v, b_k=b_k)
    torch.testing.assert_close(keyed[1], plain[1], atol=10 * TOL[dtype], rtol=0)
    torch.testing.assert_close(keyed[0], plain[0], atol=10 * TOL[dtype], rtol=0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", range(4))
def test_value_bias_adds_exactly_b_v_to_every_output_row(dtype, seed):
    x, w_q, w_k, w_v, g = attention_inputs(seed, dtype)
    T, D = x.shape[-2:]
    b_v = torch.randn(D, generator=g, dtype=dtype)
    mask = causal_mask(T)  # any mask that leaves each row a key: the weights still sum to 1
    shift = self_attention(x, w_q, w_k, w_v, b_v=b_v, mask=mask)[0] - self_attention(x, w_q, w_k, w_v, mask=mask)[0]
    torch.testing.assert_close(shift, b_v.expand_as(shift), atol=TOL[dtype], rtol=0)


@pytest.mark.parametrize("seed", range(4))
def test_query_bias_changes_the_weights(seed):
    x, w_q, w_k, w_v, g = attention_inputs(seed, torch.float64)
    D = x.shape[-1]
    b_q = torch.randn(D, generator=g, dtype=torch.float64)
    plain = self_attention(x, w_q, w_k, w_v)[1]
    biased = self_attention(x, w_q, w_k, w_v, b_q=b_q)[1]
    assert (biased - plain).abs().max() > 1e-3
    # ... by adding the same row vector b_q . k_s / sqrt(D) to every query's scores.
    k = x @ w_k
    expected = softmax((x @ w_q) @ k.transpose(-2, -1) / D ** 0.5 + (k @ b_q)[..., None, :] / D ** 0.5)
    torch.testing.assert_close(biased, expected, atol=1e-12, rtol=0)


# ---------------------------------------------------------------- the encoder block


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("norm_first", [False, True])
def test_the_lessons_block_copied_from_torch_is_its_layer_and_the_res_post_layout_is_not(
        dtype, seed, masked, norm_first):
    B, T, D = shapes(seed)
    layer = torch_layer(D, 3 * D, 1, dtype, seed, norm_first)
    x = torch.randn(B, T, D, dtype=dtype)
    mask = causal_mask(T) if masked else None
    block = Block(ModelConfig(d_model=D, d_ff=3 * D, norm="pre" if norm_first else "post")).to(dtype)
    from_torch(block, layer)
    with torch.no_grad():
        theirs = layer(x, src_mask=None if mask is None else ~mask)
        torch.testing.assert_close(block(x, mask)[0], theirs, atol=20 * TOL[dtype], rtol=0)
        if not norm_first:  # the lesson's source post's layout, with the same weights, misses torch's output
            assert (res_post(block)(x, mask)[0] - theirs).abs().max() > 1e-2


def random_block_and_input(seed: int):
    """A generator, a random float64 block (D, d_ff = 2D) and x (B, T, D) for `seed`."""
    B, T, D = shapes(seed)
    g = gen(seed)
    p = random_block(D, 2 * D, g, torch.float64)
    return g, p, torch.randn(B, T, D, generator=g, dtype=torch.float64)


@pytest.mark.parametrize("seed", range(4))
def test_res_post_layout_is_x_plus_norm_of_each_sublayer_and_equivariant(seed):
    g, p, x = random_block_and_input(seed)
    B, T, D = x.shape
    # Written out independently with torch's modules: x + LN(Attn(x)), then x + LN(FFN(x)).
    a, f, (ln1, ln2) = p.attention, p.ffn, (p.attention_norm, p.ffn_norm)
    mha = nn.MultiheadAttention(D, 1, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([a.query.weight, a.key.weight, a.value.weight]))
        mha.in_proj_bias.copy_(torch.cat([a.query.bias, a.key.bias, a.value.bias]))
        mha.out_proj.weight.copy_(a.out.weight)
        mha.out_proj.bias.copy_(a.out.bias)
        h = x + F.layer_norm(mha(x, x, x, need_weights=False)[0], (D,), ln1.weight, ln1.bias)
        ffn = F.linear(F.relu(F.linear(h, f.linear1.weight, f.linear1.bias)), f.linear2.weight, f.linear2.bias)
        expected = h + F.layer_norm(ffn, (D,), ln2.weight, ln2.bias)
    variant = res_post(p)
    assert isinstance(variant, ResPostBlock) and type(p) is Block  # a copy: the lesson's block stays post-LN
    torch.testing.assert_close(variant(x)[0], expected, atol=1e-10, rtol=0)
    assert equivariance_gap(lambda t: variant(t)[0], x, random_permutation(T, g)) < 1e-12


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("nhead", [1, 2])
@pytest.mark.parametrize("norm_first", [False, True])
def test_torch_transformer_encoder_layer_without_positions_or_mask_is_equivariant(dtype, seed, nhead, norm_first):
    B, T, D = shapes(seed)
    layer = torch_layer(D, 3 * D, nhead, dtype, seed, norm_first)
    x = torch.randn(B, T, D, dtype=dtype)
    g = gen(seed)
    with torch.no_grad():
        for _ in range(5):
            assert equivariance_gap(layer, x, random_permutation(T, g)) < 20 * TOL[dtype]


@pytest.mark.parametrize("seed", range(4))
def test_torch_layer_with_causal_mask_or_positions_is_not_equivariant(seed):
    B, T, D = shapes(seed)
    layer = torch_layer(D, 3 * D, 1, torch.float64, seed)
    x = torch.randn(B, T, D, dtype=torch.float64)
    perm = non_identity_permutation(T, gen(seed))
    with torch.no_grad():
        assert equivariance_gap(lambda t: layer(t, src_mask=~causal_mask(T)), x, perm) > 1e-3
        assert equivariance_gap(lambda t: layer(t + position_table(T, D)), x, perm) > 1e-3


@pytest.mark.parametrize("seed", range(4))
def test_layer_norm_alone_is_equivariant_because_it_acts_on_each_row(seed):
    B, T, D = shapes(seed)
    g = gen(seed)
    x = torch.randn(B, T, D, generator=g, dtype=torch.float64)
    gain, shift = torch.randn(D, generator=g, dtype=torch.float64), torch.randn(D, generator=g, dtype=torch.float64)
    ln = nn.LayerNorm(D, dtype=torch.float64)
    with torch.no_grad():
        ln.weight.copy_(gain)
        ln.bias.copy_(shift)
        assert equivariance_gap(ln, x, random_permutation(T, g)) == 0.0


@pytest.mark.parametrize("seed", range(4))
def test_our_block_is_equivariant_with_biases_and_with_a_norm_that_mixes_tokens(seed):
    g, p, x = random_block_and_input(seed)
    B, T, D = x.shape
    perm = random_permutation(T, g)
    assert equivariance_gap(lambda t: p(t)[0], x, perm) < 1e-12
    mixing = with_token_norms(p)
    norms = lambda b: (b.attention_norm, b.ffn_norm)
    assert all(isinstance(n, TokenNorm) for n in norms(mixing)) and not any(isinstance(n, TokenNorm) for n in norms(p))
    assert (mixing(x)[0] - p(x)[0]).abs().max() > 1e-3  # the norm really changed
    assert equivariance_gap(lambda t: mixing(t)[0], x, perm) < 1e-12


@pytest.mark.parametrize("seed", range(4))
def test_causal_mask_and_positions_break_our_blocks_equivariance(seed):
    g, p, x = random_block_and_input(seed)
    B, T, D = x.shape
    perm = non_identity_permutation(T, g)
    assert equivariance_gap(lambda t: p(t, causal_mask(T))[0], x, perm) > 1e-3
    pe = position_table(T, D)
    assert equivariance_gap(lambda t: p(t + pe)[0], x, perm) > 1e-3


@pytest.mark.parametrize("seed", range(4))
def test_a_mask_permuted_with_the_tokens_keeps_equivariance(seed):
    g, p, x = random_block_and_input(seed)
    B, T, D = x.shape
    perm, mask = non_identity_permutation(T, g), causal_mask(T)
    moved = p(permute_tokens(x, perm), mask[perm][:, perm])[0]
    torch.testing.assert_close(moved, permute_tokens(p(x, mask)[0], perm), atol=1e-12, rtol=0)


@pytest.mark.parametrize("seed", range(4))
def test_without_biases_drops_only_the_named_ones_and_only_the_key_bias_changes_nothing(seed):
    g, p, x = random_block_and_input(seed)
    before = {name: t.clone() for name, t in p.state_dict().items()}
    for name in ("query", "value", "out"):
        assert (without_biases(p, name)(x)[0] - p(x)[0]).abs().max() > 1e-3
    assert (without_biases(p, "key")(x)[0] - p(x)[0]).abs().max() < 1e-12  # softmax ignores q . b_k
    variant = without_biases(p, "query", "key")
    assert variant.attention.query.bias is None and variant.attention.key.bias is None
    assert variant.attention.value.bias is not None
    assert all(torch.equal(t, before[name]) for name, t in p.state_dict().items())  # the original is intact


def test_dog_bites_man_same_multiset_without_positions_different_with():
    g = gen(0)
    D = 8
    embedding = torch.randn(3, D, generator=g, dtype=torch.float64)  # dog, bites, man
    p = random_block(D, 2 * D, g, torch.float64)
    dog_bites_man, man_bites_dog = embedding[[0, 1, 2]], embedding[[2, 1, 0]]
    a, b = p(dog_bites_man)[0], p(man_bites_dog)[0]
    assert torch.equal(match_rows(a, b, atol=1e-10), torch.tensor([2, 1, 0]))
    pe = position_table(3, D)
    assert match_rows(p(dog_bites_man + pe)[0], p(man_bites_dog + pe)[0], atol=1e-3) is None


# ---------------------------------------------------------------- biases before a norm


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", range(4))
def test_batchnorm_after_linear_cancels_its_whole_bias(dtype, seed):
    B, T, D = shapes(seed)
    g = gen(seed)
    x = torch.randn(B * T + 1, D, generator=g, dtype=dtype)  # rows = examples
    w, b = torch.randn(D, D + 1, generator=g, dtype=dtype), 3 * torch.randn(D + 1, generator=g, dtype=dtype)
    bn = nn.BatchNorm1d(D + 1, dtype=dtype).train()
    torch.testing.assert_close(bn(linear(x, w, b)), bn(linear(x, w)), atol=100 * TOL[dtype], rtol=0)
    torch.testing.assert_close(bias_after_norm(b, "batch"), torch.zeros_like(b))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", range(4))
def test_layernorm_after_linear_cancels_only_the_mean_of_its_bias(dtype, seed):
    B, T, D = shapes(seed)
    g = gen(seed)
    x = torch.randn(B, T, D, generator=g, dtype=dtype)
    w, b = torch.randn(D, D + 1, generator=g, dtype=dtype), 3 * torch.randn(D + 1, generator=g, dtype=dtype)
    ln = lambda t: F.layer_norm(t, (D + 1,))  # noqa: E731
    kept = bias_after_norm(b, "layer")
    torch.testing.assert_close(ln(linear(x, w, b)), ln(linear(x, w, kept)), atol=100 * TOL[dtype], rtol=0)
    torch.testing.assert_close(ln(linear(x, w, b.mean().expand_as(b))), ln(linear(x, w)), atol=100 * TOL[dtype], rtol=0)
    assert (ln(linear(x, w, b)) - ln(linear(x, w))).abs().max() > 1e-2


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize("perm, n, error, match", [
    ([0, 0, 1], 3, ValueError, r"each of 0\.\.2 exactly once, got \[0, 0, 1\]"),
    ([0, 1], 3, ValueError, r"permutation of the 3 token positions, got shape \(2,\)"),
    ([1, 2, 3], 3, ValueError, r"each of 0\.\.2 exactly once, got \[1, 2, 3\]"),
    (torch.tensor([0.0, 1.0]), 2, TypeError, r"perm must hold integers, got dtype torch\.float32"),
    (torch.tensor([True, False]), 2, TypeError, r"perm must hold integers, got dtype torch\.bool"),
    ([1.0, 0.0], 2, TypeError, r"perm must hold integer indices, got 1\.0 \(float\)"),
    ([0.7, 1.2], 2, TypeError, r"perm must hold integer indices, got 0\.7 \(float\)"),
    ([True, False], 2, TypeError, r"perm must hold integer indices, got True \(bool\)"),
    (torch.tensor([[0, 1]]), 2, ValueError, r"perm must have 1 dimensions, got shape \(1, 2\)"),
    ("012", 3, TypeError, r"perm must be a torch\.Tensor, got str"),
])
def test_bad_permutations_are_rejected(perm, n, error, match):
    with pytest.raises(error, match=match):
        check_permutation(perm, n)


def test_permute_tokens_rejects_a_permutation_of_the_wrong_length():
    with pytest.raises(ValueError, match=r"permutation of the 4 token positions, got shape \(3,\)"):
        permute_tokens(torch.zeros(2, 4, 5), torch.tensor([2, 0, 1]))
    with pytest.raises(ValueError, match=r"x must have at least 2 dimensions, got shape \(5,\)"):
        permute_tokens(torch.zeros(5), torch.tensor([0]))


def test_linear_rejects_mismatched_weight_bias_and_dtypes():
    x = torch.zeros(3, 4)
    with pytest.raises(ValueError, match=r"w_q of shape \(5, 2\) must have 4 rows .* x has shape \(3, 4\)"):
        linear(x, torch.zeros(5, 2), name="w_q")
    with pytest.raises(ValueError, match=r"b_q must have shape \(2,\) to match w_q's 2 columns, got shape \(3,\)"):
        linear(x, torch.zeros(4, 2), torch.zeros(3), name="w_q")
    with pytest.raises(TypeError, match=r"b_v must have x's dtype torch\.float32, got torch\.float64"):
        linear(x, torch.zeros(4, 2), torch.zeros(2, dtype=torch.float64), name="w_v")
    with pytest.raises(TypeError, match=r"weight must have x's dtype torch\.float32, got torch\.float64"):
        linear(x, torch.zeros(4, 2, dtype=torch.float64))
    with pytest.raises(TypeError, match=r"x must be a floating-point tensor, got dtype torch\.int64"):
        linear(torch.zeros(3, 4, dtype=torch.long), torch.zeros(4, 2))


def test_self_attention_rejects_mismatched_query_and_key_widths():
    x = torch.zeros(3, 4)
    with pytest.raises(ValueError, match=r"w_q \(4, 2\) and w_k \(4, 3\) must give the same d_k"):
        self_attention(x, torch.zeros(4, 2), torch.zeros(4, 3), torch.zeros(4, 4))


def test_equivariance_gap_rejects_bad_functions():
    x = torch.zeros(2, 3, 4)
    with pytest.raises(TypeError, match=r"f must be a function of x, got int"):
        equivariance_gap(3, x, torch.tensor([0, 2, 1]))
    with pytest.raises(ValueError, match=r"x has shape \(2, 3, 4\), f\(x\) has \(2, 4\)"):
        equivariance_gap(lambda t: t.sum(-2), x, torch.tensor([0, 2, 1]))


def test_match_rows_rejects_different_shapes():
    with pytest.raises(ValueError, match=r"same shape \(T, D\), got \(3, 2\) and \(2, 2\)"):
        match_rows(torch.zeros(3, 2), torch.zeros(2, 2))


@pytest.mark.parametrize("call, error, match", [
    (lambda: bias_after_norm(torch.zeros(3), "group"), ValueError, r"'batch' or 'layer', got 'group'"),
    (lambda: bias_after_norm(torch.zeros(2, 3), "layer"), ValueError, r"bias must have 1 dimensions, got shape \(2, 3\)"),
    (lambda: bias_after_norm(torch.zeros(3, dtype=torch.long), "layer"), TypeError,
     r"bias must be a floating-point tensor, got dtype torch\.int64"),
    (lambda: random_permutation(0), ValueError, r"n must be >= 1, got n=0"),
    (lambda: random_permutation(2.0), TypeError, r"n must be an int, got float 2\.0"),
    (lambda: random_block(0, 4), ValueError, r"D must be >= 1, got D=0"),
    (lambda: random_block(4, True), TypeError, r"d_ff must be an int, got bool"),
    (lambda: without_biases(random_block(4, 8), "bias"), ValueError,
     r"projections must be one of .*'query', 'key', 'value', 'out'.*, got 'bias'"),
    (lambda: inverse_permutation(torch.tensor([1.0, 0.0])), TypeError, r"perm must hold integers"),
    (lambda: permute_tokens(torch.zeros(3, 2), [0, 2.0, 1]), TypeError, r"perm must hold integer indices, got 2\.0"),
    (lambda: permutation_matrix([True, False]), TypeError, r"perm must hold integer indices, got True"),
    (lambda: match_rows(torch.zeros(2, 2), torch.zeros(2, 2), atol=-1.0), ValueError, r"atol must be >= 0"),
    (lambda: match_rows(torch.zeros(2, 2, dtype=torch.long), torch.zeros(2, 2)), TypeError,
     r"a must be a floating-point tensor"),
    (lambda: equivariance_gap(lambda t: t, torch.zeros(3, 2, dtype=torch.long), [0, 2, 1]), TypeError,
     r"x must be a floating-point tensor"),
    (lambda: describe_gap(float("nan")), ValueError, r"gap must be finite, got nan"),
    (lambda: describe_gap(0.1, bound=0), ValueError, r"bound must be positive, got 0\.0"),
    (lambda: self_attention(torch.zeros(3, 4), *[torch.zeros(4, 2)] * 3, b_k=torch.zeros(3)), ValueError,
     r"b_k must have shape \(2,\) to match w_k's 2 columns, got shape \(3,\)"),
    (lambda: self_attention(torch.zeros(3, 4), *[torch.zeros(4, 2)] * 3, b_q=torch.zeros(2, dtype=torch.long)),
     TypeError, r"b_q must be a floating-point tensor, got dtype torch\.int64"),
    (lambda: self_attention(torch.zeros(3, 4, dtype=torch.long), *[torch.zeros(4, 2)] * 3), TypeError,
     r"x must be a floating-point tensor, got dtype torch\.int64"),
])
def test_other_bad_arguments_are_named(call, error, match):
    with pytest.raises(error, match=match):
        call()


@pytest.mark.parametrize("call, error, match", [
    (lambda: norm_over_tokens(torch.zeros(3, 4, dtype=torch.long), torch.ones(4), None), TypeError,
     r"x must be a floating-point tensor, got dtype torch\.int64"),
    (lambda: norm_over_tokens(torch.zeros(4), torch.ones(4), None), ValueError,
     r"x must have at least 2 dimensions, got shape \(4,\)"),
    (lambda: norm_over_tokens(torch.zeros(0, 4), torch.ones(4), None), ValueError, r"x has no tokens \(T = 0\)"),
    (lambda: norm_over_tokens(torch.zeros(3, 4), torch.ones(5), None), ValueError,
     r"weight must have last dimension 4, got shape \(5,\)"),
    (lambda: norm_over_tokens(torch.zeros(3, 4), torch.ones(4), torch.zeros(2, 4)), ValueError,
     r"bias must have 1 dimensions, got shape \(2, 4\)"),
    (lambda: norm_over_tokens(torch.zeros(3, 4), torch.ones(4, dtype=torch.float64), None), TypeError,
     r"x, weight must share one dtype"),
    (lambda: norm_over_tokens(torch.zeros(3, 4), torch.ones(4), None, eps=0.0), ValueError,
     r"eps must be positive, got 0\.0"),
    (lambda: norm_over_tokens(torch.zeros(3, 4), torch.ones(4), None, eps=float("inf")), ValueError,
     r"eps must be finite, got inf"),
    (lambda: norm_over_tokens(torch.zeros(3, 4), torch.ones(4), None, eps="1e-5"), TypeError,
     r"eps must be a number, got str"),
    (lambda: norm_over_tokens(torch.zeros(3, 4), [1.0] * 4, None), TypeError,
     r"weight must be a torch\.Tensor, got list"),
])
def test_norms_name_the_bad_argument(call, error, match):
    with pytest.raises(error, match=match):
        call()


@pytest.mark.parametrize("seed", range(4))
def test_norm_over_tokens_is_training_mode_batchnorm_over_every_token(seed):
    B, T, D = shapes(seed)
    g = gen(seed)
    x = torch.randn(B, T, D, generator=g, dtype=torch.float64)
    gain, shift = torch.randn(D, generator=g, dtype=torch.float64), torch.randn(D, generator=g, dtype=torch.float64)
    bn = nn.BatchNorm1d(D, dtype=torch.float64).train()
    with torch.no_grad():
        bn.weight.copy_(gain)
        bn.bias.copy_(shift)
        expected = bn(x.reshape(B * T, D)).reshape(B, T, D)
    torch.testing.assert_close(norm_over_tokens(x, gain, shift), expected, atol=1e-10, rtol=0)


def test_norm_over_tokens_without_gain_or_shift_has_zero_mean_unit_variance_per_feature():
    x = torch.randn(2, 5, 3, generator=gen(7), dtype=torch.float64) * 4 + 2
    out = norm_over_tokens(x, None, None, eps=1e-12)
    torch.testing.assert_close(out.mean(dim=(0, 1)), torch.zeros(3, dtype=torch.float64), atol=1e-12, rtol=0)
    torch.testing.assert_close(out.var(dim=(0, 1), unbiased=False), torch.ones(3, dtype=torch.float64),
                               atol=1e-9, rtol=0)


def test_the_module_writes_no_attention_of_its_own():
    # One attention path (lesson 01): this lesson projects, then calls scaled_dot_product_attention.
    import inspect

    import course_lib.permutation as module

    source = inspect.getsource(module)
    for written_again in ("softmax(", ".transpose(", "exp(", "@ k", ".T @"):
        assert written_again not in source, f"course_lib/permutation.py spells out {written_again!r}"
    assert "scaled_dot_product_attention(q, k, v, mask=mask)" in source


def test_describe_gap_prints_a_bound_not_float_noise():
    assert describe_gap(3e-7) == "below 1e-5"
    assert describe_gap(2e-13, 1e-12) == "below 1e-12"
    assert describe_gap(0.0) == "below 1e-5"
    assert describe_gap(2.3604) == "2.360"


# ---------------------------------------------------------------- widget


def test_permutation_widget_reports_equivariance():
    from course_lib.widgets.permutation import permutation_widget

    w = permutation_widget()
    assert "equivariant</b>: every output moved" in w.view.value
    w.controls["b_q"].value = True
    w.controls["b_v"].value = True
    w.controls["scope"].value = "encoder block"
    assert "equivariant</b>: every output moved" in w.view.value  # biases do not break it
    w.controls["mask"].value = True
    assert "not equivariant" in w.view.value
    w.controls["mask"].value = False
    w.controls["positions"].value = True
    assert "not equivariant" in w.view.value
    assert not w.errors.outputs


# ---------------------------------------------------------------- the mean-pooling classifier

from course_lib.permutation import ANIMALS, PEOPLE, train_order_classifier, who_bites_task  # noqa: E402


def test_who_bites_task_pairs_each_sentence_with_its_reversal():
    task = who_bites_task()
    assert task.ids.shape == (2 * len(ANIMALS) * len(PEOPLE), 3)
    first, second = task.ids[0::2], task.ids[1::2]  # each pair's two orders side by side
    assert torch.equal(first, second.flip(-1))  # the same three words, reversed
    assert torch.equal(task.pair[0::2], task.pair[1::2])
    assert torch.equal(task.labels[0::2], torch.ones(len(first), dtype=torch.long))
    assert torch.equal(task.labels[1::2], torch.zeros(len(first), dtype=torch.long))
    animal_first = first[:, 0] < len(ANIMALS)
    assert bool(animal_first.all()) and task.vocab[int(first[0, 1])] == "bites"


def test_without_positions_the_classifier_is_right_on_exactly_half():
    result = train_order_classifier(3, positions=False, steps=10)
    assert result.train_accuracy == 0.5 and result.held_out_accuracy == 0.5
    assert result.order_gap < 1e-12 and result.held_out_sentences == 24


def test_with_positions_the_classifier_learns_the_order():
    result = train_order_classifier(0, positions=True)
    assert result.train_accuracy == 1.0 and result.held_out_accuracy >= 0.9
    assert result.order_gap > 1.0


def test_train_order_classifier_names_a_bad_argument():
    with pytest.raises(TypeError, match="positions"):
        train_order_classifier(0, positions=1)
    with pytest.raises(ValueError, match="held_out_pairs"):
        train_order_classifier(0, positions=True, held_out_pairs=36)
    with pytest.raises(TypeError, match="seed"):
        train_order_classifier(0.5, positions=True)
