"""Set 10 (the attention graph): known-wrong answers to its exercises (MUTANTS), as source code,
and the words each likely one's visible check must say (HINTS). See tests/mutants/__init__.py."""

# The reference's energy with its quadratic term and M left to each mistake
_ENERGY = ("def energy(xi, patterns, beta):\n"
           "    lse = torch.logsumexp(beta * (xi @ patterns.T), -1) / beta\n"
           "    M = {M}\n"
           "    return -lse + {square} + math.log(len(patterns)) / beta + 0.5 * M**2")

MUTANTS = {
    "rollout": {
        "first layer on the left": "def rollout(layer_weights, residual):\n"
                                   "    eye = torch.eye(len(layer_weights[0]), "
                                   "dtype=layer_weights[0].dtype)\n"
                                   "    r = eye\n    for w in layer_weights:\n"
                                   "        r = r @ (residual * eye + (1 - residual) * w)\n    "
                                   "return r",
        "I + A not rescaled": "def rollout(layer_weights, residual):\n"
                              "    eye = torch.eye(len(layer_weights[0]), "
                              "dtype=layer_weights[0].dtype)\n"
                              "    r = eye\n    for w in layer_weights:\n        r = (eye + w) @ "
                              "r\n    return r",
        "residual and attention weights swapped": "def rollout(layer_weights, residual):\n"
                                                  "    eye = torch.eye(len(layer_weights[0]), "
                                                  "dtype=layer_weights[0].dtype)\n"
                                                  "    r = eye\n    for w in layer_weights:\n"
                                                  "        r = ((1 - residual) * eye + residual * "
                                                  "w) @ r\n    return r",
        "only two layers": "def rollout(layer_weights, residual):\n"
                           "    eye = torch.eye(len(layer_weights[0]), "
                           "dtype=layer_weights[0].dtype)\n"
                           "    a, b = (residual * eye + (1 - residual) * w for w in "
                           "layer_weights[:2])\n"
                           "    return b @ a",
        "residual ignored": "def rollout(layer_weights, residual):\n"
                            "    r = torch.eye(len(layer_weights[0]), dtype=layer_weights[0].dtype)\n"
                            "    for w in layer_weights:\n        r = w @ r\n    return r",
        "elementwise product": "def rollout(layer_weights, residual):\n"
                               "    eye = torch.eye(len(layer_weights[0]), dtype=layer_weights[0].dtype)\n"
                               "    r = eye\n    for w in layer_weights:\n"
                               "        r = (residual * eye + (1 - residual) * w) * r\n    return r",
        "calls the course reference": "from course_lib.attention_graph import attention_rollout as "
                                      "ar\n"
                                      "def rollout(layer_weights, residual):\n    return "
                                      "ar(layer_weights, residual)",
    },
    "hopfield_step": {
        "beta left out": "def hopfield_step(xi, patterns, beta):\n"
                         "    return torch.softmax(xi @ patterns.T, -1) @ patterns",
        "softmax over the batch": "def hopfield_step(xi, patterns, beta):\n"
                                  "    return torch.softmax(beta * (xi @ patterns.T), 0) @ "
                                  "patterns",
        "no softmax": "def hopfield_step(xi, patterns, beta):\n    return beta * (xi @ patterns.T) "
                      "@ patterns",
        "1/sqrt(D) scale": "def hopfield_step(xi, patterns, beta):\n"
                           "    return torch.softmax(xi @ patterns.T / math.sqrt(xi.shape[-1]), "
                           "-1) @ patterns",
        "divides by beta": "def hopfield_step(xi, patterns, beta):\n"
                           "    return torch.softmax(xi @ patterns.T / beta, -1) @ patterns",
        "returns the weights": "def hopfield_step(xi, patterns, beta):\n"
                               "    return torch.softmax(beta * (xi @ patterns.T), -1)",
        "calls torch's attention": "import torch.nn.functional as F\n"
                                   "def hopfield_step(xi, patterns, beta):\n"
                                   "    q = xi.unsqueeze(-2)\n"
                                   "    return F.scaled_dot_product_attention(q, patterns, "
                                   "patterns, scale=beta).squeeze(-2)",
    },
    "energy": {
        "lse not divided by beta": "def energy(xi, patterns, beta):\n"
                                   "    lse = torch.logsumexp(beta * (xi @ patterns.T), -1)\n"
                                   "    M = patterns.norm(dim=-1).max()\n"
                                   "    return -lse + 0.5 * (xi * xi).sum(-1) + "
                                   "math.log(len(patterns)) / beta + 0.5 * M**2",
        "max instead of logsumexp": "def energy(xi, patterns, beta):\n"
                                    "    top = (xi @ patterns.T).amax(-1)\n"
                                    "    M = patterns.norm(dim=-1).max()\n"
                                    "    return -top + 0.5 * (xi * xi).sum(-1) + "
                                    "math.log(len(patterns)) / beta + 0.5 * M**2",
        "constants missing": "def energy(xi, patterns, beta):\n"
                             "    return -torch.logsumexp(beta * (xi @ patterns.T), -1) / beta + "
                             "0.5 * (xi * xi).sum(-1)",
        "|xi|^2 without the 1/2": _ENERGY.format(square="(xi * xi).sum(-1)", M="patterns.norm(dim=-1).max()"),
        "M of the whole matrix": _ENERGY.format(square="0.5 * (xi * xi).sum(-1)", M="patterns.norm()"),
        "|xi|^2 of the whole batch": _ENERGY.format(square="0.5 * (xi * xi).sum()", M="patterns.norm(dim=-1).max()"),
        "naive exp overflows": "def energy(xi, patterns, beta):\n"
                               "    lse = torch.log(torch.exp(beta * (xi @ patterns.T)).sum(-1)) / "
                               "beta\n"
                               "    M = patterns.norm(dim=-1).max()\n"
                               "    return -lse + 0.5 * (xi * xi).sum(-1) + "
                               "math.log(len(patterns)) / beta + 0.5 * M**2",
        "calls the course reference": "from course_lib import attention_graph as ag\n"
                                      "def energy(xi, patterns, beta):\n    return "
                                      "ag.hopfield_energy(xi, patterns, beta)",
    },
}

# The words each known-wrong answer's visible check must say, naming its bug: at least five likely
# wrong answers per exercise (tests/test_exercises.py runs them).
HINTS = {
    "rollout": {
        "first layer on the left": "wrong order",
        "I + A not rescaled": "not row-stochastic",
        "residual and attention weights swapped": "are swapped",
        "only two layers": "first two layers",
        "residual ignored": "residual was left out",
        "elementwise product": "entry by entry",
    },
    "hopfield_step": {
        "beta left out": "beta left out",
        "softmax over the batch": "over the batch",
        "no softmax": "softmax is missing",
        "1/sqrt(D) scale": "1/sqrt(D)",
        "divides by beta": "beta divides",
        "returns the weights": "one weight per pattern",
    },
    "energy": {
        "lse not divided by beta": "not divided by beta",
        "max instead of logsumexp": "max instead of log-sum-exp",
        "constants missing": "constants",
        "naive exp overflows": "exp overflows",
        "|xi|^2 without the 1/2": "without the 1/2",
        "M of the whole matrix": "ONE pattern",
        "|xi|^2 of the whole batch": "whole batch",
    },
}


# Answers that change their input in place: the visible check must say so. The matrices come in a
# list, which the framework's in-place check does not look into.
IN_PLACE = {
    "rollout": {
        "changes its layers in place": "def rollout(layer_weights, residual):\n"
                                       "    eye = torch.eye(len(layer_weights[0]), dtype=layer_weights[0].dtype)\n"
                                       "    r = eye\n    for w in layer_weights:\n"
                                       "        w *= 1 - residual\n        w += residual * eye\n        r = w @ r\n    return r",
    },
}
