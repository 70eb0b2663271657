"""Set 09 (the Transformer): known-wrong answers to its exercises (MUTANTS), as source code,
and the words each likely one's visible check must say (HINTS). See tests/mutants/__init__.py."""

MUTANTS = {
    "feed_forward": {
        "no ReLU": "def feed_forward(x, w1, b1, w2, b2):\n    return (x @ w1 + b1) @ w2 + b2",
        "ReLU on the output too": "def feed_forward(x, w1, b1, w2, b2):\n"
                                  "    return torch.relu(torch.relu(x @ w1 + b1) @ w2 + b2)",
        "b1 after the ReLU": "def feed_forward(x, w1, b1, w2, b2):\n    return (torch.relu(x @ w1) + b1) @ w2 + b2",
        "b2 forgotten": "def feed_forward(x, w1, b1, w2, b2):\n    return torch.relu(x @ w1 + b1) @ w2",
        "Python's max": "def feed_forward(x, w1, b1, w2, b2):\n    return max(0, x @ w1 + b1) @ w2 + b2",
        "nn.Linear's transpose": "def feed_forward(x, w1, b1, w2, b2):\n"
                                 "    return torch.relu(x @ w1.T + b1) @ w2.T + b2",
        "calls the course reference": "from course_lib.transformer import FeedForward\n"
                                      "def feed_forward(x, w1, b1, w2, b2):\n"
                                      "    f = FeedForward(w1.shape[0], w1.shape[1]).to(x.dtype)\n"
                                      "    with torch.no_grad():\n"
                                      "        f.linear1.weight.copy_(w1.T); f.linear1.bias.copy_(b1)\n"
                                      "        f.linear2.weight.copy_(w2.T); f.linear2.bias.copy_(b2)\n"
                                      "        return f(x)",
    },
    "sublayer": {
        "placements swapped": "def sublayer(x, f, norm, norm_first):\n"
                              "    return norm(x + f(x)) if norm_first else x + f(norm(x))",
        "post-LN without the residual": "def sublayer(x, f, norm, norm_first):\n"
                                        "    return x + f(norm(x)) if norm_first else norm(f(x))",
        "pre-LN normalises the sum": "def sublayer(x, f, norm, norm_first):\n"
                                     "    return norm(x + f(norm(x))) if norm_first else norm(x + f(x))",
        "pre-LN adds norm(x)": "def sublayer(x, f, norm, norm_first):\n"
                               "    h = norm(x) if norm_first else x\n"
                               "    return h + f(h) if norm_first else norm(x + f(x))",
        "pre-LN without the residual": "def sublayer(x, f, norm, norm_first):\n"
                                       "    return f(norm(x)) if norm_first else norm(x + f(x))",
        "post-LN normalises x, not the sum": "def sublayer(x, f, norm, norm_first):\n"
                                             "    return x + f(norm(x)) if norm_first else norm(x) + f(x)",
        "norm_first ignored": "def sublayer(x, f, norm, norm_first):\n    return norm(x + f(x))",
    },
    "greedy_tokens": {
        "reads the first row": "def greedy_tokens(decoder, bos, steps):\n    p = bos\n"
                               "    for _ in range(steps):\n"
                               "        p = torch.cat([p, decoder(p)[:, 0].argmax(-1, keepdim=True)], 1)\n"
                               "    return p[:, 1:]",
        "keeps bos": "def greedy_tokens(decoder, bos, steps):\n    p = bos\n"
                     "    for _ in range(steps - 1):\n"
                     "        p = torch.cat([p, decoder(p)[:, -1].argmax(-1, keepdim=True)], 1)\n"
                     "    return p",
        "prefix never grows": "def greedy_tokens(decoder, bos, steps):\n"
                              "    t = decoder(bos)[:, -1].argmax(-1, keepdim=True)\n"
                              "    return t.repeat(1, steps)",
        "returns bos too": "def greedy_tokens(decoder, bos, steps):\n    p = bos\n"
                           "    for _ in range(steps):\n"
                           "        p = torch.cat([p, decoder(p)[:, -1].argmax(-1, keepdim=True)], 1)\n"
                           "    return p",
        "one step short": "def greedy_tokens(decoder, bos, steps):\n    p = bos\n"
                          "    for _ in range(steps - 1):\n"
                          "        p = torch.cat([p, decoder(p)[:, -1].argmax(-1, keepdim=True)], 1)\n"
                          "    return p[:, 1:]",
        "feeds back only the last token": "def greedy_tokens(decoder, bos, steps):\n    token, out = bos, []\n"
                                          "    for _ in range(steps):\n"
                                          "        token = decoder(token)[:, -1].argmax(-1, keepdim=True)\n"
                                          "        out.append(token)\n    return torch.cat(out, 1)",
        "token without keepdim": "def greedy_tokens(decoder, bos, steps):\n    p = bos\n"
                                 "    for _ in range(steps):\n"
                                 "        p = torch.cat([p, decoder(p)[:, -1].argmax(-1)], 1)\n"
                                 "    return p[:, 1:]",
    },
    "exact_match_rate": {
        "per-token accuracy": "def exact_match_rate(predicted, answer):\n"
                              "    return (predicted == answer).double().mean().item()",
        "any token right": "def exact_match_rate(predicted, answer):\n"
                           "    return (predicted == answer).any(-1).double().mean().item()",
        "counts instead of share": "def exact_match_rate(predicted, answer):\n"
                                   "    return float((predicted == answer).all(-1).sum())",
        "all along axis 0": "def exact_match_rate(predicted, answer):\n"
                                      "    return (predicted == answer).all(0).double().mean().item()",
        "mean of booleans": "def exact_match_rate(predicted, answer):\n"
                            "    return (predicted == answer).all(-1).mean().item()",
        "torch.equal on the whole batch": "def exact_match_rate(predicted, answer):\n"
                                          "    return float(torch.equal(predicted, answer))",
        "a percentage": "def exact_match_rate(predicted, answer):\n"
                        "    return 100 * (predicted == answer).all(-1).double().mean().item()",
        "calls the course reference": "from course_lib.transformer import exact_match\n"
                                      "def exact_match_rate(predicted, answer):\n    return exact_match(predicted, answer)",
    },
}

# The words each known-wrong answer's visible check must say, naming its bug: at least five likely
# wrong answers per exercise (tests/test_exercises.py runs them).
HINTS = {
    "feed_forward": {
        "no ReLU": "no ReLU",
        "ReLU on the output too": "ReLU on the output",
        "b1 after the ReLU": "b1 added after",
        "b2 forgotten": "b2 forgotten",
        "Python's max": "Python's max",
        "nn.Linear's transpose": "nn.Linear's (out, in)",
    },
    "sublayer": {
        "placements swapped": "this is pre-LN",
        "post-LN without the residual": "no residual: post-LN",
        "pre-LN normalises the sum": "the sum is normalised",
        "pre-LN adds norm(x)": "norm(x) is added",
        "pre-LN without the residual": "no residual: pre-LN",
        "post-LN normalises x, not the sum": "applied to x before adding",
        "norm_first ignored": "this is post-LN",
    },
    "greedy_tokens": {
        "reads the first row": "FIRST row",
        "keeps bos": "start token is in the answer",
        "prefix never grows": "prefix of length 1",
        "returns bos too": "start token is in the answer",
        "one step short": "one token short",
        "feeds back only the last token": "prefix of length 1",
        "token without keepdim": "keepdim=True",
    },
    "exact_match_rate": {
        "per-token accuracy": "right TOKENS",
        "any token right": "ANY token",
        "counts instead of share": "not their share",
        "all along axis 0": "each COLUMN",
        "mean of booleans": "mean of a bool tensor",
        "torch.equal on the whole batch": "torch.equal",
        "a percentage": "a percentage",
    },
}
