"""On a GPU: the GPU path of `executor launch --profile` (executor/backends/local/kernel_profile.py `StepProfile`),
which a local run on this CPU host never takes: a training step of two Llama-shaped layers (bf16, 4,096 tokens,
hidden 4,096, GQA 32/8 heads, SwiGLU 14,336; forward and backward) profiled with torch.profiler on CUDA, its GEMM and
attention rows written as kernel tables by `StepProfile.write()`, then each row's profiled latency set against the
same shape timed alone by `executor bench-kernels`' timing (a CUDA graph replaying rotating copies of the inputs).

    python studies/kernels/h200/profile_check.py OUT        (profile.sh runs it)

Writes OUT/kernels/rank0/{gemm,attention}.csv (the profile's tables) and OUT/profile_check.csv (profiled / timed
alone, one line per row).
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from executor.backends.local.kernel_profile import StepProfile
from executor.bench_kernels import compute
from executor.bench_kernels.config import Grid
from executor.bench_kernels.timing import time_calls
from perfmodel.kernels.table import read_table

TOKENS, HIDDEN, HEADS, KV_HEADS, HEAD_DIM, FFN, LAYERS = 4096, 4096, 32, 8, 128, 14336, 2


def _weights() -> list[dict[str, torch.Tensor]]:
    def w(k: int, n: int) -> torch.Tensor:  # x @ w: aten::mm over [tokens, k] x [k, n]
        return (torch.randn(k, n, device="cuda", dtype=torch.bfloat16) * k ** -0.5).requires_grad_()

    return [{"q": w(HIDDEN, HEADS * HEAD_DIM), "kv": w(HIDDEN, 2 * KV_HEADS * HEAD_DIM),
             "o": w(HEADS * HEAD_DIM, HIDDEN), "up": w(HIDDEN, 2 * FFN), "down": w(FFN, HIDDEN)}
            for _ in range(LAYERS)]


def step(layers: list[dict[str, torch.Tensor]], gqa: bool) -> None:
    x = torch.randn(TOKENS, HIDDEN, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    for p in layers:
        q = (x @ p["q"]).view(1, TOKENS, HEADS, HEAD_DIM).transpose(1, 2)
        k, v = (x @ p["kv"]).view(1, TOKENS, 2, KV_HEADS, HEAD_DIM).permute(2, 0, 3, 1, 4)
        if gqa:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            k, v = (t.repeat_interleave(HEADS // KV_HEADS, dim=1) for t in (k, v))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + a.transpose(1, 2).reshape(TOKENS, HEADS * HEAD_DIM) @ p["o"]
        h = x @ p["up"]
        x = x + (F.silu(h[:, :FFN]) * h[:, FFN:]) @ p["down"]
    x.float().pow(2).mean().backward()


def _alone_s(op: str, shape: dict[str, int]) -> float:
    """The shape timed alone as `executor bench-kernels` times it (its own case, inputs and rotation)."""
    if op == "gemm":
        grid = Grid(gemm_m=(shape["m"],), gemm_nk=((shape["n"], shape["k"]),), prefill=(), decode=(), moe=(),
                    message_bytes=(), budget_per_shape_s=0.2)
        (case,) = compute.gemm_cases(grid, "cuda")
    else:
        prefill = tuple(shape[key] for key in ("batch", "seq", "heads", "kv_heads", "head_dim"))
        grid = Grid(gemm_m=(), gemm_nk=(), prefill=(prefill,), decode=(), moe=(), message_bytes=(),
                    budget_per_shape_s=0.2)
        (case,) = compute.attention_cases(grid, "cuda", ("attention_prefill",))
    return time_calls(compute.rotating(case, "cuda"), torch.cuda.synchronize, grid.budget_per_shape_s,
                      graph=True).median_s


def main(out: Path) -> None:
    gqa = compute.sdpa_has_gqa()
    layers = _weights()
    for _ in range(3):  # warm-up: cuBLAS heuristics, the SDPA backend's choice
        step(layers, gqa)
    torch.cuda.synchronize()
    with StepProfile(out, "device-check", 1, 0, "h200") as prof:
        step(layers, gqa)
        torch.cuda.synchronize()
    prof.write()
    with open(out / "profile_check.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["op", "shape", "calls", "profiled_us", "alone_us", "profiled_over_alone"])
        for table in sorted((out / "kernels" / "rank0").glob("*.csv")):
            rows, problems = read_table(table)
            for problem in problems:
                print("problem:", problem)
            for r in rows:
                alone = _alone_s(r.op, r.shape)
                shape = " ".join(f"{k}={v}" for k, v in r.shape.items())
                w.writerow([r.op, shape, r.repetitions, f"{r.latency_s * 1e6:.1f}", f"{alone * 1e6:.1f}",
                            f"{r.latency_s / alone:.3f}"])
                print(f"{r.op:18s} {shape:60s} x{r.repetitions:<3d} profiled {r.latency_s * 1e6:9.1f} us, "
                      f"alone {alone * 1e6:9.1f} us ({r.latency_s / alone:.2f})", flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
