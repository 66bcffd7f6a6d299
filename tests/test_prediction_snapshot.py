"""Predictions are what the stored snapshot says: every figure of every shipped validation case and the top plans
of a fixed sweep (scripts/snapshot_predictions.py wrote it). A refactor must keep them; a deliberate model change
rewrites the snapshot in the same commit."""

from __future__ import annotations

import json

import pytest

from scripts.snapshot_predictions import SNAPSHOT, snapshot
from tests.conftest import validation_report

# under pytest-xdist both modules run on one worker, which simulates the shared case folders once
pytestmark = pytest.mark.xdist_group("validation_report")

REL = 1e-9  # float sums may reorder in a refactor; anything larger is a model change


@pytest.fixture(scope="module")
def now() -> dict:
    return snapshot(validation_report)


@pytest.fixture(scope="module")
def stored() -> dict:
    return json.loads(SNAPSHOT.read_text())


def test_validation_predictions_unchanged(now: dict, stored: dict) -> None:
    assert set(now["validation"]) == set(stored["validation"])
    changed = {k: (stored["validation"][k], v) for k, v in now["validation"].items()
               if (v is None) != (stored["validation"][k] is None)
               or (v is not None and v != pytest.approx(stored["validation"][k], rel=REL))}
    assert not changed, f"{len(changed)} predictions changed, e.g. {list(changed.items())[:5]}"


def test_sweep_top_plans_unchanged(now: dict, stored: dict) -> None:
    assert [r["label"] for r in now["sweep_top"]] == [r["label"] for r in stored["sweep_top"]]
    for a, b in zip(now["sweep_top"], stored["sweep_top"]):
        for k, v in a.items():
            if isinstance(v, float):
                assert v == pytest.approx(b[k], rel=REL), (a["label"], k)
