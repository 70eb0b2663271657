"""Loaded at start-up by every Python process of a claim-stability run (the folder is put on
PYTHONPATH by scripts/claim_stability.py; a normal course session never sees it).

COURSE_SEED_SHIFT=k adds k to every seed the course sets, through torch.manual_seed or a
Generator's manual_seed, in the kernel and in the worker processes it starts: every random draw
of a lesson (weights, batches, held-out cases) changes, and nothing else does.
CLAIM_STABILITY_LOG=<file> makes claim() and demonstrate() append what they found to that file
(one JSON line each) instead of raising on a false claim, so one run reports every claim.
"""

import os

if os.environ.get("CLAIM_STABILITY_LOG"):
    import json

    import torch

    _shift = int(os.environ.get("COURSE_SEED_SHIFT", "0"))
    _manual_seed = torch.manual_seed

    def _shifted_manual_seed(seed):
        return _manual_seed(int(seed) + _shift)

    class _ShiftedGenerator(torch.Generator):
        def manual_seed(self, seed):
            return super().manual_seed(int(seed) + _shift)

    torch.manual_seed = torch.random.manual_seed = _shifted_manual_seed
    torch.Generator = _ShiftedGenerator

    import course_lib.claims as _claims

    _counts: dict[int, int] = {}

    def _cell() -> int:
        """The running cell's In[n] number (IPython counts the next one while a cell runs)."""
        try:
            return get_ipython().execution_count - 1  # noqa: F821 (IPython's builtin in a kernel)
        except NameError:
            return 0

    def _record(verdict, statement, holds, measured, bound):
        cell = _cell()
        _counts[cell] = _counts.get(cell, 0) + 1
        margin = getattr(holds, "margin", None)
        record = {"cell": cell, "index": _counts[cell], "verdict": verdict,
                  "statement": statement, "holds": bool(holds), "bound": bound,
                  "measured": _claims._measured_text(measured),
                  "margin": None if margin is None else float(margin)}
        with open(os.environ["CLAIM_STABILITY_LOG"], "a") as log:
            log.write(json.dumps(record) + "\n")
        _original_report(verdict, statement, True, measured, bound)

    _original_report = _claims._report
    _claims._report = _record
