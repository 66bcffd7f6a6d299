"""How sure the ranking is (issue 24, item 1): joint draws with common random numbers, p_best and tie groups, checked
on cases whose answer is known in closed form."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from perfmodel.sweep.odds import PARAMETER_DRAWS, TIE_CONFIDENCE, beats, rank_odds, tie_groups


def _phi(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def test_two_plans_with_only_their_own_error_are_told_apart_as_a_normal_says() -> None:
    """ln T_i = ln v_i + e_i, e_i ~ N(0, s^2) independent: P(plan 1 best) = Phi(ln(v2/v1) / (sqrt(2) s))."""
    v = np.array([100.0, 110.0])
    p, drawn = rank_odds(v, np.zeros((100, 2)), 0.1, own_draws=400, seed=1)
    expect = _phi(math.log(1.1) / (math.sqrt(2) * 0.1))
    assert p[0] == pytest.approx(expect, abs=0.01) and p.sum() == pytest.approx(1.0)
    assert beats(drawn, 0, 1) == pytest.approx(expect, abs=0.01)
    assert beats(drawn, 1, 0) == pytest.approx(1 - expect, abs=0.01)


def test_an_error_every_plan_shares_never_changes_the_order() -> None:
    """A parameter both plans depend on alike (the same sensitivity), however uncertain: the faster stays best."""
    v = np.array([100.0, 100.5])
    theta = np.random.default_rng(0).normal(0.0, 1.0, size=(5000, 1))
    p, _ = rank_odds(v, theta @ np.array([[0.8, 0.8]]), 0.0, own_draws=1)
    assert list(p) == [1.0, 0.0]


def test_plans_that_depend_on_a_parameter_differently_trade_places_as_its_spread_says() -> None:
    """Plan 1 slows with a parameter of ln-sigma 0.5, plan 2 does not: plan 1 is best unless the parameter's draw
    exceeds ln(v2/v1): P = Phi(ln(v2/v1) / 0.5)."""
    v = np.array([100.0, 120.0])
    theta = np.random.default_rng(2).normal(0.0, 0.5, size=(40000, 1))
    p, _ = rank_odds(v, theta @ np.array([[1.0, 0.0]]), 0.0, own_draws=1)
    assert p[0] == pytest.approx(_phi(math.log(1.2) / 0.5), abs=0.01)


def test_an_objective_to_maximize_is_ranked_the_right_way_round() -> None:
    """-tokens/s (lower is better): a draw that slows a plan lowers its tokens/s, so raises its objective."""
    v = np.array([-120.0, -100.0])
    theta = np.random.default_rng(3).normal(0.0, 0.5, size=(40000, 1))
    p, _ = rank_odds(v, theta @ np.array([[1.0, 0.0]]), 0.0, own_draws=1)
    assert p[0] == pytest.approx(_phi(math.log(1.2) / 0.5), abs=0.01)


def test_a_draw_a_plan_cannot_be_priced_in_is_lost_by_it() -> None:
    p, _ = rank_odds(np.array([-120.0, -100.0]), np.array([[math.inf, 0.0]] * 10), 0.0, own_draws=1)
    assert list(p) == [0.0, 1.0]


def test_a_plan_joins_its_groups_first_plan_unless_beaten_by_it_in_ninety_percent_of_draws() -> None:
    hi = TIE_CONFIDENCE + 0.01
    shares = np.array([[0.0, 0.6, hi, 0.5],
                      [0.4, 0.0, 0.7, hi],
                      [0.0, 0.3, 0.0, 0.5],
                      [0.5, 0.0, 0.5, 0.0]])
    # plan 1 ties plan 0 (0.6); plan 0 beats plan 2 (>= 0.9): plan 2 starts group 2, and plan 3 ties plan 2 (0.5)
    # though plan 1 beats it: groups are runs of consecutive plans, each compared with its group's first
    assert tie_groups(4, lambda i, j: shares[i, j]) == [1, 1, 2, 2]
    assert tie_groups(3, lambda i, j: hi) == [1, 2, 3]
    assert tie_groups(1, lambda i, j: 0.0) == [1]


def test_a_draw_is_priced_exactly_kinks_included() -> None:
    """The seed plan's step re-priced under drawn multipliers: no change at theta 0; a rollout three times slower
    lengthens the step by more than its first-order sensitivity at the base says when rollout becomes critical."""
    from perfmodel.calibration import repriced, sensitivities
    from perfmodel.inputs.plan import load_plan
    from perfmodel.inputs.scenario import build_scenario
    from tests.sweep.test_sweep import SEED_PLAN

    scn = build_scenario(load_plan(SEED_PLAN))
    sens = sensitivities(scn, None)
    assert sens.names == ["stack.train_compute_scale", "stack.rollout_compute_scale", "stack.weight_update_time_scale",
                          "stack.host_op_time_scale"]
    up = math.log(3.0)
    ratio = repriced(scn, None, np.array([[0.0, 0.0, 0.0, 0.0], [0.0, up, 0.0, 0.0], [up, 0.0, 0.0, 0.0]]),
                     "step_time_s")
    assert ratio[0] == pytest.approx(1.0, rel=1e-12) and ratio[1] > 1.0 and ratio[2] > 1.0
    first_order = math.exp(sens.grads[1]["step_time_s"] * up)
    assert ratio[1] >= first_order * (1 - 1e-6)  # a max of phases is convex: first order never overshoots


def test_one_parameters_draws_read_off_an_exact_grid_and_exactly_where_it_breaks_physics() -> None:
    """A pretraining plan not bound by its host has one uncertain parameter that moves it (odds._moving leaves the
    host's out): each draw is read off exact re-pricings at GRID_POINTS values of it (linear in ln between); below a
    grid value where the plan beats the GPU's peak (NaN), draws are re-priced exactly. Against exact re-pricing at
    every draw: the same lost draws, the rest within the grid's spacing."""
    from perfmodel.calibration import repriced, uncertain_parameters
    from perfmodel.inputs.case import load_case
    from perfmodel.inputs.scenario import build_scenario
    from perfmodel.memo import Memo
    from perfmodel.sweep.odds import GRID_POINTS, _moving, _repriced_draws
    from tests.conftest import CASES_DIR

    scn = build_scenario(load_case(CASES_DIR / "mbridge-h100-sxm-llama3-8b-fp8.yaml"))
    _, names, cov, _ = uncertain_parameters(scn, None)
    assert names == ["stack.train_compute_scale", "stack.host_op_time_scale"]
    names, cov_log = _moving([scn], None, names, np.array(cov, dtype=float), Memo())
    assert names == ["stack.train_compute_scale"]
    thetas = np.random.default_rng(3).normal(0.0, math.sqrt(cov_log[0, 0]), size=(PARAMETER_DRAWS, 1))
    thetas[:2, 0] = (-2.5, 2.5)  # one far below (faster than the peak), one far above the grid's middle
    exact = repriced(scn, None, thetas, "step_time_s")
    read = _repriced_draws(scn, None, thetas, cov_log, Memo())
    assert np.array_equal(np.isnan(read), np.isnan(exact)) and np.isnan(exact).any()  # lost draws: the same
    ok = ~np.isnan(exact)
    assert read[ok] == pytest.approx(exact[ok], rel=0.02)
    grid = np.linspace(-3, 3, GRID_POINTS)[:, None] * math.sqrt(cov_log[0, 0])
    assert _repriced_draws(scn, None, grid, cov_log, Memo())[GRID_POINTS // 2:] == pytest.approx(
        repriced(scn, None, grid, "step_time_s")[GRID_POINTS // 2:], rel=1e-12)  # exact at the grid itself


def test_a_sweeps_top_plans_carry_p_best_and_tie_groups(tmp_path: Path, monkeypatch) -> None:
    from perfmodel.api import sweep
    from tests.sweep.test_sweep import small_spec

    monkeypatch.setenv("PERFMODEL_CACHE_DIR", str(tmp_path / "cache"))
    ranking = sweep(small_spec(), out=tmp_path / "s", top=4, workers=1, report=False)
    top = json.loads((tmp_path / "s" / "summary.json").read_text())["top"]
    assert len(top) == len(ranking.top) >= 2
    assert sum(t["p_best"] for t in top) == pytest.approx(1.0, abs=0.002)
    groups = [t["tie_group"] for t in top]
    assert groups[0] == 1 and groups == sorted(groups) and all(b - a <= 1 for a, b in zip(groups, groups[1:]))
    one = sweep(small_spec(), out=tmp_path / "one", top=1, workers=1, report=False)
    assert one.top[0]["p_best"] == 1.0 and one.top[0]["tie_group"] == 1  # a lone plan is surely the best of one
    summary = json.loads((tmp_path / "s" / "summary.json").read_text())
    assert summary["odds"]["parameters"] and summary["odds"]["parameter_draws"] == PARAMETER_DRAWS
    assert all(t["draws_lost"] == 0 for t in top)  # the small sweep's plans fit in memory under every draw


def test_an_overlay_without_uncertainty_leaves_only_the_plans_own_errors_and_says_so(tmp_path: Path, capsys,
                                                                                      monkeypatch) -> None:
    import yaml

    from perfmodel.cli import main
    from perfmodel.inputs.plan import load_plan
    from perfmodel.inputs.scenario import build_scenario
    from tests.sweep.test_sweep import SEED_PLAN, small_spec

    monkeypatch.setenv("PERFMODEL_CACHE_DIR", str(tmp_path / "cache"))
    spec_path = tmp_path / "sweep.yaml"
    spec_path.write_text(yaml.safe_dump(small_spec().model_dump(mode="json", by_alias=True)))
    cal = tmp_path / "cal.yaml"
    cal.write_text(yaml.safe_dump({
        "stack": build_scenario(load_plan(SEED_PLAN)).stack.id, "hardware": None,
        "stack_params": {"train_compute_scale": 1.5},
        "uncertainty": {"covariance_log": {"names": ["stack.train_compute_scale"], "matrix": [[0.0]]},
                        "residual_sigma_log": 0.05}}))
    assert main(["sweep", str(spec_path), "--out", str(tmp_path / "s"), "--workers", "1", "--top", "3",
                 "--no-report", "--calibration", str(cal)]) == 0
    out = capsys.readouterr().out
    odds = json.loads((tmp_path / "s" / "summary.json").read_text())["odds"]
    assert odds["parameters"] == [] and "own error only" in odds["basis"]
    assert "p best from each plan's own error only: the calibration gives its parameters no uncertainty" in \
        " ".join(out.split())


def test_a_sweeps_summary_names_the_settling_launch_of_one_of_its_top_plans(tmp_path: Path, monkeypatch) -> None:
    from perfmodel.api import sweep
    from tests.sweep.test_sweep import small_spec

    monkeypatch.setenv("PERFMODEL_CACHE_DIR", str(tmp_path / "cache"))
    ranking = sweep(small_spec(), out=tmp_path / "s", top=4, workers=1, report=False)
    settle = json.loads((tmp_path / "s" / "summary.json").read_text())["settle"]
    assert settle == ranking.settle and settle["command"].startswith("executor launch --plan ")
    assert settle["command"].split()[3] in {t["plan_path"] for t in ranking.top}
    whole = [c for c in settle["candidates"] if "small_scale" not in c]
    assert [c["rank"] for c in whole] == [t["rank"] for t in ranking.top] and settle["gpus"] > 0
    assert settle["expected_s"] > 0 and len(settle["candidates"]) <= len(whole) + 2  # and at most two smaller
    assert settle["p_best_after"] >= max(c["p_best_after"] for c in settle["candidates"]) - 0.01


def test_the_hosts_spread_stays_where_a_plan_is_bound_by_its_host() -> None:
    """odds._moving: B200's Qwen3-30B-A3B at one micro-batch is host-bound (the host's op issue moves its step), so
    both the compute and the host multipliers are drawn; the H100 Llama 3 8B plan above moves with compute alone."""
    from perfmodel.calibration import uncertain_parameters
    from perfmodel.inputs.case import load_case
    from perfmodel.inputs.scenario import build_scenario
    from perfmodel.memo import Memo
    from perfmodel.sweep.odds import _moving
    from tests.conftest import REPO

    scn = build_scenario(load_case(REPO / "studies/validation/mbridge-archive/cases"
                                   / "mb25.11-b200-qwen3-30b-a3b-fp8-mx-8g-tp1pp1cp1vp1ep8-mbs1.yaml"))
    _, names, cov, _ = uncertain_parameters(scn, None)
    kept, cov_kept = _moving([scn], None, names, np.array(cov, dtype=float), Memo())
    assert kept == names == ["stack.train_compute_scale", "stack.host_op_time_scale"]
    assert cov_kept.shape == (2, 2)
