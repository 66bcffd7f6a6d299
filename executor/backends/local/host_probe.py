"""What this CPU's matmuls run at, measured at launch: the `cpu-local` profile is one machine's numbers, and hosts
differ by 30x (a CPU with AVX512-BF16 or AMX runs torch's bf16 matmul at ~200 GFLOP/s on one thread, one without
takes a slow path at ~6). A run records the probe; `executor export` writes it into the case as the hardware's
measured facts (`hardware_options`) and the backward's own rate (`stack_options.backward_compute_scale`), so the
case is priced on the machine that ran it wherever it is validated or calibrated.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

# (tokens, in, out) of the executor's plans: micro-batches of 64 samples x 8-16 tokens through hidden 128, FFN 384
EXECUTOR_SHAPES = ((512, 128, 384), (704, 128, 128), (1024, 384, 128), (2048, 128, 384))

# eager PyTorch's cost per op on a CPU, which the GEMM curve's half-efficiency size stands for (hwprofiles/cpu-local)
OP_OVERHEAD_S = 25e-6


def one_thread_flops(dtype_name: str, reps: int = 5) -> dict[str, dict[str, float]]:
    """FLOP/s of one thread (the executor runs one per rank) at each of EXECUTOR_SHAPES, best of `reps`, in the
    three layouts a linear layer trains with: forward Y = X W^T (F.linear), input gradient dX = dY W, weight
    gradient dW = dY^T X. A CPU's bf16 path differs between them by up to 8x."""
    import torch
    import torch.nn.functional as F

    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype_name]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    out: dict[str, dict[str, float]] = {"forward": {}, "dgrad": {}, "wgrad": {}}
    try:
        for m, k, n in EXECUTOR_SHAPES:  # X [m, k], W [n, k], dY [m, n]
            x, w, dy = (torch.randn(m, k, dtype=dtype), torch.randn(n, k, dtype=dtype),
                        torch.randn(m, n, dtype=dtype))
            for layout, fn in (("forward", lambda x=x, w=w: F.linear(x, w)), ("dgrad", lambda dy=dy, w=w: dy @ w),
                               ("wgrad", lambda dy=dy, x=x: dy.t() @ x)):
                fn()
                best = float("inf")
                for _ in range(reps):
                    t0 = time.perf_counter()
                    fn()
                    best = min(best, time.perf_counter() - t0)
                out[layout][f"{m}x{k}x{n}"] = 2 * m * k * n / best
    finally:
        torch.set_num_threads(threads)
    return out


def _cpu_flags() -> list[str]:
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return sorted(f for f in flags if f.startswith(("avx512_bf16", "amx", "avx512f", "avx2")))


def probe_host() -> dict[str, Any]:
    """The one-thread bf16 rates (median over EXECUTOR_SHAPES per layout), the torch build and the CPU's matmul
    flags: what a run records about its host (about 1-3 s)."""
    import torch

    t0 = time.perf_counter()
    rates = one_thread_flops("bf16")
    return {"bf16_flops": {layout: statistics.median(v.values()) for layout, v in rates.items()},
            "torch": torch.__version__, "cpu_flags": _cpu_flags(), "seconds": round(time.perf_counter() - t0, 2)}


def case_facts(probe: dict[str, Any], run_id: str) -> tuple[dict[str, Any], dict[str, float]]:
    """The probe as a case's `hardware_options` (peaks and the GEMM curve's knee at this host's rate) and
    `stack_options` (the backward's rate against the forward's, as stacks/local-cpu.yaml derives it)."""
    rate = probe["bf16_flops"]
    fwd, dgrad, wgrad = rate["forward"], rate["dgrad"], rate["wgrad"]
    source = (f"executor host probe at the launch of {run_id} (executor/backends/local/host_probe.py: one-thread "
              f"bf16 F.linear at the executor's shapes, torch {probe.get('torch')}, "
              f"flags {' '.join(probe.get('cpu_flags') or []) or 'unknown'})")
    hardware = {"peak_tflops_bf16": round(fwd / 1e12, 9), "peak_tflops_fp8": round(fwd / 1e12, 9),
                "gemm_half_flops_bf16": round(OP_OVERHEAD_S * fwd, 1),
                "gemm_half_flops_fp8": round(OP_OVERHEAD_S * fwd, 1), "source": source}
    stack = {"backward_compute_scale": round((1 / dgrad + 1 / wgrad) / (2 / fwd), 4)}
    return hardware, stack
