"""Set 03 (permutation): known-wrong answers to its exercises (MUTANTS), as source code,
and the words each likely one's visible check must say (HINTS). See tests/mutants/__init__.py."""

MUTANTS = {
    "permute_rows": {
        "inverse permutation": "def permute_rows(x, perm):\n    out = torch.empty_like(x)\n"
                               "    out[..., perm, :] = x\n    return out",
        "permutes the features": "def permute_rows(x, perm):\n    return x[..., perm]",
        "indexes the first axis": "def permute_rows(x, perm):\n    return x[perm]",
        "indexes axis 1": "def permute_rows(x, perm):\n    return x[:, perm]",
        "changes x in place": "def permute_rows(x, perm):\n    x[...] = x[..., perm, :].clone()\n    return x",
        "calls the course reference": "from course_lib.permutation import permute_tokens as reorder\n"
                                      "def permute_rows(x, perm):\n    return reorder(x, perm)",
    },
    "equivariance_gap": {
        "compares with the unpermuted output": "def equivariance_gap(f, x, perm):\n"
                                               "    return float((f(permute_rows(x, perm)) - f(x)).abs().max())",
        "inverse permutation on the output": "def equivariance_gap(f, x, perm):\n"
                                             "    return float((f(permute_rows(x, perm)) - permute_rows(f(x), perm.argsort())).abs().max())",
        "mean instead of max": "def equivariance_gap(f, x, perm):\n"
                               "    return float((f(permute_rows(x, perm)) - permute_rows(f(x), perm)).abs().mean())",
        "no absolute value": "def equivariance_gap(f, x, perm):\n"
                             "    return float((f(permute_rows(x, perm)) - permute_rows(f(x), perm)).max())",
        "norm instead of max": "def equivariance_gap(f, x, perm):\n"
                               "    return float((f(permute_rows(x, perm)) - permute_rows(f(x), perm)).norm())",
        "calls the course reference": "from course_lib.permutation import equivariance_gap as gap\n"
                                      "def equivariance_gap(f, x, perm):\n    return gap(f, x, perm)",
    },
    "biased_attention": {
        "value bias forgotten": "def biased_attention(x, w_q, w_k, w_v, b_q, b_k, b_v):\n"
                                "    q, k, v = x @ w_q + b_q, x @ w_k + b_k, x @ w_v\n"
                                "    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), -1)\n    return w @ v, w",
        "query bias forgotten": "def biased_attention(x, w_q, w_k, w_v, b_q, b_k, b_v):\n"
                                "    q, k, v = x @ w_q, x @ w_k + b_k, x @ w_v + b_v\n"
                                "    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), -1)\n    return w @ v, w",
        "no scale": "def biased_attention(x, w_q, w_k, w_v, b_q, b_k, b_v):\n"
                    "    q, k, v = x @ w_q + b_q, x @ w_k + b_k, x @ w_v + b_v\n"
                    "    w = torch.softmax(q @ k.transpose(-2, -1), -1)\n    return w @ v, w",
        "softmax over the queries": "def biased_attention(x, w_q, w_k, w_v, b_q, b_k, b_v):\n"
                                    "    q, k, v = x @ w_q + b_q, x @ w_k + b_k, x @ w_v + b_v\n"
                                    "    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), -2)\n    return w @ v, w",
        "scaled by sqrt(D)": "def biased_attention(x, w_q, w_k, w_v, b_q, b_k, b_v):\n"
                             "    q, k, v = x @ w_q + b_q, x @ w_k + b_k, x @ w_v + b_v\n"
                             "    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(x.shape[-1]), -1)\n    return w @ v, w",
        "returns (weights, output)": "def biased_attention(x, w_q, w_k, w_v, b_q, b_k, b_v):\n"
                                     "    q, k, v = x @ w_q + b_q, x @ w_k + b_k, x @ w_v + b_v\n"
                                     "    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), -1)\n"
                                     "    return w, w @ v",
        "calls torch's attention": "import torch.nn.functional as F\n"
                                   "def biased_attention(x, w_q, w_k, w_v, b_q, b_k, b_v):\n"
                                   "    q, k, v = x @ w_q + b_q, x @ w_k + b_k, x @ w_v + b_v\n"
                                   "    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), -1)\n"
                                   "    return F.scaled_dot_product_attention(q, k, v), w",
        "calls the course reference": "from course_lib.permutation import self_attention as sa\n"
                                      "def biased_attention(x, w_q, w_k, w_v, b_q, b_k, b_v):\n"
                                      "    return sa(x, w_q, w_k, w_v, b_q, b_k, b_v)",
    },
    "same_multiset": {
        "compares all numbers sorted": "def same_multiset(a, b, atol=1e-6):\n    if a.shape != b.shape: return False\n"
                                       "    return torch.allclose(a.flatten().sort().values, b.flatten().sort().values, atol=atol)",
        "compares row by row in order": "def same_multiset(a, b, atol=1e-6):\n"
                                        "    return a.shape == b.shape and torch.allclose(a, b, atol=atol)",
        "a set, not a multiset": "def same_multiset(a, b, atol=1e-6):\n    if a.shape != b.shape: return False\n"
                                 "    return all(any(torch.allclose(r, s, atol=atol) for s in b) for r in a)",
        "compares mean-pooled rows": "def same_multiset(a, b, atol=1e-6):\n"
                                     "    return a.shape == b.shape and torch.allclose(a.mean(0), b.mean(0), atol=atol)",
        "exact equality": "def same_multiset(a, b, atol=1e-6):\n    if a.shape != b.shape: return False\n"
                          "    rows = [tuple(r.tolist()) for r in a]\n"
                          "    return sorted(rows) == sorted(tuple(r.tolist()) for r in b)",
        "calls the course reference": "from course_lib.permutation import match_rows as pair\n"
                                      "def same_multiset(a, b, atol=1e-6):\n"
                                      "    return a.shape == b.shape and pair(a, b, atol) is not None",
    },
    "bias_left_by_norm": {
        "LayerNorm cancels the whole bias": "def bias_left_by_norm(b, norm):\n    return torch.zeros_like(b)",
        "LayerNorm keeps the whole bias": "def bias_left_by_norm(b, norm):\n"
                                          "    return torch.zeros_like(b) if norm == 'batch' else b.clone()",
        "norms swapped": "def bias_left_by_norm(b, norm):\n"
                         "    return torch.zeros_like(b) if norm == 'layer' else b - b.mean()",
        "divides by the std too": "def bias_left_by_norm(b, norm):\n    if norm == 'batch': return torch.zeros_like(b)\n"
                                  "    c = b - b.mean()\n    return c / c.pow(2).mean().sqrt()",
        "b - mean(b) for both norms": "def bias_left_by_norm(b, norm):\n    return b - b.mean()",
        "returns the removed mean": "def bias_left_by_norm(b, norm):\n"
                                    "    return torch.zeros_like(b) if norm == 'batch' else torch.full_like(b, float(b.mean()))",
        "calls the course reference": "from course_lib.permutation import bias_after_norm as left\n"
                                      "def bias_left_by_norm(b, norm):\n    return left(b, norm)",
    },
}

# The likely wrong answers above, each with words its visible check's message must contain
# (tests/test_exercises.py asks for at least five per exercise).
HINTS = {
    "permute_rows": {
        "inverse permutation": "you used the inverse permutation",
        "permutes the features": "you permuted the columns (features)",
        "indexes the first axis": "tokens are the second-to-last axis",
        "indexes axis 1": "you permuted the columns (features)",  # X is (T, D): axis 1 is the features
        "changes x in place": "an in-place operation",
    },
    "equivariance_gap": {
        "compares with the unpermuted output": "you compared f(permuted x) with f(x) itself",
        "inverse permutation on the output": "you permuted f(x) with the inverse permutation",
        "mean instead of max": "you took the mean of the differences",
        "no absolute value": "you forgot the absolute value",
        "norm instead of max": "you took the norm of the differences",
    },
    "biased_attention": {
        "value bias forgotten": "the value bias is missing",
        "query bias forgotten": "the query bias is missing",
        "no scale": "did you divide the scores by sqrt(d_k)?",
        "softmax over the queries": "softmax over the wrong axis",
        "scaled by sqrt(D)": "divided by sqrt(D)",
        "returns (weights, output)": "the results in the wrong order",
    },
    "same_multiset": {
        "compares all numbers sorted": "you compared all numbers sorted together",
        "compares row by row in order": "the same rows in another order are the same multiset",
        "a set, not a multiset": "each row of b may be used once",
        "compares mean-pooled rows": "equal means (mean-pooled rows) do not make equal multisets",
        "exact equality": "compare within atol",
    },
    "bias_left_by_norm": {
        "LayerNorm cancels the whole bias": "LayerNorm removes only the mean of the bias",
        "LayerNorm keeps the whole bias": "so mean(b) is removed",
        "norms swapped": "BatchNorm subtracts each feature's mean over the batch",
        "divides by the std too": "not the bias alone",
        "b - mean(b) for both norms": "BatchNorm subtracts each feature's mean over the batch",
        "returns the removed mean": "mean(b) is the part LayerNorm removes",
    },
}


# Right answers written in other ways must keep full credit. The lesson's point, seen from the
# grader: an answer without b_k gets the same numbers.
ACCEPTED = {
    "biased_attention": {
        "no key bias": "def biased_attention(x, w_q, w_k, w_v, b_q, b_k, b_v):\n"
                       "    q, k, v = x @ w_q + b_q, x @ w_k, x @ w_v + b_v\n"
                       "    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), -1)\n    return w @ v, w",
    },
}
