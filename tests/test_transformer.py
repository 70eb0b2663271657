"""Lesson 09: the Transformer, checked against torch's own modules and independent computations."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
from pathlib import Path

import pytest
import torch
from torch import nn

from course_lib.claims import at_least, at_most, fmt
from course_lib.masks import causal_mask, padding_mask
from course_lib.measure import OperationCounter
from course_lib.model import DecoderOnly, EncoderDecoder, ModelConfig, Positions
from course_lib.torch_copy import from_torch
from course_lib.positional_encoding import ALiBiPositions, RotaryPositions, SinusoidalPositionalEncoding
from course_lib.transformer import (
    BOS,
    SEP,
    Block,
    FeedForward,
    decoder_only,
    depth_probe,
    exact_match,
    final_losses,
    greedy_decode,
    hand_set_reverser,
    held_out_accuracy,
    is_held_out,
    joined,
    mask_effect,
    parameter_counts,
    position_probe,
    rank_one_residual,
    roughly,
    sequence_loss,
    task_answer,
    time_block_vs_rnn,
    time_one_pass_vs_steps,
    token_accuracy,
    toy_batch,
    train_seeds,
    train_transformer,
    transformer,
    transformer_config,
    unmasked_logits,
)

D, H, FF = 16, 4, 24


def config(norm_first: bool = False, **changes) -> ModelConfig:
    """Lesson 09's config at this file's sizes; norm_first as torch's layers say it."""
    return transformer_config(**{"d_model": D, "n_heads": H, "d_ff": FF, "norm": "pre" if norm_first else "post",
                                 **changes})


def torch_layer(kind: str, norm_first: bool) -> nn.Module:
    make = nn.TransformerEncoderLayer if kind == "encoder" else nn.TransformerDecoderLayer
    return make(D, H, FF, dropout=0.0, activation="relu", batch_first=True, norm_first=norm_first).double()


def randomize(module: nn.Module, seed: int) -> None:
    """Non-trivial norms and biases, so a swapped gamma/beta or a missing bias shows."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * 0.5 + (1.0 if p.dim() == 1 else 0.0))


def assert_same_gradients(mine: nn.Module, theirs_grads: list[torch.Tensor], mine_grads: list[torch.Tensor]):
    for a, b in zip(mine_grads, theirs_grads):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-10)


# ---------------------------------------------------------------- blocks against torch's layers

@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_encoder_block_equals_torch_encoder_layer_outputs_and_gradients(norm_first, seed):
    theirs = torch_layer("encoder", norm_first)
    randomize(theirs, seed)
    mine = Block(config(norm_first=norm_first), cross=False).double()
    from_torch(mine, theirs)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 6, D, generator=gen, dtype=torch.float64, requires_grad=True)
    upstream = torch.randn(3, 6, D, generator=gen, dtype=torch.float64)
    lengths = torch.tensor([6, 4, 1])
    real = padding_mask(lengths, 6)  # (B, 1, S), True = real
    out_theirs = theirs(x, src_key_padding_mask=~real[:, 0])
    out_mine = mine(x, real[:, None])[0]  # (B, 1, 1, S): the same for every head
    keep = real[:, 0, :, None]  # torch's fast paths may leave padded rows as they like: compare real rows
    torch.testing.assert_close(out_mine * keep, out_theirs * keep, atol=1e-12, rtol=1e-12)
    g_theirs = torch.autograd.grad((out_theirs * keep * upstream).sum(), [x, *theirs.parameters()])
    g_mine = torch.autograd.grad((out_mine * keep * upstream).sum(), [x, *mine.parameters()])
    torch.testing.assert_close(g_mine[0], g_theirs[0], atol=1e-10, rtol=1e-10)
    # the parameters in torch's order: in_proj (q, k, v stacked), out_proj, linear1, linear2, norm1, norm2
    assert sum(p.numel() for p in mine.parameters()) == sum(p.numel() for p in theirs.parameters())
    by_name = dict(zip([n for n, _ in theirs.named_parameters()], g_theirs[1:]))
    mine_named = dict(zip([n for n, _ in mine.named_parameters()], g_mine[1:]))
    q, _, v = by_name["self_attn.in_proj_weight"].chunk(3)
    torch.testing.assert_close(mine_named["attention.query.weight"], q, atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(mine_named["attention.value.weight"], v, atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(mine_named["ffn.linear1.weight"], by_name["linear1.weight"], atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(mine_named["ffn_norm.weight"], by_name["norm2.weight"], atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_decoder_block_equals_torch_decoder_layer_outputs_and_gradients(norm_first, seed):
    theirs = torch_layer("decoder", norm_first)
    randomize(theirs, seed)
    mine = Block(config(norm_first=norm_first), cross=True).double()
    from_torch(mine, theirs)
    gen = torch.Generator().manual_seed(10 + seed)
    y = torch.randn(2, 5, D, generator=gen, dtype=torch.float64, requires_grad=True)
    memory = torch.randn(2, 7, D, generator=gen, dtype=torch.float64, requires_grad=True)
    upstream = torch.randn(2, 5, D, generator=gen, dtype=torch.float64)
    real = padding_mask([7, 3], 7)
    out_theirs = theirs(y, memory, tgt_mask=~causal_mask(5), memory_key_padding_mask=~real[:, 0])
    out_mine = mine(y, causal_mask(5), memory, real[:, None])[0]
    torch.testing.assert_close(out_mine, out_theirs, atol=1e-12, rtol=1e-12)
    g_theirs = torch.autograd.grad((out_theirs * upstream).sum(), [y, memory, *theirs.parameters()])
    g_mine = torch.autograd.grad((out_mine * upstream).sum(), [y, memory, *mine.parameters()])
    for a, b in zip(g_mine[:2], g_theirs[:2]):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-10)
    flat_mine = torch.cat([g.flatten() for g in g_mine[2:]]).abs().sort().values
    flat_theirs = torch.cat([g.flatten() for g in g_theirs[2:]]).abs().sort().values
    torch.testing.assert_close(flat_mine, flat_theirs, atol=1e-10, rtol=1e-10)  # same multiset of gradients


@pytest.mark.parametrize("norm_first", [False, True])
def test_model_core_equals_nn_transformer_outputs_and_gradients(norm_first):
    theirs = nn.Transformer(D, H, 2, 2, FF, dropout=0.0, batch_first=True, norm_first=norm_first).double()
    randomize(theirs, 3)
    model = transformer(config(n_encoder_layers=2, n_decoder_layers=2, norm_first=norm_first)).double()
    from_torch(model, theirs)
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(3, 6, D, generator=gen, dtype=torch.float64, requires_grad=True)
    y = torch.randn(3, 4, D, generator=gen, dtype=torch.float64, requires_grad=True)
    upstream = torch.randn(3, 4, D, generator=gen, dtype=torch.float64)
    real = padding_mask([6, 2, 5], 6)
    out_theirs = theirs(x, y, tgt_mask=~causal_mask(4), src_key_padding_mask=~real[:, 0],
                        memory_key_padding_mask=~real[:, 0])
    out_mine = model.decode(y, model.encode(x, real[:, 0]), real[:, 0])[0]
    torch.testing.assert_close(out_mine, out_theirs, atol=1e-12, rtol=1e-12)
    core = [p for n, p in model.named_parameters() if n.split(".")[0] in ("encoder", "decoder", "encoder_norm",
                                                                          "decoder_norm")]
    g_theirs = torch.autograd.grad((out_theirs * upstream).sum(), [x, y, *theirs.parameters()])
    g_mine = torch.autograd.grad((out_mine * upstream).sum(), [x, y, *core])
    for a, b in zip(g_mine[:2], g_theirs[:2]):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(sum(g.abs().sum() for g in g_mine[2:]), sum(g.abs().sum() for g in g_theirs[2:]),
                               atol=1e-8, rtol=1e-10)
    assert sum(p.numel() for p in core) == sum(p.numel() for p in theirs.parameters())


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_only_block_is_torch_encoder_layer_with_a_causal_mask(norm_first):
    theirs = torch_layer("encoder", norm_first)
    randomize(theirs, 5)
    mine = Block(config(norm_first=norm_first), cross=False).double()
    from_torch(mine, theirs)
    x = torch.randn(2, 7, D, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    torch.testing.assert_close(mine(x, causal_mask(7))[0], theirs(x, src_mask=~causal_mask(7)), atol=1e-12, rtol=1e-12)


def test_decoder_only_model_is_causal_and_uses_the_same_block():
    made = config(n_decoder_layers=2, vocab_size=9)
    model = DecoderOnly(made, SinusoidalPositionalEncoding(made.max_len, D)).double()
    assert all(type(b) is Block and b.cross_attention is None for b in model.layers)
    ids = torch.randint(9, (3, 8), generator=torch.Generator().manual_seed(0))
    changed = ids.clone()
    changed[:, 5:] = (changed[:, 5:] + 1) % 9
    a, b = model(ids), model(changed)
    torch.testing.assert_close(a[:, :5], b[:, :5], atol=0, rtol=0)
    assert (a[:, 5:] - b[:, 5:]).abs().max() > 1e-3


def test_feed_forward_acts_on_each_token_alone():
    ffn = FeedForward(D, FF).double()
    x = torch.randn(2, 5, D, dtype=torch.float64)
    by_hand = torch.clamp(x @ ffn.linear1.weight.T + ffn.linear1.bias, min=0) @ ffn.linear2.weight.T + ffn.linear2.bias
    torch.testing.assert_close(ffn(x), by_hand, atol=1e-12, rtol=0)
    torch.testing.assert_close(ffn(x[:, 2:3]), ffn(x)[:, 2:3], atol=1e-12, rtol=0)


@pytest.mark.parametrize("norm_first", [False, True])
def test_block_without_residual_is_the_sublayers_chained(norm_first):
    block = Block(config(norm_first=norm_first, residual=False), cross=False).double()
    randomize(block, 6)
    x = torch.randn(2, 5, D, dtype=torch.float64)
    n1, n2 = block.attention_norm, block.ffn_norm
    if norm_first:
        h = block.attention(n1(x))[0]
        expected = block.ffn(n2(h))
    else:
        h = n1(block.attention(x)[0])
        expected = n2(block.ffn(h))
    torch.testing.assert_close(block(x)[0], expected, atol=1e-12, rtol=0)


# ---------------------------------------------------------------- the model: causality, padding, decoding

def test_decoder_is_causal_and_padding_is_invisible():
    model = transformer(config(vocab_size=7)).double()
    gen = torch.Generator().manual_seed(1)
    src, tgt = torch.randint(7, (3, 6), generator=gen), torch.randint(7, (3, 5), generator=gen)
    base = model(src, tgt)
    later = tgt.clone()
    later[:, 3:] = (later[:, 3:] + 1) % 7
    torch.testing.assert_close(model(src, later)[:, :3], base[:, :3], atol=0, rtol=0)
    real = padding_mask(torch.tensor([6, 4, 2]), 6)[:, 0]  # (B, S), True = real token
    padded = src.clone()
    padded[1, 4:], padded[2, 2:] = 5, 1  # change only the padding
    torch.testing.assert_close(model(padded, tgt, real), model(src, tgt, real), atol=1e-14, rtol=0)
    assert (model(padded, tgt) - model(src, tgt)).abs().max() > 1e-3  # without the mask it shows


def test_greedy_decoding_equals_the_parallel_pass_on_its_own_prefix():
    model = transformer(config(vocab_size=11)).double()
    src = torch.randint(1, 11, (5, 8), generator=torch.Generator().manual_seed(2))
    decoded = greedy_decode(model, src, 8)
    assert decoded.tokens.shape == (5, 8) and decoded.cross_weights.shape == (5, H, 8, 8)  # (B, H, T, S)
    torch.testing.assert_close(decoded.tokens, decoded.logits.argmax(-1), atol=0, rtol=0)
    tgt_in = torch.cat([torch.full((5, 1), BOS), decoded.tokens[:, :-1]], 1)
    torch.testing.assert_close(model(src, tgt_in), decoded.logits, atol=1e-12, rtol=0)
    torch.testing.assert_close(decoded.cross_weights.sum(-1), torch.ones(5, H, 8, dtype=torch.float64))


def test_without_the_causal_mask_only_the_last_row_is_the_masked_passs():
    model = transformer(config(vocab_size=11)).double()
    gen = torch.Generator().manual_seed(3)
    src, tgt_in = (torch.randint(1, 11, (5, n), generator=gen) for n in (6, 8))
    masked, unmasked = model(src, tgt_in), unmasked_logits(model, src, tgt_in)  # (B, T, V)
    torch.testing.assert_close(unmasked[:, -1], masked[:, -1], atol=1e-12, rtol=0)  # sees all either way
    assert (unmasked[:, :-1] - masked[:, :-1]).abs().amax(-1).min() > 1e-6  # every earlier row sees later ones
    changed = tgt_in.clone()
    changed[:, -1] = changed[:, -1] % 10 + 1  # only the last target token changes
    assert (unmasked_logits(model, src, changed)[:, 0] - unmasked[:, 0]).abs().max() > 1e-6
    with pytest.raises(TypeError, match="model must be an EncoderDecoder"):
        unmasked_logits(gpt(), src, tgt_in)
    with pytest.raises(ValueError, match="must have the same batch size"):
        unmasked_logits(model, src, tgt_in[:2])


def test_token_accuracy_without_source_positions_loses_the_order():
    model = hand_set_reverser()  # reads source position 7 - t: only positions tell which
    batch = toy_batch("reverse", 200, 8, 10, torch.Generator().manual_seed(4), held_out=True)
    assert token_accuracy(model, batch) == 1.0
    blind = token_accuracy(model, batch, source_positions=False)
    assert blind < 0.4  # about the chance that a random source symbol is the right one
    with pytest.raises(TypeError, match="batch must be a Batch"):
        token_accuracy(model, batch.src)
    with pytest.raises(TypeError, match="source_positions must be"):
        token_accuracy(model, batch, source_positions=1)


@pytest.mark.parametrize("norm_first", [False, True])
def test_cached_decoding_equals_recomputing_every_prefix(norm_first):
    model = transformer(config(vocab_size=11, n_encoder_layers=2, n_decoder_layers=3,
                               norm_first=norm_first)).double()
    for part in (model.encoder, model.decoder):  # biases and norms not at their initial values,
        randomize(part, 8)  # so a lost one shows
    src = torch.randint(1, 11, (4, 8), generator=torch.Generator().manual_seed(8))
    full, cached = greedy_decode(model, src, 10), greedy_decode(model, src, 10, cache=True)
    torch.testing.assert_close(cached.tokens, full.tokens, atol=0, rtol=0)
    torch.testing.assert_close(cached.logits, full.logits, atol=1e-12, rtol=0)
    torch.testing.assert_close(cached.cross_weights, full.cross_weights, atol=1e-12, rtol=0)
    assert (full.logits[:, 1:] - full.logits[:, :1]).abs().max() > 1e-5  # every step's row differs
    assert (full.logits[1:] - full.logits[:1]).abs().max() > 1e-3  # and every source's
    hand = hand_set_reverser(length=8)  # a decoding whose tokens vary: the cache reverses too
    assert torch.equal(greedy_decode(hand, src, 8, cache=True).tokens, src.flip(-1))


def test_decode_with_a_cache_takes_the_target_in_pieces():
    model = transformer(config(vocab_size=11, n_decoder_layers=2)).double()
    gen = torch.Generator().manual_seed(9)
    src = torch.randint(1, 11, (3, 6), generator=gen)
    tgt = torch.randint(0, 11, (3, 9), generator=gen)
    real = padding_mask(torch.tensor([6, 4, 2]), 6)[:, 0]
    memory = model.encode(model.embed(src), real)
    caches = [({}, {}) for _ in model.decoder]
    with torch.no_grad():
        pieces = [model.decode(model.embed(tgt[:, a:b], a), memory, real, caches)[0]
                  for a, b in ((0, 4), (4, 5), (5, 9))]
        whole = model.decode(model.embed(tgt), memory, real)[0]
    torch.testing.assert_close(torch.cat(pieces, 1), whole, atol=1e-12, rtol=0)
    assert caches[0][0]["k"].shape[-2] == 9 and caches[0][1]["k"].shape[-2] == 6  # every key kept once


def test_greedy_decoding_reads_a_padded_source_as_the_unpadded_one():
    """A source padded at the end, with its padding passed, decodes as the same source unpadded:
    the same tokens, logits and cross-attention on the real positions, none on the padding."""
    model = transformer(config(vocab_size=11, n_decoder_layers=2)).double()
    randomize(model.decoder, 2)
    gen = torch.Generator().manual_seed(12)
    src = torch.randint(1, 11, (1, 5), generator=gen)
    padded = torch.cat([src, torch.randint(1, 11, (1, 3), generator=gen)], 1)  # 3 padding tokens
    real = torch.tensor([[True] * 5 + [False] * 3])
    for cache in (False, True):
        alone, with_padding = greedy_decode(model, src, 6, cache), greedy_decode(model, padded, 6, cache, real)
        assert torch.equal(alone.tokens, with_padding.tokens)
        torch.testing.assert_close(with_padding.logits, alone.logits, atol=1e-12, rtol=0)
        torch.testing.assert_close(with_padding.cross_weights[..., :5], alone.cross_weights, atol=1e-12, rtol=0)
        assert (with_padding.cross_weights[..., 5:] == 0).all()
    assert not torch.equal(greedy_decode(model, padded, 6).logits, alone.logits)  # unmasked, the padding is read
    # the (B, 1, S) mask that encode, decode and forward take decodes the same
    assert torch.equal(greedy_decode(model, padded, 6, src_mask=real[:, None]).logits,
                       greedy_decode(model, padded, 6, src_mask=real).logits)


def test_lesson_02s_counter_counts_the_transformers_multiply_adds_and_the_cache_saves_some():
    model = transformer(config(vocab_size=11)).double()
    src = torch.randint(1, 11, (2, 5), generator=torch.Generator().manual_seed(0))
    tgt = torch.zeros(2, 3, dtype=torch.long)
    # linear layers: encoder block, 4 projections (D x D) and the FFN (2 D FF) on 2 x 5 rows;
    # decoder block, self-attention's 4 and cross-attention's query and out on 2 x 3 rows, its
    # key and value on the 2 x 5 memory rows, the FFN and the read-out (D x 11) on 2 x 3 rows
    linear = (10 * (4 * D * D + 2 * D * FF) + 6 * (6 * D * D + 2 * D * FF + 11 * D)
              + 10 * 2 * D * D)
    # attention: scores and weighted sum, each (positions x keys x D) per sequence: encoder 5 x 5,
    # decoder self 3 x 3, cross 3 x 5
    attention = 2 * 2 * D * (5 * 5 + 3 * 3 + 3 * 5)
    with torch.no_grad(), OperationCounter() as counter:
        model(src, tgt)
    assert counter.counts["multiply-adds"] == linear + attention
    costs = {}
    for cache in (True, False):
        with OperationCounter() as counter:
            greedy_decode(model, src, 3, cache=cache)
        costs[cache] = counter.counts["multiply-adds"]
    assert costs[True] < costs[False]


def test_rank_one_residual_is_zero_only_for_one_repeated_row():
    row = torch.randn(1, 6, dtype=torch.float64)
    assert rank_one_residual(row.expand(5, 6)).item() < 1e-15
    x = torch.tensor([[1.0, 0.0], [-1.0, 0.0]], dtype=torch.float64)  # mean row 0: all residual
    assert rank_one_residual(x).item() == pytest.approx(1.0)
    y = torch.tensor([[2.0, 1.0], [2.0, -1.0]], dtype=torch.float64)  # residual (0, +-1)
    assert rank_one_residual(y).item() == pytest.approx(2 ** 0.5 / 10 ** 0.5)
    assert rank_one_residual(torch.randn(3, 4, 8, dtype=torch.float64)).shape == (3,)


def test_depth_probe_sees_the_collapse_only_without_residuals():
    def probe(layers, residual):
        made = transformer_config(vocab_size=11, n_encoder_layers=layers, n_decoder_layers=layers,
                                 residual=residual, seed=3)
        return depth_probe(made, seed=3)
    kept, lost = probe(2, True), probe(2, False)
    assert kept.memory_residual > 0.5 and lost.memory_residual < 1e-2
    assert kept.gradient > 0.1 and lost.gradient < 1e-4 < lost.gradient_varied_memory
    shallow = probe(1, False)  # one block: no collapse yet, and the gradient is there
    assert shallow.memory_residual > 1e-2 and shallow.gradient > 0.1


def test_position_probe_reads_positions_only_where_they_are():
    src = toy_batch("sort", 64, 8, 10, torch.Generator().manual_seed(5)).src
    config = transformer_config(vocab_size=11, n_encoder_layers=2, seed=5)
    kept = position_probe(transformer(config).double(), src)
    assert len(kept) == 4 and kept[0] == 1.0 and min(kept) > 0.6  # the skips carry it
    lost = position_probe(transformer(dataclasses.replace(config, residual=False)).double(), src)
    assert lost[0] == 1.0 and lost[-1] < 0.25  # chance is 1/8: two blocks without skips lose it
    blind = position_probe(EncoderDecoder(config, Positions()).double(), src)  # no position added
    assert max(blind) < 0.25


@pytest.mark.parametrize("length", [3, 8, 12])
def test_hand_set_reverser_reverses_every_source_without_training(length):
    model = hand_set_reverser(length=length)
    batch = toy_batch("reverse", 100, length, 10, torch.Generator().manual_seed(length))
    assert exact_match(greedy_decode(model, batch.src, length).tokens, batch.tgt_out) == 1.0
    wrong = hand_set_reverser(length=length + 1)  # reflected about the wrong centre: it fails
    assert exact_match(greedy_decode(wrong, batch.src, length).tokens, batch.tgt_out) < 0.1


def test_final_losses_are_the_training_runs_last_losses():
    make = {"a": lambda s: config(vocab_size=11, seed=s)}
    got = final_losses("sort", make, [0, 2], steps=4, n_sequences=4, length=5, lr=1e-2, last=2)
    for seed, value in zip([0, 2], got["a"]):
        _, run = train_transformer("sort", make["a"](seed), 4, 4, 5, 1e-2, seed)
        assert value == pytest.approx(sum(run[-2:]) / 2, abs=0, rel=0)
    assert got["a"][0] != got["a"][1]
    with pytest.raises(ValueError, match="last=5 must be at most steps=4"):
        final_losses("sort", make, [0], steps=4, n_sequences=4, length=5, lr=1e-2)


def test_runs_started_in_the_background_are_the_same_runs():
    """What lesson 09 starts before section 1 and collects later: the same numbers, grouped the
    same way, as training them where they are used (with one thread, as the lesson and the
    background process train); a bad recipe is refused at the start."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _same_runs_in_the_background()
    finally:
        torch.set_num_threads(threads)
    with pytest.raises(ValueError, match="task must be one of"):
        final_losses("copy", {"a": lambda s: config(vocab_size=11, seed=s)}, [0], steps=4, n_sequences=4, length=5,
                     lr=1e-2, background=True)
    with pytest.raises(TypeError, match="background must be"):
        train_seeds("reverse", config(vocab_size=11), [0], 1, 4, 4, 1e-2, background="yes")


def _same_runs_in_the_background() -> None:
    make = {"a": lambda s: config(vocab_size=11, seed=s), "b": lambda s: config(vocab_size=11, seed=s, norm="pre")}
    later = final_losses("sort", make, [0, 2], steps=4, n_sequences=4, length=5, lr=1e-2, last=2, background=True)
    seeds = train_seeds("reverse", config(vocab_size=11), [1, 0], steps=3, n_sequences=4, length=4, lr=1e-2,
                        gpt=True, background=True)
    assert later.results() == final_losses("sort", make, [0, 2], steps=4, n_sequences=4, length=5, lr=1e-2, last=2)
    here = train_seeds("reverse", config(vocab_size=11), [1, 0], steps=3, n_sequences=4, length=4, lr=1e-2, gpt=True)
    for ran, expected in zip(seeds.results(), here):
        assert ran.losses == expected.losses and ran.accuracy == expected.accuracy
        assert ran.model.config == expected.model.config
        for a, b in zip(ran.model.parameters(), expected.model.parameters()):
            assert torch.equal(a, b)


def test_tasks_against_python():
    gen = torch.Generator().manual_seed(3)
    for task, fn in (("reverse", lambda r: r[::-1]), ("sort", sorted)):
        batch = toy_batch(task, 50, 7, 9, gen)
        for src, tin, tout in zip(batch.src.tolist(), batch.tgt_in.tolist(), batch.tgt_out.tolist()):
            assert tout == list(fn(src)) and tin == [BOS] + tout[:-1] and all(1 <= s <= 9 for s in src)
        assert task_answer(task, batch.src).tolist() == batch.tgt_out.tolist()


def test_held_out_sources_are_never_trained_on():
    gen = torch.Generator().manual_seed(4)
    train_rows = {tuple(r) for _ in range(20) for r in toy_batch("reverse", 100, 4, 5, gen).src.tolist()}
    held = {tuple(r) for r in toy_batch("reverse", 300, 4, 5, gen, held_out=True).src.tolist()}
    sorted_rows = toy_batch("sort", 300, 4, 5, gen).src
    assert (sorted_rows.sort(-1).values.diff(dim=-1) > 0).all()  # sort's sources: distinct symbols
    every = torch.tensor(list(itertools.product(range(1, 6), repeat=4)))
    share = is_held_out(every).double().mean().item()
    assert not train_rows & held and len(held) > 50 and 0.1 < share < 0.2


def test_exact_match_counts_whole_rows():
    a = torch.tensor([[1, 2, 3], [1, 2, 3], [3, 2, 1]])
    b = torch.tensor([[1, 2, 3], [1, 2, 4], [3, 2, 1]])
    assert exact_match(a, b) == pytest.approx(2 / 3)


@pytest.mark.parametrize("seed", range(5))
def test_the_lessons_recipe_reaches_98_percent_on_held_out_reversal_from_every_seed(seed):
    """The lesson's bound for every seed: 99.2% is the lowest seen (seed 0, torch's portable kernels)."""
    config = transformer_config(vocab_size=11, d_model=32, n_heads=4, d_ff=64, seed=seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in the lesson
    try:
        model, losses = train_transformer("reverse", config, steps=160, n_sequences=64, lr=3.5e-3,
                                          seed=seed)
    finally:
        torch.set_num_threads(threads)
    assert losses[-1] < 0.1 * losses[0]
    assert held_out_accuracy(model, "reverse") >= 0.98


# ---------------------------------------------------------------- parameter counts and timings

@pytest.mark.parametrize("d_model,d_ff", [(16, 64), (32, 48)])
def test_parameter_counts_match_the_closed_form(d_model, d_ff):
    model = transformer(transformer_config(d_model=d_model, n_heads=4, d_ff=d_ff, n_encoder_layers=2,
                                           n_decoder_layers=3, vocab_size=10))
    counts = parameter_counts(model)
    attention = 4 * d_model * d_model + 4 * d_model  # four D x D projections and their biases
    ffn = 2 * d_model * d_ff + d_ff + d_model
    assert counts["attention"] == (2 + 3 * 2) * attention
    assert counts["ffn"] == 5 * ffn
    assert counts["norm"] == (2 * 2 + 3 * 3 + 2) * 2 * d_model
    assert counts["tokens"] == 10 * d_model and counts["readout"] == d_model * 10 + 10
    assert sum(counts.values()) == sum(p.numel() for p in model.parameters())


def test_timings_have_the_promised_shape():
    ratios = time_one_pass_vs_steps([2, 8], d_model=16, repeats=1)
    assert set(ratios) == {2, 8} and all(r > 0 for r in ratios.values())
    times = time_block_vs_rnn([4, 8], d_model=16, repeats=1)
    assert set(times) == {4, 8} and all(a > 0 and b > 0 for a, b in times.values())
    assert [roughly(v) for v in (36.2, 0.27, 3, 11.48, 150)] == ["~40", "~0.3", "~3", "~10", "~200"]
    with pytest.raises(ValueError, match="value must be positive"):
        roughly(0.0)


# ---------------------------------------------------------------- bad input

@pytest.mark.parametrize("changes,message", [
    ({"d_model": 18, "n_heads": 4}, "n_heads must divide d_model"),
    ({"d_model": 15, "n_heads": 5}, "even"),
    ({"vocab_size": 1}, "vocab_size must be >= 2"),
    ({"norm": "yes"}, "norm must be one of"),
    ({"n_encoder_layers": -1}, "n_encoder_layers must be >= 0"),
    ({"eps": -1.0}, "eps must be positive"),
])
def test_bad_config_is_refused_by_name(changes, message):
    with pytest.raises((TypeError, ValueError), match=message):
        transformer_config(**changes)


def test_bad_input_is_refused_by_name():
    model = transformer(config(vocab_size=7, max_len=6))
    ok = torch.zeros(2, 4, dtype=torch.long)
    with pytest.raises(ValueError, match="src must be token ids in 0..6"):
        model(ok + 7, ok)
    with pytest.raises(ValueError, match="the length of src T=7 must be at most max_len=6"):
        model(torch.zeros(2, 7, dtype=torch.long), ok)
    with pytest.raises(TypeError, match="src must hold integers"):
        model(ok.double(), ok)
    with pytest.raises(TypeError, match="config must be a ModelConfig"):
        transformer({"d_model": 16})
    with pytest.raises(ValueError, match="task must be one of"):
        toy_batch("copy", 4, 4, 5, torch.Generator())
    with pytest.raises(ValueError, match="n_symbols must be >= 2"):
        toy_batch("sort", 4, 4, 1, torch.Generator())
    with pytest.raises(ValueError, match=r"predicted of shape \(2, 4\) must have the shape of answer, \(2, 3\)"):
        exact_match(ok, ok[:, :3])
    with pytest.raises(TypeError, match="model must be an EncoderDecoder"):
        greedy_decode(nn.Linear(2, 2), ok, 3)
    with pytest.raises(ValueError, match="memory must be given"):
        Block(config(), cross=True)(torch.zeros(1, 3, D))
    with pytest.raises(ValueError, match="cross=True"):
        from_torch(Block(config(), cross=False).double(), torch_layer("decoder", False))




# ---------------------------------------------------------------- the decoder-only (GPT-style) model on the same task

def gpt(**changes) -> DecoderOnly:
    """An untrained float64 decoder_only model at this file's sizes, norms and biases randomised so
    that a lost one shows."""
    model = decoder_only(config(vocab_size=11, max_len=20, **changes)).double()
    randomize(nn.ModuleList([*model.layers, *([model.norm] if model.norm is not None else [])]), 5)
    return model


def test_joined_is_source_separator_answer():
    batch = toy_batch("sort", 3, 5, 9, torch.Generator().manual_seed(0))
    ids = joined(batch)
    assert ids.shape == (3, 11)
    torch.testing.assert_close(ids[:, :5], batch.src, atol=0, rtol=0)
    assert (ids[:, 5] == SEP).all() and SEP == BOS
    torch.testing.assert_close(ids[:, 6:], batch.src.sort(-1).values, atol=0, rtol=0)


def test_the_decoder_only_loss_scores_the_answer_only():
    """By hand: the rows at SEP and after, against the answer. A loss that also scored the
    source (or missed the first answer token, or scored one row late) gives another number."""
    model = gpt()
    batch = toy_batch("reverse", 4, 6, 10, torch.Generator().manual_seed(1))
    logits = model(joined(batch)[:, :-1])  # (B, 11, V)
    expected = nn.functional.cross_entropy(logits[:, 6:].flatten(0, 1), batch.tgt_out.flatten())
    torch.testing.assert_close(sequence_loss(model, batch), expected, atol=1e-14, rtol=0)
    everything = nn.functional.cross_entropy(logits.flatten(0, 1), joined(batch)[:, 1:].flatten())
    late = nn.functional.cross_entropy(logits[:, 7:].flatten(0, 1), batch.tgt_out[:, 1:].flatten())
    assert abs(everything - expected) > 1e-3 and abs(late - expected) > 1e-3
    changed = batch._replace(src=(batch.src % 10) + 1)  # the loss reads the source: it is the input
    assert abs(sequence_loss(model, changed) - expected) > 1e-3


@pytest.mark.parametrize("norm_first,n_heads", [(False, H), (True, 1)])
def test_decoder_only_greedy_decoding_with_a_cache_equals_recomputing(norm_first, n_heads):
    """Independent of greedy_decode: the model's own forward, one argmax at a time. Two blocks,
    pre- and post-LN, one head and four; the cache must also cost fewer multiply-adds."""
    model = gpt(n_decoder_layers=2, norm="pre" if norm_first else "post", n_heads=n_heads)
    src = torch.randint(1, 11, (5, 8), generator=torch.Generator().manual_seed(3))
    sequence, rows = torch.cat([src, torch.full((5, 1), SEP)], 1), []
    with torch.no_grad():
        for _ in range(9):
            rows.append(model(sequence)[:, -1])
            sequence = torch.cat([sequence, rows[-1].argmax(-1, keepdim=True)], 1)
    costs = {}
    for cache in (False, True):
        with OperationCounter() as counter:
            decoded = greedy_decode(model, src, 9, cache=cache)
        costs[cache] = counter.counts["multiply-adds"]
        torch.testing.assert_close(decoded.tokens, sequence[:, 9:], atol=0, rtol=0)
        torch.testing.assert_close(decoded.logits, torch.stack(rows, 1), atol=1e-12, rtol=0)
        # the newest row's weights on the source, with the head axis also for one head: (B, H, T, S)
        assert decoded.cross_weights.shape == (5, n_heads, 9, 8)
    assert len(set(sequence[:, 9:].flatten().tolist())) > 1  # the decoded tokens vary
    assert (torch.stack(rows, 1)[:, 1:] - rows[0][:, None]).abs().max() > 1e-3  # and every step's logits
    assert costs[True] < 0.5 * costs[False]


def test_cached_decoder_only_reads_the_kept_keys():
    """A cache that dropped the earlier positions (each step reading only itself) would give other
    logits: spoil the source and the cached decoding must change from its second token on."""
    model = gpt()
    src = torch.randint(1, 11, (4, 6), generator=torch.Generator().manual_seed(4))
    base = greedy_decode(model, src, 4, cache=True)
    other = greedy_decode(model, (src % 10) + 1, 4, cache=True)
    assert (base.logits[:, 1:] - other.logits[:, 1:]).abs().max() > 1e-3


def test_decoder_only_input_is_refused_clearly():
    model, src = gpt(), torch.ones(2, 4, dtype=torch.long)
    with pytest.raises(ValueError, match="config.causal must be True"):
        decoder_only(config(causal=False))
    with pytest.raises(ValueError, match="src_mask must be None for a DecoderOnly"):
        greedy_decode(model, src, 2, src_mask=torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="src, SEP and steps - 1 tokens T=21 must be at most max_len=20"):
        greedy_decode(model, src, 17)
    greedy_decode(model, src, 16)  # exactly fills the 20 positions
    bidirectional = DecoderOnly(config(vocab_size=11, causal=False, positions="learned"))
    with pytest.raises(ValueError, match="model.config.causal must be True"):
        greedy_decode(bidirectional, src, 2)
    with pytest.raises(ValueError, match="cache must be False for a model whose positions rotate"):
        greedy_decode(DecoderOnly(config(vocab_size=11), RotaryPositions()), src, 2, cache=True)
    alibi = DecoderOnly(config(vocab_size=11), ALiBiPositions(0.5)).double()  # its bias rows are cut to the new ones
    with_cache, without = greedy_decode(alibi, src, 6, cache=True), greedy_decode(alibi, src, 6)
    assert torch.equal(with_cache.tokens, without.tokens)
    torch.testing.assert_close(with_cache.logits, without.logits, atol=1e-12, rtol=0)
    with pytest.raises(ValueError, match="2 \\* length .* T=16 must be at most max_len=12"):
        train_transformer("reverse", config(vocab_size=11, max_len=12), steps=1, length=8, gpt=True)
    with pytest.raises(TypeError, match="gpt must be"):
        train_transformer("reverse", config(vocab_size=11), steps=1, gpt="yes")


def test_mask_effect_compares_the_decoding_with_one_unmasked_pass():
    """mask_effect is the comparison written out: the decoded tokens fed back without the mask."""
    model = transformer(config(vocab_size=11)).double()
    src = torch.randint(1, 11, (5, 6), generator=torch.Generator().manual_seed(3))
    decoded = greedy_decode(model, src, 6)
    tgt_in = torch.cat([torch.full((5, 1), BOS), decoded.tokens[:, :-1]], dim=1)
    no_mask = unmasked_logits(model, src, tgt_in)  # (B, T, V)
    effect = mask_effect(model, src, decoded)
    assert effect.smallest_move == (no_mask - decoded.logits).abs().amax(-1)[:, :5].min().item() > 0
    assert effect.tokens_changed == (no_mask.argmax(-1) != decoded.tokens)[:, :5].double().mean().item()
    # the last step sees every token either way: it is left out because it never moves
    torch.testing.assert_close(no_mask[:, -1], decoded.logits[:, -1], atol=1e-12, rtol=0)
    with pytest.raises(TypeError, match="decoded must be a Decoding"):
        mask_effect(model, src, decoded.tokens)
    with pytest.raises(ValueError, match="decoded must hold at least 2 steps"):
        mask_effect(model, src, greedy_decode(model, src, 1))


# ---------------------------------------------------------------- the lesson's tables over seeds 0 to 9
#
# The lesson trains one reverser (seed 0) and four decoder-only models (seeds 0 to 3) to stay
# within its 10 s; its markdown tables give the same recipes' ranges over seeds 0 to 9. These
# tests train those ten seeds with the lesson's recipes and inputs (each asserted to be the
# lesson's own code), and compare every range in the tables with what they measure.

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "09_transformer.ipynb"
TEN_SEEDS = list(range(10))


def _lesson_code() -> str:
    """Every code cell of lesson 09, its whitespace made single spaces."""
    import nbformat

    cells = nbformat.read(NOTEBOOK, as_version=4).cells
    return " ".join(" ".join(c.source.split()) for c in cells if c.cell_type == "code")


def _table_under(header: str) -> dict[str, list[str]]:
    """The lesson's markdown table whose first row starts with `header`: each row's first column
    -> its other columns, as printed (the header row and the |---| row left out)."""
    import nbformat

    tables = []
    for cell in nbformat.read(NOTEBOOK, as_version=4).cells:
        lines = [line.strip() for line in cell.source.splitlines()] if cell.cell_type == "markdown" else []
        for i, line in enumerate(lines):
            if line.startswith(f"| {header}"):
                rows = itertools.takewhile(lambda row: row.startswith("|"), lines[i + 2:])
                tables.append({cols[0]: cols[1:] for cols in
                               ([c.strip() for c in row.strip("|").split("|")] for row in rows)})
    assert len(tables) == 1, f"one table of lesson 09 must start with {header!r}, found {len(tables)}"
    return tables[0]


def _span(values: list[float], form=fmt) -> str:
    """A range over seeds as the lesson's tables print it: "a to b", or "a" when both print the same."""
    low, high = form(min(values)), form(max(values))
    return low if low == high else f"{low} to {high}"


def _percent(value: float) -> str:
    return f"{fmt(100 * value)}%"


def _in_lesson(*snippets: str) -> None:
    code = _lesson_code()
    for snippet in snippets:
        assert snippet in code, f"lesson 09's code no longer has {snippet!r}: make this test measure what it does"


@contextlib.contextmanager
def _one_thread():
    """One torch thread, as in the lesson (the same float digits)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@pytest.mark.slow
def test_the_reversers_tables_are_what_seeds_0_to_9_measure():
    """Sections 2, 3 and 7's tables: section 2's reverser (160 steps of 64 at lr 0.0035) from
    seeds 0 to 9, on the lesson's held-out sources, its unmasked pass and its position read-outs.
    Every bound holds for every seed, each at least 5% inside. About 30 s on two busy cores."""
    _in_lesson('config = transformer_config(vocab_size=11, d_model=32, n_heads=4, d_ff=64)',
               '"reverse", config, steps=160, n_sequences=64, lr=3.5e-3',
               'reverse_accuracy = held_out_accuracy(reverser, "reverse")',
               'at_least(reverse_accuracy, 0.9)',
               'many = toy_batch("reverse", 64, 8, 10, torch.Generator().manual_seed(4), held_out=True)',
               'steps = greedy_decode(reverser, many.src, 8)',
               'effect = mask_effect(reverser, many.src, steps)',
               'at_least(effect.smallest_move, 0.01) & at_least(effect.tokens_changed, 0.1)',
               'probe_src = toy_batch("sort", 64, 8, 10, torch.Generator().manual_seed(11)).src',
               'trained_reads = position_probe(reverser, probe_src)',
               'at_least(trained_reads[-1], 0.6)',
               'blind = toy_batch("reverse", 500, 8, 10, torch.Generator().manual_seed(1), held_out=True)',
               'as_trained = token_accuracy(reverser, blind)',
               'no_source_positions = token_accuracy(reverser, blind, source_positions=False)',
               'at_least(as_trained, 0.9) & at_most(no_source_positions, 0.5)')
    recipe = transformer_config(vocab_size=11, d_model=32, n_heads=4, d_ff=64)
    many = toy_batch("reverse", 64, 8, 10, torch.Generator().manual_seed(4), held_out=True)
    probe_src = toy_batch("sort", 64, 8, 10, torch.Generator().manual_seed(11)).src
    blind = toy_batch("reverse", 500, 8, 10, torch.Generator().manual_seed(1), held_out=True)
    with _one_thread():
        runs = train_seeds("reverse", recipe, TEN_SEEDS, steps=160, n_sequences=64, length=8, lr=3.5e-3,
                           workers=2)
        effects = [mask_effect(run.model, many.src, greedy_decode(run.model, many.src, 8)) for run in runs]
        trained = [position_probe(run.model, probe_src)[-1] for run in runs]
        untrained = [position_probe(transformer(dataclasses.replace(recipe, seed=s)).double(), probe_src)[-1]
                     for s in TEN_SEEDS]
        as_trained = [token_accuracy(run.model, blind) for run in runs]
        blind_order = [token_accuracy(run.model, blind, source_positions=False) for run in runs]
    accuracy = [run.accuracy for run in runs]
    moves = [e.smallest_move for e in effects]
    changed = [e.tokens_changed for e in effects]

    assert _table_under("seeds 0 to 9 | held-out sources exactly right") == {
        "range": [_span(accuracy, _percent)], "bound": ["at least 90%"]}
    assert _table_under("seeds 0 to 9 | smallest move") == {
        "range": [_span(moves), _span(changed, _percent)], "bound": ["above 0.01", "above 10%"]}
    assert _table_under("reverser, seeds 0 to 9") == {
        "memory read-out, trained": [_span(trained), "above 0.6"],
        "the same, untrained": [_span(untrained), ""],
        "tokens right, as trained": [_span(as_trained, _percent), "above 90%"],
        "tokens right, no source positions": [_span(blind_order, _percent), "below 50%"],
    }
    bounds = [at_least(min(accuracy), 0.9), at_least(min(moves), 0.01), at_least(min(changed), 0.1),
              at_least(min(trained), 0.6), at_least(min(as_trained), 0.9), at_most(max(blind_order), 0.5)]
    assert all(bound.margin >= 0.05 for bound in bounds), [bound.margin for bound in bounds]


@pytest.mark.slow
def test_the_decoder_only_table_is_what_seeds_0_to_9_measure():
    """Section 5's table: the lesson's decoder-only recipe (one block, 100 steps of 32 at lr
    0.015; the lesson trains seeds 0 to 3) and the encoder-decoder's (160 steps of 64 at lr
    0.0035), seeds 0 to 9, through train_seeds. The lesson's bound (at least 75% of held-out
    sources exactly right) holds for each seed, at least 5% inside; the accuracy train_seeds
    reports is the model's own, and greedy decoding with the cache gives the same tokens as
    without it. About 20 s on two busy cores."""
    _in_lesson('config = transformer_config(vocab_size=11, d_model=32, n_heads=4, d_ff=64)',
               '"reverse", config, seeds=[0, 1, 2, 3], steps=100, n_sequences=32, length=8, lr=1.5e-2, gpt=True',
               'at_least(min(gpt_accuracy), 0.75)')
    recipe = transformer_config(vocab_size=11, d_model=32, n_heads=4, d_ff=64)
    with _one_thread():
        runs = train_seeds("reverse", recipe, TEN_SEEDS, steps=100, n_sequences=32, length=8, lr=1.5e-2,
                           gpt=True, workers=2)
        slower = train_seeds("reverse", recipe, TEN_SEEDS, steps=160, n_sequences=64, length=8, lr=3.5e-3,
                             gpt=True, workers=2)
        batch = toy_batch("reverse", 100, 8, 10, torch.Generator().manual_seed(2), held_out=True)
        for seed, run in enumerate(runs):
            assert isinstance(run.model, DecoderOnly) and run.model.config.seed == seed
            assert len(run.losses) == 100 and run.losses[-1] < 0.1 * run.losses[0]
            assert run.accuracy == held_out_accuracy(run.model, "reverse")
            assert torch.equal(greedy_decode(run.model, batch.src, 8, cache=True).tokens,
                               greedy_decode(run.model, batch.src, 8).tokens)
    accuracy = [run.accuracy for run in runs]
    assert len(set(accuracy)) > 1  # ten different seeds, not one run ten times
    assert at_least(min(accuracy), 0.75).margin >= 0.05, accuracy
    assert _table_under("decoder-only, seeds 0 to 9") == {
        "100 steps of 32, lr 0.015 (the lesson's)": [_span(accuracy, _percent), "at least 75%"],
        "160 steps of 64, lr 0.0035": [_span([run.accuracy for run in slower], _percent), ""],
    }
