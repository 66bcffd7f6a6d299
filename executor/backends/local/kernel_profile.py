"""`executor launch --profile [STEP]`: the trainer's phases of one step of a real run (log-probs, training, the weight
update) under torch.profiler, their GEMMs and attention kernels written as kernel tables in the project's format
(docs/kernels.md), the same schema `executor bench-kernels` writes, so `perfmodel kernels check --tables` and
`perfmodel calibrate --kernels` read a real run's kernels too.

Every trainer rank profiles the step and writes `RUN_DIR/kernels/rank<r>/{gemm,attention}.csv`: one row per (op,
shape, dtype) the step ran, its latency the median over the calls (`repetitions`), `spread` their P10-P90. Recorded:
the GEMMs (aten::mm, addmm, _scaled_mm: forward and backward alike, each at its own m, n, k) and the fused attention
forward and backward (scaled_dot_product_attention's kernels and their `_backward`s). Not recorded: collectives (a
profiler event does not name the process group it ran on, so its size is unknown; `executor bench-kernels` measures
them at known sizes) and the rollout (the SGLang engine's kernels run in its own processes). The profiled step runs
slower than the others: the run records its number (`profiled_steps`) and `executor export` leaves it out.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from perfmodel.kernels.table import FILE_OF, KernelRow, median_and_spread, write_table

# torch's dtype names as the profiler records them -> the kernel tables' dtypes
_DTYPES = {"c10::BFloat16": "bf16", "float": "fp32", "c10::Half": "fp16", "c10::Float8_e4m3fn": "fp8",
           "c10::Float8_e4m3fnuz": "fp8", "c10::Float8_e5m2": "fp8", "c10::Float8_e5m2fnuz": "fp8"}
# GEMM ops: the index of A ([m, k]) in the op's inputs; B ([k, n]) follows it
_GEMMS = {"aten::mm": 0, "aten::addmm": 1, "aten::_scaled_mm": 0}
# the fused attention kernels scaled_dot_product_attention dispatches to (forward): q [b, h, s, d], k [b, h_kv, s_kv, d]
# (not their inner kernels' ops, which take q as [b, s, h, d] and would count the kernel twice)
_ATTENTION = ("aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_scaled_dot_product_flash_attention",
              "aten::_scaled_dot_product_efficient_attention", "aten::_scaled_dot_product_cudnn_attention")
# their backwards: (grad_out, q, k, v, out, ...), so q and k one place further on
_ATTENTION_BACKWARD = tuple(f"{name}_backward" for name in _ATTENTION)

Key = tuple[str, tuple[tuple[str, int], ...], str]


def _latency_s(event: Any, on_gpu: bool) -> float:
    """The kernel's time: on a GPU the device time of the kernels it (and the ops under it) launched, never its
    host time (a launch, not the kernel); on a CPU its own time, children included (the kernel it dispatches to)."""
    return float(event.device_time_total if on_gpu else event.cpu_time_total) * 1e-6


def _gemm(event: Any) -> tuple[dict[str, int], str] | None:
    at = _GEMMS[event.name]
    shapes, dtypes = event.input_shapes, event.input_dtypes
    if len(shapes) < at + 2 or len(shapes[at]) != 2 or len(shapes[at + 1]) != 2:
        return None
    (m, k), (k2, n) = shapes[at], shapes[at + 1]
    dtype = "fp8" if event.name == "aten::_scaled_mm" else _DTYPES.get(dtypes[at])
    if dtype is None or k != k2 or min(m, n, k) < 1:
        return None
    return {"m": m, "n": n, "k": k}, dtype


def _attention(event: Any, at: int = 0) -> tuple[dict[str, int], str] | None:
    """A forward's shape (q at input `at`, k after it); a backward's (`at` 1, after grad_out) has no cached prefix."""
    shapes, dtypes = event.input_shapes, event.input_dtypes
    if len(shapes) < at + 2 or len(shapes[at]) != 4 or len(shapes[at + 1]) != 4:
        return None
    (batch, heads, seq, head_dim), (_, kv_heads, kv_len, _) = shapes[at], shapes[at + 1]
    dtype = _DTYPES.get(dtypes[at])
    if dtype is None or min(batch, heads, seq, head_dim, kv_heads) < 1:
        return None
    shape = {"batch": batch, "seq": seq, "heads": heads, "kv_heads": kv_heads, "head_dim": head_dim}
    return (shape | {"cached": max(0, kv_len - seq)} if at == 0 else shape), dtype


class RawCpuEvent:
    """A CPU op of the profiler's raw (kineto) results with the fields `kernel_rows` reads: on a CPU the op's own
    time is all there is, so the event tree torch builds to attribute device kernels (FunctionEvents: 8-9 s for
    the 75,000 ops of a local step here) is not needed; reading the raw events takes a fraction of a second."""

    __slots__ = ("name", "input_shapes", "input_dtypes", "cpu_time_total")
    device_time_total = 0.0

    def __init__(self, event: Any) -> None:
        self.name, self.input_shapes, self.input_dtypes = event.name(), event.shapes(), event.dtypes()
        self.cpu_time_total = event.duration_ns() / 1e3  # us, children included, as FunctionEvent's


def raw_cpu_events(profiler: Any) -> list[RawCpuEvent]:
    """The GEMM and attention ops of a finished torch.profiler run on a CPU, read from its raw results."""
    wanted = {*_GEMMS, *_ATTENTION, *_ATTENTION_BACKWARD}
    return [RawCpuEvent(e) for e in profiler.profiler.kineto_results.events() if e.name() in wanted]


def kernel_rows(events: Iterable[Any], hardware: str, source: str, on_gpu: bool = False) -> list[KernelRow]:
    """The profiled events (on a GPU torch.profiler's FunctionEvents, whose device times are torch's own attribution
    of kernels to ops; on a CPU `RawCpuEvent`s) as kernel-table rows: one per (op, shape, dtype), the median of its
    calls."""
    calls: dict[Key, list[float]] = defaultdict(list)
    for event in events:
        if event.name in _GEMMS:
            op, found = "gemm", _gemm(event)
        elif event.name in _ATTENTION:
            op, found = "attention_prefill", _attention(event)
        elif event.name in _ATTENTION_BACKWARD:
            op, found = "attention_backward", _attention(event, at=1)
        else:
            continue
        if found is not None:
            shape, dtype = found
            calls[(op, tuple(shape.items()), dtype)].append(_latency_s(event, on_gpu))
    rows = []
    for (op, shape, dtype), per_call_s in calls.items():
        median_s, spread = median_and_spread(per_call_s)
        if median_s > 0:
            rows.append(KernelRow(op, dict(shape), dtype, "torch", 1, median_s, hardware, source, len(per_call_s),
                                  spread))
    return rows


def write_kernel_tables(rows: list[KernelRow], folder: Path, comment: str) -> dict[str, int]:
    """The rows into FOLDER/<family>.csv (bench-kernels' file names); rows per file written."""
    by_file: dict[str, list[KernelRow]] = defaultdict(list)
    for row in rows:
        by_file[FILE_OF[row.op]].append(row)
    folder.mkdir(parents=True, exist_ok=True)
    for name, family in sorted(by_file.items()):
        write_table(folder / name, sorted(family, key=lambda r: (r.op, sorted(r.shape.items()), r.dtype)), comment)
    return {name: len(family) for name, family in sorted(by_file.items())}


class StepProfile:
    """The trainer's phases of one step under torch.profiler (`with profile: ...`), their kernels written after
    the step is recorded (`write()`: on a GPU processing the trace takes seconds, which no phase should hold)."""

    def __init__(self, run_dir: Path, run_id: str, step: int, rank: int, hardware: str) -> None:
        import torch
        from torch.profiler import ProfilerActivity, profile

        self.run_dir, self.step, self.rank, self.hardware = run_dir, step, rank, hardware
        self.on_gpu = torch.cuda.is_available()
        device = torch.cuda.get_device_name() if self.on_gpu else "cpu"
        self.source = (f"executor launch --profile: run {run_id} step {step} rank {rank} (torch.profiler, torch "
                       f"{torch.__version__}, {device})")
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.on_gpu else [])
        self.profiler = profile(activities=activities, record_shapes=True)

    def __enter__(self) -> StepProfile:
        self.profiler.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.profiler.__exit__(*exc)

    def write(self) -> None:
        folder = self.run_dir / "kernels" / f"rank{self.rank}"
        events = self.profiler.events() if self.on_gpu else raw_cpu_events(self.profiler)
        rows = kernel_rows(events, self.hardware, self.source, self.on_gpu)
        written = write_kernel_tables(rows, folder, f"recorded by {self.source}; one row per op, shape and dtype: "
                                      "the median of its calls")
        if self.rank == 0:
            files = ", ".join(f"{name} ({n})" for name, n in written.items()) or "no GEMM or attention kernel seen"
            print(f"[executor] kernels of step {self.step}'s trainer phases (every rank: "
                  f"{self.run_dir / 'kernels'}/rank<r>/): rank 0 {files}", flush=True)
