"""Where the commands' tables go: a terminal gets tables that fit it (long names fold onto a second line, never cut
with an ellipsis); a pipe or a log gets every name in full (rich would otherwise cut rows to 80 columns); `--format
csv|json` gives the rows as data."""

from __future__ import annotations

import csv
import json
import sys
from typing import Any

from rich.console import Console
from rich.table import Table

FORMATS = ("table", "csv", "json")
PIPE_WIDTH = 10_000  # wide enough for any row: a piped table is read by grep and people, never cut


def console() -> Console:
    """The commands' console: the terminal's width, or no limit when piped. Markup is off: names from files (a
    model called `x[/]`, a `[link=...]`) print as typed; a line that styles passes markup=True and escapes them."""
    out = Console(markup=False)
    return out if out.is_terminal else Console(width=PIPE_WIDTH, markup=False)


def new_table(title: str, columns: list[str], left: tuple[str, ...] = ()) -> Table:
    """A table whose `left` columns are names (left-aligned, folded when the terminal is narrow), the rest numbers."""
    table = Table(title=title)
    for col in columns:
        if col in left:
            table.add_column(col, justify="left", overflow="fold")
        else:
            table.add_column(col, justify="right", no_wrap=True)
    return table


def write_rows(rows: list[dict[str, Any]], fmt: str, columns: list[str] | None = None) -> None:
    """Rows as CSV (the given columns, in order) or as a JSON list, to stdout."""
    if fmt == "json":
        print(json.dumps(rows, indent=2, default=str))
        return
    cols = columns or (list(rows[0]) if rows else [])
    writer = csv.DictWriter(sys.stdout, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
