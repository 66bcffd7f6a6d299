"""The one error type people see: names the file, the field and the fix; and `inert`, for any text from a file or a
store that reaches the terminal."""

from __future__ import annotations

import re

# control characters no name or note needs; printed, they drive the terminal (ESC sequences hide text, make links)
CONTROL_CHARACTERS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_LINE_BREAKING = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # the same, tab and line breaks included


def inert(text: str, keep_lines: bool = True) -> str:
    """`text` safe to print: control characters shown escaped (`\\x1b`); tab and line break kept unless
    `keep_lines` is False (a line that must stay one line: a comment in a printout meant for pasting)."""
    pattern = CONTROL_CHARACTERS if keep_lines else _LINE_BREAKING
    return pattern.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


class InputError(Exception):
    """Bad input. The CLI prints `str(err)` as one line and exits 2 (traceback only with --debug)."""

    def __init__(self, source: str, field: str, message: str) -> None:
        self.source = source
        self.field = field
        self.message = message
        super().__init__(self.one_line())

    def one_line(self) -> str:
        where = self.source or "<input>"
        name = self.field if self.field.isprintable() else repr(self.field)
        field = f": {name}" if self.field else ""
        text = " ".join(self.message.split())  # always one line
        return f"{where}{field}: {text}".replace("\n", " ")
