"""One `executor bench-kernels` run: every selected op over the grid, each row appended to its table as soon as it
is measured and printed as one progress line. Ctrl-C keeps every finished row (exit 130)."""

from __future__ import annotations

import argparse
import socket
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from executor.bench_kernels import compute
from executor.bench_kernels.collectives import CollectiveError, run_collectives
from executor.bench_kernels.config import COLLECTIVES, BenchConfig, config_from_args
from executor.bench_kernels.timing import Timing, time_calls
from perfmodel.kernels.table import FILE_OF, KernelRow, format_shape, write_table
from perfmodel.version import __version__

OnRow = Callable[[KernelRow], None]


@dataclass
class BenchResult:
    rows_by_file: Counter[Path] = field(default_factory=Counter)
    skipped: list[str] = field(default_factory=list)  # shapes this device refused (out of memory, ...)
    failures: list[str] = field(default_factory=list)  # families that stopped (the collectives' ranks)
    interrupted: bool = False

    @property
    def rows_kept(self) -> int:
        return sum(self.rows_by_file.values())

    def where(self) -> str:
        return ", ".join(f"{p} ({n})" for p, n in self.rows_by_file.items())


class TableWriter:
    """Appends each measured kernel to its family's CSV (write_table flushes it) and prints one progress line."""

    def __init__(self, cfg: BenchConfig, source: str, comment: str, result: BenchResult, on_row: OnRow | None):
        self.cfg, self.source, self.comment, self.result, self.on_row = cfg, source, comment, result, on_row

    def add(self, op: str, shape: dict[str, int], dtype: str, backend: str, timing: Timing) -> None:
        world = self.cfg.world_size if op in COLLECTIVES else 1
        row = KernelRow(op, shape, dtype, backend, world, timing.median_s, self.cfg.hardware, self.source,
                        timing.repetitions, timing.spread)
        path = self.cfg.out_dir / FILE_OF[op]
        write_table(path, [row], self.comment)
        self.result.rows_by_file[path] += 1
        print(f"{op:18} {format_shape(shape):50} {dtype:5} {timing.median_s * 1e6:12.2f} us  "
              f"spread {timing.spread:6.1%}  ({timing.repetitions} calls)", flush=True)
        if self.on_row is not None:
            self.on_row(row)


def device_name(device: str) -> str:
    import torch

    return f"cuda {torch.cuda.get_device_name()}" if device == "cuda" else "cpu"


def _cases(cfg: BenchConfig) -> Iterator[compute.Case]:
    """The single-device cases of the selected ops, in run order; says once which formats this device lacks."""
    if "gemm" in cfg.ops:
        fp8, why_not = compute.fp8_format(cfg.device)
        if fp8 is None:
            print(f"gemm fp8: skipped, {why_not}", flush=True)
        elif any(m % 16 for m in cfg.grid.gemm_m):
            print("gemm fp8: m not a multiple of 16 skipped (torch._scaled_mm needs multiples of 16)", flush=True)
        yield from compute.gemm_cases(cfg.grid, cfg.device, fp8)
    yield from compute.attention_cases(cfg.grid, cfg.device, cfg.ops)
    if "grouped_gemm" in cfg.ops:
        grouped, why_not = compute.grouped_kernel(cfg.device)
        if not grouped and cfg.device == "cuda":
            print(f"grouped_gemm: the loop over experts, {why_not}", flush=True)
        yield from compute.grouped_cases(cfg.grid, cfg.device, grouped)


def _run_compute(cfg: BenchConfig, writer: TableWriter) -> None:
    import torch

    sync = torch.cuda.synchronize if cfg.device == "cuda" else (lambda: None)
    for case in _cases(cfg):
        try:
            timing = time_calls(compute.rotating(case, cfg.device), sync, cfg.grid.budget_per_shape_s,
                                graph=cfg.device == "cuda")
        except RuntimeError as err:  # out of memory, a shape this build refuses: the rest of the grid still runs
            line = f"{case.op} {format_shape(case.shape)} {case.dtype}: skipped, {str(err).splitlines()[0][:160]}"
            print(line, flush=True)
            writer.result.skipped.append(line)
            if cfg.device == "cuda":
                torch.cuda.empty_cache()
            continue
        writer.add(case.op, case.shape, case.dtype, case.backend, timing)


def run_bench(cfg: BenchConfig, on_row: OnRow | None = None) -> BenchResult:
    """Measure everything `cfg` asks for into `cfg.out_dir`; returns what was kept, also after a Ctrl-C.
    `on_row` sees each row once it is written (the tests use it to interrupt a run)."""
    import torch

    threads = torch.get_num_threads()
    if cfg.device == "cpu":
        torch.set_num_threads(1)  # one core stands in for one GPU (hwprofiles/cpu-local.yaml); also steadier
    try:
        return _run(cfg, on_row)
    finally:
        torch.set_num_threads(threads)  # the caller's torch as it was (the tests share one process)


def _run(cfg: BenchConfig, on_row: OnRow | None) -> BenchResult:
    import torch

    source = (f"executor bench-kernels {__version__} on {socket.gethostname()}, torch {torch.__version__}, "
              f"{device_name(cfg.device)}")
    comment = (f"measured by {source}\nstarted {time.strftime('%Y-%m-%d %H:%M:%S %z')}; "
               + ("one CPU thread per process" if cfg.device == "cpu" else
                "one GPU per process; a row's calls replayed as one CUDA graph, each reading its own copy of the "
                "inputs (up to 512 MiB of copies)"))
    result = BenchResult()
    writer = TableWriter(cfg, source, comment, result, on_row)
    try:
        _run_compute(cfg, writer)
        collectives = tuple(op for op in cfg.ops if op in COLLECTIVES)
        if collectives:
            try:
                run_collectives(cfg, collectives, writer.add)
            except CollectiveError as err:
                print(f"collectives: stopped, {err}", flush=True)
                result.failures.append(str(err))
    except KeyboardInterrupt:
        result.interrupted = True
    return result


def bench_kernels_command(args: argparse.Namespace) -> int:
    """`executor bench-kernels`: checks every flag (InputError: exit 2) before measuring anything."""
    cfg = config_from_args(args)
    existing = sorted({FILE_OF[op] for op in cfg.ops if (cfg.out_dir / FILE_OF[op]).exists()})
    print(f"bench-kernels: {', '.join(cfg.ops)} on {cfg.device} for hardware {cfg.hardware} into {cfg.out_dir}"
          + (f" (appending to {', '.join(existing)})" if existing else ""), flush=True)
    t0 = time.perf_counter()
    result = run_bench(cfg)
    elapsed_s = time.perf_counter() - t0
    if result.interrupted:
        print(f"interrupted after {elapsed_s:.0f} s: kept {result.rows_kept} rows in "
              f"{result.where() or cfg.out_dir}", file=sys.stderr)
        return 130
    print(f"wrote {result.rows_kept} rows in {elapsed_s:.0f} s: {result.where() or cfg.out_dir}"
          + (f"; {len(result.skipped)} shapes skipped (above)" if result.skipped else "")
          + (f"; failed: {'; '.join(result.failures)}" if result.failures else ""))
    return 1 if result.failures else 0
