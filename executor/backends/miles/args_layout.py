"""Miles train arguments for parallelism and layout: what Megatron runs (TP/PP/CP/EP, the pipeline split, micro
batches, recompute, activation memory) and how many nodes and GPUs the actor takes."""

from __future__ import annotations

from collections.abc import Sequence

from executor.backends.miles import recipes as R
from executor.backends.miles.args_common import ArgGroup, fail
from executor.backends.miles.options import MilesOptions
from perfmodel.inputs.job import TrainSpec
from perfmodel.inputs.scenario import Scenario

# the schedules Megatron runs, and the flags that select them beyond the layout (vpp picks interleaved)
MEGATRON_SCHEDULES = {"1f1b": (), "interleaved": (), "combined-1f1b": ("--overlap-moe-expert-parallel-comm",)}


def check_trainer(t: TrainSpec, src: str) -> list[str]:
    """Refuse what Megatron in Miles does not run; the notes on what it runs differently."""
    if t.fsdp:
        raise fail(src, "train.fsdp", "the miles backend builds Megatron launches; fsdp is not supported")
    if t.resolved_schedule() not in MEGATRON_SCHEDULES:
        raise fail(src, "train.schedule", f"Megatron in Miles runs {', '.join(MEGATRON_SCHEDULES)}, not "
                   f"{t.resolved_schedule()}")
    if not t.distributed_optimizer:
        return ["train.distributed_optimizer is false, but Miles turns the distributed optimizer on for Adam"]
    return []


def parallelism_args(t: TrainSpec, sc: Scenario, ctx: int) -> ArgGroup:
    """Model parallel sizes, the MoE dispatcher, the pipeline split and the sequence length."""
    lay = t.layout
    g = ArgGroup(["--tensor-model-parallel-size", str(lay.tp)])
    if lay.tp > 1 and t.sequence_parallel:
        g.args += ["--sequence-parallel"]
    elif lay.tp > 1:
        g.notes.append("tp > 1 without train.sequence_parallel: Megatron MoE layers expect sequence parallelism")
    g.args += ["--pipeline-model-parallel-size", str(lay.pp),
               "--context-parallel-size", str(lay.cp),
               "--expert-model-parallel-size", str(lay.ep),
               "--expert-tensor-parallel-size", str(lay.etp)]
    if t.moe_dispatcher != "alltoall":  # megatron-core 0.16: the flex dispatcher with the DeepEP or Hybrid-EP backend
        g.args += ["--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend", t.moe_dispatcher]
    g.args += MEGATRON_SCHEDULES[t.resolved_schedule()]
    split_args, split_note = pipeline_split_args(sc.stage_layers, lay.pp, lay.vpp)
    g.args += split_args
    if t.microbatch_group_size_per_vp_stage is not None:
        g.args += ["--microbatch-group-size-per-virtual-pipeline-stage", str(t.microbatch_group_size_per_vp_stage)]
    if sc.stack.attention_kernel == "materialized":  # TransformerEngine's unfused attention (scores through HBM)
        g.args += ["--attention-backend", "unfused"]
    g.notes.append(f"pipeline: {split_note} ({sc.split_note})")
    g.args += ["--seq-length", str(ctx)]
    return g


def memory_args(t: TrainSpec, opts: MilesOptions, recipe: R.ModelRecipe, src: str) -> ArgGroup:
    """Recompute, micro batches or token-budget (dynamic) batches, and the attention input format."""
    g = ArgGroup()
    if t.recompute == "full" and t.recompute_num_layers is not None:  # the first n layers of each chunk
        g.args += ["--recompute-granularity", "full", "--recompute-method", "block",
                   "--recompute-num-layers", str(t.recompute_num_layers)]
    elif t.recompute == "full":
        g.args += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    elif t.recompute == "selective":
        g.args += ["--recompute-granularity", "selective"]
        if t.recompute_modules is not None:
            g.args += ["--recompute-modules", *t.recompute_modules]
    if t.activation_offload_layers:  # megatron-core's activation offload: the first layers' activations to the host
        g.args += ["--cpu-offloading-num-layers", str(t.activation_offload_layers)]  # implies --cpu-offloading
    g.args += ["--micro-batch-size", str(t.micro_batch)]
    qkv = opts.qkv_format or recipe.qkv_format
    if t.max_tokens_per_gpu is not None:
        g.args += ["--max-tokens-per-gpu", str(t.max_tokens_per_gpu),
                   "--log-probs-max-tokens-per-gpu", str(opts.log_probs_max_tokens_per_gpu or t.max_tokens_per_gpu)]
    dyn = opts.dynamic_batch_size
    if dyn is None:
        dyn = t.max_tokens_per_gpu is not None and qkv != "bshd"
    if dyn:
        if t.max_tokens_per_gpu is None:
            raise fail(src, "executor.options.dynamic_batch_size", "needs train.max_tokens_per_gpu")
        if qkv == "bshd":
            raise fail(src, "executor.options.dynamic_batch_size", "Miles forbids dynamic batch size with "
                       "qkv_format bshd (the DeepSeek-V4 recipes' format); use micro batches or qkv_format thd")
        g.args += ["--use-dynamic-batch-size"]
    elif t.max_tokens_per_gpu is not None:
        g.notes.append(f"max_tokens_per_gpu {t.max_tokens_per_gpu} without --use-dynamic-batch-size "
                       f"(qkv_format {qkv}): Miles keeps micro_batch {t.micro_batch}")
    if qkv:
        g.args += ["--qkv-format", qkv]
    return g


def actor_placement_args(actor_gpus: int, gpus_per_node: int, src: str) -> ArgGroup:
    actor_nodes, actor_per_node = nodes(actor_gpus, gpus_per_node, src, "rl.actor_gpus", "actor_gpus")
    return ArgGroup(["--actor-num-nodes", str(actor_nodes), "--actor-num-gpus-per-node", str(actor_per_node),
                     "--num-gpus-per-node", str(gpus_per_node)])


def train_memory_margin_args(opts: MilesOptions, recipe: R.ModelRecipe) -> ArgGroup:
    """GPU memory Miles leaves free on the actor (the option, else the model recipe's, else Miles' default)."""
    margin = opts.train_memory_margin_bytes
    if margin is None:
        margin = recipe.train_memory_margin_bytes
    return ArgGroup(["--train-memory-margin-bytes", str(margin)] if margin is not None else [])


def pipeline_split_args(stage_layers: Sequence[int], pp: int, vpp: int) -> tuple[list[str], str]:
    """Megatron arguments that reproduce `stage_layers` (decoder layers per virtual stage, model order).

    vpp == 1: nothing for an even split; else `--decoder-first-pipeline-num-layers` and/or
    `--decoder-last-pipeline-num-layers` (Megatron spreads the rest evenly over the other stages), choosing the fewest
    flags that give exactly this split. vpp > 1: `--num-virtual-stages-per-pipeline-rank` for an even split. Any split
    these cannot express becomes `--pipeline-model-parallel-layout` (E = embedding, t = decoder layer, L = loss,
    | = next virtual stage in model order)."""
    s = list(stage_layers)
    if len(s) != pp * vpp:
        raise ValueError(f"{len(s)} stages for pp x vpp = {pp * vpp}")
    if pp == 1 and vpp == 1:
        return [], "no pipeline parallelism"
    even = len(set(s)) == 1
    if vpp == 1:
        if even:
            return [], f"even split, {s[0]} layers per stage"
        first, last, middle = s[0], s[-1], s[1:-1]
        if len(set(s[:-1])) == 1:
            return ["--decoder-last-pipeline-num-layers", str(last)], f"split {s}: last stage {last}"
        if len(set(s[1:])) == 1:
            return ["--decoder-first-pipeline-num-layers", str(first)], f"split {s}: first stage {first}"
        if len(set(middle)) <= 1:
            return (["--decoder-first-pipeline-num-layers", str(first),
                     "--decoder-last-pipeline-num-layers", str(last)],
                    f"split {s}: first {first}, last {last}")
    elif even:
        return ["--num-virtual-stages-per-pipeline-rank", str(vpp)], f"even split, {vpp} virtual stages per rank"
    layout = "|".join(("E" if i == 0 else "") + "t" * n + ("L" if i == len(s) - 1 else "") for i, n in enumerate(s))
    return ["--pipeline-model-parallel-layout", layout], f"split {s} as an explicit pipeline layout"


def nodes(gpus: int, per_node: int, source: str, field_: str, what: str) -> tuple[int, int]:
    """(nodes, GPUs per node) of a role: Miles places actors as whole nodes once they span more than one."""
    if gpus <= per_node:
        return 1, gpus
    if gpus % per_node:
        raise fail(source, field_, f"{what} ({gpus}) must be a multiple of the {per_node} GPUs per node when it spans "
                   "nodes (Miles places actors as nodes x GPUs per node)")
    return gpus // per_node, per_node
