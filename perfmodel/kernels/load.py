"""Where `perfmodel kernels check` finds its tables: the project's CSV tables (files, or folders searched for
*.csv) and aiconfigurator-core's data folder (recognised by its system folders). The default: the installed
aiconfigurator-core's tables, if any, and the AMD tables this repository ships (studies/kernels/)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from perfmodel.kernels.aiconfigurator import default_tables_dir, is_aiconfigurator_root, read_aiconfigurator
from perfmodel.kernels.table import KernelRow, read_table

REPO_TABLES = Path(__file__).resolve().parents[2] / "studies" / "kernels"


# an evenly spaced sample of at most this many rows of each aiconfigurator table (0 / None: every row, ~4 M)
DEFAULT_ROWS_PER_TABLE = 3000


def default_table_paths() -> list[Path]:
    paths = [p for p in (default_tables_dir(), REPO_TABLES) if p is not None and p.is_dir()]
    return paths


def load_tables(paths: Iterable[Path], hardware: set[str] | None = None,
                rows_per_table: int | None = None) -> tuple[list[KernelRow], list[str]]:
    """Every readable row of every table under `paths` (of the `hardware` ids when given) and one problem line
    per table, header or row that could not be read; a bad table never stops the others."""
    rows: list[KernelRow] = []
    problems: list[str] = []
    for path in paths:
        if is_aiconfigurator_root(path):
            got, bad = read_aiconfigurator(path, hardware, rows_per_table)
            rows += got
            problems += bad
            continue
        files = sorted(path.rglob("*.csv")) if path.is_dir() else [path]
        if not path.exists():
            problems.append(f"{path}: no such file or folder")
            continue
        if path.is_dir() and not files:
            problems.append(f"{path}: no *.csv tables in this folder (docs/kernels.md: the table format)")
        for f in files:
            got, bad = read_table(f)
            rows += [r for r in got if not hardware or r.hardware in hardware]
            problems += bad
    return rows, problems
