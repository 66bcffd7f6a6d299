"""Enumerate candidate plans of a sweep and prune the impossible ones before any simulation.

A candidate is a RunSpec-shaped dict. Pruning has two stages: layout rules (the same `build_scenario` checks a
user's file meets) and the memory model (training and rollout GPUs must fit). Every pruned candidate keeps its
reason, for the CSV.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from perfmodel.schedules import default_schedule, schedule_class
from perfmodel.sweep.spec import SweepSpec, recompute_choice


def recompute_label(train: dict[str, Any]) -> str:
    """A run's recompute as a sweep writes it: none, full, selective or selective:m1+m2."""
    modules = train.get("recompute_modules")
    return train.get("recompute", "none") + (":" + "+".join(modules) if modules else "")


@dataclass(slots=True)
class Candidate:
    index: int
    nodes: int
    run: dict[str, Any]  # RunSpec data
    pruned: str | None = None  # why it was not simulated

    def label(self) -> str:
        t = self.run["train"]
        lay = t["layout"]
        rl = self.run.get("rl") or {}
        parts = [f"{self.nodes}n",
                 f"TP{lay['tp']}/PP{lay['pp']}" + (f"/VPP{lay['vpp']}" if lay.get("vpp", 1) > 1 else "")
                 + (f"/CP{lay['cp']}" if lay.get("cp", 1) > 1 else "") + f"/EP{lay['ep']}",
                 f"rc-{recompute_label(t)}"]
        if t.get("optimizer_offload_fraction"):
            parts.append("offload")
        if t.get("moe_dispatcher", "alltoall") != "alltoall":
            parts.append(t["moe_dispatcher"])
        if t.get("schedule") and t["schedule"] != default_schedule(lay.get("vpp", 1)):
            parts.append(t["schedule"])
        if rl:
            ro = rl["rollout"]
            place = "coloc" if rl["placement"] == "colocated" else f"disagg{rl['actor_gpus']}+{rl['rollout_gpus']}"
            if rl.get("async"):
                k = rl.get("off_policy_steps", 1)
                place += "-async" if k == 1 else f"-async-{k}off"
            if rl["weight_update"]["mode"] in ("p2p", "reshard"):
                place += f"-{rl['weight_update']['mode']}"
            parts.append(place)
            parts.append(f"eng{ro['engine_gpus']}-tp{ro['tp']}-ep{ro['ep']}"
                         + ("-dpa" if ro.get("dp_attention") else ""))
        return " ".join(parts)


def _divides(a: int, b: int) -> bool:
    return b % a == 0


def _train_layouts(spec: SweepSpec, gpus: int, num_experts: int, num_layers: int) -> Iterator[dict[str, Any]]:
    s = spec.space
    for tp, pp, cp in itertools.product(s.tp, s.pp, s.cp):
        mp = tp * pp * cp
        if mp > gpus or gpus % mp:
            continue
        dp = gpus // mp
        for ep, etp, vpp in itertools.product(s.ep, s.etp, s.vpp):
            if num_experts == 0 and (ep > 1 or etp > 1):
                continue
            if num_experts and (num_experts % ep or (tp * cp * dp) % (ep * etp)):
                continue
            if pp * vpp > num_layers or (vpp > 1 and pp == 1):
                continue
            for sched in _schedules(s.schedule, pp, vpp, ep):
                yield {"tp": tp, "pp": pp, "cp": cp, "ep": ep, "etp": etp, "vpp": vpp, "dp": dp, "schedule": sched}


def _schedules(names: tuple[str, ...], pp: int, vpp: int, ep: int) -> list[str]:
    """The schedules a layout is tried with, each once: every named one that runs it (its class says), and at
    vpp > 1 the default multi-chunk one (interleaved) in place of the default single-chunk one (1f1b)."""
    out: list[str] = []
    for name in names:
        if vpp > 1 and name == default_schedule(1):
            name = default_schedule(vpp)
        cls = schedule_class(name)
        if (name not in out and pp >= cls.min_pp and not cls.layout_error(pp, vpp, None)
                and not cls.run_error(ep, "none", frozenset())):
            out.append(name)
    return out


def _rollout_engines(spec: SweepSpec, gpus: int) -> Iterator[dict[str, Any]]:
    s = spec.space
    for e, ep_mode, dpa in itertools.product(s.engine_gpus, s.engine_ep, s.dp_attention):
        if e > gpus or gpus % e:
            continue
        yield {"engine_gpus": e, "tp": e, "ep": 1 if ep_mode == "none" else e, "dp": e if dpa else 1,
               "dp_attention": dpa}


def _placements(spec: SweepSpec, nodes: int, gpn: int) -> Iterator[tuple[str, int, int, bool, str]]:
    """(placement, actor_gpus, rollout_gpus, async, weight update mode)."""
    seen: set[tuple[int, int]] = set()
    for placement in spec.space.placement:
        if placement == "colocated":
            yield "colocated", nodes * gpn, nodes * gpn, False, "ipc"
            continue
        for frac in spec.space.rollout_fraction:
            rn = round(nodes * frac)
            if not 1 <= rn <= nodes - 1 or (nodes - rn, rn) in seen:
                continue
            seen.add((nodes - rn, rn))
            for is_async, mode in itertools.product(spec.space.async_, spec.space.weight_update_disaggregated):
                yield "disaggregated", (nodes - rn) * gpn, rn * gpn, is_async, mode


def _groups(spec: SweepSpec, gpus_per_node: int, num_experts: int, num_layers: int
            ) -> Iterator[tuple[int, int, tuple[str, int, int, bool, str], list[dict[str, Any]], list[Any]]]:
    """Per node count and placement: (nodes, gpus, placement, training layouts, rollout engines); a group's
    candidates are its layouts x recompute x offload x dispatcher x engines."""
    rl = spec.job.get("kind") == "rl"
    for nodes in spec.nodes:
        gpus = nodes * gpus_per_node
        placements = list(_placements(spec, nodes, gpus_per_node)) if rl else [("none", gpus, 0, False, "")]
        for place in placements:
            layouts = list(_train_layouts(spec, place[1], num_experts, num_layers))
            engines = list(_rollout_engines(spec, place[2])) if place[0] != "none" else [None]
            yield nodes, gpus, place, layouts, engines


def _per_layout(spec: SweepSpec, lay: dict[str, Any]) -> int:
    """Recipe choices per training layout: recompute x offload x dispatcher (one dispatcher without EP)."""
    s = spec.space
    return len(s.recompute) * len(s.optimizer_offload_fraction) * (len(s.moe_dispatcher) if lay["ep"] > 1 else 1)


def count_candidates(spec: SweepSpec, gpus_per_node: int, num_experts: int, num_layers: int) -> int:
    """How many candidates `enumerate_candidates` yields, without building them (a sweep's size, known up front)."""
    return sum(sum(_per_layout(spec, lay) for lay in layouts) * len(engines)
               for _, _, _, layouts, engines in _groups(spec, gpus_per_node, num_experts, num_layers))


def select_candidates(spec: SweepSpec, spec_path: str, gpus_per_node: int, num_experts: int, num_layers: int,
                      sample: int | None = None, seed: int = 0) -> tuple[int, Iterator[Candidate]]:
    """How many candidates the sweep evaluates, counted before any is built, and a generator of them: a space
    past MAX_SWEEP_CANDIDATES is refused with its size (time grows with the candidates), or sampled (`sample` of
    them, chosen at random with `seed`, their indices those of the whole space)."""
    from perfmodel.errors import InputError
    from perfmodel.inputs.bounds import MAX_SWEEP_CANDIDATES

    total = count_candidates(spec, gpus_per_node, num_experts, num_layers)
    if not total:
        raise InputError(spec_path, "space", "no candidate plans: widen the space or the node counts")
    if sample is not None and not 1 <= sample <= MAX_SWEEP_CANDIDATES:
        raise InputError("--sample", "", f"{sample}: give 1 to {MAX_SWEEP_CANDIDATES:,} candidates")
    if sample is None and total > MAX_SWEEP_CANDIDATES:
        raise InputError(spec_path, "space", f"{total:,} candidate plans, more than one sweep takes "
                         f"({MAX_SWEEP_CANDIDATES:,}; docs/reliability.md): narrow the space or the node counts, "
                         "or evaluate a random sample with --sample N")
    keep = None
    if sample is not None and sample < total:
        keep = set(random.Random(seed).sample(range(total), sample)).__contains__
        total = sample
    return total, enumerate_candidates(spec, gpus_per_node, num_experts, num_layers, keep)


def check_job(run: dict[str, Any], spec_path: str) -> None:
    """A job every candidate shares is checked once, before the sweep: a typo or a value out of range is the sweep
    file's error (job.train.seq_lenn), not a reason to prune every candidate."""
    from perfmodel.errors import InputError
    from perfmodel.inputs.loading import parse
    from perfmodel.inputs.run import RunSpec

    try:
        parse(RunSpec, run, spec_path)
    except InputError as err:
        field = f"job.{err.field}" if err.field.startswith(("train", "rl", "kind")) else err.field
        raise InputError(spec_path, field, err.message) from None


def enumerate_candidates(spec: SweepSpec, gpus_per_node: int, num_experts: int, num_layers: int,
                         keep: Callable[[int], bool] | None = None) -> Iterator[Candidate]:
    """Every candidate of the space, indexed in a fixed order; `keep(index)` False skips building one (a sample).
    A candidate's run is read-only: what it does not set (the job's nested values) is shared with the others."""
    job, model = spec.job, spec.model.model_dump(exclude_none=True)
    idx = 0
    for nodes, gpus, (placement, actor, rollout, is_async, wu_mode), layouts, engines in _groups(
            spec, gpus_per_node, num_experts, num_layers):
        for lay, recompute, offload, dispatcher in itertools.product(
                layouts, spec.space.recompute, spec.space.optimizer_offload_fraction, spec.space.moe_dispatcher):
            if lay["ep"] == 1 and dispatcher != spec.space.moe_dispatcher[0]:
                continue  # no expert parallelism: the dispatcher changes nothing
            for eng in engines:
                if keep is not None and not keep(idx):
                    idx += 1
                    continue
                run = {"kind": job.get("kind", "rl"), "hardware": spec.hardware,
                       "model": model, "gpus": gpus}
                if spec.stack:
                    run["stack"] = spec.stack
                if spec.stack_options:
                    run["stack_options"] = dict(spec.stack_options)
                if spec.hardware_options:
                    run["hardware_options"] = spec.hardware_options.model_dump(exclude_none=True)
                train = dict(job.get("train", {}))
                train["layout"] = {k: lay[k] for k in ("tp", "pp", "cp", "ep", "etp", "vpp", "dp")}
                train["schedule"] = lay["schedule"]
                train["recompute"], modules = recompute_choice(recompute)
                if modules:
                    train["recompute_modules"] = list(modules)
                train["optimizer_offload_fraction"] = offload
                train["moe_dispatcher"] = dispatcher
                train["sequence_parallel"] = lay["tp"] > 1
                run["train"] = train
                if eng is not None:
                    rl = dict(job.get("rl", {}))
                    rl.update(placement=placement, actor_gpus=actor, rollout_gpus=rollout)
                    rl["async"] = is_async
                    if not is_async and "off_policy_steps" in rl:  # the job's window is an async plan's only
                        rl["off_policy_steps"] = 1
                    ro = dict(rl.get("rollout", {}))
                    ro.update(eng)
                    rl["rollout"] = ro
                    wu = dict(rl.get("weight_update", {}))
                    wu["mode"] = wu_mode
                    rl["weight_update"] = wu
                    run["rl"] = rl
                yield Candidate(idx, nodes, run)
                idx += 1
