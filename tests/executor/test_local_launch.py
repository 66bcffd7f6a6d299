"""End to end: `executor launch` of the shipped local plans with real SGLang + megatron-core on this machine."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import host_busy

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow]


def _have(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


needs_stack = pytest.mark.skipif(not (_have("sglang") and _have("megatron.core")),
                                 reason="needs the exec extra: sglang + megatron-core")


def _executor(*args: str, cwd: Path, timeout: int) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "executor", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=timeout)


def _launch(plan: str, steps: int, tmp_path: Path, *flags: str) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    store, run_dir = tmp_path / "executor.sqlite", tmp_path / "run"
    res = _executor("launch", "--plan", str(REPO / "examples" / plan), "--steps", str(steps), "--store", str(store),
                    "--run-dir", str(run_dir), *flags, cwd=tmp_path, timeout=420)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:] + _log_tail(run_dir)
    return res, store, run_dir


def _log_tail(run_dir: Path) -> str:
    log = run_dir / "logs" / "torchrun.log"
    return log.read_text()[-4000:] if log.exists() else ""


def check_default_plan_launch(res: subprocess.CompletedProcess[str], store_path: Path, run_dir: Path,
                              steps: int) -> None:
    """What a launch of the default plan (examples/local-grpo.yaml) must leave: progress lines with the time since
    launch, a finished run in the store with every phase of every step, the trace, `executor show` and `runs`.
    tests/executor/test_long_run.py calls it on its 25-step run of that plan (one launch for both)."""
    from executor.store import Store

    lines = res.stdout.splitlines()  # progress streams, each line with the time since launch
    for expected in ("trainer ready", "engine ready in", f"step 1/{steps}", f"step {steps}/{steps}"):
        assert any(line.startswith("[") and " s] " in line and expected in line for line in lines), (expected, lines)
    assert any(f"step 2/{steps}" in line and "(rollout " in line and "gap " in line for line in lines), lines
    store = Store(store_path)
    (run,) = store.runs()
    assert run["status"] == "finished" and run["steps"] == steps and run["plan_id"] == "local-grpo"
    assert run["info"]["engine_start_s"] > 0 and "dequantized" in run["info"]["engine_weight_format"]
    assert run["info"]["engine_start_method"] == "forkserver"  # CPU: SGLang imported while the trainer built
    records = store.steps(run["run_id"])
    assert [s["step"] for s in records] == list(range(1, steps + 1))
    for s in records:
        for phase in ("rollout", "log_probs", "train", "weight_update", "step"):
            assert s["phases_s"][phase] > 0
        assert s["phases_s"]["step"] < 30
        assert 0.0 <= s["reward_mean"] <= 1.0
        assert 0.0 < s["train_rollout_logprob_abs_diff"] < 1.0 and s["train_rollout_kl"] >= 0.0
        assert s["weight_update"]["quantized_tensors"] == 14  # 7 linear weights x 2 layers
        assert s["micro_batches"] and all(m["forward_s"] > 0 for m in s["micro_batches"])
        assert s["peak_rss_bytes"]["engine"] > 0
        assert s["host_s"]["generate"] > 0 and 0 <= s["host_s"]["gc_step"] and "between_phases" in s["host_s"]
    assert "host_probe" in run["environment"]  # the host's matmul rates, for pricing this run where it ran
    trace = json.loads((run_dir / "trace.json").read_text())
    names = {e["name"] for e in trace["traceEvents"] if e["ph"] == "X"}
    assert {"engine_start", "rollout", "log_probs", "train", "update_engine", f"step {steps}"} <= names
    cwd = store_path.parent
    shown = _executor("show", run["run_id"][:12], "--store", str(store_path), cwd=cwd, timeout=60)
    assert shown.returncode == 0 and "rollout" in shown.stdout and "predicted" in shown.stdout
    rollout_row = next(line.split() for line in shown.stdout.splitlines() if line.startswith("rollout "))
    assert len(rollout_row) == 11 and "-" not in rollout_row, shown.stdout  # measured, predicted, this host
    assert "calibration none" in shown.stdout and "this host" in shown.stdout
    assert "s (forkserver); rollout weights" in shown.stdout
    listed = _executor("runs", "--store", str(store_path), cwd=cwd, timeout=60)
    assert run["run_id"] in listed.stdout
    store.close()


@needs_stack
@pytest.mark.timeout(480)
def test_launch_the_ep2_layout(tmp_path: Path) -> None:
    """Two ranks, each with its share of the micro-batches. The PP2 plan is checked the same way
    (check_two_process_layout) on the run tests/executor/test_faults.py kills a rank of and resumes. Its second
    step runs under `--profile`: every rank writes that step's GEMMs as a kernel table that `perfmodel kernels
    check` reads."""
    from executor.store import Store
    from perfmodel.cli import main as perfmodel_main
    from perfmodel.kernels.table import read_table

    res, store_path, run_dir = _launch("local-grpo-ep2.yaml", 2, tmp_path, "--profile")
    store = Store(store_path)
    (run,) = store.runs()
    assert run["status"] == "finished" and run["steps"] == 2 and run["info"]["profiled_steps"] == [2]
    check_two_process_layout(run, store.steps(run["run_id"]), "TP1/PP1/EP2/DP2")
    assert "kernels of step 2" in res.stdout
    for rank in (0, 1):
        rows, problems = read_table(run_dir / "kernels" / f"rank{rank}" / "gemm.csv")
        assert problems == [] and rows and {r.hardware for r in rows} == {"cpu-local"}
        assert any(128 in (r.shape["n"], r.shape["k"]) for r in rows)  # the model's hidden size, forward or back
        assert all(f"step 2 rank {rank}" in r.source for r in rows)
    assert perfmodel_main(["kernels", "check", "--tables", str(run_dir / "kernels")]) == 0


def check_two_process_layout(run: dict, steps: list[dict], layout: str) -> None:
    assert run["layout"] == layout
    step = steps[-1]
    assert {"rank0", "rank1", "engine"} <= set(step["peak_rss_bytes"])
    assert {m["rank"] for m in step["micro_batches"]} == {0, 1}
    assert step["train_rollout_logprob_abs_diff"] > 0


@needs_stack
@pytest.mark.timeout(480)
def test_the_dsv4_miniature_trains_like_the_other_examples(tmp_path: Path) -> None:
    """issue 16: hash routing, the sliding window and hyper-connections served by SGLang (our model class) and
    trained by megatron-core (our layer spec) in a GRPO run; the log-prob gap stays as small as Llama's."""
    from executor.store import Store

    _res, store_path, _run_dir = _launch("local-grpo-dsv4mini.yaml", 4, tmp_path)
    store = Store(store_path)
    (run,) = store.runs()
    assert run["status"] == "finished" and run["steps"] == 4
    steps = store.steps(run["run_id"])
    assert all(0 < s["train_rollout_logprob_abs_diff"] < 0.02 for s in steps)
    assert all(s["train_stats"]["grad_norm"] > 0 for s in steps)


@needs_stack
@pytest.mark.timing
@pytest.mark.timeout(900)
def test_ppo_trains_a_critic_and_the_model_calibrated_on_grpo_predicts_its_step(default_plan_run,
                                                                               tmp_path: Path) -> None:
    """examples/local-ppo.yaml for 20 steps: the critic (a value head on the actor's model) runs before the actor
    every step and its value loss falls; the local-cpu stack calibrated on a GRPO run of the same machine and
    batch (the session's launch of the default plan, tests/executor/conftest.py) predicts the PPO step (the
    critic's passes and update priced from the actor's)."""
    import statistics

    import yaml

    from executor.store import Store
    from perfmodel.calibration import fit_calibration
    from perfmodel.inputs.case import load_case
    from perfmodel.inputs.scenario import build_scenario
    from perfmodel.inputs.stack import NUMERIC_KNOBS
    from perfmodel.predict import simulate_scenario

    cases = {}
    busy = host_busy()
    for plan in ("local-ppo.yaml", "local-grpo.yaml"):
        sub = tmp_path / plan.removesuffix(".yaml")
        sub.mkdir()
        if plan == "local-ppo.yaml":
            _res, store_path, _run_dir = _launch(plan, 20, sub)
        else:
            _res, store_path, _run_dir = default_plan_run
        (run,) = Store(store_path).runs()
        assert run["status"] == "finished"
        if plan == "local-ppo.yaml":
            records = Store(store_path).steps(run["run_id"])
            for s in records:
                assert 0 < s["phases_s"]["critic"] < s["phases_s"]["train"]
                assert {m["pass_name"] for m in s["micro_batches"]} == {"log_probs", "train", "critic"}
            loss = [s["train_stats"]["critic_value_loss_sum"] for s in records]
            assert statistics.fmean(loss[-5:]) < 0.25 * statistics.fmean(loss[:5]), loss
        out = sub / "case.yaml"
        res = _executor("export", run["run_id"], "--store", str(store_path), "--out", str(out), cwd=sub, timeout=120)
        assert res.returncode == 0, res.stderr[-2000:]
        cases[plan] = load_case(out)
    busy = busy or host_busy()
    assert yaml.safe_load((tmp_path / "local-ppo" / "case.yaml").read_text())["rl"]["algorithm"] == "ppo"
    cal = fit_calibration([cases["local-grpo.yaml"]], list(NUMERIC_KNOBS))  # perfmodel calibrate's default
    ppo = cases["local-ppo.yaml"]
    predicted = simulate_scenario(cal.apply(build_scenario(ppo))).metrics()
    measured = dict(ppo.measured.items())
    # measured on a quiet host: the PPO step predicted 0.8% short, its train phase (critic + actor) 2.3% long. In
    # two clean-clone CI runs on hosts the busy probe called quiet, the two launches drifted apart: the train phase
    # 27% short (x1.37) once, the step 42% short (x1.73) once (the host itself ran that whole integration suite
    # 16% slower than the run before). Two launches minutes apart on a shared VM differ by that much, so the bound
    # is x2: a prediction in the right range, not a close one (studies/calibration-loop measures closeness over
    # 3 + 3 runs); with other processes on the cores no margin says anything
    if busy:
        pytest.skip(f"PPO step accuracy not checked: the host was busy ({busy}); predicted {predicted}, "
                    f"measured {measured}")
    for metric in ("step_time_s", "train_time_s"):
        assert abs(math.log(predicted[metric] / measured[metric])) < math.log(2.0), (metric, predicted, measured)
