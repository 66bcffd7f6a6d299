"""`executor export RUN`: a finished run as a validation case (the plan's run + the measured medians), so
`perfmodel validate` scores the model on it and `perfmodel calibrate` fits the run's stack to it."""

from __future__ import annotations

import re
import statistics
from pathlib import Path
from typing import Any

import yaml

from executor.backends.local.host_probe import case_facts
from executor.records import plan_hash
from perfmodel.errors import InputError
from perfmodel.files import write_text_atomic
from perfmodel.inputs.case import ValidationCase
from perfmodel.inputs.loading import parse
from perfmodel.inputs.plan import load_plan
from perfmodel.names import PHASE_METRICS


def run_as_case(run: dict[str, Any], steps: list[dict[str, Any]], store_path: str, skip_steps: int = 1
                ) -> dict[str, Any]:
    """The case dict of a stored run. The first `skip_steps` steps are left out (warm-up: allocation, first
    weight update), and so are the steps run under torch.profiler (`executor launch --profile`: slower than the
    rest); each phase is the median of what is left."""
    plan_path = run["plan_path"]
    if not Path(plan_path).exists():
        raise InputError(store_path, "plan_path", f"the run's plan {plan_path} is gone; export needs it")
    if plan_hash(plan_path) != run["plan_hash"]:
        raise InputError(plan_path, "", "changed since the run (sha256 differs); export needs the plan it ran")
    after_warmup = steps[skip_steps:] or steps
    profiled = set(run["info"].get("profiled_steps") or ())
    kept = [s for s in after_warmup if s["step"] not in profiled] or after_warmup
    warm = len(steps) - len(after_warmup)
    if not kept:
        raise InputError(store_path, "run", f"run {run['run_id']} has no steps")
    measured: dict[str, float] = {}
    for phase, metric in PHASE_METRICS.items():
        vals = [v for v in (s["phases_s"].get(phase) for s in kept) if v]
        if vals:
            measured[metric] = statistics.median(vals)
    plan = load_plan(plan_path)
    data = plan.model_dump(mode="json", by_alias=True, exclude_none=True,
                           include={"kind", "hardware", "hardware_options", "stack", "stack_options", "gpus", "model",
                                    "train", "rl"})
    probe = run["environment"].get("host_probe")
    if probe:  # priced on the host that ran it (hwprofiles/cpu-local.yaml is another machine's numbers)
        hardware, stack = case_facts(probe, run["run_id"])
        data["hardware_options"] = hardware
        data["stack_options"] = stack | data.get("stack_options", {})  # what the plan states wins
    if data.get("rl"):  # the workload as it ran: prompt and response lengths, the reward function's time
        _measured_lengths(data["rl"], kept)
        _measured_reward(data["rl"], kept)
    case_id = re.sub(r"[^a-z0-9.\-]+", "-", run["run_id"].lower()).strip("-")
    data |= {"id": case_id, "measured": measured,
             "source": f"executor run {run['run_id']} ({run['backend']} backend, plan {run['plan_id']} sha256 "
                       f"{run['plan_hash']}): median of {len(kept)} steps after {warm} warm-up"
                       + (", the profiled step left out" if len(kept) < len(after_warmup) else ""),
             "notes": f"host {run['environment'].get('host')}; exported from {store_path}"}
    parse(ValidationCase, data, f"export of {run['run_id']}")  # the contract holds before anything is written
    return data


def _measured_lengths(rl: dict[str, Any], kept: list[dict[str, Any]]) -> None:
    """Set rl.prompt_tokens_mean and rl.response_tokens.mean to the medians over the kept steps: a plan states a
    response cap, the run measured how long the responses were (a random-init policy writes to the cap)."""
    samples = rl["prompts_per_step"] * rl["samples_per_prompt"]
    prompts = [s["tokens"]["prompt"] / samples for s in kept if s.get("tokens", {}).get("prompt")]
    responses = [s["tokens"]["response"] / samples for s in kept if s.get("tokens", {}).get("response")]
    if prompts:
        rl["prompt_tokens_mean"] = round(statistics.median(prompts), 4)
    if responses:
        cap = rl["response_tokens"]["max"]
        rl["response_tokens"] = {"max": cap, "mean": round(min(cap, statistics.median(responses)), 4)}


def _measured_reward(rl: dict[str, Any], kept: list[dict[str, Any]]) -> None:
    """Set rl.reward_host_s to the reward function's measured seconds per sample (median over the kept steps): the
    job's default prices a math verifier (~1 ms), the local task compares strings (~1 us)."""
    samples = rl["prompts_per_step"] * rl["samples_per_prompt"]
    per_sample = [s["host_s"]["reward"] / samples for s in kept if "reward" in s.get("host_s", {})]
    if per_sample:
        rl["reward_host_s"] = float(f"{statistics.median(per_sample):.3g}")


def write_case(data: dict[str, Any], out: str | Path) -> None:
    write_text_atomic(out, yaml.safe_dump(data, sort_keys=False))
