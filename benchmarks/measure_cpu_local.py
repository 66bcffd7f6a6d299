"""Measure this machine's CPU for the `cpu-local` hardware profile (the executor's local backend runs here).

Writes benchmarks/results/cpu-local.json: bf16 and fp32 matmul FLOP/s (torch, all cores at n = 2048, and one thread
at the shapes the executor's tiny models run: tokens of a micro-batch x hidden x FFN width), memory copy bandwidth
(numpy), the torch build, core count and memory size. hwprofiles/cpu-local.yaml cites that file. Run it with the
torch the executor runs (the SGLang environment): CPU builds differ (a CUDA build's bf16 CPU matmul takes a slow
path, 100x below a CPU build's).
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

import numpy as np

from executor.backends.local.host_probe import one_thread_flops


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


def _gloo_worker(rank: int, world: int, port: int, queue) -> None:
    import torch
    import torch.distributed as dist

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    out: dict[str, float] = {}
    x = torch.zeros(64 * 8 * 128)  # one micro-batch's activations of the executor's plans (FP32 for the reduce)
    y = torch.empty_like(x)
    half = [x.numel() // 2, x.numel() - x.numel() // 2]
    ops = {"all_reduce": lambda: dist.all_reduce(x),
           "all_to_all": lambda: dist.all_to_all_single(y, x, half, half)}  # with split sizes, as MoE dispatch
    for name, fn in ops.items():
        for _ in range(5):
            fn()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(50):
            fn()
        out[name] = (time.perf_counter() - t0) / 50
    if rank == 0:
        queue.put(out)
    dist.destroy_process_group()


def _gloo_latency() -> dict[str, float]:
    """Seconds per gloo all-reduce and all-to-all of a micro-batch's activations between 2 processes on loopback
    (the executor's collectives on this machine)."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_gloo_worker, args=(r, 2, port, queue)) for r in range(2)]
    for p in procs:
        p.start()
    result = queue.get(timeout=120)
    for p in procs:
        p.join()
    return result


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
    import statistics

    import torch

    mem_bytes = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    bf16_one, fp32_one = one_thread_flops("bf16"), one_thread_flops("fp32")
    result = {
        "host": platform.node(), "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
        "torch": torch.__version__, "memory_bytes": mem_bytes, "bf16_matmul_flops": _matmul_flops("bf16", 1024, 2),
        "fp32_matmul_flops": _matmul_flops("fp32"),
        "one_thread_bf16_matmul_flops": bf16_one, "one_thread_fp32_matmul_flops": fp32_one,
        "one_thread_bf16_median": {k: statistics.median(v.values()) for k, v in bf16_one.items()},
        "gloo_seconds_per_call_2_processes": _gloo_latency(),
        "copy_bytes_per_s": _copy_bandwidth(), "measured_at": time.strftime("%Y-%m-%d"),
    }
    out = Path(__file__).parent / "results" / "cpu-local.json"
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
