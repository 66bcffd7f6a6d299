"""What the Miles argument builders (args_*.py) share: the `ArgGroup` each returns, and number formatting."""

from __future__ import annotations

from dataclasses import dataclass, field

from perfmodel.errors import InputError


@dataclass(slots=True)
class ArgGroup:
    """Train arguments of one concern, in launch order, with what that concern has to say about the launch."""

    args: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # caveats shown in the dry run; the launch still goes ahead
    passthrough_env: list[str] = field(default_factory=list)  # env names copied from the submitting shell


def fmt(x: float | int) -> str:
    """A number as Miles' argparse reads it back: ints as ints, floats by repr (1e-06, 0.2), bools lower-case."""
    if isinstance(x, bool):
        return str(x).lower()
    if isinstance(x, int):
        return str(x)
    return repr(float(x))


def fail(source: str, field_: str, message: str) -> InputError:
    return InputError(source, field_, message)
