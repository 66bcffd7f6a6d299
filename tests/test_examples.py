"""The shipped example plans carry the model's prediction (perfmodel simulate --write-plan), current with the
model, so `executor show` has something to compare a run against."""

from __future__ import annotations

from pathlib import Path

import pytest

import perfmodel
from perfmodel.inputs.plan import PREDICTED_METRICS, load_plan

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_plan_carries_the_current_prediction(path: Path) -> None:
    plan = load_plan(path)
    assert plan.priced_with is not None and plan.calibration.name == "none", path
    now = perfmodel.simulate(path).metrics()
    for metric in PREDICTED_METRICS:
        written = getattr(plan.predicted, metric)
        assert written == pytest.approx(now[metric], rel=1e-6), (
            f"{path.name}: predicted.{metric} {written} is stale ({now[metric]} now): run "
            f"`perfmodel simulate {path.relative_to(REPO)} --write-plan`")


def test_write_plan_keeps_the_users_lines_and_refuses_a_non_plan(tmp_path, capsys) -> None:
    from perfmodel.cli import main

    plan = tmp_path / "p.yaml"
    text = (REPO / "examples" / "local-grpo.yaml").read_text()
    mine = text.split("# written by perfmodel simulate --write-plan")[0]
    plan.write_text(mine + "# my note at the end\n")
    assert main(["simulate", str(plan), "--write-plan"]) == 0
    again = plan.read_text()
    assert again.startswith(mine.rstrip("\n")) and "# my note at the end" in again
    assert load_plan(plan).predicted.step_time_s == pytest.approx(perfmodel.simulate(plan).metrics()["step_time_s"])
    assert main(["simulate", str(plan), "--write-plan"]) == 0
    assert plan.read_text().count("# written by perfmodel simulate --write-plan") == 1  # replaced, not appended
    capsys.readouterr()
    case = REPO / "studies" / "validation" / "cases" / "mbridge-h100-sxm-llama3-70b-fp8.yaml"
    assert main(["simulate", str(case), "--write-plan", str(tmp_path / "x.yaml")]) == 2
    assert "needs FILE to be a plan" in capsys.readouterr().err
    assert main(["simulate", str(plan), "--write-plan", "--micro-batch", "32"]) == 2
    assert "the flags change the plan" in capsys.readouterr().err
