"""Set 08 (multi-head attention): known-wrong answers to its exercises (MUTANTS), as source code,
and the words each likely one's visible check must say (HINTS). See tests/mutants/__init__.py."""

# The reference's attention with one step left to each mistake: the scale, the mask's fill, the
# softmax's axis and the merge of the heads
_ATTEND = ("def multi_head_attend(q, k, v, n_heads, mask=None):\n    B, T, D = q.shape\n"
           "    qh, kh, vh = (split_into_heads(t, n_heads) for t in (q, k, v))\n"
           "    s = qh @ kh.transpose(-2, -1) / {scale}\n"
           "    if mask is not None:\n        m = mask.unsqueeze(-3) if mask.dim() == 3 else mask\n"
           "        s = s.masked_fill({fill}, {value})\n"
           "    w = torch.softmax(s, {axis})\n    return {merge}, w")

MUTANTS = {
    "split_into_heads": {
        "reshaped straight to (B, H, T, d_head)": "def split_into_heads(x, n_heads):\n    B, T, D = x.shape\n"
                                                  "    return x.reshape(B, n_heads, T, D // n_heads)",
        "every H-th column": "def split_into_heads(x, n_heads):\n    B, T, D = x.shape\n"
                             "    return x.reshape(B, T, D // n_heads, n_heads).permute(0, 3, 1, 2)",
        "T and H not swapped": "def split_into_heads(x, n_heads):\n    B, T, D = x.shape\n"
                               "    return x.reshape(B, T, n_heads, D // n_heads)",
        "heads concatenated along T": "def split_into_heads(x, n_heads):\n"
                                      "    return torch.cat(x.chunk(n_heads, dim=-1), dim=1)",
        "B and T swapped instead": "def split_into_heads(x, n_heads):\n    B, T, D = x.shape\n"
                                   "    return x.reshape(B, T, n_heads, D // n_heads).transpose(0, 1)",
        "calls the course reference": "from course_lib.multi_head import split_heads\n"
                                      "def split_into_heads(x, n_heads):\n    return split_heads(x, n_heads)",
    },
    "multi_head_attend": {
        "scaled by sqrt(D)": "def multi_head_attend(q, k, v, n_heads, mask=None):\n    B, T, D = q.shape\n"
                             "    qh, kh, vh = (split_into_heads(t, n_heads) for t in (q, k, v))\n"
                             "    s = qh @ kh.transpose(-2, -1) / math.sqrt(D)\n"
                             "    if mask is not None:\n"
                             "        s = s.masked_fill(~(mask.unsqueeze(-3) if mask.dim() == 3 else mask), float('-inf'))\n"
                             "    w = torch.softmax(s, -1)\n    return (w @ vh).transpose(1, 2).reshape(B, T, D), w",
        "merged without swapping H and T back": "def multi_head_attend(q, k, v, n_heads, mask=None):\n"
                                                "    B, T, D = q.shape\n"
                                                "    qh, kh, vh = (split_into_heads(t, n_heads) for t in (q, k, v))\n"
                                                "    s = qh @ kh.transpose(-2, -1) / math.sqrt(D // n_heads)\n"
                                                "    if mask is not None:\n"
                                                "        s = s.masked_fill(~(mask.unsqueeze(-3) if mask.dim() == 3 else mask), float('-inf'))\n"
                                                "    w = torch.softmax(s, -1)\n    return (w @ vh).reshape(B, T, D), w",
        "ignores the mask": "def multi_head_attend(q, k, v, n_heads, mask=None):\n    B, T, D = q.shape\n"
                            "    qh, kh, vh = (split_into_heads(t, n_heads) for t in (q, k, v))\n"
                            "    w = torch.softmax(qh @ kh.transpose(-2, -1) / math.sqrt(D // n_heads), -1)\n"
                            "    return (w @ vh).transpose(1, 2).reshape(B, T, D), w",
        "softmax over the queries": _ATTEND.format(scale="math.sqrt(D // n_heads)", fill="~m", value="float('-inf')",
                                                   axis="-2", merge="(w @ vh).transpose(1, 2).reshape(B, T, D)"),
        "no scale": _ATTEND.format(scale="1", fill="~m", value="float('-inf')", axis="-1",
                                   merge="(w @ vh).transpose(1, 2).reshape(B, T, D)"),
        "mask inverted": _ATTEND.format(scale="math.sqrt(D // n_heads)", fill="m", value="float('-inf')", axis="-1",
                                        merge="(w @ vh).transpose(1, 2).reshape(B, T, D)"),
        "masked scores set to 0": _ATTEND.format(scale="math.sqrt(D // n_heads)", fill="~m", value="0.0", axis="-1",
                                                 merge="(w @ vh).transpose(1, 2).reshape(B, T, D)"),
        "heads not merged": _ATTEND.format(scale="math.sqrt(D // n_heads)", fill="~m", value="float('-inf')", axis="-1",
                                           merge="w @ vh"),
        "calls torch's scaled_dot_product_attention": (
            "import torch.nn.functional as F\n"
            "def multi_head_attend(q, k, v, n_heads, mask=None):\n    B, T, D = q.shape\n"
            "    qh, kh, vh = (split_into_heads(t, n_heads) for t in (q, k, v))\n"
            "    m = None if mask is None else (mask.unsqueeze(-3) if mask.dim() == 3 else mask)\n"
            "    s = qh @ kh.transpose(-2, -1) / math.sqrt(D // n_heads)\n"
            "    w = torch.softmax(s if m is None else s.masked_fill(~m, float('-inf')), -1)\n"
            "    out = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=m)\n"
            "    return out.transpose(1, 2).reshape(B, T, D), w"),
    },
    "qk_form": {
        "W_K^T W_Q (the transpose)": "def qk_form(w_q, w_k, head, n_heads):\n    d = w_q.shape[0] // n_heads\n"
                                     "    r = slice(head * d, (head + 1) * d)\n    return w_k[r].T @ w_q[r]",
        "head's columns instead of rows": "def qk_form(w_q, w_k, head, n_heads):\n    d = w_q.shape[0] // n_heads\n"
                                          "    r = slice(head * d, (head + 1) * d)\n    return w_q[:, r] @ w_k[:, r].T",
        "every head at once": "def qk_form(w_q, w_k, head, n_heads):\n    return w_q.T @ w_k",
        "head starts at row h": "def qk_form(w_q, w_k, head, n_heads):\n    d = w_q.shape[0] // n_heads\n"
                                "    r = slice(head, head + d)\n    return w_q[r].T @ w_k[r]",
        "divided by sqrt(d_head)": "def qk_form(w_q, w_k, head, n_heads):\n    d = w_q.shape[0] // n_heads\n"
                                   "    r = slice(head * d, (head + 1) * d)\n    return w_q[r].T @ w_k[r] / math.sqrt(d)",
        "heads counted from 1": "def qk_form(w_q, w_k, head, n_heads):\n    d = w_q.shape[0] // n_heads\n"
                                "    r = slice((head - 1) * d, head * d)\n    return w_q[r].T @ w_k[r]",
        "calls the course reference": "from course_lib.attention import Attention\n"
                                      "from course_lib.multi_head import qk_matrix\n"
                                      "def qk_form(w_q, w_k, head, n_heads):\n"
                                      "    m = Attention(w_q.shape[1], n_heads=n_heads).double()\n"
                                      "    m.query.weight.data, m.key.weight.data = w_q.double(), w_k.double()\n"
                                      "    return qk_matrix(m, head)",
    },
    "silence_head": {
        "rows instead of columns": "def silence_head(w_out, head, n_heads):\n    d = w_out.shape[1] // n_heads\n"
                                   "    s = w_out.clone()\n    s[head * d: (head + 1) * d] = 0.0\n    return s",
        "zeroed in place": "def silence_head(w_out, head, n_heads):\n    d = w_out.shape[1] // n_heads\n"
                           "    w_out[:, head * d: (head + 1) * d] = 0.0\n    return w_out",
        "every H-th column": "def silence_head(w_out, head, n_heads):\n    s = w_out.clone()\n"
                             "    s[:, head::n_heads] = 0.0\n    return s",
        "one column only": "def silence_head(w_out, head, n_heads):\n    s = w_out.clone()\n"
                           "    s[:, head] = 0.0\n    return s",
        "head starts at column h": "def silence_head(w_out, head, n_heads):\n    d = w_out.shape[1] // n_heads\n"
                                   "    s = w_out.clone()\n    s[:, head: head + d] = 0.0\n    return s",
        "calls the course reference": "from course_lib.attention import Attention\n"
                                      "from course_lib.multi_head import without_heads\n"
                                      "def silence_head(w_out, head, n_heads):\n"
                                      "    m = Attention(w_out.shape[0], n_heads=n_heads).double()\n"
                                      "    m.out.weight.data = w_out.double().clone()\n"
                                      "    return without_heads(m, [head]).out.weight.detach()",
    },
}

# The words each known-wrong answer's visible check must say, naming its bug: at least five likely
# wrong answers per exercise (tests/test_exercises.py runs them).
HINTS = {
    "split_into_heads": {
        "reshaped straight to (B, H, T, d_head)": "reshaped straight",
        "every H-th column": "not every H-th",
        "T and H not swapped": "not swapped",
        "heads concatenated along T": "joined along T",
        "B and T swapped instead": "swaps B and T",
    },
    "multi_head_attend": {
        "scaled by sqrt(D)": "not sqrt(D)",
        "merged without swapping H and T back": "swap the H and T axes back",
        "ignores the mask": "must hide keys",
        "softmax over the queries": "wrong axis",
        "no scale": "not scaled",
        "mask inverted": "mask is inverted",
        "masked scores set to 0": "set them to -inf",
        "heads not merged": "not merged",
    },
    "qk_form": {
        "W_K^T W_Q (the transpose)": "not W_K^h^T @ W_Q^h",
        "head's columns instead of rows": "owns ROWS",
        "every head at once": "mixes every head",
        "head starts at row h": "not at row h",
        "divided by sqrt(d_head)": "no 1/sqrt(d_head)",
        "heads counted from 1": "the second slice",
    },
    "silence_head": {
        "rows instead of columns": "COLUMNS",
        "zeroed in place": "an in-place operation",
        "every H-th column": "not every H-th",
        "one column only": "not the single column",
        "head starts at column h": "not at column h",
    },
}
