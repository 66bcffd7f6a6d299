"""One torchrun rank of a local GRPO run: `python -m torch.distributed.run ... -m executor.backends.local.worker --job J`.

Every rank trains (megatron-core, its PP stage / EP experts / DP share). Rank 0 also drives: it hosts the
SGLang engine, samples prompts, scores rewards, computes group advantages, pushes weights, and writes the
step records (through the measurement sink into the store), the trace and the progress log. One step:

  rollout (rank 0, SGLang) -> broadcast batch -> log_probs (Megatron forward-only, old policy)
  -> gap metrics -> train (GRPO, optimizer step) -> gather BF16 weights -> quantize -> engine update
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

from executor.backends.local.cpu_shims import apply_megatron_shims, needs_cpu_shims


def _vm_hwm_bytes(pid: int) -> int:
    """Peak resident set size of a process (Linux VmHWM), 0 if unknown."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _engine_peak_rss_bytes() -> int:
    import psutil  # noqa: PLC0415

    return sum(_vm_hwm_bytes(c.pid) for c in psutil.Process().children(recursive=True))


def run(job: dict[str, Any]) -> None:
    apply_megatron_shims()
    import torch  # noqa: PLC0415
    import torch.distributed as dist  # noqa: PLC0415

    from executor.backends.local.grpo import group_advantages, logprob_gap  # noqa: PLC0415
    from executor.backends.local.options import LocalOptions  # noqa: PLC0415
    from executor.backends.local.task import reward, sample_prompts  # noqa: PLC0415
    from executor.backends.local.tiny_model import TinyArch, write_hf_checkpoint  # noqa: PLC0415
    from executor.backends.local.tokenizer import PAD_ID  # noqa: PLC0415
    from executor.backends.local.trainer import MicroBatchTimes, Trainer, TrainBatch, pack_samples  # noqa: PLC0415
    from executor.records import MicroBatchTiming, StepRecord  # noqa: PLC0415
    from perfmodel.inputs.plan import load_plan  # noqa: PLC0415

    plan = load_plan(job["plan_path"])
    options = LocalOptions.model_validate(plan.executor.options)
    arch = TinyArch.from_hf_config(plan.model.hf_config or {})
    rl = plan.rl
    assert rl is not None
    layout = plan.train.layout
    steps = int(job["steps"])
    run_dir = Path(job["run_dir"])

    if not needs_cpu_shims():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("gloo" if needs_cpu_shims() else "nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(options.torch_threads or max(1, (os.cpu_count() or 1) // world))
    trainer = Trainer(arch, layout.pp, layout.ep, plan.train.micro_batch, plan.train.global_batch, options)
    dp, dp_rank = trainer.dp_size, trainer.dp_rank
    samples_per_step = rl.prompts_per_step * rl.samples_per_prompt
    optimizer_steps = samples_per_step // plan.train.global_batch

    sink = trace = engine = None
    origin = time.time()
    if rank == 0:
        from executor.measurement_sink import MeasurementSink  # noqa: PLC0415
        from executor.trace import TraceWriter  # noqa: PLC0415

        sink = MeasurementSink.open(job["store_path"])
        trace = TraceWriter(run_dir / "trace.json", origin)

    try:
        # ---- initial checkpoint (Megatron's random init, in HF format) and the engine
        t0 = time.time()
        init_tensors = trainer.hf_tensors_on_rank0()
        if rank == 0:
            from executor.backends.local.rollout import RolloutEngine  # noqa: PLC0415
            from executor.backends.local.weight_update import push_weights  # noqa: PLC0415

            write_hf_checkpoint(run_dir / "hf_init", arch, init_tensors)
            t1 = time.time()
            max_tokens = rl.rollout.max_total_tokens or 4096
            engine = RolloutEngine(run_dir / "hf_init", max_tokens, rl.rollout.max_running_requests, options.seed,
                                   rl.rollout.mem_fraction_static)
            t2 = time.time()
            first = push_weights(engine, init_tensors, rl.rollout.precision, rl.weight_update.mode, arch,
                                 run_dir / "hf_update")
            t3 = time.time()
            trace.span("write_hf_checkpoint", t0, t1 - t0, lane="driver")
            trace.span("engine_start", t1, t2 - t1, lane="rollout")
            trace.span("initial_weight_update", t2, t3 - t2, lane="driver", engine_format=first.engine_format)
            sink.update_run_info(job["run_id"], engine_start_s=engine.start_s, initial_weight_update_s=t3 - t2,
                                 rollout_precision=rl.rollout.precision, engine_weight_format=first.engine_format,
                                 weight_update_mode=rl.weight_update.mode, world_size=world,
                                 layout={"tp": layout.tp, "pp": layout.pp, "ep": layout.ep, "dp": dp},
                                 optimizer_steps_per_rollout=optimizer_steps, task=options.task)
            print(f"[executor] engine ready in {engine.start_s:.1f} s; rollout weights: {first.engine_format}", flush=True)
        dist.barrier()

        rng = random.Random(options.seed)
        for step in range(1, steps + 1):
            step_t0 = time.time()
            spans: list[tuple[str, float, float, str]] = []
            payload: list[Any] = [None]
            # ---- rollout (rank 0)
            if rank == 0:
                prompts = sample_prompts(options.task, rng, rl.prompts_per_step)
                expanded = [p for p in prompts for _ in range(rl.samples_per_prompt)]
                gens = engine.generate([p.token_ids for p in expanded], rl.response_tokens.max, options.temperature)
                rewards = torch.tensor([reward(g.response_text, p.answer) for g, p in zip(gens, expanded)])
                adv = group_advantages(rewards, rl.samples_per_prompt, options.std_normalize)
                tokens, plen, rlen = pack_samples([p.token_ids for p in expanded], [g.response_ids for g in gens], PAD_ID)
                payload = [{
                    "tokens": tokens, "prompt_lengths": plen, "response_lengths": rlen, "advantages": adv.tolist(),
                    "rollout_log_probs": [g.log_probs for g in gens],
                    "rewards": rewards.tolist(),
                    "examples": [{"prompt": p.text, "answer": p.answer, "response": g.response_text, "reward": float(r)}
                                 for p, g, r in list(zip(expanded, gens, rewards.tolist()))[:: rl.samples_per_prompt][:4]],
                }]
            t_roll = time.time()
            spans.append(("rollout", step_t0, t_roll - step_t0, "rollout"))
            dist.broadcast_object_list(payload, src=0)
            data = payload[0]
            t_bcast = time.time()
            spans.append(("broadcast_batch", t_roll, t_bcast - t_roll, "train"))

            idx = list(range(dp_rank, samples_per_step, dp))  # this DP rank's share
            local = TrainBatch(data["tokens"][idx], [data["prompt_lengths"][i] for i in idx],
                               [data["response_lengths"][i] for i in idx], [data["advantages"][i] for i in idx],
                               [data["rollout_log_probs"][i] for i in idx])
            # ---- old-policy log-probs (Megatron forward only)
            lp_times, train_times = MicroBatchTimes(), MicroBatchTimes()
            local.old_log_probs = trainer.compute_log_probs(local, lp_times)
            t_lp = time.time()
            spans.append(("log_probs", t_bcast, t_lp - t_bcast, "train"))
            gap_part = None
            if trainer.is_last_stage:
                g = logprob_gap(local.old_log_probs, local.rollout_log_probs)
                n = len(local)
                gap_part = (g["train_rollout_logprob_abs_diff"] * n, g["train_rollout_kl"] * n, n)
            # ---- train
            if not trainer.is_last_stage:
                local.old_log_probs = [torch.zeros(r) for r in local.response_lengths]
            train_stats = trainer.train(local, optimizer_steps, train_times)
            t_train = time.time()
            spans.append(("train", t_lp, t_train - t_lp, "train"))
            # ---- weights -> engine
            tensors = trainer.hf_tensors_on_rank0()
            t_gather = time.time()
            spans.append(("gather_weights", t_train, t_gather - t_train, "train"))
            wu = None
            if rank == 0:
                wu = push_weights(engine, tensors, rl.rollout.precision, rl.weight_update.mode, arch, run_dir / "hf_update")
            t_wu = time.time()
            spans.append(("update_engine", t_gather, t_wu - t_gather, "rollout"))
            # ---- collect per-rank measurements on rank 0
            mine = {"rank": rank, "gap": gap_part, "train_stats": train_stats if trainer.is_last_stage else None,
                    "lp_times": lp_times, "train_times": train_times, "spans": spans,
                    "rss": trainer.peak_rss_bytes()}
            gathered: list[Any] = [None] * world if rank == 0 else []
            dist.gather_object(mine, gathered if rank == 0 else None, dst=0)
            step_end = time.time()
            if rank == 0:
                parts = [m for m in gathered if m["gap"] is not None]
                n = sum(p["gap"][2] for p in parts)
                abs_diff = sum(p["gap"][0] for p in parts) / n
                kl = sum(p["gap"][1] for p in parts) / n
                stats_parts = [m["train_stats"] for m in gathered if m["train_stats"]]
                train_summary = {k: sum(s[k] for s in stats_parts) / len(stats_parts) for k in stats_parts[0]}
                micro = []
                for m in gathered:
                    for name, t in (("log_probs", m["lp_times"]), ("train", m["train_times"])):
                        for i, f in enumerate(t.forward_s):
                            b = t.backward_s[i] if i < len(t.backward_s) else None
                            micro.append(MicroBatchTiming(m["rank"], name, i, f, b))
                    for span in m["spans"]:
                        trace.span(span[0], span[1], span[2], pid=m["rank"], lane=span[3], step=step)
                rewards = torch.tensor(data["rewards"])
                response_tokens = sum(data["response_lengths"])
                record = StepRecord(
                    step=step, started_at=step_t0,
                    phases_s={"rollout": t_roll - step_t0, "log_probs": t_lp - t_bcast, "train": t_train - t_lp,
                              "weight_update": t_wu - t_train, "offload": None, "onload": None,
                              "step": step_end - step_t0},
                    tokens={"prompt": sum(data["prompt_lengths"]), "response": response_tokens,
                            "train": int(data["tokens"].numel())},
                    reward_mean=float(rewards.mean()), reward_std=float(rewards.std()),
                    train_rollout_logprob_abs_diff=abs_diff, train_rollout_kl=kl,
                    rollout_log_prob_mean=sum(float(t.mean()) for t in data["rollout_log_probs"])
                    / len(data["rollout_log_probs"]),
                    train_stats=train_summary,
                    weight_update={**wu.__dict__, "gather_s": t_gather - t_train},
                    peak_rss_bytes={**{f"rank{m['rank']}": m["rss"] for m in gathered}, "engine": _engine_peak_rss_bytes()},
                    micro_batches=micro, samples=data["examples"],
                )
                trace.span(f"step {step}", step_t0, step_end - step_t0, lane="step")
                sink.write_step(job["run_id"], record)
                trace.flush()
                print(f"[executor] step {step}/{steps}: {step_end - step_t0:.2f} s, reward {record.reward_mean:.3f}, "
                      f"logprob_abs_diff {abs_diff:.4f}, rollout_kl {kl:.5f}", flush=True)

        dist.barrier()
    finally:  # also on errors and SIGTERM from torchrun: never leave SGLang's processes behind
        if engine is not None:
            engine.shutdown()
        if sink is not None:
            sink.close()
    dist.destroy_process_group()


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
