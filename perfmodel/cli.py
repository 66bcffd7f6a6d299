"""The `perfmodel` command line. Bad input prints one line (file: field: fix) and exits 2; an impossible result
(a physics invariant broken) one line and exits 3.

The subcommands live in perfmodel/commands/ (one module each, listed in COMMANDS); this file only builds the
parser and turns errors into exit codes.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from perfmodel.commands import COMMANDS
from perfmodel.errors import InputError
from perfmodel.invariants import PhysicsError
from perfmodel.signals import exit_code, handle_sigterm
from perfmodel.version import __version__

EXIT_BAD_INPUT = 2
EXIT_IMPOSSIBLE = 3  # a result broke physics: refused, never printed as a prediction


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="perfmodel",
        description="Predict, rank and validate RL training layouts of large MoE models on GPU clusters.",
    )
    p.add_argument("--version", action="version", version=f"perfmodel {__version__}")
    p.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        command.register(sub)
    for sp in sub.choices.values():  # `perfmodel validate --debug` works as well as `perfmodel --debug validate`
        sp.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks for errors")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    handle_sigterm()
    try:
        return int(args.func(args) or 0)
    except InputError as err:
        if args.debug:
            raise
        print(f"error: {err.one_line()}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except PhysicsError as err:
        if args.debug:
            raise
        print(f"error: {err}: refused; a stack knob or calibration overlay that scales time (train_compute_scale "
              "and the other *_scale knobs) beyond what the hardware allows does this, else it is a bug in the model "
              "(--debug shows where)", file=sys.stderr)
        return EXIT_IMPOSSIBLE
    except KeyboardInterrupt as err:  # Ctrl-C, or SIGTERM (Terminated): what was kept is said where it was kept
        print("interrupted", file=sys.stderr)
        return exit_code(err)
    except BrokenPipeError:  # `perfmodel validate | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at interpreter exit
        return 0


if __name__ == "__main__":
    sys.exit(main())
