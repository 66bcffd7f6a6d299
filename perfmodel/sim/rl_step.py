"""One RL step (GRPO/PPO as Miles runs it): rollout -> log-prob passes -> actor training -> weight update,
composed by placement: colocated (time-shared GPUs with offload/onload), disaggregated (separate rollout GPUs),
or async (rollout of step k+1 overlaps training of step k).

Phase names follow Miles' logs (perf/rollout_time, perf/log_probs_time, perf/ref_log_probs_time,
perf/actor_train_time, update weights, perf/step_time). The rollout and training sides are simulated
separately (they share nothing but the sampled response lengths) and memoized by what each depends on, so a
sweep re-uses them across plans that differ only on the other side.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from perfmodel.cost.comm import host_copy_s
from perfmodel.cost.memory.training import training_memory
from perfmodel.cost.serve.weight_update import WeightUpdateResult, weight_update_time
from perfmodel.inputs.keys import Reads, scenario_key
from perfmodel.inputs.scenario import Scenario
from perfmodel.invariants import check_rl_step
from perfmodel.memo import Memo
from perfmodel.names import BREAKDOWN, EP_COMM, training_parts
from perfmodel.schedules import runnable_microbatches
from perfmodel.sim.pipeline import pipeline_spans
from perfmodel.sim.rl_subphases import (
    SubPhase,
    TrainPathExtras,
    checkpoint_s,
    reward_tail_s,
    train_path_extras,
    weight_copy_s,
)
from perfmodel.sim.rollout import simulate_rollout
from perfmodel.sim.rollout_result import RolloutResult
from perfmodel.sim.train import TrainStepResult, simulate_train_step
from perfmodel.trace import Span


@dataclass(slots=True)
class TrainSide:
    log_probs: TrainStepResult
    ref_log_probs: TrainStepResult | None
    train: TrainStepResult
    critic: TrainStepResult | None  # PPO: the critic's update (value loss)
    microbatches_per_rank: int
    tokens: int
    values: TrainStepResult | None = None  # PPO: the critic's value pass over the rollout, before its update
    critic_swap_s: float = 0.0  # PPO: the critic onloaded and offloaded around its work (it shares the actor's GPUs)

    @property
    def critic_time_s(self) -> float:
        """Miles' critic_train: value pass, advantages, update (plus moving the critic on and off the GPUs)."""
        if self.critic is None:
            return 0.0
        return (self.values.step_time_s if self.values else 0.0) + self.critic.step_time_s + self.critic_swap_s

    @property
    def log_probs_time_s(self) -> float:
        return self.log_probs.step_time_s

    @property
    def ref_log_probs_time_s(self) -> float:
        return self.ref_log_probs.step_time_s if self.ref_log_probs else 0.0

    @property
    def train_time_s(self) -> float:
        return self.train.step_time_s + self.critic_time_s

    @property
    def total_s(self) -> float:
        return self.log_probs_time_s + self.ref_log_probs_time_s + self.train_time_s


@dataclass(slots=True)
class RLStepResult:
    scenario: Scenario
    rollout: RolloutResult
    train_side: TrainSide
    weight_update: WeightUpdateResult
    offload_s: float  # colocated: engine release + trainer onload between rollout and training (0 otherwise)
    step_time_s: float
    phases_s: dict[str, float]
    breakdown_s: dict[str, float]  # critical-path parts that sum to step_time_s (report stacked bars)
    idle_gpu_s: dict[str, float]  # GPU-seconds idle by cause
    trace_spans: list[Span] = field(default_factory=list)
    subphases: list[SubPhase] = field(default_factory=list)  # every sub-phase, in the order it runs

    def __post_init__(self) -> None:
        lay = self.scenario.layout.model_copy(update={"dp": self.scenario.dp}).short()
        check_rl_step(f"RL {self.scenario.run.rl.placement}, actor {lay}", self.step_time_s, self.phases_s,
                      self.breakdown_s, self.idle_gpu_s)

    def metrics(self) -> dict[str, float]:
        rl = self.scenario.run.rl
        gpus = self.scenario.run.gpus
        ro = self.rollout
        out = {
            "step_time_s": self.step_time_s,
            "rollout_time_s": self.phases_s["rollout"],
            # as the framework's timer times it: with the reference pass where one timer holds both (NeMo-RL)
            "log_probs_time_s": self.phases_s["log_probs"] + (
                self.phases_s.get("ref_log_probs", 0.0) if self.scenario.stack.rl_log_probs_timer_has_ref else 0.0),
            "train_time_s": self.phases_s["train"],
            "weight_update_time_s": self.phases_s["weight_update"],
            "rollout_tokens_per_gpu_s": ro.tokens_generated / ro.rollout_time_s / rl.rollout_gpus,
            # the rollout's long tail: wall time with under half of its peak requests running
            "rollout_straggler_fraction": ro.straggler_fraction,
            "train_tokens_per_s": self.train_side.tokens / self.train_side.train.step_time_s,
            "tokens_per_s_per_gpu": self.train_side.tokens / self.step_time_s / gpus,
            # Miles' perf/actor_train_tflops and perf/actor_train_mfu: model FLOPs of the actor training phase
            "tflops_per_gpu": self.train_side.train.model_tflops_per_gpu,
            "mfu": self.train_side.train.mfu,
        }
        if self.phases_s.get("ref_log_probs"):
            out["ref_log_probs_time_s"] = self.phases_s["ref_log_probs"]
        return out

    def spans(self) -> list[Span]:
        return self.trace_spans

    def to_json(self) -> dict[str, Any]:
        return {
            "phases_s": self.phases_s,
            "breakdown_s": self.breakdown_s,
            "idle_gpu_s": self.idle_gpu_s,
            "rollout": self.rollout.to_json(),
            "weight_update": self.weight_update.to_json(),
            "train_microbatches_per_rank": self.train_side.microbatches_per_rank,
            "train_breakdown_s": self.train_side.train.breakdown_s,
            "exposed_comm_s": self.train_side.train.exposed_comm_s,
            "subphases": [{"name": p.name, "seconds": p.seconds, "phase": p.phase, "scales_with": p.scales_with}
                          for p in self.subphases],
        }


def optimizer_steps_per_rollout(samples: int, global_batch: int) -> int:
    """Optimizer steps that one RL step's samples make at global_batch sequences each (at least one; a remainder
    is spread over the steps rather than refused)."""
    return max(1, samples // global_batch)


def pack_microbatches(lengths: list[int], dp: int, max_tokens: int | None,
                      samples_per_microbatch: int = 1) -> list[tuple[int, int]]:
    """Miles --balance-data then micro-batching: samples spread over DP ranks by tokens (longest first onto the
    lightest rank); with a token budget (--max-tokens-per-gpu, dynamic batching) packed first-fit into
    micro-batches of at most max_tokens tokens, else `samples_per_microbatch` samples each (--micro-batch-size).
    Returns the micro-batches (tokens, mean sample length) of the busiest DP rank."""
    ranks: list[list[int]] = [[] for _ in range(dp)]
    loads = [0] * dp
    for n in sorted(lengths, reverse=True):
        i = loads.index(min(loads))
        ranks[i].append(n)
        loads[i] += n
    busiest = ranks[loads.index(max(loads))]
    if max_tokens is None:
        groups = [busiest[i:i + samples_per_microbatch] for i in range(0, len(busiest), samples_per_microbatch)]
        return [(sum(g), max(1, sum(g) // len(g))) for g in groups]
    bins: list[list[int]] = []
    room: list[int] = []
    for n in busiest:  # already longest first
        for i, r in enumerate(room):
            if n <= r:
                bins[i].append(n)
                room[i] -= n
                break
        else:
            bins.append([n])
            room.append(max(0, max_tokens - n))
    return [(sum(b), max(1, sum(b) // len(b))) for b in bins]


def pad_microbatches(mbs: list[tuple[int, int]], count: int) -> list[tuple[int, int]]:
    """Re-split one rank's micro-batches into `count` (a count its schedule runs, `runnable_microbatches`), as
    Miles does: the samples balanced over the micro-batches by tokens, and when there are fewer samples than
    micro-batches, dummy copies of the shortest one (radixark/miles `miles/backends/megatron_utils/data.py`,
    _get_seqlen_partitions_with_dummy_padding). Samples are approximated by the micro-batches' mean lengths."""
    if count == len(mbs):
        return mbs
    samples = sorted((seq for tokens, seq in mbs for _ in range(max(1, round(tokens / seq)))), reverse=True)
    real = min(count, len(samples))
    bins: list[list[int]] = [[] for _ in range(real)]
    loads = [0] * real
    for n in samples:  # longest first onto the lightest micro-batch
        i = loads.index(min(loads))
        bins[i].append(n)
        loads[i] += n
    out = [(sum(b), max(1, sum(b) // len(b))) for b in bins]
    shortest = min(out)
    return out + [shortest] * (count - real)


# What each memoized side of a step reads of the scenario (keys derived from these: perfmodel/inputs/keys.py). The
# sides read disjoint parts where they can, so a sweep re-uses one side across plans that differ on the other.
TRAIN_SIDE_READS = Reads("train_side_key", run=("gpus", "train_gpus", "train", "rl.algorithm", "rl.log_probs"),
                         stack_parts=("train",), stack_knobs=("memory_saver",))  # PPO's critic parks with it
ROLLOUT_READS = Reads("rollout_key", run=("rl",), stack_parts=("rollout",))
WEIGHT_UPDATE_READS = Reads("weight_update_key", run=("gpus", "train_gpus", "train", "rl"),
                            stack_parts=("weight_update", "train"))


def simulate_train_side(scn: Scenario, lengths: list[int], record_trace: bool = False,
                        memo: Memo | None = None) -> TrainSide:
    memo = memo if memo is not None else Memo()
    key = (scenario_key(scn, TRAIN_SIDE_READS, memo), tuple(lengths))
    if record_trace:
        return _train_side(scn, lengths, True, memo)
    return memo.get("rl_train_side", key, lambda: _train_side(scn, lengths, False, memo))


def _train_side(scn: Scenario, lengths: list[int], record_trace: bool, memo: Memo) -> TrainSide:
    rl, t = scn.run.rl, scn.run.train
    budget = t.max_tokens_per_gpu * t.layout.cp if t.max_tokens_per_gpu else None
    sched, group = scn.schedule, t.microbatch_group_size_per_vp_stage

    def pack(share: list[int]) -> list[tuple[int, int]]:
        packed = pack_microbatches(share, scn.dp, budget, t.micro_batch)
        return pad_microbatches(packed, runnable_microbatches(sched, t.layout.pp, len(packed), group))

    if not scn.stack.pack_sequences:  # the stack pads every sample to the rollout's longest
        lengths = [max(lengths)] * len(lengths)
    mbs = pack(lengths)
    # Log-probs (and the reference pass) run once over the whole rollout; training then takes
    # samples / global_batch optimizer steps (Miles --num-steps-per-rollout, NeMo-RL train_global_batch_size),
    # each on an interleaved share of the samples so the shares see the same length mix.
    st = scn.stack
    lp_scn = scn if st.log_probs_compute_scale == 1.0 else dataclasses.replace(scn, stack=st.with_knobs(
        {"train_compute_scale": st.train_compute_scale * st.log_probs_compute_scale}, "log_probs_compute_scale"))
    log_probs = simulate_train_step(lp_scn, mbs, forward_only=True, memo=memo)
    ref = simulate_train_step(lp_scn, mbs, forward_only=True, memo=memo) if rl.log_probs.ref_model else None
    steps = optimizer_steps_per_rollout(len(lengths), t.global_batch)
    shares = [mbs] if steps == 1 else [
        pack(lengths[i::steps]) for i in range(steps)]
    train = TrainStepResult.consecutive(
        [simulate_train_step(scn, share, record_trace=record_trace, memo=memo) for share in shares])
    critic = values = None
    swap_s = 0.0
    if rl.algorithm == "ppo":
        # Miles' PPO (docs/rl-phases.md, Miles 4.3-4.4): the critic is the actor's model with a value head, on the
        # actor's GPUs with the actor's layout and batches; each step it wakes, computes values over the rollout,
        # trains on the value loss and sleeps, before the actor does the same
        critic_scn = dataclasses.replace(scn, model=scn.model.as_critic())
        values = simulate_train_step(critic_scn, mbs, forward_only=True, memo=memo)
        critic = TrainStepResult.consecutive([simulate_train_step(critic_scn, share, memo=memo) for share in shares])
        swap_s = critic_swap_s(critic_scn)
    return TrainSide(log_probs, ref, train, critic, len(mbs), sum(lengths), values, swap_s)


def critic_swap_s(critic_scn: Scenario) -> float:
    """The critic's weights and optimizer state onloaded before its work and offloaded after it, over the host link
    (torch_memory_saver resume / pause with a CPU backup; Miles forces offload_train for PPO, colocated or not,
    since actor and critic share the GPUs). 0 on a stack that keeps both resident (memory_saver off)."""
    if not critic_scn.stack.memory_saver:
        return 0.0
    return 2.0 * host_copy_s(critic_scn.hardware, training_memory(critic_scn).parked_bytes)


def simulate_rollout_side(scn: Scenario, seed: int = 0, memo: Memo | None = None) -> RolloutResult:
    memo = memo if memo is not None else Memo()
    key = (scenario_key(scn, ROLLOUT_READS, memo), seed)
    return memo.get("rl_rollout", key, lambda: simulate_rollout(scn, seed=seed))


def simulate_rl_step(scn: Scenario, seed: int = 0, record_trace: bool = False,
                     memo: Memo | None = None) -> RLStepResult:
    run = scn.run
    rl = run.rl
    assert rl is not None
    memo = memo if memo is not None else Memo()
    rollout = simulate_rollout_side(scn, seed, memo)
    # Training sees exactly the samples the rollout produced: prompt + response tokens each.
    prompt = int(round(rl.prompt_tokens_mean))
    lengths = [prompt + int(r) for r in rollout.response_lengths]
    side = simulate_train_side(scn, lengths, record_trace=record_trace, memo=memo)
    wu = memo.get("rl_weight_update", scenario_key(scn, WEIGHT_UPDATE_READS, memo),
                  lambda: weight_update_time(scn, memo=memo))
    colocated = rl.placement == "colocated"
    offload = wu.after_rollout_s if colocated else 0.0
    reward_s = reward_tail_s(scn, rollout.rollout_time_s)
    rollout_s = rollout.rollout_time_s + reward_s  # the frameworks' rollout timers hold the rewards
    copy_s = 0.0
    if scn.stack.rl_weight_restore or scn.stack.rl_weight_backup:
        copy_s = weight_copy_s(scn, memo)
    extras = train_path_extras(scn, len(lengths), side.tokens, sum(int(r) for r in rollout.response_lengths),
                               copy_s)
    fixed_s = scn.stack.rl_step_host_s + checkpoint_s(scn)

    ref = rl.log_probs.ref_model  # the first pass after the wake re-creates the process groups (comm_reinit_s)
    phases = {
        "rollout": rollout_s,
        "log_probs": side.log_probs_time_s + (0.0 if ref else extras.comm_init_first_pass_s),
        "ref_log_probs": side.ref_log_probs_time_s + (extras.comm_init_first_pass_s if ref else 0.0),
        "train": side.train_time_s + extras.comm_init_train_s + extras.comm_init_critic_s,
        # Miles times "sleep + update weights + wake" together when colocated; wu.total_s is that.
        "weight_update": wu.total_s,
        # what no phase timer holds: engine release + trainer onload (colocated), data to the trainer, weight
        # restores / backup, advantages, the driver's fixed work, checkpoints
        "other": offload + extras.outside_timers_s + fixed_s,
    }
    train_path = side.total_s + extras.total_s
    if rl.async_:
        step = max(rollout_s, train_path) + wu.total_s + fixed_s
        exposed_rollout = max(0.0, rollout_s - train_path)  # the part training does not hide
    else:
        step = rollout_s + train_path + wu.total_s + offload + fixed_s
        exposed_rollout = rollout_s
    bd = {k: 0.0 for k in BREAKDOWN}
    bd["rollout"] = exposed_rollout
    bd["log_probs"] = side.log_probs_time_s + side.ref_log_probs_time_s
    tb = side.train.breakdown_s
    bd |= training_parts(tb)
    bd["weight_sync"] = wu.total_s
    bd["other_comm"] += extras.comm_init_s
    bd["offload"] = offload + extras.moves_s
    if side.critic is not None:  # the critic's passes and their bubbles and comms, as compute; its swap, offload
        bd["train_compute"] += side.critic_time_s - side.critic_swap_s
        bd["offload"] += side.critic_swap_s
    bd["other"] = max(0.0, step - sum(bd.values()))

    idle = _idle_gpu_s(scn, tb, rollout, wu, offload, step, fixed_s, train_path, rollout_s)
    subphases = step_subphases(rollout, reward_s, offload, side, extras, wu, scn.stack.rl_step_host_s,
                               checkpoint_s(scn))
    spans = _step_spans(rollout, rollout_s, subphases, side, wu, step, fixed_s, rl.async_) if record_trace else []
    return RLStepResult(scn, rollout, side, wu, offload, step, phases, bd, idle, spans, subphases)


def _idle_gpu_s(scn: Scenario, tb: dict[str, float], rollout: RolloutResult, wu: WeightUpdateResult, offload: float,
                step: float, fixed_s: float, train_path: float, rollout_s: float) -> dict[str, float]:
    """GPU-seconds each GPU group spends waiting in one step, by cause."""
    rl, gpus = scn.run.rl, scn.run.gpus
    actor, rollout_gpus = rl.actor_gpus, rl.rollout_gpus
    idle = {
        "pipeline_bubble": tb.get("bubble", 0.0) * actor,
        "all_to_all_stall": tb.get(f"comm:{EP_COMM}", 0.0) * actor,
        "rollout_tail": rollout.idle_tail_gpu_s,
        "weight_sync": wu.total_s * gpus,
        "offload": offload * gpus,
    }
    if rl.placement != "colocated":
        if rl.async_:
            idle["waiting_on_other_side"] = (max(0.0, step - wu.total_s - fixed_s - train_path) * actor
                                             + max(0.0, step - wu.total_s - fixed_s - rollout_s) * rollout_gpus)
        else:
            idle["waiting_on_other_side"] = train_path * rollout_gpus + rollout_s * actor
    return idle


def _step_spans(rollout: RolloutResult, rollout_s: float, subphases: list[SubPhase], side: TrainSide,
                wu: WeightUpdateResult, step: float, fixed_s: float, async_: bool) -> list[Span]:
    """The step's trace: the rollout's engines, then each sub-phase where it runs (the training side after the
    rollout, or with it when async; the update and the step's fixed work close the step)."""
    spans: list[Span] = []
    spans.extend(rollout.spans(offset_s=0.0))
    spans.append(Span("rl step", "phases", "rollout", 0.0, rollout_s))
    # the training side starts after the rollout (sync) or with it (async); the update and the step's fixed
    # work close the step
    t = 0.0
    for sp in subphases:
        if sp.name == "data_to_trainer" and async_:
            t = 0.0
        if sp.name == "weight_update":
            t = step - wu.total_s - fixed_s
        if sp.seconds > 0:
            spans.append(Span("rl step", "sub-phases", sp.name, t, sp.seconds))
        if sp.name == "actor_train":
            spans.append(Span("rl step", "phases", "actor_train", t, sp.seconds))
            spans.extend(pipeline_spans(side.train.trace, prefix="train stage", offset_s=t))
        elif sp.name in ("release_and_onload", "critic_train", "log_probs"):
            if sp.seconds > 0:
                spans.append(Span("rl step", "phases", sp.name, t, sp.seconds))
        elif sp.name == "weight_update":
            spans.append(Span("rl step", "phases", "update_weights", t, sp.seconds))
            u = t
            for part, sec in wu.parts.items():  # the update's own path, part by part
                if sec > 0:
                    spans.append(Span("rl step", "weight update", part.removesuffix("_s"), u, sec))
                u += sec
        t += sp.seconds
    return spans


def step_subphases(rollout: RolloutResult, reward_s: float, offload_s: float, side: TrainSide,
                   extras: TrainPathExtras, wu: WeightUpdateResult, driver_s: float,
                   checkpoint_step_s: float) -> list[SubPhase]:
    """Every sub-phase of one step in the order the frameworks run it (docs/rl-phases.md), with the phase timer
    that holds it; the PPO critic runs before the actor (Miles)."""
    out = [
        SubPhase("generate", rollout.rollout_time_s, "rollout", "per token, per decode step, per request"),
        SubPhase("reward_tail", reward_s, "rollout", "per sample (the last one, and any excess)"),
        SubPhase("release_and_onload", offload_s, "other", "per step + trainer bytes over the host link"),
        SubPhase("data_to_trainer", extras.data_to_trainer_s, "other", "per sample + bytes per token"),
    ]
    comm = "groups x communicator init, stage after stage"
    if side.critic is not None:
        out += [SubPhase("critic_comm_init", extras.comm_init_critic_s, "train", comm),
                SubPhase("critic_train", side.critic_time_s, "train", "per micro-batch, per token, swap bytes")]
    first_pass = "ref_log_probs" if side.ref_log_probs is not None else "log_probs"
    out += [
        SubPhase("ref_restore", extras.ref_restore_s, "other", "weight bytes over the host link"),
        *([SubPhase("comm_init", extras.comm_init_first_pass_s, first_pass, comm)] if side.ref_log_probs else []),
        SubPhase("ref_log_probs", side.ref_log_probs_time_s, "ref_log_probs", "per micro-batch, per token"),
        SubPhase("actor_restore", extras.actor_restore_s, "other", "weight bytes over the host link"),
        *([] if side.ref_log_probs else [SubPhase("comm_init", extras.comm_init_first_pass_s, first_pass, comm)]),
        SubPhase("log_probs", side.log_probs_time_s, "log_probs", "per micro-batch, per token"),
        SubPhase("advantages", extras.advantages_s, "other", "per response token"),
        SubPhase("train_comm_init", extras.comm_init_train_s, "train", "gradient groups x communicator init"),
        SubPhase("actor_train", side.train.step_time_s, "train", "per micro-batch, per token, per optimizer step"),
        SubPhase("weight_backup", extras.weight_backup_s, "other", "weight bytes over the host link"),
        SubPhase("weight_update", wu.total_s, "weight_update", "per bucket + bytes + fixed calls"),
        SubPhase("checkpoint", checkpoint_step_s, "other", "parameter bytes to disk / checkpoint_every"),
        SubPhase("driver", driver_s, "other", "per step"),
    ]
    return out
