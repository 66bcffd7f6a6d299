"""Cross-validated accuracy: the leave-one-out split never calibrates a case on itself, the fit recovers a known
stack multiplier from synthetic runs, bands cover what they should, and the command prints the groups."""

from __future__ import annotations

import math

import numpy as np
import pytest

from perfmodel.cli import main
from perfmodel.crossval import SCALE_GRID, CaseCurve, band, cross_validate, curves_for, fit_scale
from perfmodel.inputs.case import case_paths, load_case, run_key
from tests.conftest import CASES_DIR


def _synthetic(cid: str, true_scale: float, slope: float, noise: float = 0.0) -> CaseCurve:
    """A case whose prediction grows as scale**slope and whose measurement sits at the true scale."""
    g = np.log(SCALE_GRID)
    log_pred = (slope * g + 1.0)[:, None]
    measured = np.array([slope * math.log(true_scale) + 1.0 + noise])
    c = CaseCurve(cid, ("s", "hw"), ["step_time_s"], measured, log_pred)
    c.zero_shot = {"step_time_s": math.exp(1.0)}
    return c


def test_the_fit_recovers_a_known_multiplier_within_2_percent():
    runs = [_synthetic(f"c{i}", 1.8, slope) for i, slope in enumerate((0.6, 0.8, 1.0, 0.9))]
    fit = fit_scale(runs)
    # the prior pulls toward 1.0 a little; with four runs that agree it stays within 2%
    assert math.exp(fit.theta) == pytest.approx(1.8, rel=0.02)
    assert fit.sigma_theta < 0.2


def test_with_no_runs_the_prior_stands():
    fit = fit_scale([])
    assert fit.theta == 0.0 and fit.n_runs == 0


def test_no_case_calibrates_on_itself():
    """Poison one case's own measurement: its calibrated prediction must not move (it is fitted on the others)."""
    runs = [_synthetic(f"c{i}", 1.5, 0.8) for i in range(4)]
    before = cross_validate(runs)["rows"]
    poisoned = [_synthetic("c0", 50.0, 0.8)] + runs[1:]
    after = cross_validate(poisoned)["rows"]
    c0_before = next(r for r in before if r["id"] == "c0")
    c0_after = next(r for r in after if r["id"] == "c0")
    assert c0_after["calibrated"] == pytest.approx(c0_before["calibrated"])
    assert all(r["calibration_runs"] == 3 for r in after)
    assert next(r for r in after if r["id"] == "c1")["calibrated"] != pytest.approx(
        next(r for r in before if r["id"] == "c1")["calibrated"])  # the others do see it


def test_bands_widen_with_disagreement_and_contain_the_median():
    tight = fit_scale([_synthetic(f"c{i}", 1.5, 0.8) for i in range(4)])
    loose = fit_scale([_synthetic(f"c{i}", 1.5, 0.8, noise=n) for i, n in enumerate((0.3, -0.3, 0.2, -0.2))])
    c = _synthetic("x", 1.5, 0.8)
    lo_t, mid_t, hi_t = band(c, tight)
    lo_l, mid_l, hi_l = band(c, loose)
    assert lo_t[0] < mid_t[0] < hi_t[0]
    assert hi_l[0] / lo_l[0] > hi_t[0] / lo_t[0]


def test_cv_on_the_megatron_2021_runs():
    files = [p for p in case_paths([str(CASES_DIR)]) if p.name.startswith("megatron2021-")][:5]
    curves, failed = curves_for([(load_case(p), str(p)) for p in files])
    assert not failed and len(curves) == 5
    cv = cross_validate(curves)
    g = cv["groups"]["megatron-lm@2021 on a100-80gb"]
    assert g["runs"] == 5 and 0 <= g["coverage"] <= 1 and g["median_width"] > 1
    assert g["calibrated_mae"] < g["zero_shot_mae"] + 0.02  # one multiplier per stack does not make it worse here
    assert cv["learning_curve"][0][1] == 10  # two figures of five runs at zero calibration runs
    for k, (mae, n, zero) in cv["learning_curve"].items():  # each k beside the zero-shot error of its own figures
        assert n and mae >= 0 and (k or mae == pytest.approx(zero))
    assert cv["learning_curve"][4][1] == 10  # five runs: each has four others


def test_the_command_prints_the_groups(capsys, tmp_path):
    src = next(p for p in case_paths([str(CASES_DIR)]) if p.name.startswith("megatron2021-gpt-1.7b"))
    for i in range(3):
        (tmp_path / f"c{i}.yaml").write_text(src.read_text().replace("id: megatron2021-gpt-1.7b", f"id: c{i}"))
    assert main(["validate", "--cv", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "megatron-lm@2021 on a100-80gb" in out and "learning curve" in out


def test_a_copy_of_the_run_under_another_id_is_not_a_calibration_run():
    a = _synthetic("a", 1.5, 0.8)
    copy_of_a = _synthetic("a-again", 1.5, 0.8, noise=0.0)
    a.run_key = copy_of_a.run_key = "same run"
    others = [_synthetic(f"c{i}", 1.5, 0.8) for i in range(2)]
    for o in others:
        o.run_key = o.id
    rows = cross_validate([a, copy_of_a, *others])["rows"]
    assert next(r for r in rows if r["id"] == "a")["calibration_runs"] == 2  # c0, c1: not its own copy


def test_shipped_copies_that_differ_in_options_or_flags_are_one_run():
    """The development set repeats archive rows with the recipe left out or a flag written otherwise: one run."""
    folder = CASES_DIR.parent / "mbridge-archive" / "cases"
    pairs = [("mbridge-b200-deepseek-v3-fp8-ep8-pp16", "mb25.11-b200-deepseek-v3-fp8-mx-256g-tp1pp16cp1vp1ep8-mbs1"),
             ("mbridge-h100-sxm-llama3-8b-fp8", "mb25.11-h100-sxm-llama3-8b-fp8-cs-8g-tp1pp1cp1vp1ep1-mbs1")]
    for dev, archive in pairs:
        a, b = load_case(CASES_DIR / f"{dev}.yaml"), load_case(folder / f"{archive}.yaml")
        assert a.stack_options != b.stack_options or a.train.distributed_optimizer != b.train.distributed_optimizer
        assert run_key(a) == run_key(b)
    # the same layout on the next release measured again is another run
    again = [load_case(folder / f"mb26.02{r}-gb200-gpt-oss-120b-bf16-64g-tp1pp1cp1vp1ep64-mbs4.yaml")
             for r in ("", ".01")]
    assert run_key(again[0]) != run_key(again[1])


def test_the_summary_has_a_row_per_kind_of_run():
    """Coverage and width per kind (pretrain, rl, serve), each over its own runs only."""
    curves = [_synthetic(f"p{i}", 1.5, 0.8, noise=0.01 * i) for i in range(3)]
    rl = [_synthetic(f"r{i}", 1.5, 0.8, noise=0.3) for i in range(2)]
    for c in rl:
        c.kind = "rl"
    groups = cross_validate(curves + rl)["groups"]
    assert groups["overall, pretrain"]["runs"] == 3 and groups["overall, rl"]["runs"] == 2
    assert "overall, serve" not in groups  # no serving run: no row
    assert groups["overall"]["n"] == groups["overall, pretrain"]["n"] + groups["overall, rl"]["n"]
    assert groups["overall, rl"]["zero_shot_mae"] > groups["overall, pretrain"]["zero_shot_mae"]
