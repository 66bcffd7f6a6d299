"""The measurement record schema: one `RunRecord` per launch, one `StepRecord` per RL step (GRPO or PPO).

Units are in the names (_s seconds, _bytes bytes). Phase names match perfmodel's `Measured` fields where they
exist (rollout_time_s, log_probs_time_s, train_time_s, weight_update_time_s, step_time_s) so `executor show`
can put the plan's prediction next to the measurement.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import socket
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

PHASES = ("rollout", "log_probs", "train", "critic", "weight_update", "offload", "onload", "step")


@dataclass
class MicroBatchTiming:
    rank: int
    pass_name: str  # "log_probs", "train" or "critic" (PPO: its value pass and update)
    index: int
    forward_s: float | None
    backward_s: float | None


@dataclass
class StepRecord:
    step: int
    started_at: float  # unix time
    phases_s: dict[str, float | None]  # keys: PHASES; None where a phase does not apply (offload on CPU, critic
    # in GRPO); PPO's train includes its critic's time
    tokens: dict[str, int]  # prompt, response, train (padded), per step
    reward_mean: float
    reward_std: float
    train_rollout_logprob_abs_diff: float
    train_rollout_kl: float
    rollout_log_prob_mean: float  # sample mean of the sampled tokens' mean log-prob: how peaked the policy is
    train_stats: dict[str, float]  # pg_loss, pg_clipfrac, ppo_kl, grad_norm, (tis_clipfrac); PPO: critic_*
    weight_update: dict[str, Any]  # quantize_s, transfer_s, tensors, payload_bytes, engine_format, ...
    peak_rss_bytes: dict[str, int]  # "rank0", "rank1", "engine" -> VmHWM
    micro_batches: list[MicroBatchTiming] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)  # a few prompt/response/reward examples
    host_s: dict[str, float] = field(default_factory=dict)  # what tells a stall's cause. Inside the rollout timer:
    # "reward" (the reward function over the step's samples), "generate" (the engine's generate call),
    # "gc_during_generate" (the driver's Python GC pauses within it); over the step: "gc_step" (all its GC
    # pauses on rank 0), "between_phases" (the step minus its timed phases: broadcast and gather)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RunRecord:
    run_id: str
    plan_id: str
    plan_hash: str
    plan_path: str
    backend: str
    hardware: str
    layout: str
    run_dir: str
    started_at: float
    environment: dict[str, Any]
    predicted: dict[str, Any]
    status: str = "running"
    finished_at: float | None = None
    info: dict[str, Any] = field(default_factory=dict)  # engine_start_s, rollout precision, ...


def plan_hash(path: str | Path) -> str:
    """sha256 of the plan file's bytes (first 16 hex digits)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def launched_plan(run: dict[str, Any]) -> Any:
    """A stored run's plan as it was launched: the loaded plan, or None when its file is gone or changed since
    (its sha256 is not the run's)."""
    from perfmodel.inputs.plan import load_plan

    path = Path(run["plan_path"])
    if not path.exists() or plan_hash(path) != run["plan_hash"]:
        return None
    return load_plan(path)


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def environment() -> dict[str, Any]:
    """Versions and host, without importing the heavy packages."""
    env: dict[str, Any] = {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "packages": {
            d: _version(d) for d in ("torch", "sglang", "megatron-core", "transformers", "tokenizers", "pydantic")
        },
    }
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            env["memory_bytes"] = int(f.readline().split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return env


def to_json_text(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, default=str)
