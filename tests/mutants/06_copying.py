"""Set 06 (copy): known-wrong answers to its exercises (MUTANTS), as source code,
and the words each likely one's visible check must say (HINTS). See tests/mutants/__init__.py."""

MUTANTS = {
    "position_query_weights": {
        "transposed": "def position_query_weights(max_len, offset, gap):\n"
                      "    w = torch.zeros(max_len, max_len, dtype=torch.float64)\n"
                      "    for p in range(max_len):\n        if 0 <= p + offset < max_len:\n"
                      "            w[p + offset, p] = gap\n    return w",
        "wraps around": "def position_query_weights(max_len, offset, gap):\n"
                        "    return gap * torch.eye(max_len, dtype=torch.float64).roll(offset, 1)",
        "forgot the gap": "def position_query_weights(max_len, offset, gap):\n"
                          "    w = torch.zeros(max_len, max_len, dtype=torch.float64)\n"
                          "    for p in range(max_len):\n        if 0 <= p + offset < max_len:\n"
                          "            w[p, p + offset] = 1.0\n    return w",
        "float32": "def position_query_weights(max_len, offset, gap):\n"
                   "    w = torch.zeros(max_len, max_len)\n"
                   "    for p in range(max_len):\n        if 0 <= p + offset < max_len:\n"
                   "            w[p, p + offset] = gap\n    return w",
        "no bounds check": "def position_query_weights(max_len, offset, gap):\n"
                           "    w = torch.zeros(max_len, max_len, dtype=torch.float64)\n"
                           "    for p in range(max_len):\n        w[p, p + offset] = gap\n    return w",
        "calls the course's position_copy_head": "from course_lib.copying import position_copy_head as h\n"
                                                 "def position_query_weights(max_len, offset, gap):\n"
                                                 "    q = h(max_len + 1, offset, slice(0, 1), slice(1, max_len + 1), gap=gap,\n"
                                                 "          dtype=torch.float64).query.weight[1:, 1:].T\n"
                                                 "    return q / math.sqrt(max_len + 1)",
    },
    "min_gap": {
        "ln(S) instead of ln(S - 1)": "def min_gap(n_keys, coherence):\n"
                                      "    return math.log(n_keys) + math.log((1 + coherence) / (1 - coherence))",
        "overlap term inverted": "def min_gap(n_keys, coherence):\n"
                                 "    return math.log(n_keys - 1) + math.log((1 - coherence) / (1 + coherence))",
        "no overlap term": "def min_gap(n_keys, coherence):\n    return math.log(n_keys - 1)",
        "no logarithm": "def min_gap(n_keys, coherence):\n"
                        "    return (n_keys - 1) * (1 + coherence) / (1 - coherence)",
        "overlap term without its log": "def min_gap(n_keys, coherence):\n"
                                        "    return math.log(n_keys - 1) + (1 + coherence) / (1 - coherence)",
        "calls the course's gap_needed": "from course_lib import copying as c\n"
                                         "def min_gap(n_keys, coherence):\n    return c.gap_needed(n_keys, coherence)",
    },
    "ov_lookup_accuracy": {
        "largest entry of each column": "def ov_lookup_accuracy(w_e, w_v, w_o, w_u):\n"
                                        "    ov = w_e @ w_v @ w_o @ w_u\n"
                                        "    return float((ov.argmax(0) == torch.arange(len(ov))).double().mean())",
        "W_V transposed": "def ov_lookup_accuracy(w_e, w_v, w_o, w_u):\n"
                          "    ov = w_e @ w_v.T @ w_o @ w_u\n"
                          "    return float((ov.argmax(-1) == torch.arange(len(ov))).double().mean())",
        "W_O left out": "def ov_lookup_accuracy(w_e, w_v, w_o, w_u):\n"
                        "    ov = w_e @ w_v @ w_u\n"
                        "    return float((ov.argmax(-1) == torch.arange(len(ov))).double().mean())",
        "count, not share": "def ov_lookup_accuracy(w_e, w_v, w_o, w_u):\n"
                            "    ov = w_e @ w_v @ w_o @ w_u\n"
                            "    return int((ov.argmax(-1) == torch.arange(len(ov))).sum())",
        "mean of booleans": "def ov_lookup_accuracy(w_e, w_v, w_o, w_u):\n"
                            "    ov = w_e @ w_v @ w_o @ w_u\n"
                            "    return float((ov.argmax(-1) == torch.arange(len(ov))).mean())",
        "calls the course's ov_copy_scores": "from course_lib.copying import ov_copy_scores\n"
                                             "def ov_lookup_accuracy(w_e, w_v, w_o, w_u):\n"
                                             "    return ov_copy_scores(w_e @ w_v @ w_o @ w_u)[0]",
    },
    "induction_targets": {
        "first occurrence": "def induction_targets(ids):\n    t = torch.full_like(ids, IGNORE)\n"
                            "    for b in range(ids.shape[0]):\n        for i in range(ids.shape[1]):\n"
                            "            for j in range(i):\n                if ids[b, j] == ids[b, i]:\n"
                            "                    t[b, i] = ids[b, j + 1]\n                    break\n    return t",
        "the token found, not the next": "def induction_targets(ids):\n    t = torch.full_like(ids, IGNORE)\n"
                                         "    for b in range(ids.shape[0]):\n        for i in range(ids.shape[1]):\n"
                                         "            for j in range(i - 1, -1, -1):\n"
                                         "                if ids[b, j] == ids[b, i]:\n"
                                         "                    t[b, i] = ids[b, j]\n                    break\n    return t",
        "matches itself": "def induction_targets(ids):\n    t = torch.full_like(ids, IGNORE)\n"
                          "    for b in range(ids.shape[0]):\n        for i in range(ids.shape[1] - 1):\n"
                          "            t[b, i] = ids[b, i + 1]\n    return t",
        "float targets": "def induction_targets(ids):\n    t = torch.full(ids.shape, -100.0)\n"
                         "    for b in range(ids.shape[0]):\n        for i in range(ids.shape[1]):\n"
                         "            for j in range(i - 1, -1, -1):\n"
                         "                if ids[b, j] == ids[b, i]:\n"
                         "                    t[b, i] = ids[b, j + 1]\n                    break\n    return t",
        "writes into ids": "def induction_targets(ids):\n    t = ids\n"
                           "    for b in range(ids.shape[0]):\n        for i in range(ids.shape[1]):\n"
                           "            found = IGNORE\n            for j in range(i - 1, -1, -1):\n"
                           "                if ids[b, j] == ids[b, i]:\n"
                           "                    found = ids[b, j + 1]\n                    break\n"
                           "            t[b, i] = found\n    return t",
        "search starts at j = i": "def induction_targets(ids):\n    t = torch.full_like(ids, IGNORE)\n"
                                  "    for b in range(ids.shape[0]):\n        for i in range(ids.shape[1]):\n"
                                  "            for j in range(i, -1, -1):\n"
                                  "                if ids[b, j] == ids[b, i]:\n"
                                  "                    t[b, i] = ids[b, j + 1]\n                    break\n    return t",
        "zero where no target": "def induction_targets(ids):\n    t = torch.zeros_like(ids)\n"
                                "    for b in range(ids.shape[0]):\n        for i in range(ids.shape[1]):\n"
                                "            for j in range(i - 1, -1, -1):\n"
                                "                if ids[b, j] == ids[b, i]:\n"
                                "                    t[b, i] = ids[b, j + 1]\n                    break\n    return t",
    },
}

# The words each known-wrong answer's visible check must say, naming its bug: at least five likely
# wrong answers per exercise (tests/test_exercises.py runs them).
HINTS = {
    "position_query_weights": {
        "transposed": "the transpose",
        "wraps around": "wraps around",
        "forgot the gap": "the gap is missing",
        "float32": "a new tensor made without dtype=x.dtype",
        "no bounds check": "past the last position",
    },
    "min_gap": {
        "ln(S) instead of ln(S - 1)": "not ln(S - 1)",
        "overlap term inverted": "not its inverse",
        "no overlap term": "must also beat the overlap",
        "no logarithm": "the logarithm is missing",
        "overlap term without its log": "is a log too",
    },
    "ov_lookup_accuracy": {
        "largest entry of each column": "each COLUMN",
        "W_V transposed": "W_V is used transposed",
        "W_O left out": "W_O is left out",
        "count, not share": "not their share",
        "mean of booleans": "mean of a bool tensor",
    },
    "induction_targets": {
        "first occurrence": "FIRST earlier occurrence",
        "the token found, not the next": "the token found",
        "matches itself": "its own next token",
        "float targets": "a float tensor where ids belong",
        "writes into ids": "an in-place operation",
        "search starts at j = i": "matched j = i",
        "zero where no target": "IGNORE (-100), not 0",
    },
}

# Ready-made code under a name no reading of the source catches: its numbers are right, so only what
# runs can refuse it, with a message saying so.
READY_MADE = {
    "min_gap": {
        "the course's reference in a thread": (
            "import threading\nfrom course_lib import copying as c\ndef min_gap(n_keys, coherence):\n    out = []\n"
            "    t = threading.Thread(target=lambda: out.append(getattr(c, 'gap_' + 'needed')(n_keys, coherence)))\n"
            "    t.start(), t.join()\n    return out[0]"),
    },
}
