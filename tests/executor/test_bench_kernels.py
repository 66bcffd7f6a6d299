"""`executor bench-kernels`: a CPU run on the tiny grid writes tables `read_table` reads without a problem, bad
flags fail in one line before anything is measured, and Ctrl-C keeps every finished row."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from executor.bench_kernels import runner
from executor.bench_kernels.collectives import _buffers
from executor.bench_kernels.compute import routed_bounds
from executor.bench_kernels.config import COLLECTIVES, GRIDS, MEASURED, BenchConfig, parse_ops
from executor.bench_kernels.timing import summarize
from executor.cli import main
from perfmodel.kernels.table import KernelRow, read_table

TABLES = ("gemm.csv", "attention.csv", "grouped_gemm.csv", "collectives.csv")


def _read_all(out: Path) -> list[KernelRow]:
    rows: list[KernelRow] = []
    for name in TABLES:
        if (out / name).exists():
            got, problems = read_table(out / name)
            assert problems == [], problems
            rows += got
    return rows


def _tiny_config(out: Path, ops: tuple[str, ...]) -> BenchConfig:
    out.mkdir(parents=True, exist_ok=True)
    return BenchConfig("cpu-local", out, ops, "cpu", 2, GRIDS["tiny"])


@pytest.mark.slow  # spawns two gloo ranks: about 15 s on a busy 2-core host
def test_quick_cpu_run_writes_readable_tables(tmp_path, capsys):
    out = tmp_path / "tables"
    rc = main(["bench-kernels", "--hardware", "cpu-local", "--out", str(out), "--quick", "--grid", "tiny",
               "--device", "cpu"])
    stdout = capsys.readouterr().out
    assert rc == 0, stdout
    rows = _read_all(out)
    assert {p.name for p in out.iterdir()} == set(TABLES)
    assert {r.op for r in rows} == set(MEASURED)
    assert all(r.latency_s > 0 and r.repetitions and r.spread is not None for r in rows)
    assert all(r.hardware == "cpu-local" and r.source.startswith("executor bench-kernels ") for r in rows)
    assert sum(" us  spread " in line for line in stdout.splitlines()) == len(rows)  # a progress line per row
    assert "gemm fp8: skipped" in stdout  # a format this device lacks is named once
    gemm = {(r.get("m"), r.get("n"), r.get("k")): r.latency_s for r in rows if r.op == "gemm"}
    assert gemm[(512, 512, 512)] > 3 * gemm[(1, 128, 128)]  # 8192x the FLOPs: a ratio within one run, never a time
    coll = [r for r in rows if r.op in COLLECTIVES]
    assert coll and all(r.world_size == 2 and r.backend == "gloo" and r.dtype == "fp32" for r in coll)
    assert all(r.world_size == 1 and r.backend == "torch" for r in rows if r.op not in COLLECTIVES)


@pytest.mark.parametrize(("flags", "says"), [
    (["--hardware", "h100"], ["--hardware", "cpu-local", "h100-sxm"]),
    (["--ops", "gemm,flash"], ["--ops", "'flash'", "attention_prefill", "all_to_all"]),
    (["--world-size", "1"], ["--world-size"]),
])
def test_bad_flags_fail_in_one_line(tmp_path, capsys, flags, says):
    out = tmp_path / "tables"
    args = ["bench-kernels", "--hardware", "cpu-local", "--out", str(out), "--device", "cpu", *flags]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err
    assert all(word in err for word in says), err
    assert not out.exists()  # checked before anything was created or measured


@pytest.mark.parametrize("where", ["file", "below_a_file"])
def test_out_must_be_a_writable_folder(tmp_path, capsys, where):
    a_file = tmp_path / "taken.csv"
    a_file.write_text("x\n")
    out = a_file if where == "file" else a_file / "tables"
    assert main(["bench-kernels", "--hardware", "cpu-local", "--out", str(out), "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--out" in err and "Traceback" not in err


def _stop_after(count: int, seen: list[KernelRow]):
    """An on_row callback that keeps the rows it is shown and presses Ctrl-C at the `count`-th."""

    def on_row(row: KernelRow) -> None:
        seen.append(row)
        if len(seen) == count:
            raise KeyboardInterrupt

    return on_row


def test_attention_backward_is_measured_on_the_prefill_shapes_and_priced(tmp_path, capsys):
    """The backward of each prefill shape, alone (one kept forward): rows kernels check prices in the training
    core's backward lane."""
    from perfmodel.kernels.check import check_rows

    result = runner.run_bench(_tiny_config(tmp_path, ("attention_prefill", "attention_backward")))
    assert not result.interrupted
    rows = _read_all(tmp_path)
    fwd = {tuple(r.shape.values())[:5]: r for r in rows if r.op == "attention_prefill"}
    bwd = {tuple(r.shape.values()): r for r in rows if r.op == "attention_backward"}
    assert set(bwd) == set(fwd) == set(GRIDS["tiny"].prefill)
    assert all(bwd[k].latency_s > fwd[k].latency_s for k in bwd)  # dQ, dK, dV: more work than the forward
    checked = check_rows([r for r in rows if r.op == "attention_backward"])
    assert {p.lane for p in checked.priced} == {"attention_backward train"} and not checked.skipped


def test_interrupt_keeps_the_rows_measured(tmp_path, capsys):
    seen: list[KernelRow] = []
    result = runner.run_bench(_tiny_config(tmp_path, ("gemm", "attention_prefill")), on_row=_stop_after(3, seen))
    assert result.interrupted and result.rows_kept == 3
    kept = [(r.op, r.shape, r.dtype, r.repetitions) for r in _read_all(tmp_path)]
    assert kept == [(r.op, r.shape, r.dtype, r.repetitions) for r in seen]  # exactly what was reported, all readable


def test_ctrl_c_exits_130_with_one_line(tmp_path, capsys, monkeypatch):
    """Ctrl-C while the third row is being written: two rows stay, the CLI says so in one line and exits 130."""
    calls = []
    real_write = runner.write_table

    def write_then_interrupt(path: Path, rows: list[KernelRow], comment: str = "") -> None:
        calls.append(path)
        if len(calls) == 3:
            raise KeyboardInterrupt
        real_write(path, rows, comment)

    monkeypatch.setattr(runner, "write_table", write_then_interrupt)
    out = tmp_path / "tables"
    rc = main(["bench-kernels", "--hardware", "cpu-local", "--out", str(out), "--grid", "tiny", "--device", "cpu",
               "--ops", "gemm"])
    err = capsys.readouterr().err
    assert rc == 130 and err.count("\n") == 1 and "kept 2 rows" in err and str(out / "gemm.csv") in err
    assert len(_read_all(out)) == 2


@pytest.mark.slow  # spawns two gloo ranks
def test_interrupt_during_collectives_stops_the_ranks(tmp_path):
    import multiprocessing

    seen: list[KernelRow] = []
    result = runner.run_bench(_tiny_config(tmp_path, ("all_reduce", "all_to_all")), on_row=_stop_after(2, seen))
    assert result.interrupted and result.rows_kept == 2
    rows = _read_all(tmp_path)
    assert [r.op for r in rows] == ["all_reduce", "all_reduce"] and all(r.world_size == 2 for r in rows)
    assert multiprocessing.active_children() == []  # no rank left running


def test_ops_take_families_and_keep_run_order():
    assert parse_ops("collectives,gemm") == ("gemm", *COLLECTIVES)
    assert parse_ops("attention") == ("attention_prefill", "attention_backward", "attention_decode")
    assert parse_ops(None) == MEASURED


def test_collective_bytes_follow_the_table_convention():
    import torch

    for op in COLLECTIVES:  # the element count rounds down to a multiple of the world size
        assert _buffers(op, 1024, 3, torch.device("cpu"), torch.float32)[1] == 1020
        assert _buffers(op, 65536, 2, torch.device("cpu"), torch.bfloat16)[1] == 65536


def test_routing_is_uniform_as_the_model_prices_it_and_spread():
    from perfmodel.cost.compute import rows_hit_experts

    bounds = routed_bounds(10, 4)
    assert bounds[0] == 0 and bounds[-1] == 10 and bounds == sorted(bounds) and len(bounds) == 5
    assert routed_bounds(10, 4) == bounds  # seeded: every run measures the same layer
    hits = [sum(hi > lo for lo, hi in zip(b[:-1], b[1:])) for b in (routed_bounds(128, 128, s) for s in range(200))]
    assert sum(hits) / len(hits) == pytest.approx(rows_hit_experts(128, 128), rel=0.02)  # about 81 of 128
    t = summarize([1.0] * 8 + [2.0, 3.0], calls_per_sample=4)
    assert t.median_s == 1.0 and t.repetitions == 40 and t.spread == pytest.approx(1.1)


def test_cli_starts_without_torch():
    code = ("import sys, executor.cli; executor.cli._parser().parse_args(['runs']); "
            "assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[2])


def test_help_lists_the_ops(capsys):
    with pytest.raises(SystemExit):
        main(["bench-kernels", "--help"])
    assert "grouped_gemm" in capsys.readouterr().out


def test_grouped_kernel_computes_what_the_loop_over_experts_does():
    """The GPU's grouped rows time the same MoE layer as the loop: same inputs, same output."""
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "_grouped_mm"):
        pytest.skip("this torch has no _grouped_mm")
    from executor.bench_kernels import compute

    torch.manual_seed(0)
    loop = compute._moe_setup(12, 32, 16, 4, 2, "cpu")
    torch.manual_seed(0)
    grouped = compute._grouped_setup(12, 32, 16, 4, 2, "cpu")
    assert torch.allclose(grouped().float(), loop().float(), rtol=2e-2, atol=2e-2)
    assert compute.grouped_kernel("cpu")[0] is False  # the CPU keeps megatron's SequentialMLP loop


def test_gpu_calls_rotate_through_input_copies():
    from executor.bench_kernels import compute

    made: list[int] = []

    def setup():
        made.append(len(made))
        me = made[-1]
        return lambda: me

    case = compute.Case("gemm", {"m": 1, "n": 4096, "k": 4096}, "bf16", setup, input_bytes=2 * 4097 * 4096)
    call = compute.rotating(case, "cuda")
    assert len(made) == compute.ROTATE_BYTES // case.input_bytes  # 15 copies of a 32 MiB weight
    assert [call() for _ in range(len(made) + 1)] == [*range(len(made)), 0]
    made.clear()
    compute.rotating(case, "cpu")
    assert len(made) == 1  # a CPU run keeps one copy (its caches are the step's too)


def test_a_graph_sample_grows_when_eager_timing_was_host_bound(monkeypatch):
    """Eager calls that cost the host 1 ms each ask for one call per sample; replayed as a graph they take 10 us,
    so the sample is re-captured with enough calls to last the sample target."""
    from executor.bench_kernels import timing

    captured: list[int] = []

    def fake_graphed(fn, calls):
        captured.append(calls)
        return lambda: None

    clock = iter([0.0, 1e-5] + [float(i) for i in range(2, 10_000)])
    monkeypatch.setattr(timing, "graphed", fake_graphed)
    monkeypatch.setattr(timing.time, "perf_counter", lambda: next(clock))
    sample, calls = timing._graph_sample(lambda: None, 1, lambda: None)
    assert captured == [1, timing.calls_per_sample(1e-5)] and calls == 100


def test_grouped_and_repeated_kv_time_the_same_attention():
    """Older torch (no enable_gqa) repeats K/V per query head: forward and backward give what the grouped call gives
    (the backward's K/V gradients summed back over the repeats)."""
    import torch

    from executor.bench_kernels.compute import _attention_setup, _backward_setup

    for setup, args in ((_attention_setup, (1, 64, 64, 4, 2, 32, "cpu")), (_backward_setup, (1, 64, 4, 2, 32, "cpu"))):
        outs = []
        for gqa in (True, False):
            torch.manual_seed(0)
            out = setup(*args, gqa)()
            outs.append(out if isinstance(out, tuple) else (out,))
        assert all(a.shape == b.shape and torch.allclose(a.float(), b.float(), atol=5e-2) for a, b in zip(*outs))
