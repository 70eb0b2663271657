"""Set 07 (logic rules): known-wrong answers to its exercises (MUTANTS), as source code,
and the words each likely one's visible check must say (HINTS). See tests/mutants/__init__.py."""

_UNEMBED = ("def composition_unembedding(rules, relations, alpha):\n"
            "    n = len(relations)\n    u = torch.zeros(n, 2 * n, dtype=torch.float64)\n"
            "    for (a, b), c in rules.items():\n        r = relations.index(c)\n"
            "        u[r, relations.index(a)] = 1.0\n"
            "        u[r, n + relations.index(b)] = {mix}\n"
            "{correction}"
            "    return u")

# The reference's loops, with one entry's place or the dtype left to each mistake
_SOLVED = ("def composition_unembedding(rules, relations, alpha):\n"
           "    n = len(relations)\n    u = torch.zeros(n, 2 * n{dtype})\n"
           "    for c in set(rules.values()):\n        r = relations.index(c)\n"
           "        for a in {{a for (a, b), o in rules.items() if o == c}}:\n"
           "            {first} += 1.0\n"
           "        for b in {{b for (a, b), o in rules.items() if o == c}}:\n"
           "            {mix} += 1.0 / alpha\n"
           "            {token} -= 1.0\n    return u")

MUTANTS = {
    "compose_targets": {
        "relations looked up in the wrong order": "def compose_targets(ids, lookup):\n    t = ids.clone()\n"
                                                  "    t[:, 1] = lookup[ids[:, 2], ids[:, 1]]\n"
                                                  "    t[:, 2] = ids[:, 3]\n    t[:, 3] = -100\n    return t",
        "Y not moved": "def compose_targets(ids, lookup):\n    t = ids.clone()\n"
                       "    t[:, 1] = lookup[ids[:, 1], ids[:, 2]]\n    return t",
        "no IGNORE at position 3": "def compose_targets(ids, lookup):\n    t = ids.clone()\n"
                                   "    t[:, 1] = lookup[ids[:, 1], ids[:, 2]]\n    t[:, 2] = ids[:, 3]\n    return t",
        "writes into ids": "def compose_targets(ids, lookup):\n    t = ids\n"
                           "    t[:, 1] = lookup[ids[:, 1], ids[:, 2]]\n"
                           "    t[:, 2] = ids[:, 3]\n    t[:, 3] = -100\n    return t",
        "float targets": "def compose_targets(ids, lookup):\n    t = torch.zeros(ids.shape)\n"
                         "    t[:, 0] = ids[:, 0]\n    t[:, 1] = lookup[ids[:, 1], ids[:, 2]]\n"
                         "    t[:, 2] = ids[:, 3]\n    t[:, 3] = -100\n    return t",
        "three columns": "def compose_targets(ids, lookup):\n"
                         "    return torch.stack([ids[:, 0], lookup[ids[:, 1], ids[:, 2]], ids[:, 3]], 1)",
    },
    "composition_unembedding": {
        "multiplies by alpha": _UNEMBED.format(mix="alpha", correction="        u[r, relations.index(b)] -= 1.0\n"),
        "no correction for alpha e(r1)": _UNEMBED.format(mix="1.0 / alpha", correction=""),
        "assigns where it must add": _UNEMBED.format(mix="1.0 / alpha",
                                                     correction="        u[r, relations.index(b)] = -1.0\n"),
        "first and second relations swapped": "def composition_unembedding(rules, relations, alpha):\n"
                                              "    n = len(relations)\n    u = torch.zeros(n, 2 * n, dtype=torch.float64)\n"
                                              "    for c in set(rules.values()):\n        r = relations.index(c)\n"
                                              "        for b in {b for (a, b), o in rules.items() if o == c}:\n"
                                              "            u[r, relations.index(b)] += 1.0\n"
                                              "        for a in {a for (a, b), o in rules.items() if o == c}:\n"
                                              "            u[r, n + relations.index(a)] += 1.0 / alpha\n"
                                              "            u[r, relations.index(a)] -= 1.0\n    return u",
        "float32": _SOLVED.format(dtype="", first="u[r, relations.index(a)]", mix="u[r, n + relations.index(b)]",
                                  token="u[r, relations.index(b)]"),
        "mix columns first": _SOLVED.format(dtype=", dtype=torch.float64", first="u[r, n + relations.index(a)]",
                                            mix="u[r, relations.index(b)]", token="u[r, n + relations.index(b)]"),
    },
    "xor_squares": {
        "every square counted four times": "def xor_squares(table):\n    n, m = table.shape\n    count = 0\n"
                                           "    for i, k in itertools.permutations(range(n), 2):\n"
                                           "        for j, l in itertools.permutations(range(m), 2):\n"
                                           "            c, d = int(table[i, j]), int(table[i, l])\n"
                                           "            count += c != d and int(table[k, l]) == c and int(table[k, j]) == d\n"
                                           "    return int(count)",
        "off-diagonal cells not compared": "def xor_squares(table):\n    n, m = table.shape\n    count = 0\n"
                                           "    for i, k in itertools.combinations(range(n), 2):\n"
                                           "        for j, l in itertools.combinations(range(m), 2):\n"
                                           "            c = int(table[i, j])\n"
                                           "            count += (int(table[k, l]) == c and int(table[i, l]) != c\n"
                                           "                      and int(table[k, j]) != c)\n"
                                           "    return int(count)",
        "answers c and d may be equal": "def xor_squares(table):\n    n, m = table.shape\n    count = 0\n"
                                        "    for i, k in itertools.combinations(range(n), 2):\n"
                                        "        for j, l in itertools.combinations(range(m), 2):\n"
                                        "            c, d = int(table[i, j]), int(table[i, l])\n"
                                        "            count += int(table[k, l]) == c and int(table[k, j]) == d\n"
                                        "    return int(count)",
        "every square counted twice": "def xor_squares(table):\n    n, m = table.shape\n    count = 0\n"
                                      "    for i, k in itertools.combinations(range(n), 2):\n"
                                      "        for j, l in itertools.permutations(range(m), 2):\n"
                                      "            c, d = int(table[i, j]), int(table[i, l])\n"
                                      "            count += c != d and int(table[k, l]) == c and int(table[k, j]) == d\n"
                                      "    return int(count)",
        "neighbouring rows and columns only": "def xor_squares(table):\n    n, m = table.shape\n    count = 0\n"
                                              "    for i in range(n - 1):\n        for j in range(m - 1):\n"
                                              "            c, d = int(table[i, j]), int(table[i, j + 1])\n"
                                              "            count += (c != d and int(table[i + 1, j + 1]) == c\n"
                                              "                      and int(table[i + 1, j]) == d)\n"
                                              "    return count",
    },
    "power_law_fit": {
        "fits y against x": "def power_law_fit(x, y):\n    design = torch.stack([torch.ones_like(x), x], 1)\n"
                            "    c, p = torch.linalg.lstsq(design, y[:, None]).solution[:, 0].tolist()\n    return c, p",
        "returns (p, a)": "def power_law_fit(x, y):\n    u, w = x.log(), y.log()\n"
                          "    design = torch.stack([torch.ones_like(u), u], 1)\n"
                          "    c, p = torch.linalg.lstsq(design, w[:, None]).solution[:, 0].tolist()\n"
                          "    return p, math.exp(c)",
        "slope through the end points": "def power_law_fit(x, y):\n"
                                        "    p = math.log(float(y[-1] / y[0])) / math.log(float(x[-1] / x[0]))\n"
                                        "    return float(y[0] / x[0] ** p), p",
        "returns log a": "def power_law_fit(x, y):\n    u, w = x.log(), y.log()\n"
                         "    design = torch.stack([torch.ones_like(u), u], 1)\n"
                         "    c, p = torch.linalg.lstsq(design, w[:, None]).solution[:, 0].tolist()\n"
                         "    return c, p",
        "no intercept column": "def power_law_fit(x, y):\n    u, w = x.log(), y.log()\n"
                               "    p = torch.linalg.lstsq(u[:, None], w[:, None]).solution.item()\n"
                               "    return 1.0, p",
        "calls the course reference": "from course_lib.logic_rules import fit_power_law\n"
                                      "def power_law_fit(x, y):\n    return fit_power_law(x, y)",
    },
}

# The words each known-wrong answer's visible check must say, naming its bug: at least five likely
# wrong answers per exercise (tests/test_exercises.py runs them).
HINTS = {
    "compose_targets": {
        "relations looked up in the wrong order": "wrong order",
        "Y not moved": "Y stays at position 3",
        "no IGNORE at position 3": "position 3 must be IGNORE",
        "writes into ids": "an in-place operation",
        "float targets": "a float tensor where ids belong",
        "three columns": "position 3 was dropped",
    },
    "composition_unembedding": {
        "multiplies by alpha": "divide by alpha",
        "no correction for alpha e(r1)": "subtract 1",
        "assigns where it must add": "added to (+=)",
        "first and second relations swapped": "are swapped",
        "float32": "a new tensor made without dtype=x.dtype",
        "mix columns first": "mix columns come first",
    },
    "xor_squares": {
        "every square counted four times": "counted 4 times",
        "off-diagonal cells not compared": "off-diagonal cells",
        "answers c and d may be equal": "must differ",
        "every square counted twice": "counted twice",
        "neighbouring rows and columns only": "neighbouring rows",
    },
    "power_law_fit": {
        "fits y against x": "not y against x",
        "returns (p, a)": "in that order",
        "slope through the end points": "two end points",
        "returns log a": "exp(intercept)",
        "no intercept column": "through the origin",
    },
}
