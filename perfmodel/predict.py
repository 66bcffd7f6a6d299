"""From a resolved scenario to the figures a validation case or a plan names (step time, phases, ...).

The one place that maps simulator results onto metric names; `validate`, `sweep` and plans all go through it.
"""

from __future__ import annotations

from perfmodel.spec.scenario import Scenario


class NotPredicted(Exception):
    """The model cannot predict this scenario (and says why); counted as a failed case, never skipped."""


def predict_metrics(scenario: Scenario) -> dict[str, float]:
    raise NotPredicted(f"not predicted yet: the {scenario.run.kind} simulator is not built")
