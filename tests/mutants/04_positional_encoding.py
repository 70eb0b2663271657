"""Set 04 (positional encoding): known-wrong answers to its exercises (MUTANTS), as source code,
and the words each likely one's visible check must say (HINTS). See tests/mutants/__init__.py."""

# offset_rotation's wrong answers build float64 matrices, as the reference does: in float32 the judge
# refuses them for their dtype alone, and would not be seen to catch their bug.
_ROTATION = ("def offset_rotation(k, d_model):\n    m = torch.zeros(d_model, d_model, dtype=torch.float64)\n"
             "    for j in range(d_model // 2):\n        b = {angle}\n"
             "        m[{row}:{row}+2, {row}:{row}+2] = torch.tensor([[math.cos(b), {sin}], [{minus_sin}, math.cos(b)]])\n"
             "    return m")
_CLOCKWISE = {"sin": "math.sin(b)", "minus_sin": "-math.sin(b)"}
_ROPE = ("def rope_rotate(x):\n    T, d = x.shape[-2:]\n"
         "    th = torch.arange(T)[:, None] * 10000 ** ({exponent})\n"
         "    e, o = x[..., 0::2], x[..., 1::2]\n"
         "    return {turned}")
_INTERLEAVED = "torch.stack([e * th.cos() - o * th.sin(), e * th.sin() + o * th.cos()], -1).flatten(-2)"
_SINUSOIDAL = ("def sinusoidal_table(n_positions, d_model):\n"
               "    a = torch.arange({start}n_positions{end})[:, None] {times} 10000 ** ({exponent})\n"
               "    return torch.stack([a.sin(), a.cos()], -1).reshape(n_positions, d_model).float()")
MUTANTS = {
    "sinusoidal_table": {
        "sin and cos swapped": "def sinusoidal_table(n_positions, d_model):\n"
                               "    a = torch.arange(n_positions)[:, None] / 10000 ** (torch.arange(0, d_model, 2) / d_model)\n"
                               "    return torch.stack([a.cos(), a.sin()], -1).reshape(n_positions, d_model).float()",
        "sines first, then cosines": "def sinusoidal_table(n_positions, d_model):\n"
                                     "    a = torch.arange(n_positions)[:, None] / 10000 ** (torch.arange(0, d_model, 2) / d_model)\n"
                                     "    return torch.cat([a.sin(), a.cos()], -1).float()",
        "exponent from the coordinate index": "def sinusoidal_table(n_positions, d_model):\n"
                                              "    i = torch.arange(d_model)\n"
                                              "    a = torch.arange(n_positions)[:, None] / 10000 ** (i / d_model)\n"
                                              "    return torch.where(i % 2 == 0, a.sin(), a.cos()).float()",
        "multiplied by 10000^(2j/d)": _SINUSOIDAL.format(start="", end="", times="*",
                                                         exponent="torch.arange(0, d_model, 2) / d_model"),
        "exponent j/d": _SINUSOIDAL.format(start="", end="", times="/", exponent="torch.arange(d_model // 2) / d_model"),
        "positions start at 1": _SINUSOIDAL.format(start="1, ", end=" + 1", times="/",
                                                   exponent="torch.arange(0, d_model, 2) / d_model"),
        "float64 table": "def sinusoidal_table(n_positions, d_model):\n"
                         "    a = torch.arange(n_positions, dtype=torch.float64)[:, None] / 10000 ** "
                         "(torch.arange(0, d_model, 2) / d_model)\n"
                         "    return torch.stack([a.sin(), a.cos()], -1).reshape(n_positions, d_model)",
        "calls the course reference": "from course_lib.positional_encoding import sinusoidal_encoding as pe\n"
                                      "def sinusoidal_table(n_positions, d_model):\n    return pe(n_positions, d_model)",
    },
    "offset_rotation": {
        "turns the wrong way": _ROTATION.format(angle="k * 10000 ** (-2 * j / d_model)", row="2*j",
                                                sin="-math.sin(b)", minus_sin="math.sin(b)"),
        "forgot to multiply by k": _ROTATION.format(angle="10000 ** (-2 * j / d_model)", row="2*j", **_CLOCKWISE),
        "one frequency for every pair": _ROTATION.format(angle="k", row="2*j", **_CLOCKWISE),
        "exponent j/d": _ROTATION.format(angle="k * 10000 ** (-j / d_model)", row="2*j", **_CLOCKWISE),
        "blocks at j instead of 2j": _ROTATION.format(angle="k * 10000 ** (-2 * j / d_model)", row="j", **_CLOCKWISE),
        "calls the course reference": "from course_lib import positional_encoding as lib\n"
                                      "def offset_rotation(k, d_model):\n    return lib.shift_matrix(k, d_model)",
    },
    "rope_rotate": {
        "turns by -m c_j": "def rope_rotate(x):\n    T, d = x.shape[-2:]\n"
                           "    th = -torch.arange(T)[:, None] * 10000 ** (-torch.arange(0, d, 2) / d)\n"
                           "    e, o = x[..., 0::2], x[..., 1::2]\n"
                           "    return torch.stack([e * th.cos() - o * th.sin(), e * th.sin() + o * th.cos()], -1).flatten(-2)",
        "pairs (x_j, x_j+d/2)": "def rope_rotate(x):\n    T, d = x.shape[-2:]\n"
                                "    th = torch.arange(T)[:, None] * 10000 ** (-torch.arange(0, d, 2) / d)\n"
                                "    e, o = x[..., :d // 2], x[..., d // 2:]\n"
                                "    return torch.cat([e * th.cos() - o * th.sin(), e * th.sin() + o * th.cos()], -1)",
        "positions start at 1": "def rope_rotate(x):\n    T, d = x.shape[-2:]\n"
                                "    th = torch.arange(1, T + 1)[:, None] * 10000 ** (-torch.arange(0, d, 2) / d)\n"
                                "    e, o = x[..., 0::2], x[..., 1::2]\n"
                                "    return torch.stack([e * th.cos() - o * th.sin(), e * th.sin() + o * th.cos()], -1).flatten(-2)",
        "every pair at c_0 = 1": _ROPE.format(exponent="0 * torch.arange(0, d, 2)", turned=_INTERLEAVED),
        "exponent j/d": _ROPE.format(exponent="-torch.arange(d // 2) / d", turned=_INTERLEAVED),
        "halves not interleaved back": _ROPE.format(exponent="-torch.arange(0, d, 2) / d",
                                                    turned="torch.cat([e * th.cos() - o * th.sin(), "
                                                           "e * th.sin() + o * th.cos()], -1)"),
        "positions from the first axis": _ROPE.format(exponent="-torch.arange(0, d, 2) / d", turned=_INTERLEAVED)
                                         .replace("T, d = x.shape[-2:]", "T, d = x.shape[0], x.shape[-1]"),
        "calls the course reference": "from course_lib.positional_encoding import apply_rope\n"
                                      "def rope_rotate(x):\n    return apply_rope(x)",
    },
    "add_learned_positions": {
        "no length check": "def add_learned_positions(x, table):\n    return x + table[:x.shape[-2]]",
        "positions wrap around": "def add_learned_positions(x, table):\n"
                                 "    return x + table[torch.arange(x.shape[-2]) % table.shape[0]]",
        "row 0 at every position": "def add_learned_positions(x, table):\n"
                                   "    if x.shape[-2] > table.shape[0]:\n"
                                   "        raise ValueError(f'length {x.shape[-2]} > {table.shape[0]} rows')\n"
                                   "    return x + table[0]",
        "message without the numbers": "def add_learned_positions(x, table):\n"
                                       "    if x.shape[-2] > table.shape[0]:\n        raise ValueError('sequence too long')\n"
                                       "    return x + table[:x.shape[-2]]",
        "last rows of the table": "def add_learned_positions(x, table):\n"
                                  "    if x.shape[-2] > table.shape[0]:\n"
                                  "        raise ValueError(f'length {x.shape[-2]} > {table.shape[0]} rows')\n"
                                  "    return x + table[-x.shape[-2]:]",
        "refuses a sequence as long as the table": "def add_learned_positions(x, table):\n"
                                                   "    if x.shape[-2] >= table.shape[0]:\n"
                                                   "        raise ValueError(f'length {x.shape[-2]} > {table.shape[0]} rows')\n"
                                                   "    return x + table[:x.shape[-2]]",
        "adds the whole table": "def add_learned_positions(x, table):\n"
                                "    if x.shape[-2] > table.shape[0]:\n"
                                "        raise ValueError(f'length {x.shape[-2]} > {table.shape[0]} rows')\n"
                                "    return x + table",
        "length from the first axis": "def add_learned_positions(x, table):\n"
                                      "    if x.shape[0] > table.shape[0]:\n"
                                      "        raise ValueError(f'length {x.shape[0]} > {table.shape[0]} rows')\n"
                                      "    return x + table[:x.shape[0]]",
        "calls the course reference": "from course_lib.positional_encoding import LearnedPositionalEmbedding as L\n"
                                      "def add_learned_positions(x, table):\n    m = L(table.shape[0], table.shape[1])\n"
                                      "    m.table.weight.data = table\n    return m(x).detach()",
    },
}

# The likely wrong answers above, each with words its visible check's message must contain
# (tests/test_exercises.py asks for at least five per exercise).
HINTS = {
    "sinusoidal_table": {
        "sin and cos swapped": "sin and cos swapped",
        "sines first, then cosines": "all sines first, then all cosines",
        "exponent from the coordinate index": "the exponent uses the coordinate index i",
        "multiplied by 10000^(2j/d)": "multiplied by 10000^(2j/d) instead of dividing by it",
        "exponent j/d": "the exponent is 2j/d, not j/d",
        "positions start at 1": "positions start at 0",
        "float64 table": "a new tensor made without dtype=x.dtype",
    },
    "offset_rotation": {
        "turns the wrong way": "the rotation turns the wrong way",
        "forgot to multiply by k": "did you forget to multiply by k?",
        "one frequency for every pair": "every block uses the angle of pair 0",
        "exponent j/d": "the exponent is 2j/d, not j/d",
        "blocks at j instead of 2j": "block j goes at rows and columns 2j and 2j + 1",
    },
    "rope_rotate": {
        "turns by -m c_j": "rotated by -m c_j instead of +m c_j",
        "pairs (x_j, x_j+d/2)": "pairs are (x_2j, x_2j+1), next to each other",
        "positions start at 1": "positions start at 0",
        "every pair at c_0 = 1": "every pair turns at c_0 = 1",
        "exponent j/d": "the exponent is 2j/d, not j/d",
        "halves not interleaved back": "interleave them again",
        "positions from the first axis": "positions are the second-to-last axis",
    },
    "add_learned_positions": {
        "no length check": "no length check",
        "positions wrap around": "positions wrapped around",
        "row 0 at every position": "every position got row 0 of the table",
        "message without the numbers": "a message without the numbers",
        "last rows of the table": "used the last rows of the table",
        "refuses a sequence as long as the table": "a sequence as long as the table fits",
        "adds the whole table": "uses its first T rows",
        "length from the first axis": "positions are the second-to-last axis of x",
    },
}
