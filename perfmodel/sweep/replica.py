"""A plan at small scale, as a settling measurement (issue 24): its fewest data-parallel replicas.

The same stack, hardware, model-parallel layout, micro-batches and engines, with the batch cut in proportion to the
replicas (every replica's work per step unchanged, `d / dp` of the prompts and of the global batch) and, when
disaggregated, the engines cut in the same proportion (at least one engine). Its phases measure what the sweep's
plans share (the stack's multipliers for training, the engine and the weight update) on a fraction of the GPUs;
what it cannot measure is the full plan's own error (data-parallel gradient traffic across more nodes, a weight
update to more engines), which stays drawn (perfmodel/sweep/settle.py)."""

from __future__ import annotations

import copy
from typing import Any

from perfmodel.inputs.hardware import HardwareProfile
from perfmodel.inputs.model import ModelSpec
from perfmodel.memo import Memo


def replica_runs(run: dict[str, Any]) -> list[dict[str, Any]]:
    """The plan's run with d of its dp replicas, for each d dividing dp (fewest first) that keeps the batch whole;
    none when dp is 1. Which of them the model can price (an expert layout needs enough ranks; a sharded optimizer
    more memory per GPU on fewer replicas) is the caller's to try."""
    t = run["train"]
    lay, rl = t["layout"], run.get("rl")
    mp = lay.get("tp", 1) * lay.get("pp", 1) * lay.get("cp", 1)
    train_gpus = rl["actor_gpus"] if rl else run["gpus"]
    dp = train_gpus // mp
    out = []
    for d in range(1, dp):
        if dp % d or (t["global_batch"] * d) % dp or (rl and (rl["prompts_per_step"] * d) % dp):
            continue
        small = copy.deepcopy(run)
        st = small["train"]
        st["global_batch"] = t["global_batch"] * d // dp
        if lay.get("dp") is not None:
            st["layout"]["dp"] = d
        if rl is None:
            small["gpus"] = mp * d
        else:
            sr = small["rl"]
            engine = sr["rollout"]["engine_gpus"]
            sr["prompts_per_step"] = rl["prompts_per_step"] * d // dp
            sr["actor_gpus"] = mp * d
            if rl["placement"] == "colocated":
                if (mp * d) % engine:
                    continue
                sr["rollout_gpus"] = small["gpus"] = mp * d
            else:
                engines = max(1, round(rl["rollout_gpus"] // engine * d / dp))
                sr["rollout_gpus"] = engines * engine
                small["gpus"] = mp * d + engines * engine
        out.append(small)
    return out


def smallest_replica(run: dict[str, Any], hw: HardwareProfile, model: ModelSpec,
                     memo: Memo | None = None) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(run, its evaluated row) of the plan's fewest replicas the model can price (fits memory, obeys the layout
    rules); None when the plan has one replica or no smaller version prices."""
    from perfmodel.sweep.run import evaluate_run

    memo = memo if memo is not None else Memo()
    for small in replica_runs(run):
        row = evaluate_run(small, hw, model, memo)
        if row.get("status") == "ok":
            return small, row
    return None
