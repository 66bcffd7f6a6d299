"""On a GPU: `executor bench-kernels`' timing (a CUDA graph replaying calls that read rotating copies of their
inputs) against triton's do_bench (CUDA events around each call, the L2 cache flushed before it) and against
eager timing of one copy, for a few shapes of each op. Writes one CSV row per shape and method.

    python studies/kernels/h200/crosscheck.py OUT.csv      (device.sh runs it)
"""

from __future__ import annotations

import csv
import sys

import torch
from triton.testing import do_bench

from executor.bench_kernels import compute
from executor.bench_kernels.config import Grid
from executor.bench_kernels.timing import time_calls

GRID = Grid(gemm_m=(1, 16, 128, 8192), gemm_nk=((4096, 4096), (28672, 4096)),
            prefill=((1, 1024, 32, 8, 128), (1, 8192, 32, 8, 128)),
            decode=((1, 1024, 32, 8, 128), (64, 4096, 32, 8, 128)),
            moe=((16, 2048, 768, 128, 8), (4096, 2048, 768, 128, 8)), message_bytes=(), budget_per_shape_s=0.2)


def main(out_path: str) -> None:
    fp8, _ = compute.fp8_format("cuda")
    grouped, _ = compute.grouped_kernel("cuda")
    cases = [*compute.gemm_cases(GRID, "cuda", fp8),
             *compute.attention_cases(GRID, "cuda", ("attention_prefill", "attention_decode")),
             *compute.grouped_cases(GRID, "cuda", grouped)]
    sync = torch.cuda.synchronize
    with open(out_path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["op", "shape", "dtype", "graph_rotating_us", "eager_one_copy_us", "do_bench_cold_l2_us"])
        for case in cases:
            graph_us = time_calls(compute.rotating(case, "cuda"), sync, 0.2, graph=True).median_s * 1e6
            one = case.setup()
            eager_us = time_calls(one, sync, 0.2).median_s * 1e6
            bench_us = do_bench(one, warmup=10, rep=50, return_mode="median") * 1e3
            shape = " ".join(f"{k}={v}" for k, v in case.shape.items())
            out.writerow([case.op, shape, case.dtype, f"{graph_us:.2f}", f"{eager_us:.2f}", f"{bench_us:.2f}"])
            print(f"crosscheck {case.op:18} {shape:50} {case.dtype:5} graph {graph_us:10.2f} us  eager "
                  f"{eager_us:10.2f} us  do_bench {bench_us:10.2f} us", flush=True)
            del one
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1])
