"""`perfmodel sweep`: enumeration and pruning, the seed's facts, outputs (CSV, plans, summary, trace), the cache,
Ctrl-C with partial results, and the same sweep on a real Ray head on loopback."""

from __future__ import annotations

import csv
import json
import os

import pytest
import yaml

from perfmodel.cli import main
from perfmodel.cost.memory.rollout import rollout_memory
from perfmodel.cost.memory.training import training_memory
from perfmodel.errors import InputError
from perfmodel.inputs.hardware import load_hardware
from perfmodel.inputs.model import load_model
from perfmodel.inputs.plan import load_plan
from perfmodel.inputs.run import RunSpec
from perfmodel.inputs.scenario import build_scenario
from perfmodel.predict import simulate_scenario
from perfmodel.sweep.run import evaluate_candidates
from perfmodel.sweep.space import enumerate_candidates
from perfmodel.sweep.spec import SweepSpec, default_sweep_path, load_sweep_spec, parse_nodes
from tests.conftest import REPO, sweep_rows

SEED_PLAN = REPO / "examples" / "seed-mi355x-dsv4.yaml"


def small_spec(**space) -> SweepSpec:
    base = yaml.safe_load(default_sweep_path().read_text())
    base["nodes"] = [4]
    base["space"] = {"tp": [1, 2], "pp": [2, 4], "ep": [4, 8], "recompute": ["full"],
                     "optimizer_offload_fraction": [1.0], "engine_gpus": [8], "engine_ep": ["none"],
                     "rollout_fraction": [0.5]} | space
    return SweepSpec.model_validate(base)


def test_moe_dispatcher_is_tried_only_with_expert_parallelism():
    one = list(enumerate_candidates(small_spec(ep=[1, 8]), 8, 256, 43))
    both = list(enumerate_candidates(small_spec(ep=[1, 8], moe_dispatcher=["alltoall", "deepep"]), 8, 256, 43))
    ep1 = [c for c in one if c.run["train"]["layout"]["ep"] == 1]
    ep8 = [c for c in one if c.run["train"]["layout"]["ep"] == 8]
    assert ep1 and ep8
    assert len(both) == len(ep1) + 2 * len(ep8)
    deep = [c for c in both if c.run["train"]["moe_dispatcher"] == "deepep"]
    assert deep and all(c.run["train"]["layout"]["ep"] == 8 and "deepep" in c.label() for c in deep)


def test_disaggregated_plans_try_each_weight_update_mechanism_asked_for():
    plain = list(enumerate_candidates(small_spec(), 8, 256, 43))
    both = list(enumerate_candidates(small_spec(weight_update_disaggregated=["broadcast", "p2p"]), 8, 256, 43))
    modes = {(c.run["rl"]["placement"], c.run["rl"]["weight_update"]["mode"]) for c in both}
    assert modes == {("colocated", "ipc"), ("disaggregated", "broadcast"), ("disaggregated", "p2p")}
    disagg = [c for c in plain if c.run["rl"]["placement"] == "disaggregated"]
    assert disagg and len(both) == len(plain) + len(disagg)
    assert all(("-p2p" in c.label()) == (c.run["rl"]["weight_update"]["mode"] == "p2p") for c in both)
    p2p = next(c for c in both if c.run["rl"]["weight_update"]["mode"] == "p2p")
    bc = next(c for c in both if c.label() == p2p.label().replace("-p2p", ""))
    wu = [simulate_scenario(build_scenario(RunSpec.model_validate(c.run))).rl.breakdown_s["weight_sync"]
          for c in (bc, p2p)]
    assert wu[1] != wu[0]  # priced by its mechanism, never folded together


def test_a_jobs_off_policy_window_goes_to_its_async_plans_only():
    spec = small_spec()
    spec.job["rl"]["off_policy_steps"] = 4
    cands = [c for c in enumerate_candidates(spec, 8, 256, 43) if c.run["rl"]["placement"] == "disaggregated"]
    window = {c.run["rl"]["async"]: c.run["rl"]["off_policy_steps"] for c in cands}
    assert window == {True: 4, False: 1}
    assert all(("-async-4off" in c.label()) == c.run["rl"]["async"] for c in cands)
    for c in cands[:2]:
        RunSpec.model_validate(c.run)  # a synchronous plan with a window would be refused


def test_recompute_modules_are_tried_as_the_sweep_file_names_them():
    spec = small_spec(recompute=["full", "selective:mla_up_proj+moe_act"], tp=[1], pp=[4], ep=[8])
    cands = list(enumerate_candidates(spec, 8, 256, 43))
    mods = [c for c in cands if c.run["train"]["recompute"] == "selective"]
    assert mods and len(mods) * 2 == len(cands)
    assert all(c.run["train"]["recompute_modules"] == ["mla_up_proj", "moe_act"] for c in mods)
    assert all("rc-selective:mla_up_proj+moe_act" in c.label() for c in mods)
    full = next(c for c in cands if c.run["train"]["recompute"] == "full")
    assert "recompute_modules" not in full.run["train"]
    # priced as those modules: less replayed than full recompute, more memory kept
    m, f = (simulate_scenario(build_scenario(RunSpec.model_validate(c.run))) for c in (mods[0], full))
    recompute = [r.rl.train_side.train.breakdown_s["recompute"] for r in (m, f)]
    assert 0 < recompute[0] < recompute[1]
    assert m.memory.activations_bytes > f.memory.activations_bytes


def test_the_ep_all_to_all_overlap_is_tried_where_megatron_runs_it():
    spec = small_spec(schedule=["1f1b", "combined-1f1b"], vpp=[1, 2], pp=[1, 2], ep=[1, 8], recompute=["selective"])
    cands = list(enumerate_candidates(spec, 8, 256, 43))
    combined = [c.run["train"] for c in cands if c.run["train"]["schedule"] == "combined-1f1b"]
    assert combined and all(t["layout"]["ep"] > 1 for t in combined)
    assert all(t["layout"]["vpp"] > 1 or t["layout"]["pp"] == 1 for t in combined)
    assert {t["layout"]["pp"] for t in combined} == {1, 2}
    # interleaved named beside 1f1b is tried once per layout, not twice
    named = small_spec(schedule=["1f1b", "interleaved"], vpp=[2], pp=[2], ep=[8], recompute=["selective"])
    plain = small_spec(schedule=["1f1b"], vpp=[2], pp=[2], ep=[8], recompute=["selective"])
    assert len(list(enumerate_candidates(named, 8, 256, 43))) == len(list(enumerate_candidates(plain, 8, 256, 43)))
    run = next(c.run for c in cands if c.run["train"]["schedule"] == "combined-1f1b")
    assert simulate_scenario(build_scenario(RunSpec.model_validate(run))).step_time_s > 0


@pytest.mark.parametrize(("value", "says"), [("selective:moe_actt", "unknown module 'moe_actt'"),
                                             ("full:mlp", "selective:<module>"),
                                             ("selective:mla_up_proj", "no MLA attention")])
def test_a_recompute_choice_the_model_cannot_take_is_one_line(tmp_path, capsys, value, says):
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump({"hardware": "h100-sxm", "model": {"id": "llama3-8b"}, "nodes": [1],
                                 "job": {"kind": "pretrain", "train": {"seq_len": 2048, "global_batch": 64}},
                                 "space": {"recompute": [value]}}))
    assert main(["sweep", str(p), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "space.recompute" in err and says in err


def test_hybrid_ep_in_an_amd_sweep_is_one_line(tmp_path, capsys):
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump({"hardware": "mi355x", "model": {"id": "qwen3-30b-a3b"}, "nodes": [1],
                                 "job": {"kind": "pretrain", "train": {"seq_len": 2048, "global_batch": 64}},
                                 "space": {"moe_dispatcher": ["alltoall", "hybridep"]}}))
    assert main(["sweep", str(p), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "space.moe_dispatcher" in err and "deepep" in err
    assert not (tmp_path / "out" / "candidates.csv").exists()


def test_parse_nodes():
    assert parse_nodes("4-64") == (4, 8, 16, 32, 64)
    assert parse_nodes("4,8,16") == (4, 8, 16)
    for bad in ("x", "8-4", "0"):
        with pytest.raises(InputError):
            parse_nodes(bad)


def test_default_spec_loads_and_enumerates():
    spec = load_sweep_spec(default_sweep_path())
    assert spec.hardware == "mi355x" and spec.model.id == "deepseek-v4-flash"
    cands = list(enumerate_candidates(spec.model_copy(update={"nodes": (4,)}), 8, 256, 43))
    assert len(cands) > 1000
    labels = {c.label() for c in cands}
    assert any("TP1/PP4/EP4" in lab and "disagg16+16" in lab for lab in labels)


def test_seed_layout_fits_and_explains_its_time():
    """The seed's facts: on 4 MI355X nodes, TP1/PP4/EP4 disaggregated 2+2 fits in memory (both sides)."""
    scn = build_scenario(load_plan(SEED_PLAN))
    mem = training_memory(scn)
    assert mem.fits and mem.total_bytes < mem.capacity_bytes
    assert rollout_memory(scn).fits
    res = simulate_scenario(scn)
    bd = res.rl.breakdown_s
    assert sum(bd.values()) == pytest.approx(res.step_time_s, rel=1e-6)
    assert bd["rollout"] + bd["log_probs"] + bd["train_compute"] + bd["weight_sync"] > 0.5 * res.step_time_s


def test_pruning_reasons_and_ranking(tmp_path):
    spec = small_spec()
    hw, model = load_hardware("mi355x"), load_model("deepseek-v4-flash")
    cands = list(enumerate_candidates(spec, 8, 256, 43))
    out = evaluate_candidates(spec, cands, hw, model, "dsv4", workers=1)
    rows = sweep_rows(out, tmp_path)
    assert [r["index"] for r in rows] == [c.index for c in cands]  # enumeration order, each once
    statuses = {r["status"] for r in rows}
    assert statuses <= {"ok", "pruned"} and "ok" in statuses
    for r in rows:
        if r["status"] == "pruned":
            assert r["reason"]
    ranked = [r for r in rows if r.get("rank")]
    assert [r["rank"] for r in sorted(ranked, key=lambda r: r["rank"])] == list(range(1, len(ranked) + 1))
    assert sorted(r["step_time_s"] for r in ranked)[0] == out.top[0]["step_time_s"]
    seed_like = [r for r in rows if r["tp"] == 1 and r["pp"] == 4 and r["ep"] == 4
                 and r["placement"] == "disaggregated" and r["actor_gpus"] == 16]
    assert seed_like and all(r["status"] == "ok" for r in seed_like)


def test_interrupt_keeps_partial_results(tmp_path):
    spec = small_spec()
    hw, model = load_hardware("mi355x"), load_model("deepseek-v4-flash")
    cands = list(enumerate_candidates(spec, 8, 256, 43))
    calls = []

    def progress(done, total):
        calls.append(done)
        if done > 0:
            raise KeyboardInterrupt

    out = evaluate_candidates(spec, cands, hw, model, "dsv4", workers=1, progress=progress)
    assert out.interrupted
    rows = sweep_rows(out, tmp_path)
    assert len(rows) == len(cands) and out.not_evaluated == sum(r["status"] == "not_evaluated" for r in rows) > 0
    assert any(r["status"] in ("ok", "pruned") for r in rows)


def test_cli_writes_outputs_and_the_cache_makes_reruns_instant(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PERFMODEL_CACHE_DIR", str(tmp_path / "cache"))
    spec_path = tmp_path / "sweep.yaml"
    spec_path.write_text(yaml.safe_dump(small_spec().model_dump(mode="json", by_alias=True)))
    out = tmp_path / "out"
    assert main(["sweep", str(spec_path), "--out", str(out), "--workers", "1", "--top", "3"]) == 0
    rows = list(csv.DictReader((out / "candidates.csv").open()))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["evaluated"] + summary["pruned"] == len(rows) and summary["cached"] == 0
    plans = sorted((out / "plans").glob("rank*.yaml"))
    named = {summary["settle"]["plan"], (summary["settle"].get("cheaper") or {}).get("plan")}
    assert len(plans) == 3 and {str(p) for p in (out / "plans").glob("settle-*.yaml")} <= named
    best = load_plan(plans[0])
    assert best.predicted.step_time_s == pytest.approx(float(summary["top"][0]["step_time_s"]))
    assert build_scenario(best)  # a written plan passes every rule
    assert json.loads((out / "best_trace.json").read_text())["traceEvents"]
    capsys.readouterr()
    out2 = tmp_path / "out2"
    assert main(["sweep", str(spec_path), "--out", str(out2), "--workers", "1", "--top", "3"]) == 0
    summary2 = json.loads((out2 / "summary.json").read_text())
    assert summary2["cached"] == len(rows)
    assert summary2["top"][0]["label"] == summary["top"][0]["label"]


def test_cache_key_follows_the_code_not_the_version(tmp_path, monkeypatch):
    """An edited cost model must not read results of the old one (an editable install keeps its version)."""
    from perfmodel.sweep import cache

    args = ({"peak": 1.0}, "hw", "model", {"tp": 1})
    before = cache.result_key(*args)
    assert cache.result_key(*args) == before  # stable
    fake_pkg = tmp_path / "perfmodel"
    (fake_pkg / "cost").mkdir(parents=True)
    (fake_pkg / "cost" / "compute.py").write_text("EFFICIENCY = 0.9\n")
    monkeypatch.setattr(cache, "PACKAGE_DIR", fake_pkg)
    cache.code_fingerprint.cache_clear()
    first = cache.result_key(*args)
    (fake_pkg / "cost" / "compute.py").write_text("EFFICIENCY = 0.8\n")
    cache.code_fingerprint.cache_clear()
    assert cache.result_key(*args) != first
    cache.code_fingerprint.cache_clear()


def test_out_folder_with_results_is_not_overwritten(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "candidates.csv").write_text("earlier results")
    assert main(["sweep", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--out" in err
    assert (out / "candidates.csv").read_text() == "earlier results"


def test_bad_sweep_file_one_line(tmp_path, capsys):
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump({"hardware": "mi355x", "model": {"id": "deepseek-v4-flash"}, "nodes": [4],
                                 "job": {}, "space": {"tq": [1]}}))
    assert main(["sweep", str(p)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "space.tq" in err


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_sweep_on_a_real_ray_head(ray_head, tmp_path):
    spec = small_spec()
    hw, model = load_hardware("mi355x"), load_model("deepseek-v4-flash")
    cands = list(enumerate_candidates(spec, 8, 256, 43))[:40]
    local = evaluate_candidates(spec, cands, hw, model, "dsv4", workers=1)
    os.environ.pop("RAY_ADDRESS", None)
    remote = evaluate_candidates(spec, cands, hw, model, "dsv4", ray_address=ray_head.gcs)
    local_rows, remote_rows = sweep_rows(local, tmp_path), sweep_rows(remote, tmp_path)
    assert [r["status"] for r in remote_rows] == [r["status"] for r in local_rows]
    for a, b in zip(local_rows, remote_rows):
        if a["status"] == "ok":
            assert b["step_time_s"] == pytest.approx(a["step_time_s"], rel=1e-9)


def test_an_impossible_result_is_counted_invalid_never_ranked(monkeypatch, tmp_path):
    """A candidate whose simulation breaks a physical invariant is a model bug: status 'invalid' with the reason,
    counted in the outcome, never ranked."""
    import perfmodel.predict as predict
    from perfmodel.invariants import PhysicsError

    spec = load_sweep_spec(default_sweep_path()).model_copy(update={"nodes": (4,)})
    hw, model = load_hardware(spec.hardware), load_model(spec.model.id)
    cands = [c for c in enumerate_candidates(spec, hw.gpus_per_node, 256, model.num_layers)
             if c.label().startswith("4n TP4/PP1/EP32 rc-selective coloc")]  # layouts that fit (the snapshot's top)
    real = predict.simulate_scenario
    calls = {"n": 0}

    def flaky(scn, **kw):
        calls["n"] += 1
        if calls["n"] == 1:
            raise PhysicsError("MFU <= 1", "TP1/PP1", "MFU 7.8")
        return real(scn, **kw)

    monkeypatch.setattr(predict, "simulate_scenario", flaky)
    out = evaluate_candidates(spec, cands, hw, model, "t", workers=1, cache=None)
    bad = [r for r in sweep_rows(out, tmp_path) if r["status"] == "invalid"]
    assert out.invalid == 1 and len(bad) == 1 and "MFU <= 1" in bad[0]["reason"]
    assert bad[0]["objective_value"] is None and bad[0]["rank"] is None


def test_a_stack_calibration_reprices_every_candidate_and_plans_carry_it(tmp_path, capsys, monkeypatch):
    """An overlay of the sweep's stack (Miles here) slows training 2x: every candidate is priced with it, the plans
    record its parameters and a P10-P90 band around their prediction; an overlay of another stack is refused."""
    monkeypatch.setenv("PERFMODEL_CACHE_DIR", str(tmp_path / "cache"))
    spec = small_spec()
    spec_path = tmp_path / "sweep.yaml"
    spec_path.write_text(yaml.safe_dump(spec.model_dump(mode="json", by_alias=True)))
    stack = build_scenario(load_plan(SEED_PLAN)).stack.id
    cal = tmp_path / "cal.yaml"
    cal.write_text(yaml.safe_dump({
        "stack": stack, "hardware": None, "stack_params": {"train_compute_scale": 2.0},
        "uncertainty": {"covariance_log": {"names": ["stack.train_compute_scale"], "matrix": [[0.01]]},
                        "residual_sigma_log": 0.05}}))
    base, calibrated = tmp_path / "base", tmp_path / "cal"
    assert main(["sweep", str(spec_path), "--out", str(base), "--workers", "1", "--top", "2", "--no-report"]) == 0
    assert main(["sweep", str(spec_path), "--out", str(calibrated), "--workers", "1", "--top", "2", "--no-report",
                 "--calibration", str(cal), "--band"]) == 0
    rows = {r["label"]: r for r in csv.DictReader((base / "candidates.csv").open()) if r["train_time_s"]}
    cal_rows = {r["label"]: r for r in csv.DictReader((calibrated / "candidates.csv").open()) if r["train_time_s"]}
    assert all(float(cal_rows[k]["train_time_s"]) > 1.05 * float(rows[k]["train_time_s"]) for k in cal_rows)
    plan = load_plan(sorted((calibrated / "plans").glob("*.yaml"))[0])
    # the plan carries the calibrated stack: simulating it again gives what the sweep ranked it by
    again = simulate_scenario(build_scenario(plan)).metrics()["train_time_s"]
    assert again == pytest.approx(plan.predicted.train_time_s, rel=1e-9)
    assert plan.calibration.params == {"stack.train_compute_scale": 2.0}
    assert plan.priced_with.stack_knobs["train_compute_scale"] == 2.0
    lo, hi = plan.band["step_time_s"]
    assert lo < plan.predicted.step_time_s < hi
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump({"stack": "torchtitan", "stack_params": {"train_compute_scale": 2.0}}))
    capsys.readouterr()
    assert main(["sweep", str(spec_path), "--out", str(tmp_path / "x"), "--calibration", str(other)]) == 2
    assert "calibration is for stack 'torchtitan'" in capsys.readouterr().err


def test_p90_objective_ranks_rl_plans_by_the_tail_of_their_step_over_length_draws(tmp_path):
    """objective p90_step_time: each plan's step over `length_samples` draws of the response lengths, ranked by
    their 90th percentile; a length law with no spread gives the one step back."""
    import numpy as np

    from perfmodel.inputs.run import RunSpec
    from perfmodel.sim.rl_step import simulate_rl_step
    from perfmodel.sweep.run import evaluate_run

    spec = small_spec(tp=[1], pp=[4], ep=[4]).model_copy(update={"objective": "p90_step_time", "length_samples": 4})
    hw, model = load_hardware("mi355x"), load_model("deepseek-v4-flash")
    cands = list(enumerate_candidates(spec, 8, 256, 43))
    out = evaluate_candidates(spec, cands, hw, model, "dsv4", workers=1)
    ranked = sorted((r for r in sweep_rows(out, tmp_path) if r.get("rank")), key=lambda r: r["rank"])
    assert ranked and all(r["objective_value"] == r["step_time_p90_s"] for r in ranked)
    assert [r["step_time_p90_s"] for r in ranked] == sorted(r["step_time_p90_s"] for r in ranked)
    run = next(c for c in cands if c.index == ranked[0]["index"]).run
    scn = build_scenario(RunSpec.model_validate(run), hardware=hw, model=model)
    steps = [simulate_rl_step(scn, seed=k).step_time_s for k in range(4)]
    assert ranked[0]["step_time_p90_s"] == pytest.approx(float(np.percentile(steps, 90)), rel=1e-9)
    assert min(steps) < max(steps)  # the draws differ: the tail is what the objective sees
    fixed = {**run, "rl": {**run["rl"], "response_tokens": {"max": run["rl"]["response_tokens"]["max"],
                                                            "histogram": [[1000, 1]]}}}
    row = evaluate_run(fixed, hw, model, length_samples=4)
    assert row["status"] == "ok" and row["step_time_p90_s"] == pytest.approx(row["step_time_s"], rel=1e-12)
    assert ranked[0]["step_time_p90_s"] == out.top[0]["step_time_p90_s"]  # the capacity report reads it back


def test_top_plans_that_predict_the_same_are_one_row_and_the_sweep_says_what_next(tmp_path, capsys, monkeypatch):
    """Plans differing only in a knob the model does not price share one top row that names the knob; the
    rollout engine's EP is priced now (its grouped expert GEMMs see rows / ep), so its two layouts no longer fold;
    the closing lines give the best plan's real path for simulate and a dry-run launch; a rerun served from the
    cache says so instead of a rate."""
    from perfmodel.sweep.ranking import group_equal_plans

    rows = [{"label": "a", "step_time_s": 1.0, "engine_ep": 1}, {"label": "b", "step_time_s": 1.0, "engine_ep": 8},
            {"label": "c", "step_time_s": 2.0, "engine_ep": 1}, {"label": "d", "step_time_s": 3.0, "engine_ep": 1},
            {"label": "e", "step_time_s": 2.0, "engine_ep": 8}]
    top = group_equal_plans(rows, 2)
    assert [r["label"] for r in top] == ["a", "c"]
    assert top[0]["equal_plans"] == 2 and top[0]["equal_knobs"] == {"engine_ep": ["1", "8"]}
    assert top[1]["equal_plans"] == 2  # "e" ranks after "d", which is not shown, yet it joins "c"

    monkeypatch.setenv("PERFMODEL_CACHE_DIR", str(tmp_path / "cache"))
    spec_path = tmp_path / "sweep.yaml"
    spec_path.write_text(yaml.safe_dump(small_spec(engine_ep=["none", "full"]).model_dump(mode="json",
                                                                                          by_alias=True)))
    for name in ("first", "again"):
        assert main(["sweep", str(spec_path), "--out", str(tmp_path / name), "--workers", "1", "--top", "2",
                     "--no-report"]) == 0
    out = capsys.readouterr().out
    flat = "".join(out.split())  # the table wraps long cells on a narrow terminal
    assert "(x2:" not in out and "does not price engine ep" not in out
    best = sorted((tmp_path / "first" / "plans").glob("*.yaml"))[0]
    assert f"executorlaunch--plan{best}--dry-run".replace(" ", "") in flat
    assert "(allfromcache)" in flat
