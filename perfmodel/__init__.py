"""perfmodel: a discrete-event performance model of RL training of large MoE models.

Data flows one way: spec (validated inputs) -> cost (pure functions) -> sim (simpy) -> sweep / report.
The Python API (perfmodel.api): `simulate(run)`, `validate(cases)`, `calibrate(cases)` (also as perfmodel.X) and
`perfmodel.api.sweep(spec)`; imported on first use, so `import perfmodel` stays cheap for the CLI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from perfmodel.version import __version__ as __version__

# perfmodel.sweep is the sweep's package (an ordinary one); its API function is perfmodel.api.sweep
__all__ = ["simulate", "validate", "calibrate", "Ranking", "ValidationReport"]

if TYPE_CHECKING:
    from perfmodel.api import Ranking, ValidationReport, calibrate, simulate, validate


def __getattr__(name: str) -> Any:
    if name in __all__:
        from perfmodel import api

        return getattr(api, name)
    raise AttributeError(f"module 'perfmodel' has no attribute {name!r}")
