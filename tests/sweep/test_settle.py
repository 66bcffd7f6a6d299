"""The settling measurement (perfmodel/sweep/settle.py): what a plan's launch would tell, checked where the answer
is known in closed form, and which launch is named."""

from __future__ import annotations

import math

import numpy as np
import pytest

from perfmodel.inputs.overlay import RUN_SIGMA_LOG
from perfmodel.sweep.settle import SETTLE_STEPS, one_parameter_estimate, p_best_after, settling_measurement


def _draws(values: list[float], shared: np.ndarray, sigma: float, n: int, seed: int = 7
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    v = np.array(values)
    own = np.random.default_rng(seed).normal(0.0, sigma, size=(n, len(v))) if sigma else np.zeros((n, len(v)))
    return v, shared, v[None, :] * np.exp(shared + own)


def test_measuring_one_of_two_equal_plans_is_right_as_often_as_the_bivariate_normal_says() -> None:
    """Two plans predicted alike, each with its own error e ~ N(0, s^2): the launch of plan 1 sees e1 + noise (sd
    r) and keeps plan 1 when that is negative. It is right when (e1 + noise) and (e1 - e2) share a sign:
    1/2 + asin(rho)/pi, rho = s^2 / sqrt((s^2 + r^2) 2 s^2)."""
    s, n = 0.3, 400_000
    v, shared, drawn = _draws([100.0, 100.0], np.zeros((n, 2)), s, n)
    rho = s ** 2 / math.sqrt((s ** 2 + RUN_SIGMA_LOG ** 2) * 2 * s ** 2)
    expected = 0.5 + math.asin(rho) / math.pi
    assert p_best_after(v, shared, drawn, s, 0) == pytest.approx(expected, abs=0.004)
    assert p_best_after(v, shared, drawn, s, 1) == pytest.approx(expected, abs=0.004)


def test_a_launch_that_fixes_the_shared_parameter_settles_plans_that_differ_only_through_it() -> None:
    """No own errors; the plans trade places as one shared parameter moves: any launch reveals it, so the choice
    afterwards is always right."""
    theta = np.random.default_rng(3).normal(0.0, 0.5, 50_000)
    shared = np.column_stack([theta, -theta])
    v, shared, drawn = _draws([100.0, 101.0], shared, 0.0, len(theta))
    assert float(np.mean(np.argmin(drawn, axis=1) == 0)) < 0.6  # before: a near coin toss
    assert p_best_after(v, shared, drawn, 0.0, 0) == 1.0 and p_best_after(v, shared, drawn, 0.0, 1) == 1.0


def test_a_plan_that_is_never_best_is_not_worth_launching_and_the_cheaper_of_equals_is_named() -> None:
    n, s = 100_000, 0.2
    v, shared, drawn = _draws([100.0, 100.0, 300.0], np.zeros((n, 3)), s, n)
    rows = [{"rank": i + 1, "label": f"p{i + 1}", "gpus": g, "step_time_s": float(v[i]),
             "plan_path": f"/p/{i + 1}.yaml", "p_best": p} for i, (g, p) in enumerate([(64, 0.5), (32, 0.5), (8, 0.0)])]
    settle = settling_measurement(rows, v, shared, drawn, s)
    after = {c["rank"]: c["p_best_after"] for c in settle["candidates"]}
    assert after[3] == pytest.approx(0.5, abs=0.01)  # it tells nothing about plans 1 and 2
    assert after[1] == pytest.approx(after[2], abs=0.01) and after[1] > 0.6
    assert settle["command"] == f"executor launch --plan /p/2.yaml --steps {SETTLE_STEPS}"  # plan 2: half the GPUs
    assert settle["gpus"] == 32 and settle["expected_s"] == SETTLE_STEPS * 100.0
    assert settle["p_best_now"] == 0.5 and settle["p_best_after"] == after[2]


def test_a_lone_plan_has_nothing_to_settle() -> None:
    v, shared, drawn = _draws([100.0], np.zeros((10, 1)), 0.2, 10)
    assert settling_measurement([{"rank": 1, "gpus": 8, "step_time_s": 100.0}], v, shared, drawn, 0.2) is None


def _rows(v: np.ndarray, gpus: list[int], p_best: list[float]) -> list[dict]:
    return [{"rank": i + 1, "label": f"p{i + 1}", "gpus": g, "step_time_s": float(v[i]),
             "plan_path": f"/p/{i + 1}.yaml", "p_best": p} for i, (g, p) in enumerate(zip(gpus, p_best))]


def _small(gpus: int, step_s: float) -> dict:
    return {"rank": 1, "label": "p1", "replicas": 1, "of": 8, "gpus": gpus, "step_time_s": step_s,
            "plan_path": "/p/settle-1.yaml"}


def test_a_smaller_version_settles_plans_that_differ_only_through_what_they_share_and_is_named_for_its_cost() -> None:
    """No own errors: the small version reveals the shared parameter as a whole plan's launch does, so it is as good
    (p best after 1.0) and, at an eighth of the GPUs, the one named."""
    theta = np.random.default_rng(3).normal(0.0, 0.5, 20_000)
    v, shared, drawn = _draws([100.0, 101.0], np.column_stack([theta, -theta]), 0.0, len(theta))
    settle = settling_measurement(_rows(v, [64, 64], [0.55, 0.45]), v, shared, drawn, 0.0, _small(8, 100.0))
    assert settle["candidates"][-1] == {"rank": 1, "p_best_after": 1.0, "gpu_s": 8 * SETTLE_STEPS * 100.0,
                                        "small_scale": "1 of 8 replicas"}
    assert settle["plan"] == "/p/settle-1.yaml" and settle["gpus"] == 8 and "cheaper" not in settle
    assert "1 of its 8 data-parallel replicas" in settle["measurement"]


def test_a_smaller_version_tells_nothing_of_the_plans_own_errors() -> None:
    """Plans that differ only by their own errors: the small version leaves the leader's odds where they are, so
    the whole plan's launch is named and no cheaper route is offered."""
    n, s = 100_000, 0.2
    v, shared, drawn = _draws([100.0, 100.0], np.zeros((n, 2)), s, n)
    now = float(np.mean(np.argmin(drawn, axis=1) == 0))
    settle = settling_measurement(_rows(v, [64, 64], [now, 1 - now]), v, shared, drawn, s, _small(8, 100.0))
    assert settle["candidates"][-1]["p_best_after"] == pytest.approx(now, abs=0.01)
    assert settle["plan"].startswith("/p/") and "settle" not in settle["plan"] and "cheaper" not in settle


def test_a_cheaper_route_is_offered_when_it_gains_most_of_the_way() -> None:
    """Shared and own errors both: the whole plan's launch reveals more (named), the small version reveals the
    shared part at a fraction of the GPU-seconds (offered as `cheaper`)."""
    rng = np.random.default_rng(5)
    n = 4_000
    theta = np.repeat(rng.normal(0.0, 0.5, n // 40), 40)
    v, shared, drawn = _draws([100.0, 101.0], np.column_stack([theta, -theta]), 0.15, n)
    now = float(np.mean(np.argmin(drawn, axis=1) == 0))
    settle = settling_measurement(_rows(v, [64, 64], [now, 1 - now]), v, shared, drawn, 0.15, _small(8, 100.0))
    whole = max(c["p_best_after"] for c in settle["candidates"][:-1])
    assert settle["p_best_after"] >= whole - 0.01 and "settle" not in settle["plan"]
    c = settle["cheaper"]
    assert now + 0.01 < c["p_best_after"] < whole - 0.01 and c["gpus"] == 8 and c["gpu_s_share"] == pytest.approx(0.125)
    assert c["command"] == f"executor launch --plan /p/settle-1.yaml --steps {SETTLE_STEPS}"


def test_the_console_names_the_launch_and_the_cheaper_route() -> None:
    from types import SimpleNamespace

    from perfmodel.commands.sweep import _odds_lines

    theta = np.repeat(np.random.default_rng(5).normal(0.0, 0.5, 100), 40)
    v, shared, drawn = _draws([100.0, 101.0], np.column_stack([theta, -theta]), 0.15, len(theta))
    now = float(np.mean(np.argmin(drawn, axis=1) == 0))
    rows = _rows(v, [64, 64], [now, 1 - now])
    settle = settling_measurement(rows, v, shared, drawn, 0.15, _small(8, 100.0))
    ranking = SimpleNamespace(odds={"parameters": ["x"], "parameter_draws": 32}, settle=settle, top=rows,
                              outcome=SimpleNamespace(interrupted=False))
    text = "\n".join(_odds_lines(ranking))
    assert f"to settle the choice: plan {settle['measurement'][5]}" in text and settle["command"] in text
    assert ("or, at 12.5% of its GPU-seconds: plan 1 (p1) at small scale, 1 of its 8 data-parallel replicas (8 GPUs)"
            in text and f"{settle['cheaper']['command']}" in text)


def test_one_parameters_estimate_is_the_plans_response_to_it_alone() -> None:
    """Plans linear in two parameters: what a measurement of one reveals is exactly each plan's slope on it times its
    value; a plan that cannot be priced in some draws is fitted on the rest."""
    rng = np.random.default_rng(2)
    thetas = rng.normal(0.0, [0.4, 0.8], size=(256, 2))
    slopes = np.array([[1.0, 0.2], [0.5, 0.9], [0.0, 1.0]])
    shared = thetas @ slopes.T + np.array([0.01, 0.0, -0.02])
    shared[:5, 2] = np.nan
    for k in range(2):
        est = one_parameter_estimate(shared, thetas, k)
        expected = np.array([0.01, 0.0, -0.02]) + thetas[:, [k]] * slopes[:, k]
        assert np.allclose(est, expected, atol=1e-9)


def test_a_rollout_on_one_engine_is_named_when_the_engine_is_what_orders_the_plans() -> None:
    """Two plans that trade places as the engine's multiplier moves (one rollout-bound, one not), a training
    multiplier that slows both alike, no own errors: one engine's rollout reveals the order as a whole launch would,
    at a fraction of the GPU-seconds, so it is named; a measurement of the training multiplier would not be."""
    rng = np.random.default_rng(4)
    thetas = np.repeat(rng.normal(0.0, [0.4, 0.8], size=(200, 2)), 10, axis=0)  # (train, rollout)
    shared = np.column_stack([thetas[:, 0] + thetas[:, 1], thetas[:, 0] - thetas[:, 1]])
    v, shared, drawn = _draws([100.0, 100.5], shared, 0.0, len(thetas))
    now = float(np.mean(np.argmin(drawn, axis=1) == 0))
    engine = {"rank": 2, "label": "p2", "engines": 12, "gpus": 8, "step_time_s": 60.0, "plan_path": "/p/eng.yaml",
              "parameter": "stack.rollout_compute_scale"}
    names = ("stack.train_compute_scale", "stack.rollout_compute_scale")
    settle = settling_measurement(_rows(v, [128, 128], [now, 1 - now]), v, shared, drawn, 0.0, None, engine,
                                  thetas, names)
    assert settle["plan"] == "/p/eng.yaml" and settle["p_best_after"] == 1.0 and 0.3 < now < 0.7
    assert settle["candidates"][-1]["small_scale"] == "rollout alone on 1 of 12 engines"
    assert "alone on one of its 12 engines" in settle["measurement"] and settle["gpus"] == 8
    assert settle["expected_s"] == SETTLE_STEPS * 60.0
    assert "perfmodel calibrate settle.yaml --params rollout_compute_scale --out cal.yaml" in settle["then"]
    train_only = settling_measurement(_rows(v, [128, 128], [now, 1 - now]), v, shared, drawn, 0.0, None,
                                      engine | {"parameter": names[0]}, thetas, names)
    assert train_only["candidates"][-1]["p_best_after"] == pytest.approx(now, abs=0.05)


def test_a_weight_update_alone_is_named_when_the_update_is_what_orders_the_plans() -> None:
    """A plan that waits for its weight update and one that hides it (async) trade places as the update's multiplier
    moves; the engine's multiplier slows both alike. An update at the plan's fewest replicas reveals the order
    at a fraction of a whole launch's GPU-seconds, so it is named, with the calibration of that multiplier alone; the
    engine's rollout, which reveals only what the plans share, is not."""
    rng = np.random.default_rng(5)
    thetas = np.repeat(rng.normal(0.0, [0.3, 0.4, 0.6], size=(200, 3)), 10, axis=0)  # (train, rollout, update)
    shared = np.column_stack([thetas[:, 1] + 0.8 * thetas[:, 2], thetas[:, 1] - 0.8 * thetas[:, 2]])
    v, shared, drawn = _draws([100.0, 100.5], shared, 0.0, len(thetas))
    now = float(np.mean(np.argmin(drawn, axis=1) == 0))
    names = ("stack.train_compute_scale", "stack.rollout_compute_scale", "stack.weight_update_time_scale")
    engine = {"rank": 1, "label": "p1", "engines": 4, "gpus": 8, "step_time_s": 60.0, "plan_path": "/p/eng.yaml",
              "parameter": names[1]}
    update = {"rank": 2, "label": "p2", "replicas": 1, "of": 2, "gpus": 24, "step_time_s": 20.0, "update_s": 15.0,
              "plan_path": "/p/wu.yaml", "parameter": names[2]}
    settle = settling_measurement(_rows(v, [128, 128], [now, 1 - now]), v, shared, drawn, 0.0, None, engine,
                                  thetas, names, update)
    assert settle["plan"] == "/p/wu.yaml" and settle["p_best_after"] == 1.0 and 0.3 < now < 0.7
    by_kind = {c.get("small_scale", "plan").split(",")[0]: c for c in settle["candidates"]}
    assert by_kind["weight update alone"]["gpu_s"] == 24 * SETTLE_STEPS * 20.0
    assert by_kind["rollout alone on 1 of 4 engines"]["p_best_after"] == pytest.approx(now, abs=0.05)
    said = settle["measurement"]
    assert "weight update of plan 2 (p2) from 1 of its 2 training replicas to one engine (24 GPUs" in said
    assert "about 15 s priced" in settle["measurement"] and settle["expected_s"] == SETTLE_STEPS * 20.0
    assert "perfmodel calibrate settle.yaml --params weight_update_time_scale --out cal.yaml" in settle["then"]
    without = settling_measurement(_rows(v, [128, 128], [now, 1 - now]), v, shared, drawn, 0.0, None, engine,
                                   thetas[:, :2], names[:2], update)  # an overlay that gives the update no spread
    assert all("weight update" not in c.get("small_scale", "") for c in without["candidates"])
