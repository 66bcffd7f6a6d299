"""A plan at small scale, as a settling measurement (issue 24): smaller runs of the same stack and hardware that
measure what the sweep's plans share, on a fraction of the GPUs.

- Its fewest data-parallel replicas (`replica_runs`): the same model-parallel layout, micro-batches and engines,
  with the batch cut in proportion to the replicas (every replica's work per step unchanged, `d / dp` of the
  prompts and of the global batch) and, when disaggregated, the engines cut in the same proportion (at least one).
  Its phases measure the stack's multipliers for training, the engine and the weight update; what it cannot measure
  is the full plan's own error (gradient traffic across more nodes, a weight update to more engines).
- Its rollout alone on one of its engines (`one_engine_run`): one engine's share of the prompts (the load each
  engine carries in the plan), launched with Miles' `--debug-rollout-only` (no trainer), so it measures the
  engine's multiplier only, on the GPUs of one engine.
- Its weight update between its fewest training replicas and one engine (`weight_update_run`): the same
  model-parallel layout, mechanism and rollout precision, with a token-sized rollout and batch around it; read for
  the weight update's multiplier only (the smaller version's update goes to fewer engines than the plan's, which
  the model prices).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from perfmodel.inputs.hardware import HardwareProfile
from perfmodel.memo import Memo


def _model_parallel(run: dict[str, Any]) -> int:
    lay = run["train"]["layout"]
    return lay.get("tp", 1) * lay.get("pp", 1) * lay.get("cp", 1)


def replicas(run: dict[str, Any]) -> int:
    """A run's data-parallel replicas: its training GPUs over its model-parallel size."""
    return (run.get("rl") or {}).get("actor_gpus", run["gpus"]) // _model_parallel(run)


def replica_runs(run: dict[str, Any]) -> list[dict[str, Any]]:
    """The plan's run with d of its dp replicas, for each d dividing dp (fewest first) that keeps the batch whole;
    none when dp is 1. Which of them the model can price (an expert layout needs enough ranks; a sharded optimizer
    more memory per GPU on fewer replicas) is the caller's to try."""
    t = run["train"]
    lay, rl = t["layout"], run.get("rl")
    mp, dp = _model_parallel(run), replicas(run)
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
                kept = max(1, round(engines(rl) * d / dp))
                sr["rollout_gpus"] = kept * engine
                small["gpus"] = mp * d + kept * engine
        out.append(small)
    return out


def engines(rl: dict[str, Any]) -> int:
    """A run's rollout engines (at least one)."""
    return max(1, rl["rollout_gpus"] // rl["rollout"]["engine_gpus"])


def one_engine_run(run: dict[str, Any]) -> dict[str, Any] | None:
    """The plan's rollout on one of its engines, as a plan: one engine's share of the prompts, its own GPUs
    (disaggregated: a colocated engine's update mechanism becomes a broadcast, which a rollout-only launch never
    runs), synchronous, the global batch no larger than the samples; None for a run without a rollout."""
    rl = run.get("rl")
    if not rl:
        return None
    engine = rl["rollout"]["engine_gpus"]
    small = copy.deepcopy(run)
    sr = small["rl"]
    sr["placement"] = "disaggregated"
    sr["async"] = False  # nothing to overlap: Miles' synchronous loop (train.py) and its standard rollout
    sr.pop("off_policy_steps", None)
    sr["rollout_gpus"] = engine
    sr["prompts_per_step"] = max(1, round(rl["prompts_per_step"] / engines(rl)))
    if sr.get("weight_update", {}).get("mode") == "ipc":
        sr["weight_update"]["mode"] = "broadcast"
    samples = sr["prompts_per_step"] * rl["samples_per_prompt"]
    if samples % small["train"]["global_batch"]:
        small["train"]["global_batch"] = samples
    small["gpus"] = rl["actor_gpus"] + engine
    return small


# Response tokens of the weight-update launch's rollout: a token-sized rollout, so its step is mostly the update.
UPDATE_RESPONSE_TOKENS = 16


def weight_update_run(run: dict[str, Any]) -> dict[str, Any] | None:
    """The plan's weight update at its smallest, as a plan: its fewest training replicas that hold the expert layout
    (one without expert parallelism) and one engine (colocated: the engines on those GPUs), the update's mechanism,
    bucket and rollout precision unchanged, synchronous, around a token-sized rollout (UPDATE_RESPONSE_TOKENS per
    response) and the fewest samples that give every replica's pipeline stages whole micro-batches; None without a
    rollout, or when those replicas' GPUs hold no whole engine."""
    rl = run.get("rl")
    if not rl:
        return None
    t, mp, engine = run["train"], _model_parallel(run), rl["rollout"]["engine_gpus"]
    lay = t["layout"]
    experts = lay.get("ep", 1) * lay.get("etp", 1)  # ranks an expert layout spans: whole replicas of tp x cp
    d = experts // math.gcd(experts, lay.get("tp", 1) * lay.get("cp", 1))
    colocated = rl["placement"] == "colocated"
    if replicas(run) % d or (colocated and (mp * d) % engine):
        return None
    small = copy.deepcopy(run)
    st, sr = small["train"], small["rl"]
    if lay.get("dp") is not None:
        st["layout"]["dp"] = d
    fill = t.get("micro_batch", 1) * lay.get("pp", 1) * d  # samples: whole micro-batches on every stage
    sr["prompts_per_step"] = fill // math.gcd(fill, rl["samples_per_prompt"])
    st["global_batch"] = sr["prompts_per_step"] * rl["samples_per_prompt"]
    sr["response_tokens"] = {"max": UPDATE_RESPONSE_TOKENS, "mean": UPDATE_RESPONSE_TOKENS}
    sr["async"] = False  # nothing to overlap the update with
    sr.pop("off_policy_steps", None)
    sr["actor_gpus"] = mp * d
    sr["rollout_gpus"] = mp * d if colocated else engine  # colocated: the engines that share the replicas' GPUs
    small["gpus"] = mp * d if colocated else mp * d + engine
    return small


def _evaluated(run: dict[str, Any], hw: HardwareProfile, memo: Memo) -> dict[str, Any] | None:
    """The sweep's own row for `run` when the model can price it (None when pruned or invalid)."""
    from perfmodel.inputs.run import RunSpec
    from perfmodel.inputs.scenario import resolve_model
    from perfmodel.sweep.run import evaluate_run

    row = evaluate_run(run, hw, resolve_model(RunSpec.model_validate(run), ""), memo)
    return row if row.get("status") == "ok" else None


def _cheapest(rows: list[dict[str, Any]], by_index: dict[int, Any], hw: HardwareProfile,
              cuts: Callable[[dict[str, Any]], Iterable[dict[str, Any]]],
              cost: Callable[[dict[str, Any], dict[str, Any]], float]) -> tuple[Any, ...] | None:
    """(row, its plan's run, the cut-down run, the sweep's row for that) of the compared plan whose cut-down run
    costs the least `cost` (run, priced row): of the runs `cuts` makes of a plan, in order, the first the model can
    price; None when it can price none."""
    memo, best = Memo(), None
    for row in rows:
        full = by_index[row["index"]].run
        for small in cuts(full):
            priced = _evaluated(small, hw, memo)
            if priced is not None:
                spent = cost(small, priced)
                if spent < (best[0] if best else math.inf):
                    best = (spent, row, full, small, priced)
                break
    return None if best is None else best[1:]


def _alone(cut: Callable[[dict[str, Any]], dict[str, Any] | None]) -> Callable[[dict[str, Any]], list[dict[str, Any]]]:
    """A cut that makes at most one run, as `_cheapest` takes it."""
    return lambda run: [small] if (small := cut(run)) is not None else []


def _write_settle_plan(row: dict[str, Any], run: dict[str, Any], label: str, plans_dir: Path, cal: Any,
                       spec_name: str, executor: dict[str, Any] | None) -> str:
    """The smaller launch as a plan file `plans_dir/settle-<id>.yaml` (the sweep's plan format); returns its path."""
    from perfmodel.inputs.plan import dump_plan
    from perfmodel.sweep.ranking import plan_for

    plan = plan_for(row | {"label": label}, run, cal, spec_name, executor)
    path = plans_dir / f"settle-{plan.id}.yaml"
    dump_plan(plan.model_copy(update={"id": f"settle-{plan.id}"}), path)
    return str(path)


def smallest_version(rows: list[dict[str, Any]], by_index: dict[int, Any], hw: HardwareProfile, plans_dir: Path,
                     cal: Any, spec_name: str, executor: dict[str, Any] | None) -> dict[str, Any] | None:
    """The compared plans' cheapest version at their fewest replicas (GPU-seconds of a step), its plan file written
    (settle-<plan>.yaml); None when no plan has one the model can price. What the settling measurement reads:
    rank and label of the plan, replicas and of, gpus, step_time_s, plan_path."""
    best = _cheapest(rows, by_index, hw, replica_runs, lambda small, priced: small["gpus"] * priced["step_time_s"])
    if best is None:
        return None
    row, full, small, priced = best
    d = replicas(small)
    path = _write_settle_plan(priced | {"rank": row["rank"]}, small, f"{row['label']} at {d} of its replicas",
                              plans_dir, cal, spec_name, executor)
    return {"rank": row["rank"], "label": row["label"], "replicas": d, "of": replicas(full), "gpus": small["gpus"],
            "step_time_s": priced["step_time_s"], "plan_path": path}


def one_engine_version(rows: list[dict[str, Any]], by_index: dict[int, Any], hw: HardwareProfile, plans_dir: Path,
                       cal: Any, spec_name: str, executor: dict[str, Any] | None) -> dict[str, Any] | None:
    """The compared RL plans' cheapest rollout on one engine (GPU-seconds of its rollout), its plan file written
    with Miles' rollout-only switch (`executor.options.debug_rollout_only`); None without RL plans or when the
    sweep launches on another backend (only Miles runs a rollout alone). What the settling measurement reads: rank
    and label of the plan, engines, gpus (one engine's), step_time_s (its rollout), plan_path, parameter."""
    from perfmodel.priors import ROLLOUT

    if (executor or {}).get("backend", "miles") != "miles":
        return None
    best = _cheapest(rows, by_index, hw, _alone(one_engine_run), lambda one, priced: one["rl"]["rollout_gpus"]
                     * priced["rollout_time_s"])
    if best is None:
        return None
    row, full, one, priced = best
    options = dict((executor or {}).get("options") or {}) | {"debug_rollout_only": True}
    path = _write_settle_plan(priced | {"rank": row["rank"]}, one, f"{row['label']} rollout on one engine",
                              plans_dir, cal, spec_name, {"backend": "miles", "options": options})
    return {"rank": row["rank"], "label": row["label"], "engines": engines(full["rl"]),
            "gpus": one["rl"]["rollout_gpus"], "step_time_s": priced["rollout_time_s"], "plan_path": path,
            "parameter": ROLLOUT}


def weight_update_version(rows: list[dict[str, Any]], by_index: dict[int, Any], hw: HardwareProfile, plans_dir: Path,
                          cal: Any, spec_name: str, executor: dict[str, Any] | None) -> dict[str, Any] | None:
    """The compared RL plans' cheapest weight update at its smallest (`weight_update_run`; GPU-seconds of its step),
    its plan file written (the sweep's backend: any runs a whole plan); None without RL plans or when the model can
    price none. What the settling measurement reads: rank and label of the plan, replicas and of, gpus, step_time_s
    (the small launch's whole step), update_s (its priced update), plan_path, parameter."""
    from perfmodel.priors import WEIGHT_UPDATE

    best = _cheapest(rows, by_index, hw, _alone(weight_update_run), lambda small, priced: small["gpus"]
                     * priced["step_time_s"])
    if best is None:
        return None
    row, full, small, priced = best
    d = replicas(small)
    path = _write_settle_plan(priced | {"rank": row["rank"]}, small,
                              f"{row['label']} weight update at {d} of its replicas", plans_dir, cal, spec_name,
                              executor)
    return {"rank": row["rank"], "label": row["label"], "replicas": d, "of": replicas(full), "gpus": small["gpus"],
            "step_time_s": priced["step_time_s"], "update_s": priced["weight_update_time_s"], "plan_path": path,
            "parameter": WEIGHT_UPDATE}
