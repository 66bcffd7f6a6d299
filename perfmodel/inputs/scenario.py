"""Resolve a run against its model and hardware: check every layout rule, derive dp, the pipeline split and
the micro-batch count. A `Scenario` is what the simulators consume; building one is the last place input is
checked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from perfmodel.errors import InputError
from perfmodel.inputs.bounds import MAX_MICRO_BATCHES
from perfmodel.inputs.hardware import HardwareProfile, load_hardware
from perfmodel.inputs.model import ModelSpec, load_model, model_from_hf_config
from perfmodel.inputs.run import RunSpec
from perfmodel.inputs.stack import Stack, resolve_stack
from perfmodel.schedules import Schedule, schedule_class

if TYPE_CHECKING:
    from perfmodel.inputs.serve import ServeRun


@dataclass(frozen=True, slots=True)
class Scenario:
    hardware: HardwareProfile
    model: ModelSpec
    run: RunSpec | ServeRun  # a serve run: the engine alone (its `rl` is the engine section)
    dp: int
    expert_dp: int  # data-parallel replicas of each expert shard
    stage_layers: tuple[int, ...]  # decoder layers per virtual stage, in model order (len pp * vpp)
    split_note: str  # how the pipeline split was chosen, for people
    num_microbatches: int  # per DP rank and step (fixed micro-batching; see train.max_tokens_per_gpu)
    schedule: str
    stack: Stack = Stack(id="default", requested="")  # the software stack the scenario is priced with

    @property
    def train(self):
        return self.run.train

    @property
    def layout(self):
        return self.run.train.layout

    @property
    def schedule_type(self) -> type[Schedule]:
        """The schedule's class: its placement, in-flight activations and rules (perfmodel/schedules/)."""
        return schedule_class(self.schedule)


def balanced_split(num_layers: int, stages: int) -> tuple[int, ...]:
    """Most balanced split of decoder layers over virtual stages, counting the embedding (first stage) and the
    loss (last stage) as one layer each, as Megatron's account_for_{embedding,loss}_in_pipeline_split do.
    Surplus capacity is taken from the last stages first (DSV4 43 layers / PP4 -> 11, 11, 11, 10). The first and
    last stage may hold no decoder layer (only the embedding / the loss), as Megatron's pipeline layouts allow:
    Llama 3.1 405B's 126 layers fill PP16 x VPP8 = 128 virtual stages (Megatron-Bridge GB200 recipes)."""
    extra = [0] * stages
    extra[0] += 1
    extra[-1] += 1
    cost_cap = -(-(num_layers + 2) // stages)
    while sum(max(0, cost_cap - e) for e in extra) < num_layers:
        cost_cap += 1
    counts = [max(0, cost_cap - e) for e in extra]
    surplus = sum(counts) - num_layers
    while surplus > 0:
        top = max(c + e for c, e in zip(counts, extra))
        for i in range(stages - 1, -1, -1):
            if surplus and counts[i] + extra[i] == top and counts[i] > 1:
                counts[i] -= 1
                surplus -= 1
        if all(c <= 1 for c in counts):
            break
    if surplus > 0 or min(counts[1:-1], default=1) < 1:
        raise ValueError("cannot split")
    # Ties go to the even split: when the layers divide evenly and that is no worse once the embedding and loss
    # are counted, Megatron's default (L / stages each) is what runs, and it keeps the most decoder layers on one
    # stage lowest (80 layers on 40 stages: 2 each, not one stage of 3).
    if num_layers % stages == 0:
        even = num_layers // stages
        even_cost = even + (2 if stages == 1 else 1)
        if even_cost <= max(c + e for c, e in zip(counts, extra)):
            return (even,) * stages
    return tuple(counts)


def _fail(source: str, field: str, message: str) -> InputError:
    return InputError(source, field, message)


def resolve_model(run: RunSpec, source: str) -> ModelSpec:
    if run.model.id is not None:
        return load_model(run.model.id, source=source, field="model.id")
    return model_from_hf_config(run.model.hf_config or {}, model_id=run.model.label(), source=source)


def build_scenario(
    run: RunSpec | ServeRun,
    source: str = "",
    hardware: HardwareProfile | None = None,
    model: ModelSpec | None = None,
) -> Scenario:
    hw = (hardware or load_hardware(run.hardware, source=source)).with_options(run.hardware_options)
    m = model or resolve_model(run, source)
    stack = resolve_stack(run.stack, run.stack_options, source)
    if run.kind == "serve":
        return _serve_scenario(run, hw, m, stack, source)
    if run.rl is not None:
        _check_rl_gpus(run, m, source)
    dp, expert_dp = _check_layout(run, m, stack, source)
    check_moe_dispatchers((run.train.moe_dispatcher,), hw, source, "train.moe_dispatcher")
    schedule = run.train.resolved_schedule()
    split, note = _pipeline_split(run, m, schedule, source)
    m_count = _microbatches(run, dp, schedule, source)
    return Scenario(hw, m, run, dp, expert_dp, split, note, m_count, schedule, stack)


def _serve_scenario(run: ServeRun, hw: HardwareProfile, m: ModelSpec, stack: Stack, source: str) -> Scenario:
    """A serving benchmark: the engine alone (perfmodel/inputs/serve.py), no training layout to resolve."""
    from perfmodel.inputs.serve import VLLM_ROCM_ATTENTION_NOTE, serve_field

    try:
        _check_rl_gpus(run, m, source)
    except InputError as err:
        raise serve_field(err) from None
    s = run.serve
    if m.max_position_embeddings and s.input_tokens + s.output_tokens > m.max_position_embeddings:
        raise _fail(source, "serve.input_tokens", f"input + output = {s.input_tokens + s.output_tokens} tokens is "
                    f"longer than the model's context ({m.max_position_embeddings})")
    if stack.id.partition("@")[0] == "vllm" and hw.vendor == "amd":
        stack = stack.model_copy(update={"notes": (*stack.notes, VLLM_ROCM_ATTENTION_NOTE)})
    return Scenario(hw, m, run, 1, 1, (), "serving: no training", 0, "1f1b", stack)


def _check_rl_gpus(run: RunSpec, m: ModelSpec, source: str) -> None:
    """GPU accounting of an RL run and the rollout engine's shape."""
    rl = run.rl
    if rl.placement == "colocated":
        if rl.actor_gpus != run.gpus or rl.rollout_gpus != run.gpus:
            raise _fail(source, "rl.actor_gpus", f"colocated: actor_gpus ({rl.actor_gpus}) and rollout_gpus "
                        f"({rl.rollout_gpus}) must both equal gpus ({run.gpus})")
        if rl.async_:
            raise _fail(source, "rl.async", "async needs placement: disaggregated (colocated GPUs time-share)")
    else:
        if rl.actor_gpus + rl.rollout_gpus != run.gpus:
            raise _fail(source, "rl.rollout_gpus", f"disaggregated: actor_gpus + rollout_gpus "
                        f"({rl.actor_gpus} + {rl.rollout_gpus}) must equal gpus ({run.gpus})")
        if rl.weight_update.mode == "ipc":
            raise _fail(source, "rl.weight_update.mode", "ipc needs colocated placement; use broadcast, p2p or disk")
    if rl.placement == "colocated" and rl.weight_update.mode in ("p2p", "reshard"):
        raise _fail(source, "rl.weight_update.mode", f"{rl.weight_update.mode} (writes to other GPUs) needs "
                    "disaggregated placement; use ipc")
    ro = rl.rollout
    if rl.rollout_gpus % ro.engine_gpus:
        raise _fail(source, "rl.rollout.engine_gpus", f"rollout_gpus ({rl.rollout_gpus}) must be a multiple of "
                    f"engine_gpus ({ro.engine_gpus})")
    expected_engine = ro.tp * (1 if ro.dp_attention else ro.dp)
    if ro.engine_gpus != expected_engine:
        how = "tp" if ro.dp_attention else "tp x dp"
        raise _fail(source, "rl.rollout.engine_gpus", f"engine_gpus ({ro.engine_gpus}) must equal {how} "
                    f"({expected_engine}) of the SGLang engine")
    if ro.dp_attention and ro.tp % ro.dp:
        raise _fail(source, "rl.rollout.dp", f"with dp_attention, dp ({ro.dp}) must divide tp ({ro.tp})")
    if ro.ep > ro.engine_gpus or ro.engine_gpus % ro.ep:
        raise _fail(source, "rl.rollout.ep", f"ep ({ro.ep}) must divide engine_gpus ({ro.engine_gpus})")
    first = m.layers[0]
    n_exp = next((layer.ffn.num_experts for layer in m.layers if layer.ffn.kind == "moe"), 0)
    if n_exp:
        if n_exp % ro.ep:
            raise _fail(source, "rl.rollout.ep", f"{n_exp} experts are not divisible by rollout ep {ro.ep}")
    heads = first.attention.num_heads
    attn_tp = ro.tp // ro.dp if ro.dp_attention else ro.tp
    if heads % attn_tp:
        raise _fail(source, "rl.rollout.tp", f"{heads} attention heads are not divisible by the rollout "
                    f"attention TP {attn_tp}")



def _check_layout(run: RunSpec, m: ModelSpec, stack: Stack, source: str) -> tuple[int, int]:
    """The training layout against the GPUs and the model; returns (dp, expert_dp)."""
    t = run.train
    lay = t.layout
    f = "train.layout"
    gpus = run.train_gpus
    mp = lay.tp * lay.pp * lay.cp
    if gpus % mp:
        raise _fail(source, f"{f}", f"tp x pp x cp = {lay.tp} x {lay.pp} x {lay.cp} = {mp} does not divide the "
                    f"{gpus} training GPUs ({gpus} / {mp} = {gpus / mp:g})")
    dp = gpus // mp
    if lay.dp is not None and lay.dp != dp:
        raise _fail(source, f"{f}.dp", f"tp x pp x cp x dp = {lay.tp} x {lay.pp} x {lay.cp} x {lay.dp} = "
                    f"{mp * lay.dp} GPUs, but the run trains on {gpus}: dp must be {gpus} / {mp} = {dp} (or omit it)")

    attn = m.layers[0].attention
    if stack.attention_kernel == "materialized" and any(x.attention.kind != "gqa" for x in m.layers):
        field = "stack_options.attention_kernel" if run.stack_options and run.stack_options.attention_kernel \
            else "stack"
        raise _fail(source, field, f"materialized attention (stack {stack.id}) is priced for MHA/GQA layers only; "
                    f"{m.id or m.family} has {attn.kind} attention: use flash")
    if attn.num_heads % lay.tp:
        raise _fail(source, f"{f}.tp", f"{attn.num_heads} attention heads are not divisible by tp {lay.tp}")
    # A latent KV (MLA, DSV4's single KV head) is replicated across TP ranks: no divisibility rule.
    if attn.kind == "gqa" and attn.num_kv_heads % lay.tp and lay.tp % attn.num_kv_heads:
        raise _fail(source, f"{f}.tp", f"{attn.num_kv_heads} KV heads and tp {lay.tp}: one must divide the other")

    moe = [layer.ffn for layer in m.layers if layer.ffn.kind == "moe"]
    if moe:
        n_exp = moe[0].num_experts
        if n_exp % lay.ep:
            raise _fail(source, f"{f}.ep", f"{n_exp} experts are not divisible by ep {lay.ep}")
        if (lay.tp * lay.cp * dp) % (lay.ep * lay.etp):
            raise _fail(source, f"{f}.ep", f"ep x etp = {lay.ep * lay.etp} must divide tp x cp x dp = "
                        f"{lay.tp * lay.cp * dp} (the ranks of one pipeline stage)")
        expert_dp = lay.tp * lay.cp * dp // (lay.ep * lay.etp)
        if moe[0].expert_intermediate_size % lay.etp:
            raise _fail(source, f"{f}.etp", f"expert FFN size {moe[0].expert_intermediate_size} is not divisible by "
                        f"etp {lay.etp}")
    else:
        if lay.ep > 1 or lay.etp > 1:
            raise _fail(source, f"{f}.ep", f"{m.id or m.family} has no MoE layers; ep and etp must be 1")
        expert_dp = dp

    if t.activation_offload_layers:  # megatron-core TransformerConfig.__post_init__'s rules for cpu_offloading
        g = "train.activation_offload_layers"
        if lay.pp > 1:
            raise _fail(source, g, f"megatron-core offloads activations only without pipeline parallelism (pp "
                        f"{lay.pp}): use pp 1 or 0 offloaded layers")
        if t.recompute != "none":
            raise _fail(source, g, f"megatron-core does not offload activations with recompute ({t.recompute}): "
                        "use recompute none or 0 offloaded layers")
        if t.activation_offload_layers >= len(m.layers):
            raise _fail(source, g, f"{t.activation_offload_layers} of {len(m.layers)} layers: at most "
                        f"{len(m.layers) - 1} (megatron-core keeps at least one layer's activations on the GPU)")

    if t.recompute_modules is not None:
        check_recompute_modules(t.recompute_modules, m, source, "train.recompute_modules")
    if t.seq_len % (2 * lay.cp if lay.cp > 1 else 1):
        raise _fail(source, "train.seq_len", f"seq_len {t.seq_len} must be divisible by 2 x cp = {2 * lay.cp} "
                    "(load-balanced context parallel)")

    return dp, expert_dp


def check_moe_dispatchers(dispatchers: tuple[str, ...], hw: HardwareProfile, source: str, field: str) -> None:
    """NVIDIA's Hybrid-EP kernels run on NVIDIA GPUs only."""
    if "hybridep" in dispatchers and hw.vendor != "nvidia":
        raise _fail(source, field, f"hybridep: NVIDIA's Hybrid-EP kernels do not run on {hw.id}; use deepep "
                    "(Primus-Turbo DeepEP, MORI) or alltoall")


def check_recompute_modules(modules: tuple[str, ...], m: ModelSpec, source: str, field: str) -> None:
    """Each recompute submodule has something to replay in this model (megatron-core refuses mla_up_proj without
    MLA and moe_act without grouped-GEMM MoE; the others would be priced as doing nothing)."""
    kinds = {layer.attention.kind for layer in m.layers}
    ffns = [layer.ffn for layer in m.layers]
    has = {
        "core_attn": True,
        "mla_up_proj": bool(kinds & {"mla", "dsv4"}),
        "layernorm": any(any(layer.separate_norms()) for layer in m.layers),
        "mlp": any(f.kind == "dense" for f in ffns),
        "moe": any(f.kind == "moe" for f in ffns),
        "moe_act": any(f.kind == "moe" for f in ffns),
        "shared_experts": any(f.kind == "moe" and f.num_shared_experts for f in ffns),
    }
    what = {"mla_up_proj": "MLA attention", "layernorm": "a norm of its own (MLA attention or an MoE layer; "
            "TransformerEngine fuses the others into the next linear)", "mlp": "a dense MLP layer",
            "moe": "MoE layers", "moe_act": "MoE layers", "shared_experts": "shared experts"}
    for name in modules:
        if not has[name]:
            raise _fail(source, field, f"{name}: {m.id or m.family} has no {what[name]}, nothing to recompute; "
                        "remove it")


def _pipeline_split(run: RunSpec, m: ModelSpec, schedule: str, source: str) -> tuple[tuple[int, ...], str]:
    """Decoder layers per virtual stage, given or most balanced, and how they were chosen."""
    t = run.train
    lay = t.layout
    f = "train.layout"
    sched = schedule_class(schedule)
    bad = (sched.layout_error(lay.pp, lay.vpp, t.microbatch_group_size_per_vp_stage)
           or sched.run_error(lay.ep, t.recompute, t.recomputed_modules()))
    if bad:
        raise _fail(source, *bad)
    chunks = sched.chunks_per_rank(lay.vpp)  # DualPipe(V): two chunks per rank in a V, stages r and 2pp-1-r
    stages = lay.pp * chunks
    if t.pipeline_layers is not None:
        pl = tuple(t.pipeline_layers)
        if len(pl) != stages:
            what = "pp x vpp" if chunks == lay.vpp else f"{chunks} x pp for {schedule}"
            raise _fail(source, "train.pipeline_layers", f"needs {stages} entries ({what}), got {len(pl)}")
        if sum(pl) != m.num_layers:
            raise _fail(
                source, "train.pipeline_layers", f"entries sum to {sum(pl)}, the model has {m.num_layers} layers")
        if min(pl) < 1:
            raise _fail(source, "train.pipeline_layers", "every (virtual) stage needs at least one layer")
        split, note = pl, "given by train.pipeline_layers"
    else:
        if m.num_layers + 2 < stages:
            raise _fail(source, f"{f}.pp", f"{m.num_layers} layers (+ embedding and loss) cannot be split over "
                        f"pp x vpp = {stages} stages")
        try:
            split = balanced_split(m.num_layers, stages)
        except ValueError:
            raise _fail(source, f"{f}.pp", f"{m.num_layers} layers cannot leave every one of pp x vpp = {stages} "
                        "virtual stages a layer once the embedding and loss are counted") from None
        note = "most balanced (embedding and loss counted as a layer each): " + ",".join(map(str, split))

    return split, note


def _microbatches(run: RunSpec, dp: int, schedule: str, source: str) -> int:
    """Micro-batches per DP rank and optimizer step, checked against the schedule's framework."""
    t = run.train
    lay = t.layout
    # Micro-batches
    if t.max_tokens_per_gpu is None:
        per_rank = t.micro_batch * dp
        if t.global_batch % per_rank:
            raise _fail(source, "train.global_batch", f"global_batch {t.global_batch} is not divisible by "
                        f"micro_batch x dp = {t.micro_batch} x {dp}")
        m_count = t.global_batch // per_rank
    else:
        if t.global_batch % dp:
            raise _fail(source, "train.global_batch", f"global_batch {t.global_batch} is not divisible by dp {dp}")
        if t.max_tokens_per_gpu * lay.cp < t.seq_len and run.kind == "pretrain":
            raise _fail(source, "train.max_tokens_per_gpu", f"{t.max_tokens_per_gpu} x cp is below seq_len {t.seq_len}")
        m_count = max(1, t.global_batch // dp)  # upper bound; the simulator packs by tokens
    if m_count * lay.pp * lay.vpp > MAX_MICRO_BATCHES:  # each a simulated event per virtual stage
        raise _fail(source, "train.global_batch", f"{m_count:,} micro-batches per rank x {lay.pp * lay.vpp} virtual "
                    f"stages: at most {MAX_MICRO_BATCHES:,} are simulated (docs/reliability.md); raise micro_batch")
    # Fixed micro-batching fixes the count per optimizer step: the schedule's framework must run it (packed
    # micro-batches are padded to a runnable count by the simulator, as Miles does).
    if t.max_tokens_per_gpu is None:
        sched = schedule_class(schedule)
        why = sched.rule(lay.pp, m_count, t.microbatch_group_size_per_vp_stage)
        if why:
            fix = "change global_batch or micro_batch" + sched.rule_fix(lay.pp, m_count)
            raise _fail(source, "train.global_batch", f"{why} (global_batch {t.global_batch} / (micro_batch "
                        f"{t.micro_batch} x dp {dp}) = {m_count}); {fix}")

    return m_count
