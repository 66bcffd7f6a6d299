"""Miles train arguments for the rollout engine: the SGLang engine's shape and memory, where it runs (colocated or
on its own GPUs), and how the trained weights reach it."""

from __future__ import annotations

from executor.backends.miles import recipes as R
from executor.backends.miles.args_common import ArgGroup, fail, fmt
from executor.backends.miles.options import MilesOptions
from perfmodel.inputs.hardware import HardwareProfile
from perfmodel.inputs.job import RLSpec, RolloutSpec

MIB = 1024 * 1024


def check_engine(ro: RolloutSpec, src: str) -> None:
    if ro.dp > 1 and not ro.dp_attention:
        raise fail(src, "rl.rollout.dp_attention", "Miles requires SGLang DP attention when rollout dp > 1")


def sglang_args(ro: RolloutSpec, ctx: int, recipe: R.ModelRecipe, hw: HardwareProfile) -> ArgGroup:
    a = ["--rollout-num-gpus-per-engine", str(ro.engine_gpus),
         "--sglang-tp-size", str(ro.tp), "--sglang-dp-size", str(ro.dp), "--sglang-ep-size", str(ro.ep)]
    if ro.dp_attention:
        a += ["--sglang-enable-dp-attention"]
    a += ["--sglang-mem-fraction-static", fmt(ro.mem_fraction_static)]
    if ro.max_running_requests is not None:
        a += ["--sglang-max-running-requests", str(ro.max_running_requests)]
    if ro.max_total_tokens is not None:
        a += ["--sglang-max-total-tokens", str(ro.max_total_tokens)]
    if ro.kv_cache_dtype == "fp8":
        a += ["--sglang-kv-cache-dtype", "fp8_e4m3"]
    a += [x.replace("{ctx}", str(ctx)) for x in recipe.sglang_args]
    if hw.vendor == "amd":
        a += list(recipe.amd_sglang_args)
    a += list(recipe.router_args)
    return ArgGroup(a)


def weight_update_args(rl: RLSpec, opts: MilesOptions, src: str) -> ArgGroup:
    """Colocated engines or their own GPUs, the weight transfer mode, and its bucket size."""
    g = ArgGroup()
    if rl.placement == "colocated":
        g.args += ["--colocate"]
        if rl.weight_update.mode != "ipc":
            g.notes.append(f"weight_update.mode {rl.weight_update.mode}: Miles always updates colocated engines "
                           "from tensors (CUDA IPC)")
    else:
        g.args += ["--rollout-num-gpus", str(rl.rollout_gpus)]
        if rl.weight_update.mode in ("broadcast", "p2p"):  # p2p: RDMA writes (docs/advanced/p2p-weight-transfer.md)
            g.args += ["--update-weight-transfer-mode", rl.weight_update.mode]
        elif rl.weight_update.mode == "reshard":
            raise fail(src, "rl.weight_update.mode", "reshard is NeMo-RL's nccl_reshard; Miles transfers by "
                       "broadcast, p2p or disk")
        elif rl.weight_update.mode == "disk":
            if not (opts.update_weight_disk_dir and opts.update_weight_local_checkpoint_dir):
                raise fail(src, "executor.options.update_weight_disk_dir", "weight_update.mode disk (Miles "
                           "disk-delta) needs update_weight_disk_dir and update_weight_local_checkpoint_dir")
            g.args += ["--update-weight-transfer-mode", "disk-delta",
                       "--update-weight-disk-dir", opts.update_weight_disk_dir,
                       "--update-weight-local-checkpoint-dir", opts.update_weight_local_checkpoint_dir]
    g.args += ["--update-weight-buffer-size", str(int(round(rl.weight_update.bucket_mb * MIB)))]
    return g
