"""Transformer Roots: one small, readable PyTorch implementation of each Transformer piece.

One module per lesson, imported by its notebook; a lesson's module imports only the modules
of earlier lessons (and torch), so the layers of the code follow the course:
    attention            01  THE attention path (attend: mask, bias, scale), the Attention layer
                             on it (projections, n_heads heads of lesson 08, KV cache), causal_mask
    attention_scores     01  softmax, scores and attention as checked functions; why sqrt(d_k)
    masks                02  padding and causal masks, the three uses of attention, additive
                             attention
    model                02  the course's model: config, FeedForward, Block, the decoder-only
                             and encoder-decoder models
    torch_copy           02  weights to and from torch's modules, refused when they differ
    measure              02  what a computation costs (OperationCounter, per score, timed),
                             whether a layer is causal (perturbation, gradients, prefixes), and
                             what the causal mask is for (next-token training)
    permutation          03  permutation symmetry and what each bias does
    positional_encoding  04  sinusoidal, learned and rotary positions, ALiBi
    normalization        05  BatchNorm, LayerNorm and RMSNorm written out; post-LN vs pre-LN
    copying              06  copying by position and by content (the induction head), by hand
                             and trained; what attention without softmax cannot copy
    logic_rules          07  composing relations: a head that mixes, lesson 06's head that
                             copies, where a fixed mix stops, the MLP, rule capacity
    multi_head           08  many heads: split, attend, concatenate, project; QK and OV per head
    transformer          09  the encoder-decoder Transformer from these pieces, trained on toy tasks
    attention_graph      10  attention as a weighted graph, rollout through layers; the
                             modern Hopfield update as attention and its energy; a RASP
                             program compiled into the model's blocks
Beneath every lesson: guards (input checks with clear errors), progress (the progress bars;
it imports nothing else, so a lesson's first cell shows one while torch loads), training (the
one training loop, and the training of a model of token ids), optimizers (SGD and Adam, written
out), runs (independent seeded runs at once, in other processes), claims (`claim`, the lessons'
computed checks), plots (figures). Beside them: widgets/ (live widgets, one module per
lesson) and checks/ (the exercises' visible checks).

Dimension names, the same in every docstring and shape comment:
    B    batch                        T    query positions (sequence length)
    S    key/value positions          D    model width (d_model)
    d_k  query/key width              d_v  value width
    H    heads                        V    vocabulary size (vocab_size)
A leading "..." in a shape is any number of batch dimensions (including none).
Boolean masks mean True = "may attend" (or "real token"), as in
torch.nn.functional.scaled_dot_product_attention.
"""


def exercise_notebook(set_name: str) -> str:
    """The file name of exercise set `set_name`'s notebook, e.g. "03_permutation_exercises.ipynb".

    The one place that names it: solutions/<set>/ and exercises/<set>/ hold it, a learner hands it
    in, and the grader, the LMS import, the hub and the tests look for it. It differs from the
    lesson's notebooks/<set>.ipynb so that JupyterLab's tabs of the two have different names.
    """
    return f"{set_name}_exercises.ipynb"
