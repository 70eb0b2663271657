"""Set 01 (attention scores): known-wrong answers to its exercises (MUTANTS), as source code,
and the words each likely one's visible check must say (HINTS). See tests/mutants/__init__.py."""

MUTANTS = {
    "softmax_rows": {
        "no max subtraction": "def softmax_rows(x):\n    e = torch.exp(x)\n    return e / e.sum(-1, keepdim=True)",
        "wrong axis": "def softmax_rows(x):\n    e = torch.exp(x - x.amax(0, keepdim=True))\n    return e / e.sum(0, keepdim=True)",
        "max of the whole tensor": "def softmax_rows(x):\n    e = torch.exp(x - x.max())\n    return e / e.sum(-1, keepdim=True)",
        "no division by the row sum": "def softmax_rows(x):\n    return torch.exp(x - x.amax(-1, keepdim=True))",
        "max without keepdim": "def softmax_rows(x):\n    e = torch.exp(x - x.amax(-1))\n    return e / e.sum(-1, keepdim=True)",
        "sum without keepdim": "def softmax_rows(x):\n    e = torch.exp(x - x.amax(-1, keepdim=True))\n    return e / e.sum(-1)",
        "changes x in place": "def softmax_rows(x):\n    x -= x.amax(-1, keepdim=True)\n    x.exp_()\n"
                              "    return x / x.sum(-1, keepdim=True)",
        "returns float64": "def softmax_rows(x):\n    x = x.double()\n"
                           "    e = torch.exp(x - x.amax(-1, keepdim=True))\n    return e / e.sum(-1, keepdim=True)",
        "calls torch.softmax": "def softmax_rows(x):\n    return torch.softmax(x, -1)",
        "calls the course reference": "from course_lib.attention_scores import softmax as my_softmax\n"
                                      "def softmax_rows(x):\n    return my_softmax(x)",
    },
    "score_matrix": {
        "no scale": "def score_matrix(q, k):\n    return q @ k.transpose(-2, -1)",
        "divides by d_k": "def score_matrix(q, k):\n    return q @ k.transpose(-2, -1) / q.shape[-1]",
        "scales by the key count": "def score_matrix(q, k):\n    return q @ k.transpose(-2, -1) / math.sqrt(k.shape[-2])",
        "multiplies by sqrt(d_k)": "def score_matrix(q, k):\n    return q @ k.transpose(-2, -1) * math.sqrt(q.shape[-1])",
        "k not transposed": "def score_matrix(q, k):\n    return q @ k / math.sqrt(q.shape[-1])",
        "keys times queries": "def score_matrix(q, k):\n    return k @ q.transpose(-2, -1) / math.sqrt(q.shape[-1])",
    },
    # Written with softmax_rows or exp and sum, not torch.softmax (which the hidden tests refuse on its
    # own), so that the hidden tests are seen to catch each one's own bug.
    "attend": {
        "no scale": "def attend(q, k, v, mask=None):\n    s = q @ k.transpose(-2, -1)\n"
                    "    if mask is not None: s = s.masked_fill(~mask, -math.inf)\n"
                    "    w = softmax_rows(s)\n    return w @ v, w",
        "softmax over the wrong axis": "def attend(q, k, v, mask=None):\n    s = score_matrix(q, k)\n"
                                       "    if mask is not None: s = s.masked_fill(~mask, -math.inf)\n"
                                       "    e = torch.exp(s - s.amax(-2, keepdim=True))\n"
                                       "    w = (e / e.sum(-2, keepdim=True)).nan_to_num(0)\n    return w @ v, w",
        "mask applied after softmax": "def attend(q, k, v, mask=None):\n    w = softmax_rows(score_matrix(q, k))\n"
                                      "    if mask is not None: w = w * mask\n    return w @ v, w",
        "mask that yields NaN": "def attend(q, k, v, mask=None):\n    s = score_matrix(q, k)\n"
                                "    if mask is not None: s = s.masked_fill(~mask, -math.inf)\n"
                                "    e = torch.exp(s - s.amax(-1, keepdim=True))\n"
                                "    w = e / e.sum(-1, keepdim=True)\n    return w @ v, w",
        "mask inverted": "def attend(q, k, v, mask=None):\n    s = score_matrix(q, k)\n"
                         "    if mask is not None: s = s.masked_fill(mask, -math.inf)\n"
                         "    w = softmax_rows(s)\n    return w @ v, w",
        "-1e9 instead of -inf": "def attend(q, k, v, mask=None):\n    s = score_matrix(q, k)\n"
                                "    if mask is not None: s = s.masked_fill(~mask, -1e9)\n"
                                "    w = softmax_rows(s)\n    return w @ v, w",
        "returns (weights, output)": "def attend(q, k, v, mask=None):\n    s = score_matrix(q, k)\n"
                                     "    if mask is not None: s = s.masked_fill(~mask, -math.inf)\n"
                                     "    w = softmax_rows(s)\n    return w, w @ v",
        "calls torch's attention": "import torch.nn.functional as F\ndef attend(q, k, v, mask=None):\n"
                                   "    s = score_matrix(q, k)\n    w = softmax_rows(s if mask is None else s.masked_fill(~mask, -1e9))\n"
                                   "    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask), w",
    },
    "row_entropy": {
        "0 log 0 gives NaN": "def row_entropy(w):\n    return -(w * torch.log(w)).sum(-1)",
        "missing minus sign": "def row_entropy(w):\n    return (w * torch.log(w.clamp_min(1e-45))).sum(-1)",
        "log base 2": "def row_entropy(w):\n    return -(w * torch.log2(w.clamp_min(1e-45))).sum(-1)",
        "sum over the wrong axis": "def row_entropy(w):\n    return -(w * torch.log(w.clamp_min(1e-45))).sum(0)",
        "mean instead of sum": "def row_entropy(w):\n    return -(w * torch.log(w.clamp_min(1e-45))).mean(-1)",
        "keepdim=True": "def row_entropy(w):\n    return -(w * torch.log(w.clamp_min(1e-45))).sum(-1, keepdim=True)",
        "changes w in place": "def row_entropy(w):\n    w[w == 0] = 1.0\n    return -(w * w.log()).sum(-1)",
    },
}

# The likely wrong answers above, each with words its visible check's message must contain
# (tests/test_exercises.py asks for at least five per exercise).
HINTS = {
    "softmax_rows": {
        "no max subtraction": "no max subtraction",
        "max of the whole tensor": "max of the whole tensor",
        "wrong axis": "softmax over the wrong axis",
        "no division by the row sum": "forget to divide by the row sum",
        "max without keepdim": "keepdim=True",
        "sum without keepdim": "keepdim=True",
        "changes x in place": "an in-place operation",
        "returns float64": "a new tensor made without dtype=x.dtype",
    },
    "score_matrix": {
        "no scale": "did you divide by sqrt(d_k)?",
        "divides by d_k": "divided by d_k instead of sqrt(d_k)",
        "scales by the key count": "the number of keys",
        "multiplies by sqrt(d_k)": "multiplied by sqrt(d_k)",
        "k not transposed": "k must be transposed",
        "keys times queries": "rows and columns swapped",
    },
    "attend": {
        "no scale": "did you divide by sqrt(d_k)?",
        "softmax over the wrong axis": "softmax over the wrong axis",
        "mask applied after softmax": "mask applied after the softmax",
        "mask that yields NaN": "0/0 = NaN",
        "mask inverted": "mask inverted",
        "-1e9 instead of -inf": "(-1e9) instead of -inf",
        "returns (weights, output)": "the results in the wrong order",
    },
    "row_entropy": {
        "0 log 0 gives NaN": "0 * log 0 = 0",
        "missing minus sign": "forgot the minus sign",
        "log base 2": "log2 instead of the natural log",
        "sum over the wrong axis": "summed over the wrong axis",
        "mean instead of sum": "the mean over the weights instead of the sum",
        "keepdim=True": "keepdim=True",
        "changes w in place": "an in-place operation",
    },
}


# Right answers written in other ways must keep full credit.
ACCEPTED = {
    "softmax_rows": {
        "own helper named softmax": "def softmax(x):\n    e = torch.exp(x - x.max(-1, keepdim=True).values)\n"
                                    "    return e / e.sum(-1, keepdim=True)\n"
                                    "def softmax_rows(x):\n    return softmax(x)",
    },
    "attend": {
        "uses torch.softmax (allowed here)": "def attend(q, k, v, mask=None):\n    s = score_matrix(q, k)\n"
                                             "    if mask is not None: s = s.masked_fill(~mask, -math.inf)\n"
                                             "    w = torch.softmax(s, -1).nan_to_num(0.0)\n    return w @ v, w",
    },
}

# Ready-made code under a name no reading of the source catches (an alias, a helper, a thread, the
# dispatcher's name): its numbers are right, so only what runs can refuse it, with a message saying so.
READY_MADE = {
    "softmax_rows": {
        "calls torch.softmax through its own helper": "def helper(x):\n    return torch.softmax(x, -1)\n"
                                                      "def softmax_rows(x):\n    return helper(x)",
        "own helper named softmax calling torch's": "def softmax(x):\n    return torch.softmax(x, -1)\n"
                                                    "def softmax_rows(x):\n    return softmax(x)",
        "import alias": "from torch.nn.functional import softmax as smax\ndef softmax_rows(x):\n    return smax(x, -1)",
        "default argument": "import torch.nn.functional as F\ndef softmax_rows(x, f=F.softmax):\n    return f(x, dim=-1)",
        "getattr": "import torch.nn.functional as F\ndef softmax_rows(x):\n    return getattr(F, 'soft' + 'max')(x, -1)",
        "course_lib default": "from course_lib import attention_scores as A\ndef softmax_rows(x, f=A.softmax):\n    return f(x)",
        "in another thread": "from concurrent.futures import ThreadPoolExecutor\npool = ThreadPoolExecutor(1)\n"
                             "def softmax_rows(x):\n    return pool.submit(getattr(torch.special, 'soft' + 'max'), x, -1).result()",
        "profiling switched off": "import sys\ndef softmax_rows(x):\n    sys.setprofile(None)\n"
                                  "    return torch._softmax(x, -1, False)",
        "vmap over the aten kernel": "def softmax_rows(x):\n    rows = x.reshape(-1, x.shape[-1])\n"
                                     "    out = torch.vmap(lambda r: torch.ops.aten._softmax(r, -1, False))(rows)\n"
                                     "    return out.reshape(x.shape)",
    },
    "attend": {
        "the math kernel of torch's attention, by its dispatcher name": (
            "def attend(q, k, v, mask=None):\n"
            "    bias = None if mask is None else torch.zeros(mask.shape).masked_fill(~mask, float('-inf'))\n"
            "    out, w = torch.ops.aten._scaled_dot_product_attention_math(q, k, v, bias)\n"
            "    keep = torch.ones(()) if mask is None else mask.any(-1, keepdim=True)\n"
            "    return torch.where(keep, out, 0.0), torch.where(keep, w, 0.0)"),
        "multi_head_attention_forward": (
            "import torch.nn.functional as F\ndef attend(q, k, v, mask=None):\n"
            "    d, e = q.shape[-1], torch.eye(q.shape[-1])\n"
            "    q2, k2, v2 = (x.reshape(-1, x.shape[-2], x.shape[-1]).transpose(0, 1) for x in (q, k, v))\n"
            "    out, w = F.multi_head_attention_forward(q2, k2, v2, d, 1, None, None, None, None, False, 0.0, e, None,\n"
            "        training=False, use_separate_proj_weight=True, q_proj_weight=e, k_proj_weight=e, v_proj_weight=e)\n"
            "    return out.transpose(0, 1).reshape(q.shape[:-1] + v.shape[-1:]), w.reshape(q.shape[:-1] + k.shape[-2:-1])"),
        "module-level alias": "import torch.nn.functional as F\nsdpa = F.scaled_dot_product_attention\n"
                              "def attend(q, k, v, mask=None):\n    w = softmax_rows(score_matrix(q, k).masked_fill(~mask, -1e9) "
                              "if mask is not None else score_matrix(q, k))\n    return sdpa(q, k, v, attn_mask=mask).nan_to_num(0), w",
    },
}
