"""Transformer Roots: one small, readable PyTorch implementation of each Transformer piece.

One module per lesson, imported by its notebook:
    attention            01  Q, K, V, the score matrix, softmax, scaled dot-product attention
    masks                02  padding and causal masks, the three uses of attention, additive attention
    permutation          03  permutation symmetry and what each bias does
    positional_encoding  04  sinusoidal, learned and rotary positions, ALiBi
    normalization        05  BatchNorm, LayerNorm and RMSNorm written out
and beside them: plots (figures), widgets/ (live widgets, one module per lesson), checks/
(the exercises' visible checks), claims (`claim`, the lessons' computed checks).

Dimension names used everywhere: B batch, T query positions, S key/value positions, D model
width, d_k query/key width, d_v value width, H heads; a leading "..." is any batch dimensions.
Boolean masks mean True = "may attend".
"""
