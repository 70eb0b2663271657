"""How much of course_lib is input checking: calls in one forward pass, and lines of code.

Usage: python scripts/guard_share.py [--root DIR]   (DIR: a checkout holding course_lib/)

A "guard" is a function of course_lib/guards.py, or a function anywhere in course_lib (the
exercise sets' checks/ and the widgets/ excepted: they are not the model's input checks) whose
name starts with require_, check_, _check or _require.

calls: one forward pass of lesson 09's Transformer with 2 encoder and 2 decoder blocks (batch 4,
source and target of 8 tokens) runs under sys.setprofile; every Python call whose code lives in
course_lib is counted by function, and the guard share is guard calls / all course_lib calls.

lines, counted two ways, per module (checks/ and widgets/ left out), from the ast module's first
and last line of each statement:
  guard functions: every line of guards.py, plus every line (signature, docstring and body) of
                   the other guard functions;
  checking lines:  those, plus every statement elsewhere that calls a guard (a bare call, an
                   assignment or a return of one) and every `if` whose body only raises.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import re
import sys
from collections import Counter
from pathlib import Path

GUARD_NAME = re.compile(r"^(require_|check_|_check|_require)")
NOT_MODEL = ("checks", "widgets")  # folders of course_lib whose check_ functions are not input guards


def is_guard(file: str, name: str) -> bool:
    return Path(file).name == "guards.py" or bool(GUARD_NAME.match(name))


def forward_calls(root: Path) -> Counter[tuple[str, str]]:
    """(file, function) -> calls, for course_lib's Python functions in one forward pass."""
    sys.path.insert(0, str(root))
    import torch

    transformer = importlib.import_module("course_lib.transformer")
    if hasattr(transformer, "transformer_config"):
        model = transformer.transformer(transformer_config := transformer.transformer_config(
            vocab_size=11, n_encoder_layers=2, n_decoder_layers=2))
    else:  # the course before issue 16: one Transformer class and its own config
        transformer_config = transformer.TransformerConfig(vocab_size=11, n_encoder_layers=2, n_decoder_layers=2)
        model = transformer.Transformer(transformer_config)
    generator = torch.Generator().manual_seed(0)
    src = torch.randint(1, 11, (4, 8), generator=generator)
    tgt = torch.randint(0, 11, (4, 8), generator=generator)
    package = str(root / "course_lib")
    calls: Counter[tuple[str, str]] = Counter()

    def profile(frame, event, _arg) -> None:
        if event == "call" and frame.f_code.co_filename.startswith(package):
            calls[frame.f_code.co_filename, frame.f_code.co_name] += 1

    with torch.no_grad():
        model(src, tgt)  # once before counting: first calls import and cache what later ones reuse
        sys.setprofile(profile)
        try:
            model(src, tgt)
        finally:
            sys.setprofile(None)
    return calls


def _called_name(node: ast.AST) -> str:
    """The name a statement's value calls (f(...) or x.f(...)), or ""."""
    value = getattr(node, "value", None)
    if not isinstance(value, ast.Call):
        return ""
    return value.func.id if isinstance(value.func, ast.Name) else getattr(value.func, "attr", "")


def guard_lines(root: Path) -> dict[str, dict[str, int]]:
    """{"guard functions": {module: lines}, "checking lines": {module: lines}} for course_lib."""
    counts: dict[str, dict[str, int]] = {"guard functions": {}, "checking lines": {}}
    for path in sorted((root / "course_lib").rglob("*.py")):
        relative = path.relative_to(root / "course_lib")
        if relative.parts[0] in NOT_MODEL:
            continue
        source = path.read_text()
        functions, checks = set(), set()  # line numbers
        if path.name == "guards.py":
            functions = set(range(1, len(source.splitlines()) + 1))
        for node in ast.walk(ast.parse(source)):
            span = set(range(getattr(node, "lineno", 0), getattr(node, "end_lineno", -1) + 1))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and GUARD_NAME.match(node.name):
                functions |= span
            elif isinstance(node, (ast.Expr, ast.Assign, ast.Return)) and GUARD_NAME.match(_called_name(node)):
                checks |= span
            elif isinstance(node, ast.If) and not node.orelse and all(isinstance(b, ast.Raise) for b in node.body):
                checks |= span
        for kind, lines in (("guard functions", functions), ("checking lines", functions | checks)):
            if lines:
                counts[kind][str(relative)] = len(lines)
    return counts


def measure(root: Path) -> dict[str, object]:
    calls = forward_calls(root)
    guards = sum(n for (file, name), n in calls.items() if is_guard(file, name))
    return {"guard calls": guards, "course_lib calls": sum(calls.values()),
            "guard share": guards / max(sum(calls.values()), 1), "lines": guard_lines(root),
            "calls by function": calls}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    args = parser.parse_args()
    result = measure(args.root.resolve())
    print(f"guard calls in one forward pass: {result['guard calls']} of {result['course_lib calls']} "
          f"course_lib calls ({100 * result['guard share']:.1f}%)")
    for kind, by_module in result["lines"].items():
        print(f"{kind}: {sum(by_module.values())}  ("
              + ", ".join(f"{module} {n}" for module, n in by_module.items()) + ")")
    print("calls by function:")
    for (file, name), n in result["calls by function"].most_common():
        print(f"  {n:4d}  {Path(file).name}:{name}{'  (guard)' if is_guard(file, name) else ''}")


if __name__ == "__main__":
    main()
