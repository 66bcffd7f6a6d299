"""Write the knob table of docs/stacks.md from the knobs' declarations (`Stack` in perfmodel/inputs/stack.py);
tests/inputs/test_knob_declarations.py checks the doc's table is current.

    python scripts/knob_table.py            # rewrite the table between its markers in docs/stacks.md
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
DOC = REPO / "docs" / "stacks.md"
BEGIN = "<!-- knob table: written by scripts/knob_table.py from perfmodel/inputs/stack.py; edit the declarations -->"
END = "<!-- end of knob table -->"


def _table_span(text: str) -> tuple[int, int]:
    start = text.index(BEGIN) + len(BEGIN)
    return start, text.index(END, start)


def doc_table(text: str) -> str:
    """The table between the markers of a docs/stacks.md text."""
    start, end = _table_span(text)
    return text[start:end].strip("\n")


def with_table(text: str, table: str) -> str:
    """The text with the table between its markers replaced."""
    start, end = _table_span(text)
    return f"{text[:start]}\n{table}\n{text[end:]}"


def main() -> None:
    from perfmodel.inputs.stack import knob_table_markdown

    DOC.write_text(with_table(DOC.read_text(encoding="utf-8"), knob_table_markdown()), encoding="utf-8")


if __name__ == "__main__":
    main()
