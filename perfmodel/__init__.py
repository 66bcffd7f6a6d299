"""perfmodel: a discrete-event performance model of RL training of large MoE models.

Data flows one way: spec (validated inputs) -> cost (pure functions) -> sim (simpy) -> sweep / report.
The Python API (perfmodel.api): `simulate(run)`, `sweep(spec)`, `validate(cases)`, `calibrate(cases)`; imported
on first use, so `import perfmodel` stays cheap for the CLI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["simulate", "sweep", "validate", "calibrate", "Ranking", "ValidationReport"]

if TYPE_CHECKING:
    from perfmodel.api import Ranking, ValidationReport, calibrate, simulate, sweep, validate


def __getattr__(name: str) -> Any:
    if name == "sweep":  # the subpackage, callable as the API's sweep (perfmodel/sweep/__init__.py)
        import importlib

        return importlib.import_module("perfmodel.sweep")
    if name in __all__:
        from perfmodel import api

        return getattr(api, name)
    raise AttributeError(f"module 'perfmodel' has no attribute {name!r}")
