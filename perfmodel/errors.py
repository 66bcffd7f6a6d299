"""The one error type people see: names the file, the field and the fix."""

from __future__ import annotations


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
