"""The SQLite store: WAL mode, one transaction per step, a crash loses at most the step in flight."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

from executor.records import RunRecord, StepRecord
from executor.store import Store


def _run(run_id: str = "r1") -> RunRecord:
    return RunRecord(run_id=run_id, plan_id="p", plan_hash="h", plan_path="p.yaml", backend="local",
                     hardware="cpu-local", layout="TP1/PP1/DP1", run_dir="/tmp/x", started_at=time.time(),
                     environment={"host": "h"}, predicted={"step_time_s": 1.0})


def _step(n: int) -> StepRecord:
    return StepRecord(step=n, started_at=time.time(),
                      phases_s={"rollout": 0.1, "log_probs": 0.2, "train": 0.3, "weight_update": 0.05,
                                "offload": None, "onload": None, "step": 0.7},
                      tokens={"prompt": 10, "response": 5, "train": 20}, reward_mean=0.5, reward_std=0.1,
                      train_rollout_logprob_abs_diff=0.01, train_rollout_kl=0.001,
                      rollout_log_prob_mean=-1.0, train_stats={"grad_norm": 1.0},
                      weight_update={"tensors": 3}, peak_rss_bytes={"rank0": 1})


def test_wal_mode_and_round_trip(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.sqlite")
    assert store.journal_mode() == "wal"
    store.create_run(_run())
    store.write_step("r1", _step(1))
    store.write_step("r1", _step(2))
    store.update_run_info("r1", engine_start_s=30.0)
    store.finish_run("r1", "finished")
    again = Store(tmp_path / "s.sqlite")
    run = again.run("r1")
    assert run is not None and run["status"] == "finished" and run["info"]["engine_start_s"] == 30.0
    assert [s["step"] for s in again.steps("r1")] == [1, 2]
    assert again.steps("r1")[0]["phases_s"]["offload"] is None
    assert again.runs()[0]["steps"] == 2


def test_a_failing_step_write_leaves_no_partial_row(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.sqlite")
    store.create_run(_run())
    store.write_step("r1", _step(1))
    try:
        with store._transaction() as conn:
            conn.execute("INSERT INTO steps (run_id, step, started_at, record, written_at) "
                         "VALUES ('r1', 2, 0, '{}', 0)")
            raise RuntimeError("crash inside the step")
    except RuntimeError:
        pass
    assert store.step_count("r1") == 1


def test_process_killed_mid_step_loses_only_that_step(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    store = Store(path)
    store.create_run(_run())
    store.close()
    code = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
        sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
        from test_local_store import _step
        from executor.store import Store
        s = Store({str(path)!r})
        s.write_step("r1", _step(1))
        s.write_step("r1", _step(2))
        s.conn.execute("BEGIN IMMEDIATE")
        s.conn.execute("INSERT INTO steps (run_id, step, started_at, record, written_at) "
                       "VALUES ('r1', 3, 0, '{{}}', 0)")
        os._exit(9)  # dies holding the open transaction of step 3
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 9, proc.stderr
    reopened = Store(path)
    assert [s["step"] for s in reopened.steps("r1")] == [1, 2]
    reopened.write_step("r1", _step(3))  # the store is usable again, no lock left behind
    assert reopened.step_count("r1") == 3


def test_show_puts_the_gap_next_to_the_other_precision(tmp_path: Path, capsys) -> None:
    """issue 16: `executor show` compares the run's per-step log-prob gap with the same model's runs of the other
    rollout precision in the store, in a line and as a figure."""
    import dataclasses

    from executor.cli import main as executor_main
    from executor.records import plan_hash

    repo = Path(__file__).resolve().parents[2]
    store = Store(tmp_path / "s.sqlite")
    for run_id, plan, precision, gap in (("fp8run", "local-grpo.yaml", "fp8", 0.006),
                                         ("bf16run", "local-grpo-bf16.yaml", "bf16", 0.002),
                                         ("other", "local-grpo-ep2.yaml", "bf16", 0.5)):  # another model
        path = repo / "examples" / plan
        rec = dataclasses.replace(_run(run_id), plan_path=str(path), plan_hash=plan_hash(path),
                                  info={"rollout_precision": precision})
        store.create_run(rec)
        for n in (1, 2, 3):
            store.write_step(run_id, dataclasses.replace(_step(n), train_rollout_logprob_abs_diff=gap))
    store.close()
    assert executor_main(["show", "fp8run", "--store", str(tmp_path / "s.sqlite"), "--figure",
                          str(tmp_path / "gap.html")]) == 0
    out = capsys.readouterr().out
    assert "this run (fp8) 6.00e-03" in out and "bf16run (bf16, same model) 2.00e-03" in out
    assert "the FP8 rollout's gap is 3.0x the BF16 one" in out and "other" not in out.split("log-prob gap")[1]
    assert (tmp_path / "gap.html").stat().st_size > 100_000
