"""course_lib.attention: the attention layer's input checks, and lesson 02's padding mask on its heads."""

from __future__ import annotations

import pytest
import torch

from course_lib.attention import Attention
from course_lib.masks import padding_mask

BAD_INPUT = {
    "layer d_k": (lambda: Attention(8, d_k=0), ValueError, "d_k must be >= 1, got d_k=0"),
    "layer input": (lambda: Attention(8)(torch.ones(3, 8, dtype=torch.long)), TypeError,
                    "x must be a floating-point tensor"),
    "layer width": (lambda: Attention(8)(torch.randn(3, 6)), ValueError, r"x must have last dimension 8, got shape \(3, 6\)"),
    # x in float64 into float32 weights: torch's matmul said "mat1 and mat2 must have the same dtype" from inside
    "x dtype against the weights": (lambda: Attention(8)(torch.randn(2, 3, 8, dtype=torch.float64)), TypeError,
                                    r"x, weights must share one dtype, got x torch.float64, weights torch.float32"),
    "memory dtype": (lambda: Attention(8, d_memory=6)(torch.randn(3, 8), torch.randn(4, 6, dtype=torch.float64)),
                     TypeError, r"x, memory, weights must share one dtype, got x torch.float32, memory torch.float64, "
                     r"weights torch.float32"),
    # keys and values read d_memory-wide rows: x (width d_model) failed inside the key projection
    "memory missing": (lambda: Attention(8, d_memory=6)(torch.randn(2, 3, 8)), ValueError,
                       r"memory must be given: this layer's keys and values read rows of width d_memory=6, not x's "
                       r"d_model=8"),
    "memory width": (lambda: Attention(8, d_memory=6)(torch.randn(3, 8), torch.randn(4, 8)), ValueError,
                     r"memory must have last dimension 6"),
    # a rotate that is not a function failed as "'int' object is not callable" after the projections
    "rotate not callable": (lambda: Attention(8)(torch.randn(3, 8), rotate=3), TypeError,
                            "rotate must be a function \\(q, k\\) -> \\(q, k\\), got int"),
    "rotate a tensor": (lambda: Attention(8)(torch.randn(3, 8), rotate=torch.eye(8)), TypeError,
                        "rotate must be a function"),
    # padding_mask's (B, 1, S) without the head axis: broadcast against (B, H, T, S) it would grow the scores
    "padding mask without its head axis": (lambda: Attention(8)(torch.randn(3, 5, 8), mask=padding_mask([5, 2, 1], 5)),
                                           ValueError, r"mask of shape \(3, 1, 5\) does not broadcast to the scores' "
                                           r"shape \(3, 1, 5, 5\).*a mask or bias for each sequence's keys is \(B, 1, 1, S\), "
                                           r"e.g. padding_mask\(lengths, S\)\[:, None\]"),
    "padding mask of other keys": (lambda: Attention(8, n_heads=2)(torch.randn(3, 5, 8),
                                                                  mask=padding_mask([5, 2, 1], 6)[:, None]),
                                   ValueError, r"mask of shape \(3, 1, 1, 6\) does not broadcast with scores of shape "
                                   r"\(3, 2, 5, 5\)"),
}


@pytest.mark.parametrize("case", BAD_INPUT)
def test_bad_input_names_the_argument_and_the_problem(case):
    call, error, message = BAD_INPUT[case]
    with pytest.raises(error, match=message):
        call()


@pytest.mark.parametrize("n_heads", [1, 2, 4])
def test_lesson_02s_padding_mask_with_a_head_axis_is_one_mask_per_sequence(n_heads):
    torch.manual_seed(0)
    layer = Attention(8, n_heads=n_heads, bias=True).double()
    x = torch.randn(3, 5, 8, dtype=torch.float64)
    out, weights = layer(x, mask=padding_mask([5, 3, 1], 5)[:, None])  # (B, 1, 1, S): every head and query
    assert weights.shape == (3, n_heads, 5, 5)  # one head too has its axis
    for b, n in enumerate([5, 3, 1]):  # every head of sequence b gives its padding keys weight 0
        assert torch.all(weights[b, :, :, n:] == 0) and torch.all(weights[b, :, :, :n] > 0)
    # and each sequence's output is the one it gets alone, without its padding
    for b, n in enumerate([5, 3, 1]):
        alone = layer(x[b:b + 1, :, :], memory=x[b:b + 1, :n])[0]
        torch.testing.assert_close(out[b:b + 1], alone, atol=1e-12, rtol=0)


def test_a_mask_is_read_by_broadcasting_alone_so_a_3d_mask_is_one_per_head():
    """Nothing reads a mask's meaning from its shape: (H, 1, S) lines up with (B, H, T, S)'s last three
    axes, so it is one mask per head, the same as (1, H, 1, S), whatever the batch size B."""
    layer = Attention(8, n_heads=2)
    per_head = torch.tensor([[True] * 5, [True, False, False, False, False]])[:, None]  # (H, 1, S)
    for B in (2, 3):  # B = H included: the layer does not guess that (2, 1, S) meant one per sequence
        x = torch.randn(B, 5, 8)
        weights = layer(x, mask=per_head)[1]
        assert torch.all(weights[:, 1, :, 1:] == 0) and torch.all(weights[:, 0] > 0)
        torch.testing.assert_close(weights, layer(x, mask=per_head[None])[1], atol=0, rtol=0)
