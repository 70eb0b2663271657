"""Does every claim of every lesson hold for other seeds and on other CPUs? (`make stability`)

Usage: python scripts/claim_stability.py [--lessons 04 07] [--seeds 5] [--kernels avx2 default]
                                         [--jobs 2] [--markdown]

Runs each lesson top to bottom once per (seed shift, CPU kernel) in a fresh kernel, with
`scripts/stability_hook/` on PYTHONPATH: every seed the lesson sets is shifted by 1000 x k
(k = 0 is the committed run), and every `claim` / `demonstrate` is recorded instead of raising.
The CPU kernels are torch's own (`ATEN_CPU_CAPABILITY`: avx512 where the CPU has it, avx2,
default) crossed with MKL's, the BLAS, which picks its code path per processor whatever torch
is told (`MKL_ENABLE_INSTRUCTIONS`): a machine of another make runs one of these pairs.

It prints every claim that fails in some run (a flip) and, for each claim tested with a
`Bound` (`at_least`, `at_most`), its smallest margin over the runs, then exits 1 if anything
flipped or a lesson raised. Every record goes to test-artifacts/claim_stability.json, the
report with a markdown table (the maintainer's guide's, docs/maintainers.md) to test-artifacts/claim_stability.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HOOK = ROOT / "scripts" / "stability_hook"
SHIFT = 1000  # seed s of shift k becomes s + 1000 k: no lesson uses a seed near 1000


def kernels() -> dict[str, dict[str, str]]:
    """The (torch kernel, BLAS path) pairs this CPU can run, by name."""
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    pairs = {"avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
             "default": {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2"}}
    if "avx512f" in flags:
        pairs = {"avx512": {"ATEN_CPU_CAPABILITY": "avx512", "MKL_ENABLE_INSTRUCTIONS": "AVX512"},
                 # torch's AVX-512 kernels with MKL's AVX2 path: likely what an AMD CPU runs
                 "avx512+blas-avx2": {"ATEN_CPU_CAPABILITY": "avx512",
                                      "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
                 **pairs}
    return pairs


def run_one(notebook: Path, shift: int, kernel: str) -> tuple[list[dict], str, str]:
    """Execute one lesson under one (seed shift, kernel): its claim records, its error if it raised,
    and the error of a first try that raised before a second ran through.

    A lesson that raises is run once more: in a matrix of 200 runs on two cores, lesson 05 raised
    a bare AssertionError before its first claim, which 132 more runs of it (12 alone, 120 two at
    a time) did not repeat. The traceback is printed either way; a lesson that raises twice fails."""
    first = ""
    while True:
        with tempfile.TemporaryDirectory() as tmp:
            log = Path(tmp) / "claims.jsonl"
            env = {**os.environ, **kernels()[kernel], "CLAIM_STABILITY_LOG": str(log),
                   "COURSE_SEED_SHIFT": str(shift * SHIFT), "PYTHONHASHSEED": "0",
                   "PYTHONPATH": os.pathsep.join([str(HOOK), str(ROOT),
                                                  os.environ.get("PYTHONPATH", "")])}
            done = subprocess.run([sys.executable, __file__, "--execute", str(notebook)], env=env,
                                  capture_output=True, text=True)
            # the traceback's end, without its colours: which cell, which line, which library
            lines = [line for line in re.sub(r"\x1b\[[0-9;]*m", "", done.stderr).splitlines() if line.strip()]
            error = "" if done.returncode == 0 else "\n".join(lines[-25:] or ["?"])
            records = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        if not error or first:
            return records, error, first
        first = error


def execute(notebook: Path) -> None:
    """Run a notebook in memory (nothing is written back) in a kernel with this environment."""
    import nbformat
    from nbclient import NotebookClient

    from jupyter_client.manager import KernelManager

    nb = nbformat.read(notebook, as_version=4)
    # Unix sockets, not TCP ports: two runs at once each pick "free" ports for their kernels, and
    # now and then the same one ("Address already in use", seen in make bench here).
    with tempfile.TemporaryDirectory() as sockets:
        km = KernelManager(kernel_name="python3", transport="ipc", ip=os.path.join(sockets, "kernel"))
        try:
            NotebookClient(nb, km=km, timeout=600, kernel_name="python3",
                           resources={"metadata": {"path": str(notebook.parent)}}).execute()
        finally:  # a kernel handed to nbclient is not shut down by it
            if km.has_kernel:
                km.shutdown_kernel(now=True)


def margin_text(smallest: tuple[float, int, str] | None) -> str:
    """A claim's smallest margin over the runs, and the run it was found in."""
    return "-" if smallest is None else f"{100 * smallest[0]:+.1f}% (shift {smallest[1]}, {smallest[2]})"


def report(results: dict, lessons: list[Path], seeds: int, names: list[str],
           markdown: bool = False) -> tuple[str, int]:
    """The printed report, and the number of flipped claims plus failed runs."""
    lines, bad, table = [], 0, []
    for notebook in lessons:
        runs = {key: value for key, value in results.items() if key[0] == notebook.stem}
        claims: dict[tuple[int, int], list] = defaultdict(list)
        errors = [(shift, kernel, error) for (_, shift, kernel), (_, error, _) in runs.items() if error]
        retried = [(shift, kernel, first) for (_, shift, kernel), (_, error, first) in runs.items()
                   if first and not error]
        for (_, shift, kernel), (records, _, _) in runs.items():
            for r in records:
                claims[r["cell"], r["index"]].append((shift, kernel, r))
        flips = {key: [(s, k, r) for s, k, r in found if not r["holds"]]
                 for key, found in claims.items()}
        flips = {key: value for key, value in flips.items() if value}
        missing = {key for key, found in claims.items() if len(found) < len(runs)}
        margins = {key: min((r["margin"], s, k) for s, k, r in found if r["margin"] is not None)
                   for key, found in claims.items()
                   if any(r["margin"] is not None for _, _, r in found)}
        checked = sum(found[0][2]["verdict"] == "checked" for found in claims.values())
        smallest = min(margins.values(), default=None)
        table.append((notebook.stem, checked, len(claims) - checked, len(margins), len(runs),
                      len(flips) + len(missing - set(flips)) + len(errors), smallest))
        bad += len(flips) + len(missing - set(flips)) + len(errors)
        for shift, kernel, error in errors:
            *before, last = error.splitlines()
            lines.append(f"{notebook.stem} seed shift {shift}, {kernel}: the lesson raised (twice): {last}")
            lines += [f"    | {line}" for line in before]
        for shift, kernel, first in retried:
            *before, last = first.splitlines()
            lines.append(f"{notebook.stem} seed shift {shift}, {kernel}: the lesson raised, then ran through on a "
                         f"second try (its claims are the second run's): {last}")
            lines += [f"    | {line}" for line in before]
        for key in sorted(set(flips) | missing):
            found = claims[key]
            statement = found[0][2]["statement"][:110]
            lines.append(f"{notebook.stem} cell {key[0]} claim {key[1]}: {statement}")
            for s, k, r in flips.get(key, []):
                lines.append(f"    FALSE at seed shift {s}, {k}: {r['measured'][:140]}")
            if key in missing:
                lines.append(f"    made in only {len(found)} of {len(runs)} runs")
        for key, (margin, s, k) in sorted(margins.items(), key=lambda kv: kv[1])[:5]:
            statement = claims[key][0][2]["statement"][:90]
            lines.append(f"{notebook.stem} smallest margin {100 * margin:+.1f}% "
                         f"(seed shift {s}, {k}), cell {key[0]}: {statement}")
    if markdown:
        rows = ["| lesson | checked | by construction | with a margin | runs | flips | smallest margin |",
                "|---|---|---|---|---|---|---|"]
        rows += [f"| {name} | {c} | {d} | {b} | {n} | {f} | {margin_text(m)} |"
                 for name, c, d, b, n, f, m in table]
    else:
        rows = [f"{'lesson':<24} {'checked':>7} {'by constr.':>10} {'bounded':>7} {'runs':>5} "
                f"{'flips':>5}  smallest margin"]
        rows += [f"{name:<24} {c:>7} {d:>10} {b:>7} {n:>5} {f:>5}  {margin_text(m)}"
                 for name, c, d, b, n, f, m in table]
    summary = (f"{len(lessons)} lessons x {seeds} seed shifts x {len(names)} kernels "
               f"({', '.join(names)})")
    return "\n".join([summary, *rows, "", *lines]), bad


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--execute", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--lessons", nargs="*", default=[], help="lesson numbers, e.g. 04 07")
    parser.add_argument("--seeds", type=int, default=5, help="seed shifts per lesson (k = 0..n-1)")
    parser.add_argument("--kernels", nargs="*", default=[], help=f"of {', '.join(kernels())}")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--markdown", action="store_true", help="the summary as a markdown table")
    args = parser.parse_args()
    if args.execute:
        execute(args.execute)
        return 0
    names = args.kernels or list(kernels())
    unknown = sorted(set(names) - set(kernels()))
    if unknown:
        parser.error(f"--kernels {' '.join(unknown)}: this CPU runs {', '.join(kernels())}")
    lessons = sorted(p for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")
                     if not args.lessons or p.name[:2] in args.lessons)
    if not lessons:
        parser.error(f"--lessons {' '.join(args.lessons)}: no such lesson in notebooks/")
    jobs = [(nb, shift, kernel) for nb in lessons for shift in range(args.seeds) for kernel in names]
    start = time.perf_counter()
    with ThreadPoolExecutor(args.jobs) as pool:
        found = list(pool.map(lambda job: run_one(*job), jobs))
    results = {(nb.stem, shift, kernel): out for (nb, shift, kernel), out in zip(jobs, found)}
    text, bad = report(results, lessons, args.seeds, names, args.markdown)
    print(text)
    print(f"{len(jobs)} runs in {time.perf_counter() - start:.0f} s; "
          + ("no claim flipped" if not bad else f"{bad} flipped claims or failed runs"))
    out = ROOT / "test-artifacts" / "claim_stability.json"
    out.parent.mkdir(exist_ok=True)
    out.with_suffix(".md").write_text(report(results, lessons, args.seeds, names, True)[0])
    out.write_text(json.dumps([{"lesson": k[0], "seed_shift": k[1], "kernel": k[2],
                                "error": v[1], "first_try_error": v[2], "claims": v[0]}
                               for k, v in results.items()]))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
