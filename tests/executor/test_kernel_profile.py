"""`executor launch --profile`: a profiled step's kernels as kernel tables. The conversion is checked on a real
torch.profiler trace of small CPU kernels (a linear layer forward and backward, fused attention); the flag's
checks before anything starts; `executor export` leaving the profiled step out. A real launch with --profile
runs in tests/executor/test_local_launch.py (slow)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from executor.backends.base import LaunchOptions
from executor.backends.local.backend import _profile_step
from executor.backends.local.kernel_profile import kernel_rows, raw_cpu_events, write_kernel_tables
from executor.backends.registry import backend_for
from executor.cli import main
from executor.export import run_as_case
from executor.records import RunRecord, environment, plan_hash
from executor.store import Store
from perfmodel.errors import InputError
from perfmodel.inputs.plan import load_plan
from perfmodel.kernels.table import read_table

REPO = Path(__file__).resolve().parents[2]
SEED = REPO / "examples" / "seed-mi355x-dsv4.yaml"
LOCAL = REPO / "examples" / "local-grpo.yaml"


def _profile():
    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(48, 32, requires_grad=True)  # fp32: 48 tokens, 32 in, 96 out
    w = torch.randn(96, 32, requires_grad=True)
    q, kv = torch.randn(2, 4, 8, 16, dtype=torch.bfloat16), torch.randn(2, 2, 12, 16, dtype=torch.bfloat16)
    tq, tkv = (torch.randn(1, h, 16, 16, dtype=torch.bfloat16, requires_grad=True) for h in (4, 2))
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(3):
            F.linear(x, w).sum().backward()
        F.scaled_dot_product_attention(q, kv, kv, enable_gqa=True)
        F.scaled_dot_product_attention(tq, tkv, tkv, is_causal=True, enable_gqa=True).sum().backward()  # training
        torch.relu(x)  # not a kernel the tables hold
    return prof


def _trace() -> list:
    return _profile().events()


def test_a_traced_step_becomes_one_row_per_kernel_shape():
    rows = kernel_rows(_trace(), "cpu-local", "test trace")
    gemms = {(r.shape["m"], r.shape["n"], r.shape["k"]): r for r in rows if r.op == "gemm"}
    # forward x @ w.T; backward: grad x = grad y @ w, grad w = grad y.T @ x: each its own m, n, k
    assert set(gemms) == {(48, 96, 32), (48, 32, 96), (96, 32, 48)}
    assert all(r.dtype == "fp32" and r.repetitions == 3 and r.latency_s > 0 and r.spread >= 0
               for r in gemms.values())
    attention = {(r.op, r.get("seq")): r for r in rows if r.op != "gemm"}
    assert set(attention) == {("attention_prefill", 8), ("attention_prefill", 16), ("attention_backward", 16)}
    assert all(r.dtype == "bf16" and r.repetitions == 1 for r in attention.values())
    assert dict(attention["attention_prefill", 8].shape) == {"batch": 2, "seq": 8, "heads": 4, "kv_heads": 2,
                                                            "head_dim": 16, "cached": 4}
    # the backward's q and k follow its grad_out: the same shape as its forward's, no cached prefix
    assert dict(attention["attention_backward", 16].shape) == {"batch": 1, "seq": 16, "heads": 4, "kv_heads": 2,
                                                              "head_dim": 16}
    assert {r.hardware for r in rows} == {"cpu-local"} and {r.world_size for r in rows} == {1}


def test_a_cpu_steps_raw_events_give_the_same_rows():
    """On a CPU the raw profiler events (fast) and torch's FunctionEvents (its device-time attribution, for GPUs)
    give the same rows."""
    prof = _profile()
    raw, full = (kernel_rows(events, "cpu-local", "t") for events in (raw_cpu_events(prof), prof.events()))
    assert [(r.op, r.shape, r.dtype, r.repetitions) for r in raw] == [(r.op, r.shape, r.dtype, r.repetitions)
                                                                      for r in full]
    assert [r.latency_s for r in raw] == pytest.approx([r.latency_s for r in full], rel=1e-9)
    assert [r.spread for r in raw] == pytest.approx([r.spread for r in full], rel=1e-6)
    assert {e.name for e in raw_cpu_events(prof)} >= {"aten::mm", "aten::_scaled_dot_product_flash_attention_for_cpu"}


def test_the_tables_are_what_kernels_check_reads(tmp_path):
    rows = kernel_rows(_trace(), "cpu-local", "test trace")
    written = write_kernel_tables(rows, tmp_path / "rank0", "recorded by a test")
    assert written == {"attention.csv": 3, "gemm.csv": 3}
    for name in written:
        read, problems = read_table(tmp_path / "rank0" / name)
        assert problems == [] and len(read) == written[name]
    from perfmodel.cli import main as perfmodel_main

    assert perfmodel_main(["kernels", "check", "--tables", str(tmp_path)]) == 0


def test_the_profiled_step_is_one_of_the_run():
    assert _profile_step(None, 5) is None
    assert _profile_step(0, 5) == 2 and _profile_step(0, 1) == 1  # the first step after the warm-up
    assert _profile_step(4, 5) == 4
    for bad in (6, -1):
        with pytest.raises(InputError) as e:
            _profile_step(bad, 5)
        assert e.value.source == "--profile" and "1-5" in str(e.value)


def test_profile_is_refused_where_it_cannot_run(tmp_path, capsys):
    plan = load_plan(SEED)
    with pytest.raises(InputError) as e:
        backend_for(plan, str(SEED)).launch(plan, LaunchOptions(str(SEED), tmp_path / "s.sqlite", profile_step=0))
    assert e.value.field == "executor.backend" and "--profile" in str(e.value)
    assert main(["launch", "--resume", "x", "--profile"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--resume" in err
    assert main(["launch", "--plan", str(LOCAL), "--profile", "99", "--steps", "3",
                 "--store", str(tmp_path / "s.sqlite")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--profile" in err and "1-3" in err
    assert not (tmp_path / "s.sqlite").exists()  # refused before anything was recorded


def test_export_leaves_the_profiled_step_out(tmp_path):
    record = RunRecord(run_id="r", plan_id="local-grpo", plan_hash=plan_hash(LOCAL), plan_path=str(LOCAL),
                       backend="local", hardware="cpu-local", layout="TP1/PP1/DP1", run_dir=str(tmp_path),
                       started_at=time.time(), environment=environment(), predicted={},
                       info={"profiled_steps": [2]})
    store = Store(tmp_path / "s.sqlite")
    store.create_run(record)
    store.close()
    steps = [{"step": n, "phases_s": {"step": t, "rollout": t / 2}, "tokens": {}} for n, t in
             ((1, 9.0), (2, 5.0), (3, 1.0), (4, 1.2))]
    case = run_as_case(record.__dict__, steps, str(tmp_path / "s.sqlite"))
    assert case["measured"]["step_time_s"] == pytest.approx(1.1)  # steps 3 and 4: not the warm-up, not step 2
    assert "the profiled step left out" in case["source"] and "median of 2 steps after 1 warm-up" in case["source"]
