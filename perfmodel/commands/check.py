"""`perfmodel check`: check a case or plan file against every layout rule and print the resolved layout."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported only when a command runs
    from perfmodel.inputs.scenario import Scenario
    from perfmodel.inputs.serve import ServeRun


def register(sub: argparse._SubParsersAction) -> None:
    c = sub.add_parser("check", help="check a case or plan file and print the resolved layout",
                       description="Load a validation case or plan, check every layout rule against the model and "
                       "hardware, and print the derived dp, pipeline split and micro-batch count.")
    c.add_argument("path", metavar="FILE", help="a validation case or plan YAML")
    c.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from perfmodel.inputs.job import engine_layout
    from perfmodel.inputs.run_file import load_run_file
    from perfmodel.inputs.scenario import build_scenario

    run_file = load_run_file(args.path)  # not `run`: that is this handler's name
    s = build_scenario(run_file, source=args.path)
    if run_file.kind == "serve":
        _print_serve(args.path, run_file, s)
        return 0
    lay = s.layout.model_copy(update={"dp": s.dp})
    print(f"{args.path}: {run_file.kind} {s.model.id or s.model.family} on {run_file.gpus} x {s.hardware.id}")
    print(f"  training layout   {lay.short()} (expert-DP {s.expert_dp}), schedule {s.schedule}")
    print(f"  pipeline split    {','.join(map(str, s.stage_layers))} ({s.split_note})")
    t = run_file.train
    print(f"  recompute         {t.recompute}" + (f" ({', '.join(sorted(t.recomputed_modules()))})"
                                                  if t.recompute == "selective" else "")
          + (f" (the first {t.recompute_num_layers} layers of each chunk)" if t.recompute_num_layers else ""))
    print(f"  micro-batches     {s.num_microbatches} per DP rank"
          + (" (upper bound: packed by max_tokens_per_gpu)" if s.train.max_tokens_per_gpu else ""))
    if run_file.rl is not None:
        ro = run_file.rl.rollout
        engines = run_file.rl.rollout_gpus // ro.engine_gpus
        print(f"  rollout           {engines} engines x {ro.engine_gpus} GPUs "
              f"({engine_layout(ro.tp, ro.ep, ro.dp, ro.dp_attention)}), {run_file.rl.placement}"
              f"{' async' if run_file.rl.async_ else ''}"
              f"{f', {run_file.rl.steps_in_flight} steps in flight' if run_file.rl.steps_in_flight > 1 else ''}")
        from perfmodel.cost.memory.rollout import rollout_memory

        mem, longest = rollout_memory(s), int(run_file.rl.prompt_tokens_mean) + run_file.rl.response_tokens.max
        print(f"  KV pool           {mem.kv_pool_bytes / 2**30:,.1f} GiB per GPU: {mem.max_requests(longest):,} "
              f"requests of {longest:,} tokens{_held(s)}")
    return 0


def _held(s: Scenario) -> str:
    """What the engine holds out of its pool for its profile run's sampler (vLLM), said where there is any."""
    from perfmodel.cost.memory.rollout import engine_reserved_bytes

    held = engine_reserved_bytes(s)
    return f", after the sampler's {held / 2**30:.1f} GiB (rollout_memory_rule vllm)" if held else ""


def _print_serve(path: str, run_file: ServeRun, s: Scenario) -> None:
    """A serving benchmark: its engines, what the KV pool holds and the client."""
    from perfmodel.cost.serve.engine import EngineCost, engine_geometry
    from perfmodel.inputs.job import engine_layout
    from perfmodel.sim.serving import serve_params

    v, g, cost = run_file.serve, engine_geometry(s), EngineCost(s)
    longest = v.input_tokens + v.output_tokens
    fits = int(cost.kv_pool_bytes // cost.kv_bytes(longest))
    print(f"{path}: serve {s.model.id or s.model.family} on {run_file.gpus} x {s.hardware.id}, stack {s.stack.id}")
    print(f"  engines           {g.n_engines} x {v.engine_gpus} GPUs "
          f"({engine_layout(v.tp, v.ep, v.dp, v.dp_attention)}), {v.precision} weights, KV {cost.kv_dtype}")
    print(f"  KV pool           {cost.kv_pool_bytes / 2**30:,.1f} GiB per GPU: {fits:,} requests of {longest:,} tokens "
          f"per scheduler (running cap {cost.max_running:,}){_held(s)}")
    print(f"  prefill           {serve_params(s).chunked_prefill_tokens:,} prompt tokens per forward")
    print(f"  client            {v.requests} requests, {v.concurrency} in flight, input {v.input_tokens} / output "
          f"{v.output_tokens} tokens" + (f" (range ratio {v.range_ratio})" if v.range_ratio < 1 else ""))

