"""Lesson 04: sinusoidal, learned, rotary and ALiBi position encodings, checked independently."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from course_lib.attention import Attention
from course_lib.claims import at_least, at_most
from course_lib.model import DecoderOnly, LearnedPositions, Positions
from course_lib.positional_encoding import (
    ALiBiPositions, LearnedPositionalEmbedding, RotaryPositions, SinusoidalPositionalEncoding, alibi_bias,
    alibi_slopes, apply_rope, block_rotation, frequencies, positions_for, measure_previous_token,
    previous_token_batch, rotate_pairs, shift_matrix, sinusoidal_dot, sinusoidal_encoding, tiny_model,
    train_previous_token, wavelength)
from course_lib.positional_encoding import previous_token_runs

DTYPES = [torch.float32, torch.float64]
TOL = {torch.float32: 1e-5, torch.float64: 1e-12}


def loop_table(n_positions: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """The formula of the paper, one entry at a time with the math module (float64)."""
    table = torch.zeros(n_positions, d_model, dtype=torch.float64)
    for pos in range(n_positions):
        for i in range(d_model // 2):
            angle = pos / base ** (2 * i / d_model)
            table[pos, 2 * i], table[pos, 2 * i + 1] = math.sin(angle), math.cos(angle)
    return table


def complex_rope(x: torch.Tensor, positions: torch.Tensor | None = None, base: float = 10000.0) -> torch.Tensor:
    """RoPE as complex multiplication in float64: pair j of row m is z_j * exp(i m c_j)."""
    d = x.shape[-1]
    z = torch.view_as_complex(x.to(torch.float64).reshape(*x.shape[:-1], d // 2, 2).contiguous())
    m = (torch.arange(x.shape[-2]) if positions is None else positions).to(torch.float64)[:, None]
    theta = m * torch.tensor([base ** (-2 * j / d) for j in range(d // 2)], dtype=torch.float64)
    turned = z * torch.polar(torch.ones_like(theta), theta)  # (..., T, d/2)
    return torch.view_as_real(turned).flatten(-2)


# ---------------------------------------------------------------- sinusoidal table

@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("dtype", DTYPES)
def test_sinusoidal_table_matches_the_formula_entry_by_entry(seed, dtype):
    gen = torch.Generator().manual_seed(seed)
    n_positions = int(torch.randint(1, 40, (), generator=gen))
    d_model = 2 * int(torch.randint(1, 33, (), generator=gen))
    base = [10000.0, 100.0, 500.0][seed % 3]
    got = sinusoidal_encoding(n_positions, d_model, base=base, dtype=dtype)
    assert got.shape == (n_positions, d_model) and got.dtype == dtype
    torch.testing.assert_close(got.double(), loop_table(n_positions, d_model, base), atol=TOL[dtype], rtol=0)


def test_sinusoidal_table_known_values():
    table = sinusoidal_encoding(3, 4, dtype=torch.float64)
    # position 0: every sin is 0, every cos is 1
    assert table[0].tolist() == [0.0, 1.0, 0.0, 1.0]
    # d = 4: c_0 = 1, c_1 = 10000^(-1/2) = 0.01
    expected_1 = [0.8414709848078965, 0.5403023058681398, 0.009999833334166664, 0.9999500004166653]
    expected_2 = [0.9092974268256817, -0.4161468365471424, 0.019998666693333080, 0.9998000066665778]
    torch.testing.assert_close(table[1], torch.tensor(expected_1, dtype=torch.float64), atol=1e-15, rtol=0)
    torch.testing.assert_close(table[2], torch.tensor(expected_2, dtype=torch.float64), atol=1e-15, rtol=0)
    # d = 512, pair 255: c = 10000^(-510/512)
    assert abs(float(frequencies(512)[255]) - 10000 ** (-510 / 512)) < 1e-18


def test_wavelengths_of_the_first_and_last_pair():
    assert wavelength(512, 0) == pytest.approx(2 * math.pi)
    # the last pair is j = d/2 - 1: 2 pi * 10000^(1 - 2/d), short of 2 pi * 10000 by a factor 10000^(2/d)
    assert wavelength(512, 255) == pytest.approx(2 * math.pi * 10000 ** (1 - 2 / 512), rel=1e-12)
    assert wavelength(8, 3) == pytest.approx(2 * math.pi * 10000 ** 0.75, rel=1e-12)
    assert wavelength(512, 255) < 0.97 * 2 * math.pi * 10000


def test_sinusoidal_accepts_a_tensor_of_positions_of_any_shape():
    positions = torch.tensor([[0, 5], [7, 3]])
    got = sinusoidal_encoding(positions, 8, dtype=torch.float64)
    assert got.shape == (2, 2, 8)
    torch.testing.assert_close(got, loop_table(8, 8)[positions], atol=1e-12, rtol=0)


def test_float32_table_is_accurate_at_large_positions():
    positions = [10_000, 54_321]
    got = sinusoidal_encoding(torch.tensor(positions), 16, dtype=torch.float32)
    want = torch.tensor([[f(p * 10000 ** (-2 * j / 16)) for j in range(8) for f in (math.sin, math.cos)]
                         for p in positions], dtype=torch.float64)
    torch.testing.assert_close(got.double(), want, atol=1e-6, rtol=0)


@pytest.mark.parametrize("d_model", [2, 8, 64, 512])
def test_every_row_has_squared_norm_d_over_2(d_model):
    table = sinusoidal_encoding(200, d_model, dtype=torch.float64)
    torch.testing.assert_close(table.pow(2).sum(-1), torch.full((200,), d_model / 2, dtype=torch.float64))


@pytest.mark.parametrize("n_positions, d_model", [(100, 128), (1000, 16), (300, 2)])
def test_no_two_positions_share_a_vector(n_positions, d_model):
    table = sinusoidal_encoding(n_positions, d_model, dtype=torch.float64)
    distances = torch.cdist(table, table)  # (T, T), every pair
    distances.fill_diagonal_(float("inf"))
    # the closest pair is the closest offset k: |PE_t - PE_t+k|^2 = d - 2 sum_j cos(c_j k)
    offsets = torch.arange(1, n_positions)
    closest = (d_model - 2 * sinusoidal_dot(offsets, d_model)).clamp_min(0).sqrt().min()
    assert float(distances.min()) > 0.01
    assert float(distances.min()) == pytest.approx(float(closest), rel=1e-6)


def test_squared_distance_is_d_minus_twice_the_dot_product():
    d_model = 64
    table = sinusoidal_encoding(300, d_model, dtype=torch.float64)
    for k in [1, 2, 7, 50, 150]:
        squared = (table[:300 - k] - table[k:]).pow(2).sum(-1)  # |PE_t - PE_t+k|^2 for every t
        want = d_model - 2 * sum(math.cos(k * 10000 ** (-2 * j / d_model)) for j in range(d_model // 2))
        torch.testing.assert_close(squared, torch.full_like(squared, want), atol=1e-9, rtol=0)


# ---------------------------------------------------------------- PE(pos + k) = M_k PE(pos)

@pytest.mark.parametrize("d_model", [2, 16, 128])
def test_shift_matrix_maps_every_position_to_position_plus_k(d_model):
    table = sinusoidal_encoding(300, d_model, dtype=torch.float64)
    for k in [-50, -7, -1, 0, 1, 3, 25, 100]:
        positions = torch.arange(max(0, -k), 300 - max(k, 0))
        moved = table[positions] @ shift_matrix(k, d_model).T  # row-wise M_k @ PE(pos)
        torch.testing.assert_close(moved, table[positions + k], atol=1e-10, rtol=0)


def test_shift_matrix_is_the_addition_formula_and_a_rotation():
    d_model, k = 16, 9
    table = sinusoidal_encoding(40, d_model, dtype=torch.float64)
    m_k = shift_matrix(k, d_model)
    pe_k = table[k]
    # PE(pos+k, 2i) = PE(pos, 2i) PE(k, 2i+1) + PE(pos, 2i+1) PE(k, 2i), and the cos line likewise
    for pos in range(0, 30, 3):
        sin_part = table[pos, 0::2] * pe_k[1::2] + table[pos, 1::2] * pe_k[0::2]
        cos_part = table[pos, 1::2] * pe_k[1::2] - table[pos, 0::2] * pe_k[0::2]
        torch.testing.assert_close(torch.stack([sin_part, cos_part], -1).flatten(), table[pos + k])
    torch.testing.assert_close(m_k @ m_k.T, torch.eye(d_model, dtype=torch.float64))
    for step in [-40, -1, 1, 9, 333]:
        assert float(torch.linalg.det(shift_matrix(step, d_model))) == pytest.approx(1.0, abs=1e-10)
    torch.testing.assert_close(shift_matrix(4, d_model) @ shift_matrix(5, d_model), m_k)
    off_block = m_k.clone()
    for j in range(d_model // 2):
        off_block[2 * j:2 * j + 2, 2 * j:2 * j + 2] = 0
    assert off_block.abs().max() == 0


def test_block_rotation_turns_each_pair_counter_clockwise():
    angles = torch.tensor([math.pi / 2, math.pi], dtype=torch.float64)
    rot = block_rotation(angles, torch.tensor([1.0, 2.0], dtype=torch.float64))
    torch.testing.assert_close(rot @ torch.tensor([1.0, 0.0, 1.0, 0.0], dtype=torch.float64),
                               torch.tensor([0.0, 1.0, -2.0, 0.0], dtype=torch.float64), atol=1e-15, rtol=0)


def test_block_rotation_equals_block_diag_of_2x2_rotations():
    angles = torch.tensor([0.3, -1.2, 2.5], dtype=torch.float64)
    blocks = [torch.tensor([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]], dtype=torch.float64)
              for a in angles.tolist()]
    torch.testing.assert_close(block_rotation(angles), torch.block_diag(*blocks), atol=1e-15, rtol=0)


# ---------------------------------------------------------------- dot products

@pytest.mark.parametrize("d_model", [4, 64, 512])
def test_dot_product_depends_only_on_the_offset_and_not_its_sign(d_model):
    table = sinusoidal_encoding(400, d_model, dtype=torch.float64)
    for k in [0, 1, 2, 17, 99]:
        forward = (table[:400 - k] * table[k:]).sum(-1)  # PE_t . PE_{t+k} for every t
        backward = (table[k:] * table[:400 - k]).sum(-1)
        torch.testing.assert_close(forward, sinusoidal_dot(k, d_model).expand_as(forward))
        torch.testing.assert_close(sinusoidal_dot(-k, d_model), sinusoidal_dot(k, d_model))
        torch.testing.assert_close(backward, forward)
    assert float(sinusoidal_dot(0, d_model)) == pytest.approx(d_model / 2)


def test_dot_product_is_not_monotone_in_the_offset():
    dots = sinusoidal_dot(torch.arange(0, 60), 512)
    assert (dots[1:] > dots[:-1]).any()  # it rises somewhere before k = 60 (first at k = 43 -> 44)
    assert float(dots[44]) > float(dots[43])


def test_a_matrix_of_scaled_rotations_keeps_k_only_and_breaks_the_sign_symmetry():
    d_model, n = 16, 120
    gen = torch.Generator().manual_seed(0)
    table = sinusoidal_encoding(n, d_model, dtype=torch.float64)
    learned = block_rotation(torch.rand(d_model // 2, generator=gen, dtype=torch.float64) * 2 - 1,
                             torch.rand(d_model // 2, generator=gen, dtype=torch.float64) + 0.5)
    scores = table @ learned @ table.T  # (T, S): PE_t A PE_s^T, A = W_Q W_K^T
    for k in [1, 5, 20]:
        along = torch.diagonal(scores, offset=k)
        assert float(along.max() - along.min()) < 1e-10
        assert abs(float(along[0] - torch.diagonal(scores, offset=-k)[0])) > 1e-3
    generic = torch.randn(d_model, d_model, generator=gen, dtype=torch.float64)
    assert float(torch.diagonal(table @ generic @ table.T, offset=3).std()) > 0.1


# ---------------------------------------------------------------- position schemes (masks.Positions)

@pytest.mark.parametrize("dtype", DTYPES)
def test_sinusoidal_scheme_adds_the_table(dtype):
    x = torch.randn(3, 7, 10, generator=torch.Generator().manual_seed(1), dtype=dtype)
    scheme = SinusoidalPositionalEncoding(12, 10)
    assert isinstance(scheme, Positions)
    torch.testing.assert_close(scheme.add(x), x + loop_table(7, 10).to(dtype), atol=TOL[dtype], rtol=0)
    torch.testing.assert_close(scheme(x), scheme.add(x))


def test_learned_and_sinusoidal_tables_take_max_len_then_d_model():
    assert LearnedPositionalEmbedding is LearnedPositions
    for table in (SinusoidalPositionalEncoding(9, 6), LearnedPositionalEmbedding(9, 6)):
        assert (table.max_len, table.d_model) == (9, 6)
        assert table.add(torch.zeros(2, 9, 6)).shape == (2, 9, 6)
    assert tuple(LearnedPositionalEmbedding(9, 6).table.weight.shape) == tuple(torch.nn.Embedding(9, 6).weight.shape)


def test_rotary_scheme_rotates_q_and_k_and_alibi_biases_the_scores():
    gen = torch.Generator().manual_seed(2)
    q, k = torch.randn(2, 5, 8, generator=gen), torch.randn(2, 5, 8, generator=gen)
    q_rot, k_rot = RotaryPositions().rotate(q, k)
    torch.testing.assert_close(q_rot, complex_rope(q).float())
    torch.testing.assert_close(k_rot, complex_rope(k).float())
    bias = ALiBiPositions(0.25).score_bias(3)
    torch.testing.assert_close(bias, torch.tensor([[0.0, 0.0, 0.0], [-0.25, 0.0, 0.0], [-0.5, -0.25, 0.0]]))


@pytest.mark.parametrize("H", [1, 2, 4])
def test_rope_and_alibi_act_on_each_head_of_a_layer_as_torchs_attention_per_head(H):
    """A layer hands rotate(q, k) the head axis, (B, H, T, d_head), and adds a bias to scores
    (B, H, T, S): RoPE turns each head's own d_head columns, ALiBi's (H, T, T) gives head h slope h."""
    torch.manual_seed(H)
    B, T, D = 2, 6, 8
    layer = Attention(D, n_heads=H).double()
    x = torch.randn(B, T, D, dtype=torch.float64)
    bias = alibi_bias(T, alibi_slopes(H)).double()  # (H, T, T)
    out, weights = layer(x, bias=bias, rotate=RotaryPositions().rotate)
    split = lambda t: t.view(B, T, H, D // H).transpose(1, 2)  # (B, T, D) -> (B, H, T, d_head)
    q, k, v = (split(f(x)) for f in (layer.query, layer.key, layer.value))
    q, k = complex_rope(q), complex_rope(k)  # each head's columns turned by position, independently
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)  # (B, H, T, d_head)
    assert weights.shape == (B, H, T, T)
    torch.testing.assert_close(out, layer.out(theirs.transpose(1, 2).reshape(B, T, D)), atol=1e-12, rtol=0)


def test_rotary_scheme_gives_apply_ropes_digits_for_every_shape_and_dtype_it_has_seen():
    scheme, gen = RotaryPositions(base=500.0), torch.Generator().manual_seed(3)
    cases = [((2, 5, 8), torch.float32), ((2, 5, 8), torch.float64), ((7, 4), torch.float32),
             ((2, 5, 8), torch.float32), ((3, 9, 6), torch.float32)]  # repeats: from the cache
    for shape, dtype in cases:
        x = torch.randn(shape, generator=gen, dtype=dtype)
        q_rot, k_rot = scheme.rotate(x, 2 * x)
        assert q_rot.dtype == dtype and torch.equal(q_rot, apply_rope(x, base=500.0))
        assert torch.equal(k_rot, apply_rope(2 * x, base=500.0))
    with pytest.raises(ValueError, match="even"):
        scheme.rotate(torch.zeros(4, 5), torch.zeros(4, 5))


def test_adam_of_the_training_loop_is_the_per_parameter_rule_to_1e_12():
    """course_lib.optimizers.Adam against Adam written out one parameter at a time (float64); a
    parameter's step count t counts only the steps on which it had a gradient, as in torch."""
    from course_lib.optimizers import Adam

    gen = torch.Generator().manual_seed(4)
    shapes = [(16, 32), (64, 32), (32,), (), (5, 3)]
    ours = [torch.randn(s, generator=gen, dtype=torch.float64) for s in shapes]
    ref, start = [p.clone() for p in ours], [p.clone() for p in ours]
    m, v = [torch.zeros_like(p) for p in ref], [torch.zeros_like(p) for p in ref]
    rule, (b1, b2), lr, eps = Adam(ours, 0.02), (0.9, 0.999), 0.02, 1e-8
    steps = [0] * len(ref)
    for t in range(1, 61):
        for i, (p, r) in enumerate(zip(ours, ref)):
            grad = torch.randn(p.shape, generator=gen, dtype=torch.float64) * (1 + t % 7)
            p.grad = None if (i == 2 and t % 3 == 0) else grad  # a parameter without a gradient
            r.grad = p.grad
        rule.step()
        for i, (r, m_i, v_i) in enumerate(zip(ref, m, v)):
            if r.grad is None:
                continue
            steps[i] += 1
            m_i.mul_(b1).add_(r.grad, alpha=1 - b1)
            v_i.mul_(b2).addcmul_(r.grad, r.grad, value=1 - b2)
            r.sub_(lr * (m_i / (1 - b1 ** steps[i])) / ((v_i / (1 - b2 ** steps[i])).sqrt() + eps))
    assert max(float((p - r).abs().max()) for p, r in zip(ours, ref)) < 1e-12
    assert min(float((p - r).abs().max()) for p, r in zip(ours, start)) > 0.1  # every one moved


def test_a_learned_alibi_slope_is_a_parameter_that_gets_a_gradient():
    scheme = ALiBiPositions(0.5, learned=True)
    (params,) = list(scheme.parameters())
    scheme.score_bias(4).sum().backward()
    assert params.grad is not None and float(params.grad) != 0
    assert list(ALiBiPositions(0.5).parameters()) == []
    assert ALiBiPositions(0.5).slope == pytest.approx(0.5)


# ---------------------------------------------------------------- RoPE

@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("dtype", DTYPES)
def test_rope_matches_complex_multiplication(seed, dtype):
    gen = torch.Generator().manual_seed(seed)
    d = 2 * int(torch.randint(1, 17, (), generator=gen))
    shape = (int(torch.randint(1, 4, (), generator=gen)), int(torch.randint(1, 30, (), generator=gen)), d)
    x = torch.randn(shape, generator=gen, dtype=dtype)
    got = apply_rope(x)
    assert got.dtype == dtype
    torch.testing.assert_close(got.double(), complex_rope(x), atol=TOL[dtype] * 10, rtol=TOL[dtype])


def test_float32_rope_is_accurate_at_large_positions():
    x = torch.randn(3, 64, generator=torch.Generator().manual_seed(7))
    positions = torch.tensor([2000, 4321, 20000])
    error = (apply_rope(x, positions).double() - complex_rope(x, positions)).abs().max()
    # a float32 angle m c_j at m = 2000 is off by ~1e-4 rad; cos/sin in float64 leave float32 rounding only
    assert float(error) < 2e-6


def test_rope_row_m_is_the_block_rotation_by_m_theta_of_the_roformer_paper():
    """Su et al. (RoFormer), eq. 15: row m turned by the block-diagonal matrix R_m whose block j is
    the 2x2 rotation by m theta_j, theta_j = 10000^(-2j/d), built here from math's cos and sin; and
    eq. 34, the same map written without a matrix: x * cos(m theta) + (-x_2, x_1, -x_4, x_3, ...) *
    sin(m theta). Neither goes through the course's frequencies, rotate_pairs or block_rotation."""
    d = 8
    x = torch.randn(12, d, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    got = apply_rope(x)
    theta = [10000 ** (-2 * j / d) for j in range(d // 2)]
    for m in range(12):
        blocks = [torch.tensor([[math.cos(m * t), -math.sin(m * t)], [math.sin(m * t), math.cos(m * t)]],
                               dtype=torch.float64) for t in theta]
        torch.testing.assert_close(got[m], torch.block_diag(*blocks) @ x[m], atol=1e-14, rtol=0)
        cos = torch.tensor([math.cos(m * t) for t in theta for _ in (0, 1)], dtype=torch.float64)
        sin = torch.tensor([math.sin(m * t) for t in theta for _ in (0, 1)], dtype=torch.float64)
        swapped = torch.stack([-x[m, 1::2], x[m, 0::2]], dim=-1).flatten()  # (-x_2, x_1, -x_4, x_3, ...)
        torch.testing.assert_close(got[m], x[m] * cos + swapped * sin, atol=1e-14, rtol=0)
    # and the course's matrix picture agrees with the paper's matrix
    torch.testing.assert_close(block_rotation(5 * frequencies(d)), torch.block_diag(*[
        torch.tensor([[math.cos(5 * t), -math.sin(5 * t)], [math.sin(5 * t), math.cos(5 * t)]], dtype=torch.float64)
        for t in theta]), atol=1e-14, rtol=0)


def test_rotate_pairs_is_complex_multiplication_by_unit_numbers():
    gen = torch.Generator().manual_seed(8)
    x, angles = torch.randn(4, 6, generator=gen, dtype=torch.float64), torch.randn(4, 3, generator=gen,
                                                                                  dtype=torch.float64)
    z = torch.view_as_complex(x.reshape(4, 3, 2).contiguous()) * torch.polar(torch.ones_like(angles), angles)
    torch.testing.assert_close(rotate_pairs(x, angles), torch.view_as_real(z).flatten(-2))


def test_rope_with_explicit_positions_equals_rows_of_a_longer_sequence():
    x = torch.randn(30, 8, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    positions = torch.tensor([3, 17, 29])
    torch.testing.assert_close(apply_rope(x[positions], positions), apply_rope(x)[positions])


@pytest.mark.parametrize("dtype", DTYPES)
def test_rope_score_depends_only_on_m_minus_n_and_its_sign_matters_unless_q_equals_k(dtype):
    gen = torch.Generator().manual_seed(5)
    q, k = torch.randn(16, generator=gen, dtype=dtype), torch.randn(16, generator=gen, dtype=dtype)
    length, m = 40, 20
    scores = apply_rope(q.expand(length, 16)) @ apply_rope(k.expand(length, 16)).T  # (T, T)
    for offset in range(-10, 11):
        along = torch.diagonal(scores, offset=offset)
        assert float(along.max() - along.min()) < 50 * TOL[dtype] * float(q.norm() * k.norm())
    # from one query position m: the key o ahead and the key o behind
    ahead, behind = scores[m, m + 1:m + 11], scores[m, m - 10:m].flip(0)
    assert float((ahead - behind).abs().max()) > 1e-2  # q != k: +o and -o differ
    same = apply_rope(q.expand(length, 16)) @ apply_rope(q.expand(length, 16)).T
    torch.testing.assert_close(same[m, m + 1:m + 11], same[m, m - 10:m].flip(0))  # q = k: they agree


def test_rope_keeps_lengths():
    x = torch.randn(2, 20, 10, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    torch.testing.assert_close(apply_rope(x).norm(dim=-1), x.norm(dim=-1))


# ---------------------------------------------------------------- ALiBi

def test_alibi_slopes_known_values():
    assert alibi_slopes(8).tolist() == [1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32, 1 / 64, 1 / 128, 1 / 256]
    assert alibi_slopes(2).tolist() == [1 / 16, 1 / 256]


def test_alibi_bias_is_minus_slope_times_distance():
    bias = alibi_bias(4, torch.tensor([0.5, 1.0]))
    assert bias.shape == (2, 4, 4)
    assert bias[0].tolist() == [[0, 0, 0, 0], [-0.5, 0, 0, 0], [-1.0, -0.5, 0, 0], [-1.5, -1.0, -0.5, 0]]
    assert torch.equal(bias[1], 2 * bias[0])


# ---------------------------------------------------------------- the tiny model against torch's attention

def torch_reference_forward(model: DecoderOnly, kind: str, ids: torch.Tensor) -> torch.Tensor:
    """The same model with torch's own F.scaled_dot_product_attention and independent encodings."""
    T = ids.shape[1]
    x = model.tokens(ids)
    if kind == "learned":
        x = x + model.positions.table(torch.arange(T))
    if kind == "sinusoidal":
        x = x + loop_table(T, x.shape[-1]).to(x.dtype)
    layer = model.attention
    q, k, v = layer.query(x), layer.key(x), layer.value(x)
    if kind == "rope":
        q, k = complex_rope(q).float(), complex_rope(k).float()
    bias = torch.zeros(T, T).masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    if kind == "alibi":
        t = torch.arange(T)
        bias = bias - model.positions.slope * (t[:, None] - t[None, :]).clamp_min(0)
    attended = layer.out(F.scaled_dot_product_attention(q, k, v, attn_mask=bias))
    return model.readout(x + attended)


@pytest.mark.parametrize("kind", ["none", "learned", "sinusoidal", "rope", "alibi"])
def test_tiny_model_matches_torch_scaled_dot_product_attention(kind):
    model = tiny_model(kind, vocab_size=11, max_len=20, d_model=12, alibi_slope=0.7)
    ids = torch.randint(11, (3, 15), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(model(ids), torch_reference_forward(model, kind, ids), atol=1e-5, rtol=1e-5)


def test_previous_token_batch_targets_the_token_before():
    ids, targets = previous_token_batch(4, 6, 9)(torch.Generator().manual_seed(0))
    assert ids.shape == targets.shape == (4, 6)
    assert (targets[:, 0] == -100).all() and torch.equal(targets[:, 1:], ids[:, :-1])


def test_learned_rows_past_the_trained_length_never_move_and_accuracy_falls_to_chance():
    untouched = tiny_model("learned", vocab_size=16, max_len=64).positions.table.weight.detach().clone()
    model = tiny_model("learned", vocab_size=16, max_len=64)
    loss = train_previous_token(model, train_length=8)
    table = model.positions.table.weight.detach()
    assert torch.equal(table[8:], untouched[8:])  # same seed, same init: rows 8.. got no gradient
    assert not torch.equal(table[:8], untouched[:8])
    accuracy, _ = measure_previous_token(model, 32)
    assert loss < 0.05 and float(accuracy[:7].min()) > 0.95
    assert float(accuracy[8:].mean()) < 0.15  # chance is 1/16


def test_alibi_keeps_its_accuracy_and_rope_loses_attention_at_unseen_offsets():
    alibi = tiny_model("alibi", vocab_size=16, max_len=64)
    train_previous_token(alibi, train_length=8)
    assert float(measure_previous_token(alibi, 48)[0][8:].mean()) > 0.9
    rope = tiny_model("rope", vocab_size=16, max_len=64)
    train_previous_token(rope, train_length=8)
    _, on_previous = measure_previous_token(rope, 48)
    # offsets past 7 were never trained on: at positions 32-47 they pull weight off the previous token
    assert float(on_previous[:7].mean()) > 0.7
    assert float(on_previous[31:].mean()) < float(on_previous[:7].mean()) - 0.3


def test_previous_token_runs_are_the_seeded_runs_one_by_one():
    """Each (kind, seed) is tiny_model(kind, seed=seed) trained with that seed: the same
    numbers as building, training and measuring it by hand; different seeds differ."""
    config = dict(vocab_size=8, max_len=12, d_model=8)
    runs = previous_token_runs(["learned", "alibi"], [0, 3], 4, 10, learned_slope=False, **config)
    assert sorted(runs) == [("alibi", 0), ("alibi", 3), ("learned", 0), ("learned", 3)]
    for (kind, seed), run in runs.items():
        model = tiny_model(kind, seed=seed, **config)
        train_previous_token(model, 4, seed=seed)
        accuracy, on_previous = measure_previous_token(model, 10)
        assert run.accuracy.shape == run.on_previous.shape == (9,)
        assert torch.equal(run.accuracy, accuracy) and torch.equal(run.on_previous, on_previous)
        for mine, theirs in zip(run.model.parameters(), model.parameters()):
            assert torch.equal(mine, theirs)
    first, other = runs["learned", 0].model, runs["learned", 3].model
    assert not torch.equal(first.positions.table.weight, other.positions.table.weight)
    with pytest.raises(ValueError, match="test_length"):
        previous_token_runs(["learned"], [0], 4, 1, **config)


# ---------------------------------------------------------------- bad input

@pytest.mark.parametrize("call", [
    lambda: sinusoidal_encoding(5, 7),
    lambda: frequencies(3),
    lambda: shift_matrix(1, 5),
    lambda: sinusoidal_dot(1, 9),
    lambda: wavelength(9, 0),
    lambda: SinusoidalPositionalEncoding(4, 11),
    lambda: apply_rope(torch.randn(4, 5)),
    lambda: rotate_pairs(torch.randn(4, 5), torch.zeros(2)),
    lambda: tiny_model("rope", d_model=7),
    lambda: tiny_model("sinusoidal", d_model=7),
])
def test_odd_width_is_refused_by_name(call):
    with pytest.raises(ValueError, match=r"must be an even number >= 2 .*got .*=(7|3|5|9|11)"):
        call()


@pytest.mark.parametrize("call, error, message", [
    (lambda: sinusoidal_encoding(3, 0), ValueError, "d_model must be >= 1, got d_model=0"),
    (lambda: sinusoidal_encoding(3, 8.0), TypeError, "d_model must be an int, got float"),
    (lambda: sinusoidal_encoding(3, True), TypeError, "d_model must be an int, got bool"),
    (lambda: frequencies("8"), TypeError, "d_model must be an int, got str"),
    (lambda: SinusoidalPositionalEncoding(0, 8), ValueError, "max_len must be >= 1, got max_len=0"),
    (lambda: SinusoidalPositionalEncoding(6.0, 8), TypeError, "max_len must be an int, got float"),
    (lambda: LearnedPositionalEmbedding(-3, 8), ValueError, "max_len must be >= 1, got max_len=-3"),
    (lambda: alibi_slopes(0), ValueError, "n_heads must be >= 1, got n_heads=0"),
    (lambda: alibi_slopes(2.5), TypeError, "n_heads must be an int, got float"),
    (lambda: alibi_bias(4.0, torch.ones(1)), TypeError, "length must be an int, got float"),
    (lambda: alibi_bias(torch.tensor(4), torch.ones(1)), TypeError, "length must be an int, got Tensor"),
    (lambda: wavelength(8, 4), ValueError, r"j=4 is out of range for 4 sin/cos pairs of d_model=8 \(0..3\)"),
    (lambda: wavelength(8, 1.0), TypeError, "j must be an int, got float"),
    (lambda: previous_token_runs(["none"], [0], train_length=1, test_length=4), ValueError,
     "train_length must be >= 2, got train_length=1"),
    (lambda: previous_token_runs(["none"], [0], train_length=9, test_length=4, max_len=8), ValueError,
     "T=9 must be at most max_len=8"),
    (lambda: tiny_model("relative"), ValueError, "kind must be one of"),
    (lambda: previous_token_runs(["none"], [0.5], train_length=8, test_length=4), TypeError, "seed must be an int"),
    (lambda: train_previous_token(tiny_model("none"), steps=0), ValueError, "steps must be >= 1"),
    (lambda: train_previous_token(tiny_model("none"), lr="fast"), TypeError, "lr must be a number"),
    (lambda: previous_token_runs(["none"], [0], train_length=8, test_length=1), ValueError,
     "test_length must be >= 2"),
    (lambda: tiny_model("none", vocab_size=0), ValueError, "vocab_size must be >= 2"),
])
def test_sizes_that_are_not_positive_ints_are_refused_by_name(call, error, message):
    with pytest.raises(error, match=message):
        call()


@pytest.mark.parametrize("base, error, message", [
    ("10000", TypeError, "base must be a number, got str"),
    (None, TypeError, "base must be a number, got NoneType"),
    (True, TypeError, "base must be a number, got bool"),
    (-1.0, ValueError, "base must be positive, got -1"),
    (float("inf"), ValueError, "base must be finite"),
])
@pytest.mark.parametrize("entry", [
    lambda base: frequencies(8, base), lambda base: sinusoidal_encoding(3, 8, base),
    lambda base: sinusoidal_dot(1, 8, base), lambda base: shift_matrix(1, 8, base),
    lambda base: apply_rope(torch.zeros(3, 8), base=base), lambda base: RotaryPositions(base),
    lambda base: SinusoidalPositionalEncoding(4, 8, base), lambda base: wavelength(8, 0, base),
])
def test_a_base_that_is_not_a_positive_number_is_refused_by_name(entry, base, error, message):
    with pytest.raises(error, match=message):
        entry(base)


@pytest.mark.parametrize("positions, error, message", [
    (torch.tensor([0.0, 1.5]), TypeError, "positions must hold integers, got dtype torch.float32"),
    (torch.tensor([True, False]), TypeError, "positions must hold integers, got dtype torch.bool"),
    (torch.tensor([0, -2, 4]), ValueError, r"positions must be >= 0 .*minimum of -2"),
    (-1, ValueError, "positions must be >= 0, got positions=-1"),
    (2.0, TypeError, "positions must be an int .* or an integer tensor, got float"),
    (True, TypeError, "positions must be an int .* or an integer tensor, got bool"),
    ([0, 1], TypeError, "positions must be an int .* or an integer tensor, got list"),
])
def test_positions_that_are_not_non_negative_integers_are_refused(positions, error, message):
    with pytest.raises(error, match=message):
        sinusoidal_encoding(positions, 8)
    if isinstance(positions, torch.Tensor):
        with pytest.raises(error, match=message):
            apply_rope(torch.zeros(positions.shape[0], 4), positions)


def test_offsets_and_k_must_be_integers():
    with pytest.raises(TypeError, match="offsets must hold integers, got dtype torch.float32"):
        sinusoidal_dot(torch.tensor([0.5]), 8)
    with pytest.raises(TypeError, match="offsets must hold integers, got dtype torch.bool"):
        sinusoidal_dot(torch.tensor([True]), 8)
    with pytest.raises(TypeError, match="offsets must be an int or an integer tensor, got float"):
        sinusoidal_dot(1.0, 8)
    with pytest.raises(TypeError, match="k must be an int offset, got float"):
        shift_matrix(1.0, 8)
    with pytest.raises(TypeError, match="k must be an int offset, got bool"):
        shift_matrix(True, 8)


@pytest.mark.parametrize("make", [lambda: SinusoidalPositionalEncoding(6, 8), lambda: LearnedPositionalEmbedding(6, 8)])
def test_sequences_longer_than_max_len_get_a_clear_error(make):
    with pytest.raises(ValueError, match=r"T=9 must be at most max_len=6 of this .*table: .*"
                                         r"positions 0\.\.5 only, so positions 6\.\.8 have no encoding"):
        make()(torch.zeros(2, 9, 8))


def test_the_tiny_model_refuses_sequences_past_its_table_and_bad_ids():
    model = tiny_model("learned", vocab_size=5, max_len=8, d_model=8)
    with pytest.raises(ValueError, match="the length of ids T=12 must be at most max_len=8"):
        model(torch.zeros(1, 12, dtype=torch.long))
    with pytest.raises(TypeError, match="ids must hold integers, got dtype torch.float32"):
        model(torch.zeros(1, 3))
    with pytest.raises(ValueError, match=r"ids must be token ids in 0..4, got values from 0 to 7"):
        model(torch.tensor([[0, 7, 2]]))


def test_width_mismatch_names_the_shape():
    with pytest.raises(ValueError, match=r"x must have last dimension 8, got shape \(2, 3, 5\)"):
        SinusoidalPositionalEncoding(10, 8)(torch.zeros(2, 3, 5))
    with pytest.raises(ValueError, match=r"x must have last dimension 8, got shape \(2, 3, 5\)"):
        LearnedPositionalEmbedding(10, 8)(torch.zeros(2, 3, 5))
    with pytest.raises(TypeError, match="x must be a floating-point tensor"):
        SinusoidalPositionalEncoding(10, 8)(torch.zeros(2, 3, 8, dtype=torch.long))


def test_rope_bad_input():
    with pytest.raises(TypeError, match="x must be a torch.Tensor, got list"):
        apply_rope([[1.0, 2.0]])
    with pytest.raises(TypeError, match="x must be a floating-point tensor"):
        apply_rope(torch.zeros(3, 4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"x must have at least 2 dimensions, got shape \(4,\)"):
        apply_rope(torch.zeros(4))
    with pytest.raises(ValueError, match=r"positions of shape \(2,\) must have one entry per row of x: x has shape \(3, 4\)"):
        apply_rope(torch.zeros(3, 4), torch.tensor([0, 1]))
    with pytest.raises(TypeError, match="angles must be a floating-point tensor"):
        rotate_pairs(torch.zeros(3, 4), torch.zeros(3, 2, dtype=torch.long))


def test_rotation_and_alibi_bad_input():
    with pytest.raises(ValueError, match=r"scales of shape \(3,\) must have the shape of angles, \(2,\)"):
        block_rotation(torch.zeros(2), torch.ones(3))
    with pytest.raises(ValueError, match=r"angles must have 1 dimensions, got shape \(2, 2\)"):
        block_rotation(torch.zeros(2, 2))
    with pytest.raises(TypeError, match="slopes must be a floating-point tensor"):
        alibi_bias(4, torch.tensor([1]))
    with pytest.raises(ValueError, match="slope must be positive, got 0"):
        ALiBiPositions(0.0)
    with pytest.raises(TypeError, match="slope must be a number, got str"):
        ALiBiPositions("1/2")
    with pytest.raises(TypeError, match="dtype must be a floating-point torch.dtype"):
        sinusoidal_encoding(3, 8, dtype=torch.long)


# ---------------------------------------------------------------- widgets

def test_widgets_render_every_setting_without_error():
    from course_lib.widgets.positional_encoding import BANDS, offset_widget, rope_widget

    view = offset_widget()
    for d in (8, 512):
        view.controls["d"].value = d
        for band in BANDS:
            view.controls["band"].value = band
            for k in (-64, -1, 0, 37, 64):
                view.controls["k"].value = k
    rope = rope_widget()
    for angle in (-180, 0, 45):
        rope.controls["angle"].value = angle
        rope.controls["m"].value, rope.controls["n"].value = 7, 0
    for live in (view, rope):
        assert not live.errors.outputs
        assert "<svg" in live.view.value


def test_rope_widget_prints_bounds_not_rounding_noise():
    """Its readout and picture are compared byte for byte between CPUs: the spread along a
    diagonal, 0 in exact arithmetic, shows as a bound, and a score that is 0 in exact
    arithmetic (q . k at 90 degrees) as +0.000, never as -0.000."""
    from course_lib.widgets.positional_encoding import ROPE_ANGLES, rope_widget

    rope = rope_widget()
    for angle in ROPE_ANGLES:
        for m in range(8):
            html = rope.render(angle=angle, m=m, n=m)
            assert "Largest spread along any diagonal: below 1e-12;" in html
            assert "-0.000" not in html and "-0.00</text>" not in html, (angle, m)


def test_rope_fades_past_the_trained_length_in_most_seeds_but_not_all():
    """Lesson 04's text: of seeds 0-14, most fall below 80% at positions 32-47, but seed 8 keeps
    almost 90%. The count is 14 here (100 training steps; the nearest to the line is seed 6 at
    0.70), yet a seed near the line may cross it on another CPU: at least 12 is the margin kept."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in the lesson
    try:
        runs = previous_token_runs(["rope"], range(15), 8, 48, vocab_size=16, max_len=64, d_model=32)
    finally:
        torch.set_num_threads(threads)
    far = {seed: float(run.accuracy[31:].mean()) for (_, seed), run in runs.items()}
    fading = [seed for seed, accuracy in far.items() if accuracy < 0.8]
    assert len(fading) >= 12 and 0.86 < far[8] < 0.92, far


def test_previous_token_runs_in_two_processes_give_the_same_numbers_run_for_run():
    serial = previous_token_runs(["rope", "alibi"], range(2), 8, 16, vocab_size=16, max_len=32)
    forked = previous_token_runs(["rope", "alibi"], range(2), 8, 16, workers=2, vocab_size=16,
                                 max_len=32)
    assert serial.keys() == forked.keys()
    for key, run in serial.items():
        assert torch.equal(run.accuracy, forked[key].accuracy), key
        assert torch.equal(run.on_previous, forked[key].on_previous), key
        assert torch.equal(run.model.last_weights, forked[key].model.last_weights), key


def _lesson_04_readings(seeds: range) -> dict[str, list[float]]:
    """Per seed, every number lesson 04's training claims read (sections 6 to 8), for `seeds`."""
    config = dict(vocab_size=16, max_len=64, d_model=32)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in the lesson
    try:
        runs = previous_token_runs(["learned", "sinusoidal", "rope", "alibi"], seeds, 8, 48, workers=2,
                                   **config)
        free = previous_token_runs(["alibi"], seeds, 8, 48, learned_slope=True, workers=2, **config)
        none = previous_token_runs(["none"], seeds, 8, 8, workers=2, **config)
    finally:
        torch.set_num_threads(threads)
    t = torch.arange(48)
    too_far = (t[:, None] - t[None, :]) > 7  # (T, S): offsets never trained on

    def each(kind: str, reading, found=runs) -> list[float]:
        return [float(reading(found[kind, seed])) for seed in seeds]

    def unseen(run) -> float:
        return float((run.model.last_weights[:, 0].double() * too_far).sum(-1).mean(0)[32:].mean())

    r = {f"{kind} worst 1-7": each(kind, lambda run: run.accuracy[:7].min())
         for kind in ("learned", "sinusoidal", "rope")}
    r.update({f"{kind} mean 8-47": each(kind, lambda run: run.accuracy[7:].mean())
              for kind in ("learned", "sinusoidal", "alibi")})
    r["alibi mean 1-7"] = each("alibi", lambda run: run.accuracy[:7].mean())
    r["rope mean 8-15"] = each("rope", lambda run: run.accuracy[7:15].mean())
    r["rope mean 32-47"] = each("rope", lambda run: run.accuracy[31:].mean())
    r["rope weight 1-7"] = each("rope", lambda run: run.on_previous[:7].mean())
    r["rope weight 32-47"] = each("rope", lambda run: run.on_previous[31:].mean())
    r["rope unseen"], r["alibi unseen"] = each("rope", unseen), each("alibi", unseen)
    r["alibi weight 5-7"] = each("alibi", lambda run: run.on_previous[4:7].mean())
    r["alibi weight 32-47"] = each("alibi", lambda run: run.on_previous[31:].mean())
    r["learned slope"] = each("alibi", lambda run: run.model.positions.slope, free)
    r["learned slope worst 1-47"] = each("alibi", lambda run: run.accuracy.min(), free)
    r["none mean 1-7"] = each("none", lambda run: run.accuracy.mean(), none)
    r["none 2 minus 7"] = each("none", lambda run: run.accuracy[1] - run.accuracy[-1], none)
    return r


@pytest.mark.slow
def test_lesson_04_training_claims_hold_over_seeds_0_to_9_at_least_5_percent_inside_their_bounds():
    """Lesson 04 trains seeds 0-4 (its 10 s budget); issue 41 asks ranges from 10 seeds with no
    claim within 5% of its bound. Every bound here is the lesson's; margin as claims.Bound's."""
    r = _lesson_04_readings(range(10))
    mean = lambda values: sum(values) / len(values)
    difference = lambda a, b: [x - y for x, y in zip(r[a], r[b])]
    bounds = {  # the lesson's claims, section by section
        "learned table": at_least(min(r["learned worst 1-7"]), 0.85) & at_most(max(r["learned mean 8-47"]), 0.1),
        "sinusoidal table": at_least(min(r["sinusoidal worst 1-7"]), 0.85)
        & at_most(max(r["sinusoidal mean 8-47"]), 0.2),
        "ALiBi past the trained length": at_least(min(r["alibi mean 8-47"]), 0.85)
        & at_most(max(difference("alibi mean 1-7", "alibi mean 8-47")), 0.05),
        "RoPE on the trained positions": at_least(min(r["rope worst 1-7"]), 0.9)
        & at_least(mean(r["rope mean 8-15"]), 0.85),
        "RoPE fades": at_least(mean(difference("rope mean 8-15", "rope mean 32-47")), 0.2)
        & at_most(mean(r["rope mean 32-47"]), 0.8),
        "RoPE's weight on the previous token": at_least(min(r["rope weight 1-7"]), 0.85)
        & at_least(min(difference("rope weight 1-7", "rope weight 32-47")), 0.15)
        & at_most(mean(r["rope weight 32-47"]), 0.7),
        "weight at unseen offsets": at_least(min(r["rope unseen"]), 0.2) & at_least(mean(r["rope unseen"]), 0.3)
        & at_most(max(r["alibi unseen"]), 0.05),
        "ALiBi's weight on the previous token": at_least(min(r["alibi weight 32-47"]), 0.25)
        & at_most(max(r["alibi weight 32-47"]), 0.35)
        & at_most(max(abs(x) for x in difference("alibi weight 32-47", "alibi weight 5-7")), 0.03),
        "learned ALiBi slope": at_least(min(r["learned slope"]), 1.0) & at_least(min(r["learned slope worst 1-47"]), 0.9),
        "no positions": at_most(max(r["none mean 1-7"]), 0.6) & at_least(min(r["learned worst 1-7"]), 0.85),
        "no positions, falling": at_least(min(r["none 2 minus 7"]), 0.1),
    }
    close = {name: round(bound.margin, 3) for name, bound in bounds.items() if bound.margin < 0.05}
    assert not close, (close, r)
    assert _table_column("seeds 0-9 (test)") == _ten_seed_column(r)


def _ten_seed_column(r: dict[str, list[float]]) -> dict[str, str]:
    """What lesson 04's seeds table must print in its "seeds 0-9 (test)" column, row by row, from
    the readings of seeds 0-9: percentages to 0.1 (a whole one without ".0"), points to 0.1, weights
    and slopes to 3 significant digits."""
    mean = lambda values: sum(values) / len(values)
    difference = lambda a, b: [x - y for x, y in zip(r[a], r[b])]
    pct = lambda v: f"{100 * v:.1f}".removesuffix(".0")
    percents = lambda key: f"{pct(min(r[key]))}-{pct(max(r[key]))}%"
    points = lambda values: f"{100 * min(values):.1f}-{100 * max(values):.1f}"
    plain = lambda values: f"{min(values):.3g}-{max(values):.3g}"
    fades = difference("rope mean 8-15", "rope mean 32-47")
    return {
        "learned table: worst of 1-7; mean at 8-47 (6)": f"{percents('learned worst 1-7')}; {percents('learned mean 8-47')}",
        "sinusoidal table: worst of 1-7; mean at 8-47 (6)":
            f"{percents('sinusoidal worst 1-7')}; {percents('sinusoidal mean 8-47')}",
        "ALiBi: mean at 8-47; fall from 1-7 (6)":
            f"{percents('alibi mean 8-47')}; {points(difference('alibi mean 1-7', 'alibi mean 8-47'))}",
        "RoPE: worst of 1-7; mean at 8-15 (6)": f"{percents('rope worst 1-7')}; {pct(mean(r['rope mean 8-15']))}%",
        "RoPE fades: fall from 8-15 to 32-47; mean at 32-47 (6)":
            f"{points(fades)} (mean {100 * mean(fades):.1f}); {pct(mean(r['rope mean 32-47']))}%",
        "RoPE's weight on the previous token: at 1-7; drop (7)":
            f"{plain(r['rope weight 1-7'])}; {plain(difference('rope weight 1-7', 'rope weight 32-47'))}",
        "RoPE's weight on offsets past 7 (7)": percents("rope unseen"),
        "ALiBi's weight on the previous token at 32-47 (7)": plain(r["alibi weight 32-47"]),
        "learned ALiBi slope; worst of 1-47 (7)": f"{plain(r['learned slope'])}; {percents('learned slope worst 1-47')}",
        "no positions: mean over 1-7; position 2 minus 7 (8)": f"{percents('none mean 1-7')}; {points(r['none 2 minus 7'])}",
    }


def _table_column(column: str) -> dict[str, str]:
    """Lesson 04's seeds table (its "**Seeds.**" cell), first column -> the named column, as typed."""
    import nbformat

    notebook = nbformat.read(Path(__file__).parent.parent / "notebooks" / "04_positional_encoding.ipynb", as_version=4)
    cell = next(c.source for c in notebook.cells if c.cell_type == "markdown" and c.source.startswith("**Seeds.**"))
    rows = [[part.strip() for part in line.strip().strip("|").split("|")] for line in cell.splitlines()
            if line.startswith("|") and not line.startswith("|---")]
    at = rows[0].index(column)
    return {row[0]: row[at] for row in rows[1:]}
