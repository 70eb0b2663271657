"""scripts/claim_stability.py: it shifts every seed, records a false claim instead of stopping,
and reports the flip and the margin (the whole course's run is `make stability`, in `make test-all`,
which runs these tests just before it)."""

import sys
from pathlib import Path

import nbformat
import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "scripts"))
import claim_stability  # noqa: E402

pytestmark = pytest.mark.slow

CELLS = [
    "import torch\nfrom course_lib.claims import at_least, claim, demonstrate",
    # the first draw of seed 0 is 0.4963: true only when the seed is not shifted
    "x = torch.rand(1, generator=torch.Generator().manual_seed(0)).item()\n"
    "claim('the draw is seed 0\\'s', at_least(-abs(x - 0.4963), -1e-4), measured=x)\n"
    "_ = torch.manual_seed(0)\n"
    "y = torch.rand(1).item()\n"
    "claim('the global seed is shifted too', abs(y - 0.4963) < 1e-4, measured=y)",
    "demonstrate('a later cell still runs', True, measured=1)",
]


def test_a_seed_shift_flips_a_seed_dependent_claim_and_the_lesson_goes_on(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    path = tmp_path / "99_probe.ipynb"
    nbformat.write(nb, path)
    kernel = next(iter(claim_stability.kernels()))
    results = {(path.stem, shift, kernel): claim_stability.run_one(path, shift, kernel)
               for shift in (0, 1)}
    for (_, shift, _), (records, error, first_try) in results.items():
        assert error == first_try == ""
        assert [(r["cell"], r["index"], r["holds"]) for r in records] == [
            (2, 1, shift == 0), (2, 2, shift == 0), (3, 1, True)]
    unshifted, shifted = (results[path.stem, s, kernel][0][0]["margin"] for s in (0, 1))
    assert unshifted > -1e-4 > shifted
    text, bad = claim_stability.report(results, [path], 2, [kernel])
    assert bad == 2
    assert "FALSE at seed shift 1" in text and "FALSE at seed shift 0" not in text


def test_a_lesson_that_raises_is_a_failed_run(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 / 0")])
    path = tmp_path / "98_raises.ipynb"
    nbformat.write(nb, path)
    kernel = next(iter(claim_stability.kernels()))
    results = {(path.stem, 0, kernel): claim_stability.run_one(path, 0, kernel)}
    assert "ZeroDivisionError" in results[path.stem, 0, kernel][1]
    text, bad = claim_stability.report(results, [path], 1, [kernel])
    assert bad == 1 and "raised (twice): ZeroDivisionError" in text


def test_a_lesson_that_raises_once_runs_again_and_says_so(tmp_path):
    """The second try counts (a rare raise no later run repeated), and its traceback is printed."""
    marker = tmp_path / "tried"
    cell = (f"import pathlib\nmarker = pathlib.Path({str(marker)!r})\n"
            "if not marker.exists():\n    marker.touch()\n    raise RuntimeError('first try only')\n"
            "from course_lib.claims import demonstrate\ndemonstrate('the second try ran', True, measured=1)")
    path = tmp_path / "97_once.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell)]), path)
    kernel = next(iter(claim_stability.kernels()))
    results = {(path.stem, 0, kernel): claim_stability.run_one(path, 0, kernel)}
    records, error, first_try = results[path.stem, 0, kernel]
    assert error == "" and "RuntimeError: first try only" in first_try and len(records) == 1
    text, bad = claim_stability.report(results, [path], 1, [kernel])
    assert bad == 0 and "raised, then ran through on a second try" in text and "first try only" in text
