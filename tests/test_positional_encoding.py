"""Lesson 04: sinusoidal, learned, rotary and ALiBi position encodings, checked independently."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from course_lib.positional_encoding import (
    LearnedPositionalEmbedding, SinusoidalPositionalEncoding, TinyPositionModel, alibi_bias, alibi_slopes,
    apply_rope, block_rotation, causal_mask, frequencies, previous_token_accuracy, shift_matrix,
    sinusoidal_dot, sinusoidal_encoding, train_previous_token, wavelength)
from exercise_harness import outcome

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


def complex_rope(x: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """RoPE as complex multiplication: pair j of row m is z_j * exp(i m c_j)."""
    d = x.shape[-1]
    z = torch.view_as_complex(x.to(torch.float64).reshape(*x.shape[:-1], d // 2, 2).contiguous())
    m = torch.arange(x.shape[-2], dtype=torch.float64)[:, None]
    theta = m * torch.tensor([base ** (-2 * j / d) for j in range(d // 2)], dtype=torch.float64)
    turned = z * torch.polar(torch.ones_like(theta), theta)  # (..., T, d/2)
    return torch.view_as_real(turned).flatten(-2).to(x.dtype)


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
    assert wavelength(512, 0) == pytest.approx(2 * math.pi)


def test_sinusoidal_accepts_a_tensor_of_positions_of_any_shape():
    positions = torch.tensor([[0, 5], [7, 3]])
    got = sinusoidal_encoding(positions, 8, dtype=torch.float64)
    assert got.shape == (2, 2, 8)
    table = loop_table(8, 8)
    torch.testing.assert_close(got, table[positions], atol=1e-12, rtol=0)


def test_float32_table_is_accurate_at_large_positions():
    # angles in float64 first: a float32 product pos * c would be off by ~1e-4 rad at pos 10^4
    got = sinusoidal_encoding(torch.tensor([10_000, 54_321]), 16, dtype=torch.float32)
    torch.testing.assert_close(got.double(), sinusoidal_encoding(torch.tensor([10_000, 54_321]), 16, dtype=torch.float64),
                               atol=1e-6, rtol=0)


@pytest.mark.parametrize("d_model", [2, 8, 64, 512])
def test_every_row_has_squared_norm_d_over_2(d_model):
    table = sinusoidal_encoding(200, d_model, dtype=torch.float64)
    torch.testing.assert_close(table.pow(2).sum(-1), torch.full((200,), d_model / 2, dtype=torch.float64))


# ---------------------------------------------------------------- PE(pos + k) = M_k PE(pos)

@pytest.mark.parametrize("d_model", [2, 16, 128])
def test_shift_matrix_maps_every_position_to_position_plus_k(d_model):
    table = sinusoidal_encoding(300, d_model, dtype=torch.float64)
    for k in [-50, -7, -1, 0, 1, 3, 25, 100]:
        positions = torch.arange(max(0, -k), 300 - max(k, 0))
        moved = table[positions] @ shift_matrix(k, d_model).T  # row-wise M_k @ PE(pos)
        torch.testing.assert_close(moved, table[positions + k], atol=1e-10, rtol=0)


def test_shift_matrix_is_the_seeds_addition_formula_and_a_rotation():
    d_model, k = 16, 9
    table = sinusoidal_encoding(40, d_model, dtype=torch.float64)
    m_k = shift_matrix(k, d_model)
    pe_k = table[k]
    # PE(pos+k, 2i) = PE(pos, 2i) PE(k, 2i+1) + PE(pos, 2i+1) PE(k, 2i), and the cos line likewise
    pos = 13
    sin_part = table[pos, 0::2] * pe_k[1::2] + table[pos, 1::2] * pe_k[0::2]
    cos_part = table[pos, 1::2] * pe_k[1::2] - table[pos, 0::2] * pe_k[0::2]
    torch.testing.assert_close(torch.stack([sin_part, cos_part], -1).flatten(), table[pos + k])
    torch.testing.assert_close(m_k @ m_k.T, torch.eye(d_model, dtype=torch.float64))
    torch.testing.assert_close(shift_matrix(4, d_model) @ shift_matrix(5, d_model), m_k)
    off_block = m_k.clone()
    for j in range(d_model // 2):
        off_block[2 * j:2 * j + 2, 2 * j:2 * j + 2] = 0
    assert off_block.abs().max() == 0


def test_block_rotation_turns_each_pair_counter_clockwise():
    angles = torch.tensor([math.pi / 2, math.pi], dtype=torch.float64)
    rot = block_rotation(angles, torch.tensor([1.0, 2.0]))
    torch.testing.assert_close(rot @ torch.tensor([1.0, 0.0, 1.0, 0.0], dtype=torch.float64),
                               torch.tensor([0.0, 1.0, -2.0, 0.0], dtype=torch.float64), atol=1e-15, rtol=0)


# ---------------------------------------------------------------- dot products

@pytest.mark.parametrize("d_model", [4, 64, 512])
def test_dot_product_depends_only_on_the_offset_and_not_its_sign(d_model):
    table = sinusoidal_encoding(400, d_model, dtype=torch.float64)
    for k in [0, 1, 2, 17, 99]:
        forward = (table[:400 - k] * table[k:]).sum(-1)  # PE_t . PE_{t+k} for every t
        torch.testing.assert_close(forward, sinusoidal_dot(k, d_model).expand_as(forward))
        torch.testing.assert_close(sinusoidal_dot(-k, d_model), sinusoidal_dot(k, d_model))
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
    scores = table @ learned @ table.T  # (T, S): PE_t^T A PE_s
    for k in [1, 5, 20]:
        along = torch.diagonal(scores, offset=k)
        assert float(along.max() - along.min()) < 1e-10
        assert abs(float(along[0] - torch.diagonal(scores, offset=-k)[0])) > 1e-3
    generic = torch.randn(d_model, d_model, generator=gen, dtype=torch.float64)
    assert float(torch.diagonal(table @ generic @ table.T, offset=3).std()) > 0.1


# ---------------------------------------------------------------- modules with a table

@pytest.mark.parametrize("dtype", DTYPES)
def test_sinusoidal_module_adds_the_table(dtype):
    x = torch.randn(3, 7, 10, generator=torch.Generator().manual_seed(1), dtype=dtype)
    got = SinusoidalPositionalEncoding(10, max_len=12)(x)
    torch.testing.assert_close(got, x + sinusoidal_encoding(7, 10, dtype=dtype))


def test_learned_module_is_an_embedding_lookup_of_positions():
    torch.manual_seed(0)
    module = LearnedPositionalEmbedding(max_len=9, d_model=6)
    x = torch.randn(2, 5, 6)
    torch.testing.assert_close(module(x), x + F.embedding(torch.arange(5), module.table.weight))
    torch.testing.assert_close(module(x), x + module.table(torch.arange(5)))


# ---------------------------------------------------------------- RoPE

@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("dtype", DTYPES)
def test_rope_matches_complex_multiplication(seed, dtype):
    gen = torch.Generator().manual_seed(seed)
    d = 2 * int(torch.randint(1, 17, (), generator=gen))
    shape = (int(torch.randint(1, 4, (), generator=gen)), int(torch.randint(1, 30, (), generator=gen)), d)
    x = torch.randn(shape, generator=gen, dtype=dtype)
    torch.testing.assert_close(apply_rope(x), complex_rope(x), atol=TOL[dtype] * 10, rtol=TOL[dtype])


def test_rope_row_m_is_the_block_rotation_by_m_c():
    x = torch.randn(12, 8, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    got = apply_rope(x)
    for m in range(12):
        torch.testing.assert_close(got[m], block_rotation(m * frequencies(8)) @ x[m])


def test_rope_with_explicit_positions_equals_rows_of_a_longer_sequence():
    x = torch.randn(30, 8, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    positions = torch.tensor([3, 17, 29])
    torch.testing.assert_close(apply_rope(x[positions], positions), apply_rope(x)[positions])


@pytest.mark.parametrize("dtype", DTYPES)
def test_rope_score_depends_only_on_m_minus_n_and_not_its_sign(dtype):
    gen = torch.Generator().manual_seed(5)
    q, k = torch.randn(16, generator=gen, dtype=dtype), torch.randn(16, generator=gen, dtype=dtype)
    length = 40
    scores = apply_rope(q.expand(length, 16)) @ apply_rope(k.expand(length, 16)).T  # (T, T)
    for offset in range(-10, 11):
        along = torch.diagonal(scores, offset=offset)
        assert float(along.max() - along.min()) < 50 * TOL[dtype] * float(q.norm() * k.norm())
    assert abs(float(scores[10, 13] - scores[13, 10])) > 1e-2  # +3 and -3 differ for these q, k
    same = apply_rope(q.expand(length, 16)) @ apply_rope(q.expand(length, 16)).T
    torch.testing.assert_close(same, same.T)  # q = k: symmetric


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

def torch_reference_forward(model: TinyPositionModel, tokens: torch.Tensor) -> torch.Tensor:
    """The same model, with torch's own F.scaled_dot_product_attention and nn.Embedding lookups."""
    length = tokens.shape[1]
    x = model.tokens(tokens)
    if model.position == "learned":
        x = x + model.learned.table(torch.arange(length))
    if model.position == "sinusoidal":
        x = x + loop_table(length, x.shape[-1]).to(x.dtype)
    q, k, v = model.q(x), model.k(x), model.v(x)
    if model.position == "rope":
        q, k = complex_rope(q), complex_rope(k)
    bias = torch.zeros(length, length).masked_fill(~torch.ones(length, length, dtype=torch.bool).tril(), float("-inf"))
    if model.position == "alibi":
        t = torch.arange(length)
        bias = bias - model.alibi_slope * (t[:, None] - t[None, :]).clamp_min(0)
    return model.readout(F.scaled_dot_product_attention(q, k, v, attn_mask=bias))


@pytest.mark.parametrize("position", ["none", "learned", "sinusoidal", "rope", "alibi"])
def test_tiny_model_matches_torch_scaled_dot_product_attention(position):
    torch.manual_seed(0)
    model = TinyPositionModel(11, 12, position, max_len=20, alibi_slope=0.7)
    tokens = torch.randint(11, (3, 15), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(model(tokens), torch_reference_forward(model, tokens), atol=1e-5, rtol=1e-5)


def test_causal_mask_lets_each_query_see_itself_and_the_past():
    assert causal_mask(3).tolist() == [[True, False, False], [True, True, False], [True, True, True]]


def test_learned_rows_past_the_trained_length_never_move_and_accuracy_falls_to_chance():
    torch.manual_seed(0)
    untouched = TinyPositionModel(16, 32, "learned", max_len=64).learned.table.weight.detach().clone()
    model, loss = train_previous_token("learned", train_length=8, max_len=64, seed=0)
    table = model.learned.table.weight.detach()
    assert torch.equal(table[8:], untouched[8:])  # same seed, same init: rows 8.. got no gradient
    assert not torch.equal(table[:8], untouched[:8])
    accuracy = previous_token_accuracy(model, 32)
    assert loss < 0.05 and float(accuracy[:7].min()) > 0.95
    assert float(accuracy[8:].mean()) < 0.15  # chance is 1/16


def test_alibi_model_keeps_its_accuracy_past_the_trained_length():
    model, _ = train_previous_token("alibi", train_length=8, seed=0)
    assert float(previous_token_accuracy(model, 48)[8:].mean()) > 0.95


# ---------------------------------------------------------------- bad input

@pytest.mark.parametrize("call", [
    lambda: sinusoidal_encoding(5, 7),
    lambda: frequencies(3),
    lambda: shift_matrix(1, 5),
    lambda: sinusoidal_dot(1, 9),
    lambda: SinusoidalPositionalEncoding(11, 4),
    lambda: apply_rope(torch.randn(4, 5)),
])
def test_odd_width_is_refused_by_name(call):
    with pytest.raises(ValueError, match=r"must be an even number >= 2 .*got .*=(7|3|5|9|11)"):
        call()


def test_zero_width_and_non_int_width_are_refused():
    with pytest.raises(ValueError, match="d_model=0"):
        sinusoidal_encoding(3, 0)
    with pytest.raises(TypeError, match="d_model must be an int, got float"):
        sinusoidal_encoding(3, 8.0)


def test_negative_positions_are_refused_with_the_value():
    with pytest.raises(ValueError, match=r"positions must be >= 0 .*minimum of -2 in positions of shape \(3,\)"):
        sinusoidal_encoding(torch.tensor([0, -2, 4]), 8)
    with pytest.raises(ValueError, match="number of positions must be >= 0, got positions=-1"):
        sinusoidal_encoding(-1, 8)
    with pytest.raises(ValueError, match="minimum of -1"):
        apply_rope(torch.randn(3, 4), torch.tensor([-1, 0, 1]))


def test_float_positions_are_refused():
    with pytest.raises(TypeError, match="positions must hold integers .*got dtype torch.float32"):
        sinusoidal_encoding(torch.tensor([0.0, 1.5]), 8)
    with pytest.raises(TypeError, match="offsets must be integers"):
        sinusoidal_dot(torch.tensor([0.5]), 8)
    with pytest.raises(TypeError, match="k must be an int offset, got float"):
        shift_matrix(1.0, 8)


@pytest.mark.parametrize("module, kind", [(SinusoidalPositionalEncoding(8, max_len=6), "sinusoidal table"),
                                          (LearnedPositionalEmbedding(max_len=6, d_model=8), "learned position table")])
def test_sequences_longer_than_max_len_get_a_clear_error(module, kind):
    with pytest.raises(ValueError, match=rf"sequence length T=9 is longer than max_len=6 of this {kind}: .*"
                                         r"positions 0\.\.5 only, so positions 6\.\.8 have no encoding"):
        module(torch.zeros(2, 9, 8))


def test_the_tiny_model_refuses_sequences_past_its_table():
    model = TinyPositionModel(5, 8, "learned", max_len=8)
    with pytest.raises(ValueError, match="T=12 is longer than max_len=8"):
        model(torch.zeros(1, 12, dtype=torch.long))


def test_width_mismatch_in_modules_names_the_shape():
    with pytest.raises(ValueError, match=r"x of shape \(2, 3, 5\) must end in d_model=8"):
        SinusoidalPositionalEncoding(8, 10)(torch.zeros(2, 3, 5))
    with pytest.raises(ValueError, match=r"x of shape \(2, 3, 5\) must end in d_model=8"):
        LearnedPositionalEmbedding(10, 8)(torch.zeros(2, 3, 5))


def test_rope_bad_input():
    with pytest.raises(TypeError, match="x must be a torch.Tensor, got list"):
        apply_rope([[1.0, 2.0]])
    with pytest.raises(TypeError, match="x must be a floating-point tensor"):
        apply_rope(torch.zeros(3, 4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"x must have at least 2 dimensions, got shape \(4,\)"):
        apply_rope(torch.zeros(4))
    with pytest.raises(ValueError, match=r"positions of shape \(2,\) must have one entry per row of x: x has shape \(3, 4\)"):
        apply_rope(torch.zeros(3, 4), torch.tensor([0, 1]))


def test_other_bad_arguments():
    with pytest.raises(ValueError, match="position must be one of"):
        TinyPositionModel(5, 8, "relative")
    with pytest.raises(ValueError, match="train_length=80, max_len=64"):
        train_previous_token("learned", train_length=80)
    with pytest.raises(ValueError, match="max_len must be a positive int, got max_len=0"):
        LearnedPositionalEmbedding(0, 8)
    with pytest.raises(ValueError, match="max_len must be a positive int, got max_len=-3"):
        SinusoidalPositionalEncoding(8, -3)
    with pytest.raises(ValueError, match="n_heads must be a positive int, got n_heads=0"):
        alibi_slopes(0)
    with pytest.raises(ValueError, match=r"scales of shape \(3,\) must match angles of shape \(2,\)"):
        block_rotation(torch.zeros(2), torch.ones(3))
    with pytest.raises(ValueError, match="base must be positive, got -1"):
        frequencies(8, base=-1.0)
    with pytest.raises(ValueError, match=r"tokens must have 2 dimensions, got shape \(4,\)"):
        TinyPositionModel(5, 8, "none")(torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"tokens must be ids in 0..4, got values from 0 to 7 in tokens of shape \(1, 3\)"):
        TinyPositionModel(5, 8, "none")(torch.tensor([[0, 7, 2]]))
    with pytest.raises(TypeError, match="tokens must be integer ids, got dtype torch.float32"):
        TinyPositionModel(5, 8, "none")(torch.zeros(1, 3))
    with pytest.raises(ValueError, match="d_model must be an even number >= 2 .*got d_model=7"):
        TinyPositionModel(5, 7, "rope")
    with pytest.raises(ValueError, match=r"pair index j=4 is out of range: d_model=8 has pairs 0..3"):
        wavelength(8, 4)


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


# ---------------------------------------------------------------- exercise set 04: known-wrong answers

SET = "04_positional_encoding"

MUTANTS = {
    "sinusoidal_table": {
        "sin and cos swapped": "def sinusoidal_table(n_positions, d_model):\n"
                               "    a = torch.arange(n_positions)[:, None] / 10000 ** (torch.arange(0, d_model, 2) / d_model)\n"
                               "    return torch.stack([a.cos(), a.sin()], -1).reshape(n_positions, d_model).float()",
        "sines first, then cosines": "def sinusoidal_table(n_positions, d_model):\n"
                                     "    a = torch.arange(n_positions)[:, None] / 10000 ** (torch.arange(0, d_model, 2) / d_model)\n"
                                     "    return torch.cat([a.sin(), a.cos()], -1).float()",
        "exponent from the coordinate index": "def sinusoidal_table(n_positions, d_model):\n"
                                              "    i = torch.arange(d_model)\n"
                                              "    a = torch.arange(n_positions)[:, None] / 10000 ** (i / d_model)\n"
                                              "    return torch.where(i % 2 == 0, a.sin(), a.cos()).float()",
        "calls the course reference": "from course_lib.positional_encoding import sinusoidal_encoding as pe\n"
                                      "def sinusoidal_table(n_positions, d_model):\n    return pe(n_positions, d_model)",
    },
    "offset_rotation": {
        "turns the wrong way": "def offset_rotation(k, d_model):\n    m = torch.zeros(d_model, d_model)\n"
                               "    for j in range(d_model // 2):\n        b = k * 10000 ** (-2 * j / d_model)\n"
                               "        m[2*j:2*j+2, 2*j:2*j+2] = torch.tensor([[math.cos(b), -math.sin(b)], [math.sin(b), math.cos(b)]])\n"
                               "    return m",
        "forgot to multiply by k": "def offset_rotation(k, d_model):\n    m = torch.zeros(d_model, d_model)\n"
                                   "    for j in range(d_model // 2):\n        b = 10000 ** (-2 * j / d_model)\n"
                                   "        m[2*j:2*j+2, 2*j:2*j+2] = torch.tensor([[math.cos(b), math.sin(b)], [-math.sin(b), math.cos(b)]])\n"
                                   "    return m",
        "one frequency for every pair": "def offset_rotation(k, d_model):\n    m = torch.zeros(d_model, d_model)\n"
                                        "    for j in range(d_model // 2):\n        b = k\n"
                                        "        m[2*j:2*j+2, 2*j:2*j+2] = torch.tensor([[math.cos(b), math.sin(b)], [-math.sin(b), math.cos(b)]])\n"
                                        "    return m",
        "calls the course reference": "from course_lib import positional_encoding as lib\n"
                                      "def offset_rotation(k, d_model):\n    return lib.shift_matrix(k, d_model)",
    },
    "rope_rotate": {
        "turns by -m c_j": "def rope_rotate(x):\n    T, d = x.shape[-2:]\n"
                           "    th = -torch.arange(T)[:, None] * 10000 ** (-torch.arange(0, d, 2) / d)\n"
                           "    e, o = x[..., 0::2], x[..., 1::2]\n"
                           "    return torch.stack([e * th.cos() - o * th.sin(), e * th.sin() + o * th.cos()], -1).flatten(-2)",
        "pairs (x_j, x_j+d/2)": "def rope_rotate(x):\n    T, d = x.shape[-2:]\n"
                                "    th = torch.arange(T)[:, None] * 10000 ** (-torch.arange(0, d, 2) / d)\n"
                                "    e, o = x[..., :d // 2], x[..., d // 2:]\n"
                                "    return torch.cat([e * th.cos() - o * th.sin(), e * th.sin() + o * th.cos()], -1)",
        "positions start at 1": "def rope_rotate(x):\n    T, d = x.shape[-2:]\n"
                                "    th = torch.arange(1, T + 1)[:, None] * 10000 ** (-torch.arange(0, d, 2) / d)\n"
                                "    e, o = x[..., 0::2], x[..., 1::2]\n"
                                "    return torch.stack([e * th.cos() - o * th.sin(), e * th.sin() + o * th.cos()], -1).flatten(-2)",
        "calls the course reference": "from course_lib.positional_encoding import apply_rope\n"
                                      "def rope_rotate(x):\n    return apply_rope(x)",
    },
    "add_learned_positions": {
        "no length check": "def add_learned_positions(x, table):\n    return x + table[:x.shape[-2]]",
        "positions wrap around": "def add_learned_positions(x, table):\n"
                                 "    return x + table[torch.arange(x.shape[-2]) % table.shape[0]]",
        "row 0 at every position": "def add_learned_positions(x, table):\n"
                                   "    if x.shape[-2] > table.shape[0]:\n"
                                   "        raise ValueError(f'length {x.shape[-2]} > {table.shape[0]} rows')\n"
                                   "    return x + table[0]",
        "message without the numbers": "def add_learned_positions(x, table):\n"
                                       "    if x.shape[-2] > table.shape[0]:\n        raise ValueError('sequence too long')\n"
                                       "    return x + table[:x.shape[-2]]",
        "calls the course reference": "from course_lib.positional_encoding import LearnedPositionalEmbedding as L\n"
                                      "def add_learned_positions(x, table):\n    m = L(table.shape[0], table.shape[1])\n"
                                      "    m.table.weight.data = table\n    return m(x).detach()",
    },
}


@pytest.mark.parametrize("exercise,mutant", [(e, m) for e, ms in MUTANTS.items() for m in ms
                                             if not m.startswith(("calls", "message"))])
def test_visible_check_names_a_likely_bug(exercise, mutant):
    result = outcome(SET, exercise, MUTANTS[exercise][mutant])
    assert any("Likely bug" in message for message in result.messages), result.messages
