"""`executor bench-kernels`: microbenchmark the kernels the performance model prices (GEMMs, attention, one MoE
layer's expert GEMMs, collectives) on the user's own machine, into kernel tables in the project's CSV format
(docs/kernels.md) that `perfmodel kernels check` reads.

  config.py       ops, table files, shape grids, the flags' checks
  timing.py       warm-up, timed samples, median and spread
  compute.py      the single-device kernels (torch)
  collectives.py  gloo / NCCL collectives between spawned ranks
  runner.py       a run: rows appended as measured, progress lines, Ctrl-C keeps what finished

torch is imported only inside the functions that measure, so `executor` starts without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["BenchConfig", "BenchResult", "bench_kernels_command", "config_from_args", "run_bench"]

if TYPE_CHECKING:
    from executor.bench_kernels.config import BenchConfig, config_from_args
    from executor.bench_kernels.runner import BenchResult, bench_kernels_command, run_bench


def __getattr__(name: str) -> Any:  # lazy: the CLI's parser reads config.py alone
    if name in ("BenchConfig", "config_from_args"):
        from executor.bench_kernels import config

        return getattr(config, name)
    if name in __all__:
        from executor.bench_kernels import runner

        return getattr(runner, name)
    raise AttributeError(f"module 'executor.bench_kernels' has no attribute {name!r}")
