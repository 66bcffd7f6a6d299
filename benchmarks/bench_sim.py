"""Simulator speed (issue 3 and 4 targets). Prints wall times; asserts nothing (timing is noisy here).

Targets on a 2-core machine: DSV4-Flash training step on 16 MI355X (TP1/PP4/EP4, 64 micro-batches) <= 0.2 s;
DeepSeek-V3 step on 2,048 GPUs (PP16/EP64, 120 micro-batches, DualPipeV) <= 1 s; time grows with micro-batches
and stages, not with DP. RL: DSV4-Flash on 32 MI355X (256 responses up to 8,192 tokens) <= 0.5 s; 8,192
responses on 256 GPUs <= 3 s.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from perfmodel.inputs.run import RunSpec
from perfmodel.inputs.scenario import build_scenario


def _train_run(model: str, hw: str, gpus: int, layout: dict, gb: int, seq: int, schedule: str = "1f1b",
               precision: str = "bf16") -> RunSpec:
    return RunSpec.model_validate({
        "kind": "pretrain", "hardware": hw, "gpus": gpus, "model": {"id": model},
        "train": {"precision": precision, "seq_len": seq, "global_batch": gb, "micro_batch": 1, "layout": layout,
                  "schedule": schedule, "recompute": "full", "distributed_optimizer": True},
    })


def _time(fn, repeat: int = 3) -> float:
    """Best of `repeat` cold runs: each call of `fn` simulates without a memo (fresh tables), the time of a first
    simulation."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def bench_train() -> None:
    from perfmodel.sim.train import simulate_train_step

    def fresh(run: RunSpec):
        scn = build_scenario(run)

        def go() -> None:
            simulate_train_step(scn)
        return go

    dsv4 = _train_run("deepseek-v4-flash", "mi355x", 16, {"tp": 1, "pp": 4, "ep": 4}, 256, 4096)
    t = _time(fresh(dsv4))
    print(f"train  DSV4-Flash 16 x MI355X TP1/PP4/EP4, 64 micro-batches: {t:.3f} s (target <= 0.2 s)")
    v3 = _train_run("deepseek-v3", "h800", 2048, {"tp": 1, "pp": 16, "ep": 64}, 15360, 4096, "dualpipev", "fp8")
    t = _time(fresh(v3), repeat=1)
    print(f"train  DeepSeek-V3 2048 GPUs PP16/EP64 DualPipeV, 120 micro-batches: {t:.3f} s (target <= 1 s)")
    print("growth (DSV4-Flash, 1F1B):")
    for pp, mbs, gpus in ((4, 32, 16), (4, 64, 16), (4, 128, 16), (8, 64, 32), (4, 64, 64), (4, 64, 256)):
        dp = gpus // pp
        run = _train_run("deepseek-v4-flash", "mi355x", gpus, {"tp": 1, "pp": pp, "ep": 4}, mbs * dp, 4096)
        print(f"  pp {pp:2d}  micro-batches {mbs:4d}  dp {dp:3d}: {_time(fresh(run)):.3f} s")


def bench_rl() -> None:
    from perfmodel.predict import simulate_scenario

    base = {
        "kind": "rl", "hardware": "mi355x", "model": {"id": "deepseek-v4-flash"},
        "train": {"precision": "bf16", "seq_len": 8192 + 512, "global_batch": 256, "max_tokens_per_gpu": 8192,
                  "layout": {"tp": 1, "pp": 4, "ep": 4}, "recompute": "full", "optimizer_offload_fraction": 1.0},
        "rl": {"placement": "disaggregated", "actor_gpus": 16, "rollout_gpus": 16, "prompts_per_step": 32,
               "samples_per_prompt": 8, "prompt_tokens_mean": 140,
               "response_tokens": {"max": 8192, "mean": 4000, "truncated_fraction": 0.3},
               "rollout": {"precision": "fp8", "engine_gpus": 8, "tp": 8}},
        "gpus": 32,
    }
    scn = build_scenario(RunSpec.model_validate(base))
    print(f"rl     DSV4-Flash 32 x MI355X, 256 responses <= 8192 tokens: {_time(lambda: simulate_scenario(scn)):.3f} s "
          "(target <= 0.5 s)")
    big = dict(base, gpus=256)
    big["train"] = dict(base["train"], global_batch=8192)
    big["rl"] = dict(base["rl"], actor_gpus=128, rollout_gpus=128, prompts_per_step=1024)
    scn = build_scenario(RunSpec.model_validate(big))
    print(f"rl     DSV4-Flash 256 GPUs, 8192 responses: {_time(lambda: simulate_scenario(scn), repeat=1):.3f} s "
          "(target <= 3 s)")


if __name__ == "__main__":
    bench_train()
    try:
        bench_rl()
    except ImportError as err:
        print(f"rl     not built yet: {err}")
