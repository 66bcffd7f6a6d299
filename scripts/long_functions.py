"""Functions and modules over the architecture page's sizes (docs/architecture.md, Conventions: modules under about
500 lines, functions under about 80, or say why).

    python3 scripts/long_functions.py [--function-lines 80] [--module-lines 500] [paths ...]

A function's length runs from its `def` line to its last line (docstring and comments included); nested functions
are listed on their own and counted inside their parent too.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator
from pathlib import Path

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def long_functions(path: Path, limit: int) -> Iterator[tuple[int, str, int]]:
    """(lines, qualified name, first line) of each function in `path` longer than `limit` lines."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))

    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[int, str, int]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (*_FUNCTIONS, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if isinstance(child, _FUNCTIONS) and (lines := child.end_lineno - child.lineno + 1) > limit:
                    yield lines, name, child.lineno
                yield from walk(child, f"{name}.")
            else:
                yield from walk(child, prefix)

    yield from walk(tree, "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="long_functions.py", description=__doc__.split("\n")[0])
    parser.add_argument("paths", nargs="*", default=["perfmodel", "executor"])
    parser.add_argument("--function-lines", type=int, default=80)
    parser.add_argument("--module-lines", type=int, default=500)
    args = parser.parse_args(argv)
    files = sorted(f for p in map(Path, args.paths) for f in ([p] if p.is_file() else p.rglob("*.py")))
    functions = [(n, f"{f}:{line}::{name}") for f in files for n, name, line in long_functions(f, args.function_lines)]
    modules = [(n, str(f)) for f in files if (n := len(f.read_text(encoding="utf-8").splitlines())) > args.module_lines]
    print(f"functions over {args.function_lines} lines: {len(functions)}")
    for n, where in sorted(functions, reverse=True):
        print(f"  {n:4d}  {where}")
    print(f"modules over {args.module_lines} lines: {len(modules)}")
    for n, where in sorted(modules, reverse=True):
        print(f"  {n:4d}  {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
