"""Measure this machine's CPU for the `cpu-local` hardware profile (the executor's local backend runs here).

Writes benchmarks/results/cpu-local.json: bf16 and fp32 matmul FLOP/s (torch), memory copy bandwidth (numpy),
core count and memory size. hwprofiles/cpu-local.yaml cites that file.
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

import numpy as np


def _matmul_flops(dtype_name: str, n: int = 2048, reps: int = 5) -> float:
    import torch

    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype_name]
    a = torch.randn(n, n, dtype=dtype)
    b = torch.randn(n, n, dtype=dtype)
    a @ b
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best


def _copy_bandwidth(nbytes: int = 1 << 28, reps: int = 5) -> float:
    src = np.ones(nbytes // 8)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return 2 * nbytes / best  # read + write


def main() -> None:
    mem_bytes = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    result = {
        "host": platform.node(), "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
        "memory_bytes": mem_bytes, "bf16_matmul_flops": _matmul_flops("bf16"),
        "fp32_matmul_flops": _matmul_flops("fp32"),
        "copy_bytes_per_s": _copy_bandwidth(), "measured_at": time.strftime("%Y-%m-%d"),
    }
    out = Path(__file__).parent / "results" / "cpu-local.json"
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
