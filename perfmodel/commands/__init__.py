"""The `perfmodel` subcommands: one module each, listed once in COMMANDS.

Each module has `register(subparsers)`, which adds its parser and sets `func` to its handler `run(args)`.
Handlers import what they run lazily so building the parser (`perfmodel --help`) stays fast. The arrow points one
way: these modules import from predict/sim/sweep/report/calibration, never the reverse.
"""

from __future__ import annotations

from types import ModuleType

from perfmodel.commands import calibrate, check, hardware, kernels, models, report, simulate, sweep, validate

# The order is the order `perfmodel --help` lists them in.
COMMANDS: tuple[ModuleType, ...] = (validate, models, hardware, check, simulate, sweep, report, calibrate, kernels)
