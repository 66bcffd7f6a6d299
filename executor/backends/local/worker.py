"""One torchrun rank of a local GRPO or PPO run:
`python -m torch.distributed.run ... -m executor.backends.local.worker --job J`.

Every rank trains (megatron-core, its PP stage / EP experts / DP share). Rank 0 also drives: it hosts the
SGLang engine, samples prompts, scores rewards, computes group advantages, pushes weights, and writes the
step records (through the measurement sink into the store), the trace and the progress log.

This module is the rank's life: setup (rank_setup.py), the steps (rl_step.py, recorded by step_record.py),
checkpoints (checkpoint.py), cleanup. PPO runs Miles' order: the critic (the actor's model with a value head, on
the same ranks and layout) first, then the actor (docs/rl-phases.md, Miles 4.4).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

from executor.backends.local.cpu_shims import apply_megatron_shims
from executor.backends.local.engine_processes import prestart as prestart_engine_processes
from executor.backends.local.gc_pauses import freeze_gc
from executor.backends.local.rank_setup import Driver, RankSetup, open_driver, setup_rank, start_engine
from executor.backends.local.rl_step import run_step

# Imported by `run` up front, in this order: after apply_megatron_shims (megatron-core must be patched before its
# first import) and before any timing, so no step phase pays for a first import. The helpers' own local imports of
# these modules are then only cache hits.
_RUN_MODULES = (
    "torch", "torch.distributed", "executor.backends.local.grpo", "executor.backends.local.options",
    "executor.backends.local.task", "executor.backends.local.tiny_model", "executor.backends.local.tokenizer",
    "executor.backends.local.trainer", "executor.records", "perfmodel.inputs.plan",
)


def run(job: dict[str, Any]) -> None:
    if os.environ.get("RANK", "0") == "0":  # the engine's host: its processes' imports overlap megatron-core's
        prestart_engine_processes(_architecture(job))
    apply_megatron_shims()
    for module in _RUN_MODULES:
        importlib.import_module(module)
    import torch.distributed as dist

    t_setup = time.time()
    setup = setup_rank(job)
    if setup.rank == 0:
        print(f"[executor] trainer ready: megatron-core model on {setup.world} rank(s) in {time.time() - t_setup:.1f} s"
              + (" (with a critic)" if setup.critic is not None else "") + "; starting the SGLang engine", flush=True)
    driver = open_driver(setup)  # None off rank 0
    try:
        start_engine(setup, driver)
        dist.barrier()

        rng = random.Random(setup.options.seed)
        if setup.first_step > 1:  # resumed: the prompt sampler where the checkpoint left it
            rng.setstate(setup.resumed_sampler_state)
        for step in range(setup.first_step, setup.steps + 1):
            run_step(setup, driver, rng, step)
            if step == setup.first_step:
                freeze_gc(driver.engine if driver is not None else None)
            every = setup.options.checkpoint_every
            if every and (step % every == 0 or step == setup.steps):
                _checkpoint(setup, driver, step, rng)

        dist.barrier()
    finally:  # also on errors and SIGTERM from torchrun: never leave SGLang's processes behind
        if driver is not None and driver.engine is not None:
            driver.engine.shutdown()
        if driver is not None:
            driver.sink.close()
    dist.destroy_process_group()


def _architecture(job: dict[str, Any]) -> str:
    from perfmodel.inputs.plan import load_plan

    return ((load_plan(job["plan_path"]).model.hf_config or {}).get("architectures") or ["LlamaForCausalLM"])[0]


def _checkpoint(setup: RankSetup, driver: Driver | None, step: int, rng: random.Random) -> None:
    """Every rank writes its share; rank 0 seals it once all are in place and says so (checkpoint.py)."""
    from executor.backends.local.checkpoint import save

    t0 = time.time()
    folder, size = save(setup.run_dir, step, setup.rank, setup.world, setup.trainer, setup.critic, rng,
                        setup.job["run_id"], setup.options.checkpoints_kept)
    if driver is None:
        return
    driver.sink.update_run_info(setup.job["run_id"], last_checkpoint={"step": step, "path": str(folder),
                                                                      "bytes": size, "write_s": time.time() - t0})
    print(f"[executor] checkpoint of step {step}: {size / 2**20:.1f} MiB in {time.time() - t0:.2f} s -> {folder}",
          flush=True)


def _exit_on_sigterm(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    parser = argparse.ArgumentParser(prog="executor.backends.local.worker")
    parser.add_argument("--job", required=True, help="job.json written by the runner")
    args = parser.parse_args(argv)
    job = json.loads(Path(args.job).read_text(encoding="utf-8"))
    run(job)
    return 0


if __name__ == "__main__":
    sys.exit(main())
