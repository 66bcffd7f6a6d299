"""`executor align`: one batch of sequences through the rollout engine and through the trainer with the same
weights, each held against the FP32 reference (executor/align/compare.py), on this machine.

    session = AlignSession.start(plan_path, precision="fp8")       # trainer, engine, sequences
    result = session.compare()                                      # the table's rows, departures, gap
    session.compare(trainer_overrides={"hash_seed": 3})             # a trainer configured otherwise, same engine
    session.close()

The trainer is the local backend's megatron-core model (one rank: TP, PP and EP 1, whatever the plan's layout:
align compares arithmetic, not parallelism), built with the plan's seed, so its weights are a run's initial ones.
The engine serves them as the plan's rollout does (FP8: 128x128 blocks, or `fp8_block`); `rollout_overrides` change
the engine's model config and `trainer_overrides` the trainer's, to ask "what if one side were configured so".
"""

from __future__ import annotations

import json
import random
import socket
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from executor.align.capture import RolloutCapture, TrainerCapture
from executor.align.compare import AlignResult, compare
from executor.align.reference import Forward, Reference
from perfmodel.errors import InputError

OVERRIDABLE = ("sliding_window", "hash_seed", "hc_sinkhorn_iters", "num_hash_layers", "rms_norm_eps", "rope_theta")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _process_group() -> None:
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1)


def parse_overrides(items: list[str], flag: str) -> dict[str, Any]:
    """KEY=VALUE pairs (numbers as numbers) of the model config keys align lets one side change."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or key not in OVERRIDABLE:
            raise InputError(flag, item, f"give KEY=VALUE with KEY one of {', '.join(OVERRIDABLE)}")
        try:
            out[key] = json.loads(value)
        except ValueError:
            raise InputError(flag, item, "the value must be a number") from None
    return out


@dataclass
class AlignSession:
    plan_path: Path
    plan: Any
    precision: str
    fp8_block: int
    rollout_overrides: dict[str, Any]
    work_dir: Path
    sequences: list[torch.Tensor]
    engine: Any
    engine_tensors: dict[str, torch.Tensor]
    reference_tensors: dict[str, torch.Tensor]  # the rollout weights as the plan's recipe makes them
    trainer_tensors: dict[str, torch.Tensor]
    timings_s: dict[str, float] = field(default_factory=dict)

    @classmethod
    def start(cls, plan_path: str | Path, precision: str | None = None, tokens_file: str | Path | None = None,
              samples: int = 8, fp8_block: int = 128, rollout_overrides: dict[str, Any] | None = None,
              work_dir: str | Path | None = None) -> AlignSession:
        from executor.backends.local.cpu_shims import apply_megatron_shims

        apply_megatron_shims()
        from executor.backends.local.engine_processes import prestart as prestart_engine_processes
        from executor.backends.local.fp8 import BLOCK
        from executor.backends.local.options import LocalOptions
        from executor.backends.local.plan_check import check_plan
        from executor.backends.local.rollout import RolloutEngine
        from executor.backends.local.tiny_model import TinyArch, write_hf_checkpoint
        from executor.backends.local.weight_update import prepare_for_engine

        t0 = time.perf_counter()
        checked = check_plan(plan_path)
        plan = checked.plan
        engine_hf_config = {**plan.model.hf_config, **(rollout_overrides or {})}
        prestart_engine_processes((engine_hf_config.get("architectures") or ["LlamaForCausalLM"])[0])  # overlaps
        precision = precision or plan.rl.rollout.precision
        tokens = _read_tokens(tokens_file, plan.model.hf_config["vocab_size"]) if tokens_file else None
        work = Path(work_dir) if work_dir else Path(tempfile.mkdtemp(prefix="align-"))
        (work / "dumps").mkdir(parents=True, exist_ok=True)
        _process_group()
        arch = TinyArch.from_hf_config(plan.model.hf_config)
        trainer = _trainer(arch, plan, LocalOptions.model_validate(plan.executor.options))
        trainer_tensors = trainer.hf_tensors_on_rank0()
        engine_named, _, _ = prepare_for_engine(trainer_tensors, precision, block=fp8_block)
        reference_named, _, _ = prepare_for_engine(trainer_tensors, precision, block=BLOCK)
        engine_arch = TinyArch.from_hf_config(engine_hf_config)
        write_hf_checkpoint(work / "engine", engine_arch, dict(engine_named))
        t1 = time.perf_counter()
        import os

        os.environ["PERFMODEL_ALIGN_DUMP_DIR"] = str(work / "dumps")
        try:
            engine = RolloutEngine(work / "engine", plan.rl.rollout.max_total_tokens or 4096,
                                   plan.rl.rollout.max_running_requests, LocalOptions.model_validate(
                                       plan.executor.options).seed)
        finally:
            os.environ.pop("PERFMODEL_ALIGN_DUMP_DIR", None)
        t2 = time.perf_counter()
        session = cls(Path(plan_path), plan, precision, fp8_block, dict(rollout_overrides or {}), work, [], engine,
                      dict(engine_named), dict(reference_named), trainer_tensors)
        session.sequences = tokens if tokens is not None else session._sample(samples)
        session.timings_s = {"trainer_and_weights": t1 - t0, "engine_start": t2 - t1,
                             "sample": time.perf_counter() - t2}
        return session

    def _sample(self, n: int) -> list[torch.Tensor]:
        """Prompts of the plan's task, each with a response the engine samples (temperature 1)."""
        from executor.backends.local.options import LocalOptions
        from executor.backends.local.task import sample_prompts

        options = LocalOptions.model_validate(self.plan.executor.options)
        prompts = sample_prompts(options.task, random.Random(options.seed), n)
        gens = self.engine.generate([p.token_ids for p in prompts], self.plan.rl.response_tokens.max, 1.0)
        return [torch.tensor(p.token_ids + g.response_ids) for p, g in zip(prompts, gens, strict=True)]

    def compare(self, trainer_overrides: dict[str, Any] | None = None) -> AlignResult:
        """The sequences through the trainer (configured with `trainer_overrides`) and the engine, against the
        reference (the plan's configuration) on each side's weights."""
        from executor.backends.local.options import LocalOptions
        from executor.backends.local.tiny_model import TinyArch

        t0 = time.perf_counter()
        plan = self.plan
        arch = TinyArch.from_hf_config(plan.model.hf_config)
        trainer = _trainer(TinyArch.from_hf_config({**plan.model.hf_config, **(trainer_overrides or {})}), plan,
                           LocalOptions.model_validate(plan.executor.options))
        mine = trainer.hf_tensors_on_rank0()
        if any(not torch.equal(mine[k], v) for k, v in self.trainer_tensors.items()):
            raise RuntimeError("the trainer built for this comparison has other weights than the engine's")
        train_cap = TrainerCapture(trainer)
        roll_cap = RolloutCapture(self.engine, self.work_dir / "dumps")
        ref_train, ref_roll = Reference(arch, self.trainer_tensors), Reference(arch, self.reference_tensors)
        fw: dict[str, list[Forward]] = {"train": [], "roll": [], "ref_train": [], "ref_roll": []}
        for seq in self.sequences:
            fw["train"].append(train_cap.forward(seq))
            fw["roll"].append(roll_cap.forward(seq))
            fw["ref_train"].append(ref_train.forward(seq))
            fw["ref_roll"].append(ref_roll.forward(seq))
        result = compare(fw["train"], fw["roll"], fw["ref_train"], fw["ref_roll"], arch.num_hash_layers)
        self.timings_s["compare"] = time.perf_counter() - t0
        return result

    def close(self) -> None:
        self.engine.shutdown()


def _trainer(arch: Any, plan: Any, options: Any) -> Any:
    """The local backend's trainer on one rank, seeded as a run is (its weights: the run's initial ones)."""
    from executor.backends.local.trainer import Trainer

    return Trainer(arch, 1, 1, plan.train.micro_batch, plan.train.global_batch, options)


def _read_tokens(path: str | Path, vocab_size: int) -> list[torch.Tensor]:
    """A JSON list of token-id lists (each at least 2 tokens, every id below the vocabulary size)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise InputError(str(path), "--tokens", f"cannot read a JSON list of token-id lists: {err}") from None
    if not isinstance(data, list) or not data or not all(
            isinstance(s, list) and len(s) >= 2 and all(isinstance(t, int) and 0 <= t < vocab_size for t in s)
            for s in data):
        raise InputError(str(path), "--tokens", "expected a JSON list of token-id lists, each of 2 or more ids in "
                         f"0..{vocab_size - 1} (the model's vocabulary)")
    return [torch.tensor(s) for s in data]
