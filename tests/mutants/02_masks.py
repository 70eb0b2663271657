"""Set 02 (masks): known-wrong answers to its exercises (MUTANTS), as source code,
and the words each likely one's visible check must say (HINTS). See tests/mutants/__init__.py."""

_CROSS = ("def cross_attend(target, source, w_q, w_k, w_v, source_lengths):\n"
          "    q, k, v = {q} @ w_q, {kv} @ w_k, {kv} @ w_v\n"
          "    scores = q @ k.transpose(-2, -1){scale}\n"
          "    weights = masked_softmax(scores, {mask})\n"
          "    return weights @ v, weights")
_PAD = "padding(source_lengths, source.shape[1])"
MUTANTS = {
    "causal": {
        "diagonal excluded": "def causal(T):\n    return torch.ones(T, T, dtype=torch.bool).tril(-1)",
        "upper triangle": "def causal(T):\n    return torch.ones(T, T, dtype=torch.bool).triu()",
        "float 0/1 instead of bool": "def causal(T):\n    return torch.ones(T, T).tril()",
        "inverted (True = masked)": "def causal(T):\n    return torch.ones(T, T, dtype=torch.bool).triu(1)",
        "one future key allowed": "def causal(T):\n    return torch.ones(T, T, dtype=torch.bool).tril(1)",
        "additive mask (0 and -inf)": "def causal(T):\n    future = torch.ones(T, T, dtype=torch.bool).triu(1)\n"
                                      "    return torch.zeros(T, T).masked_fill(future, -math.inf)",
        "calls the course reference": "from course_lib.masks import causal_mask as cm\n"
                                      "def causal(T):\n    return cm(T)",
    },
    "padding": {
        "no query axis": "def padding(lengths, S):\n    return torch.arange(S)[None, :] < torch.tensor(lengths)[:, None]",
        "off by one": "def padding(lengths, S):\n    return (torch.arange(S)[None, :] <= torch.tensor(lengths)[:, None])[:, None, :]",
        "inverted": "def padding(lengths, S):\n    return (torch.arange(S)[None, :] >= torch.tensor(lengths)[:, None])[:, None, :]",
        "padding at the start": "def padding(lengths, S):\n"
                                "    return (torch.arange(S)[None, :] >= S - torch.tensor(lengths)[:, None])[:, None, :]",
        "size-1 axis last": "def padding(lengths, S):\n"
                            "    return (torch.arange(S)[None, :] < torch.tensor(lengths)[:, None])[:, :, None]",
        "size-1 axis first": "def padding(lengths, S):\n    return (torch.arange(S)[None, :] < torch.tensor(lengths)[:, None])[None]",
        "float 0/1 instead of bool": "def padding(lengths, S):\n"
                                     "    return (torch.arange(S)[None, :] < torch.tensor(lengths)[:, None]).float()[:, None, :]",
        "calls the course reference": "import course_lib.masks as M\n"
                                      "def padding(lengths, S):\n    return M.padding_mask(lengths, S)",
    },
    "masked_softmax": {
        "NaN on fully masked rows": "def masked_softmax(scores, mask):\n"
                                    "    return torch.softmax(scores.masked_fill(~mask, -math.inf), -1)",
        "mask applied after softmax": "def masked_softmax(scores, mask):\n    return torch.softmax(scores, -1) * mask",
        "-1e9 instead of -inf": "def masked_softmax(scores, mask):\n"
                                "    return torch.softmax(scores.masked_fill(~mask, -1e9), -1)",
        "inverted mask": "def masked_softmax(scores, mask):\n"
                         "    return torch.softmax(scores.masked_fill(mask, -math.inf), -1).nan_to_num(0.0)",
        "scores multiplied by the mask": "def masked_softmax(scores, mask):\n    return torch.softmax(scores * mask, -1)",
        "softmax over the queries": "def masked_softmax(scores, mask):\n"
                                    "    w = torch.softmax(scores.masked_fill(~mask, -math.inf), -2)\n"
                                    "    return torch.where(mask.any(-1, keepdim=True), w, 0.0)",
        "calls the course reference": "from course_lib.attention_scores import softmax as sm\n"
                                      "def masked_softmax(scores, mask):\n"
                                      "    return sm(scores.masked_fill(~mask, -math.inf))",
    },
    "additive_scores": {
        "no tanh": "def additive_scores(q, k, w_q, w_k, w):\n"
                   "    return ((q @ w_q)[..., :, None, :] + (k @ w_k)[..., None, :, :]) @ w",
        "tanh after the dot product with w": "def additive_scores(q, k, w_q, w_k, w):\n"
                                             "    return torch.tanh(((q @ w_q)[..., :, None, :] + (k @ w_k)[..., None, :, :]) @ w)",
        "rows and columns swapped": "def additive_scores(q, k, w_q, w_k, w):\n"
                                    "    return (torch.tanh((q @ w_q)[..., :, None, :] + (k @ w_k)[..., None, :, :]) @ w)"
                                    ".transpose(-2, -1)",
        "projections multiplied": "def additive_scores(q, k, w_q, w_k, w):\n"
                                  "    return torch.tanh((q @ w_q)[..., :, None, :] * (k @ w_k)[..., None, :, :]) @ w",
        "no dot product with w": "def additive_scores(q, k, w_q, w_k, w):\n"
                                 "    return torch.tanh((q @ w_q)[..., :, None, :] + (k @ w_k)[..., None, :, :])",
        "no broadcasting": "def additive_scores(q, k, w_q, w_k, w):\n    return torch.tanh(q @ w_q + k @ w_k) @ w",
        "calls the course reference": "from course_lib.checks.masks import reference_additive_scores as r\n"
                                      "def additive_scores(q, k, w_q, w_k, w):\n    return r(q, k, w_q, w_k, w)",
    },
    "cross_attend": {
        "causal mask in cross-attention": _CROSS.format(
            q="target", kv="source", scale=" / math.sqrt(q.shape[-1])",
            mask=f"{_PAD} & torch.ones(target.shape[1], source.shape[1], dtype=torch.bool).tril()"),
        "no padding mask": _CROSS.format(q="target", kv="source", scale=" / math.sqrt(q.shape[-1])",
                                         mask="torch.ones_like(scores, dtype=torch.bool)"),
        "queries from the source": _CROSS.format(q="source", kv="target", scale=" / math.sqrt(q.shape[-1])",
                                                 mask="padding(source_lengths, target.shape[1])"),
        "no scale": _CROSS.format(q="target", kv="source", scale="", mask=_PAD),
        "values made with w_k": _CROSS.format(q="target", kv="source", scale=" / math.sqrt(q.shape[-1])", mask=_PAD)
                                .replace("source @ w_v", "source @ w_k"),
        "returns (weights, output)": _CROSS.format(q="target", kv="source", scale=" / math.sqrt(q.shape[-1])", mask=_PAD)
                                     .replace("return weights @ v, weights", "return weights, weights @ v"),
        "calls torch's attention": "import torch.nn.functional as F\n"
                                   "def cross_attend(target, source, w_q, w_k, w_v, source_lengths):\n"
                                   "    q, k, v = target @ w_q, source @ w_k, source @ w_v\n"
                                   f"    keep = {_PAD}\n"
                                   "    weights = masked_softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), keep)\n"
                                   "    return F.scaled_dot_product_attention(q, k, v, attn_mask=keep), weights",
    },
}

# The likely wrong answers above, each with words its visible check's message must contain
# (tests/test_exercises.py asks for at least five per exercise).
HINTS = {
    "causal": {
        "diagonal excluded": "the diagonal is excluded",
        "upper triangle": "upper triangle",
        "float 0/1 instead of bool": "0/1 numbers where a boolean tensor belongs",
        "inverted (True = masked)": "inverted: True must mean 'may attend'",
        "one future key allowed": "one future key allowed",
        "additive mask (0 and -inf)": "an additive mask",
    },
    "padding": {
        "no query axis": "the query axis is missing",
        "off by one": "off by one",
        "inverted": "inverted: True must mark the real tokens",
        "padding at the start": "padding at the start",
        "size-1 axis last": "the axis of size 1 is in the wrong place",
        "size-1 axis first": "the axis of size 1 is in the wrong place",
        "float 0/1 instead of bool": "0/1 numbers where a boolean tensor belongs",
    },
    "masked_softmax": {
        "NaN on fully masked rows": "0/0 = NaN",
        "mask applied after softmax": "mask applied after the softmax",
        "-1e9 instead of -inf": "(-1e9) instead of -inf",
        "inverted mask": "mask inverted",
        "scores multiplied by the mask": "multiplied the scores by the mask",
        "softmax over the queries": "softmax over the wrong axis",
    },
    "additive_scores": {
        "no tanh": "no tanh",
        "tanh after the dot product with w": "tanh applied after the dot product with w",
        "rows and columns swapped": "rows and columns swapped",
        "projections multiplied": "multiplied the two projections",
        "no dot product with w": "the hidden axis is still there",
        "no broadcasting": "to pair every query with every key",
    },
    "cross_attend": {
        "causal mask in cross-attention": "a causal mask in cross-attention",
        "no padding mask": "no padding mask",
        "queries from the source": "queries and keys swapped",
        "no scale": "did you divide by sqrt(d_k)?",
        "values made with w_k": "values made with w_k",
        "returns (weights, output)": "the results in the wrong order",
    },
}
