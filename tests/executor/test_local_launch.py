"""End to end: `executor launch` of the shipped local plans with real SGLang + megatron-core on this machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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


def _launch(plan: str, steps: int, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    store, run_dir = tmp_path / "executor.sqlite", tmp_path / "run"
    res = _executor("launch", "--plan", str(REPO / "examples" / plan), "--steps", str(steps), "--store", str(store),
                    "--run-dir", str(run_dir), cwd=tmp_path, timeout=420)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:] + _log_tail(run_dir)
    return res, store, run_dir


def _log_tail(run_dir: Path) -> str:
    log = run_dir / "logs" / "torchrun.log"
    return log.read_text()[-4000:] if log.exists() else ""


@needs_stack
@pytest.mark.timeout(480)
def test_launch_default_plan_three_steps(tmp_path: Path) -> None:
    from executor.store import Store

    res, store_path, run_dir = _launch("local-grpo.yaml", 3, tmp_path)
    assert "step 3/3" in res.stdout
    store = Store(store_path)
    (run,) = store.runs()
    assert run["status"] == "finished" and run["steps"] == 3 and run["plan_id"] == "local-grpo"
    assert run["info"]["engine_start_s"] > 0 and "dequantized" in run["info"]["engine_weight_format"]
    steps = store.steps(run["run_id"])
    for s in steps:
        for phase in ("rollout", "log_probs", "train", "weight_update", "step"):
            assert s["phases_s"][phase] > 0
        assert s["phases_s"]["step"] < 30
        assert 0.0 <= s["reward_mean"] <= 1.0
        assert 0.0 < s["train_rollout_logprob_abs_diff"] < 1.0 and s["train_rollout_kl"] >= 0.0
        assert s["weight_update"]["quantized_tensors"] == 14  # 7 linear weights x 2 layers
        assert s["micro_batches"] and all(m["forward_s"] > 0 for m in s["micro_batches"])
        assert s["peak_rss_bytes"]["engine"] > 0
    trace = json.loads((run_dir / "trace.json").read_text())
    names = {e["name"] for e in trace["traceEvents"] if e["ph"] == "X"}
    assert {"engine_start", "rollout", "log_probs", "train", "update_engine", "step 3"} <= names
    shown = _executor("show", run["run_id"][:12], "--store", str(store_path), cwd=tmp_path, timeout=60)
    assert shown.returncode == 0 and "rollout" in shown.stdout and "predicted" in shown.stdout
    listed = _executor("runs", "--store", str(store_path), cwd=tmp_path, timeout=60)
    assert run["run_id"] in listed.stdout


@needs_stack
@pytest.mark.timeout(480)
@pytest.mark.parametrize(
    "plan,layout", [("local-grpo-pp2.yaml", "TP1/PP2/DP1"), ("local-grpo-ep2.yaml", "TP1/PP1/EP2/DP2")])
def test_launch_two_process_layouts(tmp_path: Path, plan: str, layout: str) -> None:
    from executor.store import Store

    _res, store_path, _run_dir = _launch(plan, 2, tmp_path)
    store = Store(store_path)
    (run,) = store.runs()
    assert run["status"] == "finished" and run["layout"] == layout and run["steps"] == 2
    step = store.steps(run["run_id"])[-1]
    assert {"rank0", "rank1", "engine"} <= set(step["peak_rss_bytes"])
    assert {m["rank"] for m in step["micro_batches"]} == {0, 1}
    assert step["train_rollout_logprob_abs_diff"] > 0
