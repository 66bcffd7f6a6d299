"""The actor (and PPO's critic): megatron-core GPTModel (BF16 params, FP32 Adam main weights), DDP, pipeline
schedules.

One instance per model per torchrun rank. `compute_log_probs` is Miles' `compute_log_prob` pass (forward only, the
old-policy log-probs of the sampled tokens); `train` runs one optimizer step per mini-batch with the GRPO/PPO policy
loss; `hf_tensors_on_rank0` gathers this step's BF16 weights from every PP/EP rank under Hugging Face names. The
critic (`value_head=True`) is the same model with its LM head replaced by hidden -> 1, as Miles builds it
(`LinearForLastLayer`): `compute_values`, and `train` with the clipped value loss. Call
`cpu_shims.apply_megatron_shims()` before constructing either.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from executor.backends.local.cpu_shims import needs_cpu_shims
from executor.backends.local.grpo import grpo_sample_losses, value_sample_losses
from executor.backends.local.options import LocalOptions
from executor.backends.local.tiny_model import TinyArch, build_gpt_model, megatron_to_hf, transformer_config


@dataclass
class TrainBatch:
    """Samples of one step in this rank's data-parallel share; tokens right-padded to a common length."""

    tokens: torch.Tensor  # [n, seq] long
    prompt_lengths: list[int]
    response_lengths: list[int]
    advantages: list[float | torch.Tensor]  # GRPO: per sample; PPO: per response token (GAE)
    rollout_log_probs: list[torch.Tensor]
    old_log_probs: list[torch.Tensor] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    old_values: list[torch.Tensor] = field(default_factory=list)  # PPO: the critic's values before its update
    returns: list[torch.Tensor] = field(default_factory=list)  # PPO: GAE returns, the critic's targets

    def __len__(self) -> int:
        return self.tokens.shape[0]

    def subset(self, start: int, stop: int) -> TrainBatch:
        def cut(xs: list) -> list:
            return xs[start:stop] if xs else []

        return TrainBatch(self.tokens[start:stop], self.prompt_lengths[start:stop], self.response_lengths[start:stop],
                          self.advantages[start:stop], self.rollout_log_probs[start:stop], cut(self.old_log_probs),
                          cut(self.rewards), cut(self.old_values), cut(self.returns))


def response_log_probs(logits: torch.Tensor, batch: TrainBatch) -> list[torch.Tensor]:
    """Log-probs (fp32) of each sample's response tokens: logits at position t score token t+1."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    targets = batch.tokens[:, 1:].to(logits.device)
    token_logp = logp[:, :-1].gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return [
        token_logp[i, p - 1 : p - 1 + r]
        for i, (p, r) in enumerate(zip(batch.prompt_lengths, batch.response_lengths))
    ]


def response_values(values: torch.Tensor, batch: TrainBatch) -> list[torch.Tensor]:
    """The critic's values (fp32) at the positions that score each response token, as `response_log_probs`."""
    v = values.float().squeeze(-1)
    return [v[i, p - 1 : p - 1 + r] for i, (p, r) in enumerate(zip(batch.prompt_lengths, batch.response_lengths))]


class ValueHead(torch.nn.Module):
    """hidden -> 1 in place of the output layer, called as megatron calls it (Miles' LinearForLastLayer)."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(hidden, 1)

    def forward(self, hidden_states: torch.Tensor, weight: Any = None, runtime_gather_output: Any = None,
                ) -> tuple[torch.Tensor, None]:
        return self.linear(hidden_states), None


@dataclass
class MicroBatchTimes:
    forward_s: list[float] = field(default_factory=list)
    backward_s: list[float] = field(default_factory=list)


class _BackwardTimer:
    """Wraps megatron's `schedules.backward_step` to time each micro-batch backward (instrumentation only)."""

    def __init__(self) -> None:
        from megatron.core.pipeline_parallel import schedules

        self.schedules = schedules
        self.original = schedules.backward_step
        self.times: list[float] = []

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            out = self.original(*args, **kwargs)
            self.times.append(time.perf_counter() - t0)
            return out

        schedules.backward_step = timed


class Trainer:
    def __init__(
        self, arch: TinyArch, pp: int, ep: int, micro_batch: int, global_batch: int, options: LocalOptions,
        value_head: bool = False,
    ) -> None:
        from megatron.core import parallel_state as ps
        from megatron.core.distributed import (
            DistributedDataParallel,
            DistributedDataParallelConfig,
            finalize_model_grads,
        )
        from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
        from megatron.core.pipeline_parallel import get_forward_backward_func
        from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
        from megatron.core.transformer.module import Float16Module

        self.ps = ps
        self.arch = arch
        self.options = options
        self.micro_batch = micro_batch
        self.global_batch = global_batch
        self.value_head = value_head
        if not ps.model_parallel_is_initialized():  # the critic joins the actor's groups
            ps.initialize_model_parallel(tensor_model_parallel_size=1, pipeline_model_parallel_size=pp,
                                         expert_model_parallel_size=ep)
        model_parallel_cuda_manual_seed(options.seed + (1 if value_head else 0))
        torch.manual_seed(options.seed + (1 if value_head else 0))
        self.config = transformer_config(arch, pp, ep)
        # the schedules call this after the last backward: DP all-reduce of the grads (and the PP/MoE fix-ups)
        self.config.finalize_model_grads_func = finalize_model_grads
        model = build_gpt_model(arch, self.config, ps.is_pipeline_first_stage(), ps.is_pipeline_last_stage())
        if value_head and ps.is_pipeline_last_stage():
            model.output_layer = ValueHead(arch.hidden_size)
        self.device = torch.device("cpu") if needs_cpu_shims() else torch.device("cuda", torch.cuda.current_device())
        model = Float16Module(self.config, model).to(self.device)
        ddp_config = DistributedDataParallelConfig(grad_reduce_in_fp32=True, use_distributed_optimizer=False)
        self.model = DistributedDataParallel(self.config, ddp_config, model)
        self.optimizer = get_megatron_optimizer(
            OptimizerConfig(optimizer="adam", lr=(options.critic_lr or options.lr) if value_head else options.lr,
                            bf16=True, clip_grad=options.clip_grad,
                            weight_decay=options.weight_decay, adam_beta1=options.adam_beta1,
                            adam_beta2=options.adam_beta2),
            [self.model],
        )
        self.forward_backward = get_forward_backward_func()
        self.dp_size = ps.get_data_parallel_world_size()
        self.dp_rank = ps.get_data_parallel_rank()
        self.ep_rank = ps.get_expert_model_parallel_rank()
        self.ep_size = ps.get_expert_model_parallel_world_size()
        self.is_last_stage = ps.is_pipeline_last_stage()
        self.backward_timer = _BackwardTimer()

    # ------------------------------------------------------------------ helpers

    def _micro_batches(self, batch: TrainBatch) -> list[TrainBatch]:
        return [batch.subset(i, i + self.micro_batch) for i in range(0, len(batch), self.micro_batch)]

    def _run(
        self, batch: TrainBatch, loss_fn_factory: Any, forward_only: bool, times: MicroBatchTimes
    ) -> list[dict[str, Any]]:
        micro = self._micro_batches(batch)
        seq = batch.tokens.shape[1]
        positions = torch.arange(seq, device=self.device).unsqueeze(0)
        it: Iterator[TrainBatch] = iter(micro)

        def forward_step(data_iterator: Iterator[TrainBatch], model: Any) -> tuple[torch.Tensor, Any]:
            mb = next(data_iterator)
            t0 = time.perf_counter()
            out = model(mb.tokens.to(self.device), positions.expand(len(mb), seq), None)
            times.forward_s.append(time.perf_counter() - t0)
            return out, loss_fn_factory(mb, len(micro))

        self.backward_timer.times = []
        result = self.forward_backward(
            forward_step_func=forward_step, data_iterator=it, model=[self.model], num_microbatches=len(micro),
            seq_length=seq, micro_batch_size=self.micro_batch, forward_only=forward_only,
        )
        times.backward_s.extend(self.backward_timer.times)
        return list(result or [])

    # ------------------------------------------------------------------ the two passes

    def _per_response(self, batch: TrainBatch, times: MicroBatchTimes,
                      pick: Any) -> list[torch.Tensor]:
        """A forward-only pass: `pick(output, micro_batch)` per micro-batch, one tensor per sample (filled on the last
        pipeline stage, empty elsewhere)."""

        def loss_fn_factory(mb: TrainBatch, _n: int) -> Any:
            def loss_fn(output: torch.Tensor) -> tuple[torch.Tensor, dict[str, Any]]:
                return output.new_zeros(()), {"rows": [x.detach().cpu() for x in pick(output, mb)]}

            return loss_fn

        self.model.eval()
        with torch.no_grad():
            out = self._run(batch, loss_fn_factory, forward_only=True, times=times)
        self.model.train()
        return [x for item in out for x in item["rows"]] if self.is_last_stage else []

    def compute_log_probs(self, batch: TrainBatch, times: MicroBatchTimes) -> list[torch.Tensor]:
        """Old-policy log-probs of the response tokens."""
        return self._per_response(batch, times, response_log_probs)

    def compute_values(self, batch: TrainBatch, times: MicroBatchTimes) -> list[torch.Tensor]:
        """The critic's values at the response positions."""
        return self._per_response(batch, times, response_values)

    def train(self, batch: TrainBatch, optimizer_steps: int, times: MicroBatchTimes) -> dict[str, float]:
        """`optimizer_steps` optimizer steps over equal mini-batches of `batch` (Miles num_steps_per_rollout): the
        policy loss for the actor, the clipped value loss for the critic."""
        opts = self.options

        def policy(out: torch.Tensor, mb: TrainBatch) -> tuple[torch.Tensor, dict[str, torch.Tensor], str]:
            dev = out.device
            loss_sum, stats = grpo_sample_losses(response_log_probs(out, mb), [t.to(dev) for t in mb.old_log_probs],
                                                 [t.to(dev) for t in mb.rollout_log_probs], mb.advantages,
                                                 opts.use_tis, opts.eps_clip, opts.eps_clip_high, opts.tis_clip)
            return loss_sum, stats, "pg_loss_sum"

        def value(out: torch.Tensor, mb: TrainBatch) -> tuple[torch.Tensor, dict[str, torch.Tensor], str]:
            loss_sum, stats = value_sample_losses(response_values(out, mb), mb.old_values, mb.returns,
                                                  opts.value_clip)
            return loss_sum, stats, "value_loss_sum"

        sample_losses = value if self.value_head else policy
        per_step = len(batch) // optimizer_steps
        sums: dict[str, float] = {}
        grad_norms: list[float] = []
        for k in range(optimizer_steps):
            mini = batch.subset(k * per_step, (k + 1) * per_step)
            samples_in_step = self.global_batch // optimizer_steps

            def loss_fn_factory(mb: TrainBatch, n_micro: int, samples_in_step: int = samples_in_step) -> Any:
                def loss_fn(output: torch.Tensor) -> tuple[torch.Tensor, dict[str, Any]]:
                    loss_sum, stats, name = sample_losses(output, mb)
                    # megatron divides by the micro-batch count and DDP averages over DP ranks: undo both, so the
                    # gradient is that of sum_of_sample_mean / samples in the optimizer step (Miles' normalization)
                    scale = n_micro * self.dp_size / samples_in_step
                    report = {k2: float(v) for k2, v in stats.items()}
                    report[name] = float(loss_sum.detach())
                    report["samples"] = float(len(mb))
                    return loss_sum * scale, report

                return loss_fn

            self.model.zero_grad_buffer()
            self.optimizer.zero_grad()
            out = self._run(mini, loss_fn_factory, forward_only=False, times=times)
            _ok, grad_norm, _zeros = self.optimizer.step()
            grad_norms.append(float(grad_norm) if grad_norm is not None else float("nan"))
            for item in out:
                for key, value in item.items():
                    sums[key] = sums.get(key, 0.0) + value
        samples = sums.pop("samples", 0.0)
        stats = {k: v / samples for k, v in sums.items()} if samples else {}
        stats["grad_norm"] = sum(grad_norms) / len(grad_norms)
        return stats

    # ------------------------------------------------------------------ weights for the rollout engine

    def hf_tensors_on_rank0(self) -> dict[str, torch.Tensor]:
        """This step's BF16 weights under Hugging Face names, gathered from all ranks onto global rank 0.

        Each rank converts its own shard (its pipeline stage's layers, its experts); replicas of the same
        tensor on other data-parallel ranks are not sent. Returns {} on ranks other than 0.
        """
        local = {}
        for name, tensor in megatron_to_hf(self.model, self.arch, self.ep_rank, self.ep_size):
            if ".experts." in name or self.dp_rank == 0:
                local[name] = tensor.to(torch.bfloat16).cpu().contiguous()
        gathered: list[Any] = [None] * dist.get_world_size() if dist.get_rank() == 0 else []
        dist.gather_object(local, gathered if dist.get_rank() == 0 else None, dst=0)
        if dist.get_rank() != 0:
            return {}
        merged: dict[str, torch.Tensor] = {}
        for part in gathered:
            merged.update(part)
        return merged

    def peak_rss_bytes(self) -> int:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def pack_samples(
    prompt_ids: list[list[int]], response_ids: list[list[int]], pad_id: int
) -> tuple[torch.Tensor, list[int], list[int]]:
    seqs = [p + r for p, r in zip(prompt_ids, response_ids, strict=True)]
    width = max(len(s) for s in seqs)
    tokens = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        tokens[i, : len(s)] = torch.tensor(s, dtype=torch.long)
    return tokens, [len(p) for p in prompt_ids], [len(r) for r in response_ids]

