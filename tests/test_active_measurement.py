"""The loop choosing on hidden measurements (perfmodel/active_measurement.py): on synthetic jobs whose right answer
is known analytically, the settling measurement finds the best layout where a measurement can tell, cannot where
the layouts share their error, and the random baseline is the mean over every choice; on the shipped cases, a run
filed twice is one layout."""

from __future__ import annotations

import glob
import math

import numpy as np
import pytest

from perfmodel.active_measurement import Job, job_cases, play, regret_after, summarize
from perfmodel.crossval import SCALE_GRID, CaseCurve
from perfmodel.inputs.case import case_paths, load_case
from tests.conftest import REPO


def _layout(cid: str, fixed_s: float, scaled_s: float, true_scale: float) -> CaseCurve:
    """A layout whose step is fixed_s + scaled_s x the multiplier (a part the multiplier does not touch, such as
    communication, and one it scales), measured at the true multiplier."""
    log_pred = np.log(fixed_s + scaled_s * np.array(SCALE_GRID))[:, None]
    measured = np.array([math.log(fixed_s + scaled_s * true_scale)])
    c = CaseCurve(cid, ("s", "hw"), ["step_time_s"], measured, log_pred, step_time_s=fixed_s + scaled_s)
    c.zero_shot = {"step_time_s": fixed_s + scaled_s}
    return c


def _job(*layouts: CaseCurve) -> Job:
    return Job("synthetic", "pretrain", "step_time_s", True, "train_compute_scale", list(layouts),
               np.array([c.step_time_s for c in layouts]))


def test_one_measurement_reveals_the_multiplier_and_the_best_layout_is_chosen():
    # priced at the first-principles multiplier 1.0: A 10 s, B 11 s, C 30 s; the stack is 2x slower than priced:
    # A (all compute) measures 20 s, B (8 s of communication) 14 s, C 60 s. Zero-shot picks A (regret 20/14);
    # measuring A or B reveals the multiplier, and either way B is then chosen.
    job = _job(_layout("A", 0.0, 10.0, 2.0), _layout("B", 8.0, 3.0, 2.0), _layout("C", 0.0, 30.0, 2.0))
    row = play(job)
    assert row["regret_settle"][0] == pytest.approx(20 / 14)
    assert row["settle_picks"][0] in ("A", "B")  # measuring C (the slowest by far) would settle it too, dearer
    assert row["regret_settle"][1] == pytest.approx(1.0, abs=0.01)
    assert row["regret_settle"][2] == pytest.approx(1.0, abs=0.01)
    # the random baseline is the mean over the three choices, each of which reveals the multiplier here
    assert row["regret_random"][1] == pytest.approx(np.mean([regret_after(job, (k,)) for k in range(3)]))


def test_layouts_that_share_their_error_are_not_reordered_by_one_measurement():
    # A and B both all compute, priced 10 and 11 s; A measures 12 s (its own error), B 11 s. One measurement
    # calibrates the multiplier both share, so neither choice moves the order: only measuring both does.
    a = _layout("A", 0.0, 10.0, 1.2)
    b = _layout("B", 0.0, 11.0, 1.0)
    job = _job(a, b)
    row = play(job)
    assert row["regret_settle"][0] == pytest.approx(12 / 11)
    assert row["regret_settle"][1] == pytest.approx(12 / 11, rel=0.01)
    assert row["regret_hindsight"][1] == pytest.approx(12 / 11, rel=0.01)
    assert row["regret_settle"][2] == 1.0 and row["regret_random"][2] == 1.0  # both measured


def test_throughput_regret_is_the_best_measured_over_the_chosen():
    a, b = _layout("A", 0.0, 10.0, 1.0), _layout("B", 0.0, 12.0, 1.0)
    job = Job("tps", "pretrain", "tokens_per_s_per_gpu", False, "train_compute_scale", [a, b], np.ones(2))
    # measured throughputs 10 and 12: choosing the layout priced higher (-12 is the lower objective) is right
    assert job.regret(np.array([-10.0, -12.0])) == 1.0
    assert job.regret(np.array([-12.0, -10.0])) == pytest.approx(1.2)


def test_summary_counts_within_5_percent_per_rule():
    rows = [{"regret_settle": [1.2, 1.0, 1.0], "regret_random": [1.2, 1.1, 1.0], "regret_hindsight": [1.2, 1.0, 1.0],
             "within_random": [0.0, 0.5, 1.0], "measured_gap": 1.2, "layouts": 3},
            {"regret_settle": [1.0, 1.0, 1.0], "regret_random": [1.0, 1.0, 1.0], "regret_hindsight": [1.0, 1.0, 1.0],
             "within_random": [1.0, 1.0, 1.0], "measured_gap": 1.01, "layouts": 2}]
    s = summarize(rows)
    assert s["all"]["settle_0_within_5pct"] == 0.5 and s["all"]["settle_1_within_5pct"] == 1.0
    assert s["all"]["random_1_within_5pct"] == 0.75 and s["decisive"]["jobs"] == 1
    assert s["three or more layouts"]["random_1_mean_regret"] == pytest.approx(1.1)


def test_a_run_filed_twice_is_one_layout_of_its_job():
    files = case_paths([str(REPO / "studies/validation/cases")] + glob.glob(str(REPO / "studies/validation/*/cases")))
    jobs = job_cases([(load_case(p), str(p)) for p in files])
    # the development set's DSV3 B200 row (data-parallel size written out) and the archive's 25.11 row (with its
    # FP8 recipe) are one run: that job has one layout, so it is no job
    assert "deepseek-v3 fp8 seq 4096 batch 2048 on b200, megatron-bridge@25.11 (pretrain)" not in jobs
    assert jobs and all(len(m) >= 2 for _, m in jobs.values())
    for metric, members in jobs.values():
        keys = [(c.gpus, c.train.layout.model_dump_json(exclude={"dp"}), dict(c.measured.items())[metric])
                for c, _ in members]
        assert len(keys) == len(set(keys))
