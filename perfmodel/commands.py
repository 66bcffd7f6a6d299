"""Subcommands defined next to the code they run (simulate, sweep, report, calibrate).

Each module listed here has `register(subparsers)`; cli.py stays small. Imports are lazy inside each
command's handler so `perfmodel --help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib

COMMAND_MODULES: tuple[str, ...] = ("perfmodel.sim.command", "perfmodel.sweep.command", "perfmodel.report.capacity",
                                     "perfmodel.calibrate_command")


def register_all(sub: argparse._SubParsersAction) -> None:
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
