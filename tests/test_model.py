"""course_lib.model: the block's named norms, and the encoder-decoder's three public steps checked at
their entry (embed, encode, decode), as forward is."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from course_lib.masks import causal_mask, padding_mask
from course_lib.model import Block, DecoderOnly, EncoderDecoder, ModelConfig

CONFIG = ModelConfig(vocab_size=9, max_len=8, d_model=8, n_heads=2, d_ff=16, norm="post",
                     n_encoder_layers=2, n_decoder_layers=2, seed=1)


def model_and_batch():
    model = EncoderDecoder(CONFIG)
    gen = torch.Generator().manual_seed(0)
    src, tgt = torch.randint(9, (2, 5), generator=gen), torch.randint(9, (2, 4), generator=gen)
    return model, src, tgt


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_a_decoder_block_names_one_norm_per_sublayer_and_uses_each_where_its_placement_says(norm):
    block = Block(ModelConfig(d_model=8, n_heads=2, d_ff=16, norm=norm), cross=True).double()
    with torch.no_grad():  # distinct gains and shifts, so a norm used in the wrong place shows
        for p in block.parameters():
            p.add_(0.3 * torch.randn(p.shape, dtype=p.dtype, generator=torch.Generator().manual_seed(p.numel())))
    norms = (block.attention_norm, block.cross_norm, block.ffn_norm)
    assert all(isinstance(n, nn.LayerNorm) for n in norms) and not hasattr(block, "norms")
    x, memory = torch.randn(2, 5, 8, dtype=torch.float64), torch.randn(2, 6, 8, dtype=torch.float64)
    mask = causal_mask(5)
    sublayers = (lambda h: block.attention(h, mask=mask)[0], lambda h: block.cross_attention(h, memory)[0], block.ffn)
    expected = x
    for norm_module, f in zip(norms, sublayers):  # written out: post LN(x + f(x)), pre x + f(LN(x))
        expected = norm_module(expected + f(expected)) if norm == "post" else expected + f(norm_module(expected))
    torch.testing.assert_close(block(x, mask, memory)[0], expected, atol=1e-12, rtol=0)


def test_a_block_without_norms_has_none():
    block = Block(ModelConfig(d_model=8, d_ff=16, norm="none"), cross=True)
    assert (block.attention_norm, block.cross_norm, block.ffn_norm) == (None, None, None)
    assert not any(isinstance(m, nn.LayerNorm) for m in block.modules())


def test_encode_takes_lesson_02s_padding_mask_as_it_takes_the_two_dimensional_one():
    """encode(x, padding_mask(...)) gave memory of shape (2, 2, 5, 8) for x (2, 5, 8), silently."""
    model, src, tgt = model_and_batch()
    x = model.embed(src)  # (2, 5, 8)
    mask = padding_mask([5, 3], 5)  # (B, 1, S)
    memory = model.encode(x, mask)
    assert memory.shape == (2, 5, 8)
    torch.testing.assert_close(memory, model.encode(x, mask[:, 0]), atol=0, rtol=0)
    out, weights = model.decode(model.embed(tgt), memory, mask)
    assert out.shape == (2, 4, 8) and weights.shape == (2, 2, 4, 5)
    torch.testing.assert_close(out, model.decode(model.embed(tgt), memory, mask[:, 0])[0], atol=0, rtol=0)
    assert torch.all(weights[1, :, :, 3:] == 0)  # padding keys get no weight
    torch.testing.assert_close(model(src, tgt, mask), model(src, tgt, mask[:, 0]), atol=0, rtol=0)


def bad_calls():
    model, src, tgt = model_and_batch()
    x, y = model.embed(src), model.embed(tgt)  # (2, 5, 8), (2, 4, 8)
    memory = model.encode(x)
    return {
        # src (B=2) and tgt (B=3): torch's broadcasting error came from inside the attention
        "src and tgt batches": (lambda: model(src, torch.randint(9, (3, 4))), ValueError,
                                r"src \(2, 5\) and tgt_in \(3, 4\) must have the same batch size B"),
        "y and memory batches": (lambda: model.decode(y[:1], memory), ValueError,
                                 r"y \(1, 4, 8\) and memory \(2, 5, 8\) must have the same batch size B"),
        "mask of another length": (lambda: model.encode(x, torch.ones(2, 6, dtype=torch.bool)), ValueError,
                                   r"src_mask of shape \(2, 6\) must be \(B, S\) = \(2, 5\)"),
        "mask of another batch": (lambda: model(src, tgt, padding_mask([5, 3, 1], 5)), ValueError,
                                  r"src_mask of shape \(3, 1, 5\) must be \(B, S\) = \(2, 5\)"),
        "mask per query": (lambda: model.encode(x, torch.ones(2, 5, 5, dtype=torch.bool)), ValueError,
                           r"src_mask of shape \(2, 5, 5\) must be \(B, S\)"),
        "float mask": (lambda: model.decode(y, memory, torch.ones(2, 5)), TypeError,
                       "src_mask must be a boolean tensor"),
        "ids into encode": (lambda: model.encode(src), ValueError, r"x must have 3 dimensions, got shape \(2, 5\)"),
        "unbatched vectors": (lambda: model.encode(x[0]), ValueError, r"x must have 3 dimensions, got shape \(5, 8\)"),
        "vectors of another width": (lambda: model.decode(torch.randn(2, 4, 6), memory), ValueError,
                                     r"y must have last dimension 8"),
        "vectors of another dtype": (lambda: model.encode(x.double()), TypeError,
                                     "x, the model's weights must share one dtype, got x torch.float64"),
        "float ids into embed": (lambda: model.embed(src.float()), TypeError, "ids must hold integers"),
        "ids past the vocabulary": (lambda: model.embed(src + 9), ValueError, "ids must be token ids in 0..8"),
        "positions past max_len": (lambda: model.embed(src, start=4), ValueError,
                                   "the length of ids T=9 must be at most max_len=8"),
        "negative start": (lambda: model.embed(src, start=-1), ValueError, "start must be >= 0"),
        "caches of another length": (lambda: model.decode(y, memory, caches=[({}, {})]), ValueError,
                                     "caches must be a list of 2 \\(dict, dict\\) pairs"),
    }


@pytest.mark.parametrize("case", list(bad_calls()))
def test_bad_input_to_embed_encode_and_decode_names_the_argument_and_the_problem(case):
    call, error, message = bad_calls()[case]
    with pytest.raises(error, match=message):
        call()


@pytest.mark.parametrize("n_heads", [1, 2])
def test_a_decoder_only_model_fed_in_pieces_through_its_caches_gives_the_logits_of_one_pass(n_heads):
    """DecoderOnly.forward's caches, as EncoderDecoder.decode's: 4 positions, then 1, then 2, give the
    rows of one forward over all 7 (the one decoding path greedy_decode takes with cache=True)."""
    model = DecoderOnly(ModelConfig(vocab_size=9, max_len=8, d_model=8, n_heads=n_heads, d_ff=16, norm="pre",
                                    n_decoder_layers=2, seed=1)).double()
    ids = torch.randint(9, (2, 7), generator=torch.Generator().manual_seed(0))
    whole = model(ids)  # (B, 7, V)
    caches = [{} for _ in model.layers]
    pieces = [model(ids[:, a:b], caches) for a, b in ((0, 4), (4, 5), (5, 7))]
    torch.testing.assert_close(torch.cat(pieces, 1), whole, atol=1e-12, rtol=0)
    assert caches[1]["k"].shape[-2] == 7  # every block kept every position


def test_a_decoder_only_model_refuses_caches_it_cannot_use_by_name():
    from course_lib.positional_encoding import RotaryPositions
    ids = torch.zeros(1, 3, dtype=torch.long)
    model = DecoderOnly(ModelConfig(n_decoder_layers=2))
    for caches, message in (([{}], "caches must be a list of 2 dicts"), ({}, "caches must be a list")):
        with pytest.raises(ValueError, match=message):
            model(ids, caches)
    with pytest.raises(ValueError, match="caches need config.causal=True"):
        DecoderOnly(ModelConfig(causal=False))(ids, [{}])
    with pytest.raises(ValueError, match="caches need positions added to the tokens or a score bias"):
        DecoderOnly(ModelConfig(positions="none"), RotaryPositions())(ids, [{}])
    caches = [{}, {}]
    model(torch.zeros(1, 6, dtype=torch.long), caches)
    with pytest.raises(ValueError, match="max_len"):  # 6 kept and 3 more do not fit 8 positions
        model(ids, caches)


def test_importing_the_model_loads_the_model_attention_and_guards_only():
    """A reader of the model reads what `import course_lib.model` loads: counted in a fresh process."""
    import subprocess
    import sys
    count = ("import sys, course_lib.model; mods = sorted(m for m in sys.modules if m.startswith('course_lib')); "
             "print(mods); print(sum(sum(1 for _ in open(sys.modules[m].__file__)) for m in mods))")
    out = subprocess.run([sys.executable, "-c", count], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0] == str(["course_lib", "course_lib.attention", "course_lib.guards", "course_lib.model"])
    assert int(out[1]) < 800, f"import course_lib.model loads {out[1]} lines of the course (bound 800)"
