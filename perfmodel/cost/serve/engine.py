"""Cost of one SGLang engine (scheduler) forward, per GPU: prefill, decode step, KV-cache reads, engine
collectives, and the engine's geometry (attention TP/DP, EP). `perfmodel.sim.rollout` runs engines over time with
these costs. See that module's docstring for what is modelled; the constants below carry their sources.

Where it prices what training also prices, it goes through the same path: GEMMs through
`perfmodel.cost.compute.gemm_roofline_s`, EP dispatch through `perfmodel.cost.dispatch`, parameters by role through
`perfmodel.cost.params`. It keeps two named choices of its own (decode GEMMs at the large-GEMM rate without the
curve, `ROLLOUT_DISPATCH`) so predictions stay as measured; switching them is a model change.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Literal

from perfmodel.cost.comm import graph_all_reduce_s, placement_from_stride
from perfmodel.cost.compute import (
    KERNEL_OVERHEAD_S,
    activation_quant_time_s,
    engine_gemm_rate,
    gemm_rate,
    grouped_gemm_time_s,
    hbm_rate,
    roofline_s,
    softmax_exp_s,
)
from perfmodel.cost.dispatch import Dispatch, dispatch_s
from perfmodel.cost.dtypes import FP8_BLOCK, FP8_BLOCK_WEIGHT_BYTES
from perfmodel.cost.memory.rollout import engine_reserved_bytes, engine_static_bytes, rollout_memory
from perfmodel.cost.params import params_by_role
from perfmodel.cost.serve.decode_kernels import (
    DSV4_DECODE_KERNELS_PER_LAYER,
    GQA_DENSE_DECODE_KERNELS_PER_LAYER,
    MLA_EXTRA_DECODE_KERNELS_PER_LAYER,
    MOE_EXTRA_DECODE_KERNELS_PER_LAYER,
    QUANTIZED_ATTENTION_INPUTS,
    dense_gemm_calls,
)
from perfmodel.errors import InputError
from perfmodel.inputs.hardware import HardwareProfile
from perfmodel.inputs.model_spec import AttentionSpec
from perfmodel.inputs.scenario import Scenario

# ---------------------------------------------------------------------------------------------------------------
# Named constants (each with its source). Calibratable ones are the defaults of `RolloutParams`.

ROLLOUT_DISPATCH = "alltoall"
"""The engine's EP all-to-all sends one copy per (token, expert) pair (SGLang's EP MoE all-to-all), not the
DeepEP-style deduplicated dispatch training can choose; switching is a model change (issue on software stacks)."""

KERNEL_FLOOR_S = KERNEL_OVERHEAD_S
"""Fixed GPU time of one kernel (launch, ramp, tail): `perfmodel.cost.compute.KERNEL_OVERHEAD_S`, AMD-AGI/Primus
projection `kernel_launch_latency` 2.8 us (docs/reference/hardware.md S4), the number the hardware profiles also use
for the GEMM half-efficiency point. Cross-check:
sgl-project/sglang issue #29960 (DSV4-Flash decode, 2 x RTX PRO 6000, TP2) reports a 12.0 ms GPU span for a graph of
2,876 nodes whose weight reads take about 3 ms, i.e. about 3 us per node."""

DEFAULT_RESPONSE_SIGMA = 1.0
"""Assumption: log-space standard deviation of the response-length law when `truncated_fraction` is not given. It
gives a long tail; with the DAPO-Math GB300 case (mean 3020 of a 4096 cap) it puts 46% of the responses at the cap,
near the 55-60% truncation the AMD Miles DSV4 blog reports for DAPO-Math at a 4K cap
(docs/reference/dsv4-flash-and-miles.md section 2.1)."""

SGLANG_DEFAULT_MAX_RUNNING_REQUESTS = 2048
"""SGLang ModelRunner: without --max-running-requests, max_num_reqs = clamp(pool tokens / context_len x 512, 2048,
4096) per scheduler (DP worker); the lower clamp 2048 is used (it never binds at RL batch sizes)."""

SGLANG_CHUNKED_PREFILL_TOKENS = 8192
"""SGLang --chunked-prefill-size default for large-memory GPUs (the Miles DSV4 docs use 8192 as well)."""

MILES_SERVER_CONCURRENCY_PER_ENGINE = 512
"""slime / Miles `--sglang-server-concurrency` default 512; the client semaphore is that x number of engines
(`GenerateState`: sglang_server_concurrency * rollout_num_gpus // rollout_num_gpus_per_engine)."""

@dataclass(frozen=True, slots=True)
class RolloutParams:
    """Calibratable rollout parameters (named, documented defaults)."""

    kernel_floor_s: float = KERNEL_FLOOR_S
    decode_kernels_per_layer: float | None = None  # None: by attention kind (DSV4 67, MLA/GQA counted)
    decode_host_overhead_s: float = 0.0
    """CPU time per decode step not hidden by the device: the stack's `rollout_decode_host_s` (stacks/default.yaml:
    0, SGLang's overlap scheduler hides it on a GPU)."""
    prefill_host_overhead_s: float = 5.0e-3
    """Python scheduling of a prefill batch: the stack's `rollout_prefill_host_s` (stacks/default.yaml)."""
    prefill_kernel_host_s: float = 0.0
    """Host time to issue one kernel of an eager prefill forward (the stack's `rollout_prefill_kernel_host_s`, x the
    host CPU's `host_op_time_factor`): a forward without a CUDA graph takes at least its kernels' issue time."""
    chunked_prefill_tokens: int = SGLANG_CHUNKED_PREFILL_TOKENS
    client_concurrency_per_engine: int = MILES_SERVER_CONCURRENCY_PER_ENGINE
    client_concurrency: int | None = None  # all engines together, overriding the above (a serving benchmark)
    router: Literal["round_robin", "least_loaded"] = "round_robin"
    kv_admission: Literal["actual", "max"] = "actual"
    response_sigma: float = DEFAULT_RESPONSE_SIGMA
    moe_all_to_all: bool | None = None  # None: all-to-all with DP-attention, all-reduce (SGLang EP MoE) without


def rollout_params_for(scn: Scenario) -> RolloutParams:
    """The rollout parameters a scenario's stack states (its host time per decode step and per prefill)."""
    return RolloutParams(decode_host_overhead_s=scn.stack.rollout_decode_host_s,
                         prefill_host_overhead_s=scn.stack.rollout_prefill_host_s,
                         prefill_kernel_host_s=scn.stack.rollout_prefill_kernel_host_s
                         * scn.hardware.host_op_time_factor)


# ---------------------------------------------------------------------------------------------------------------
# Engine geometry and the cost of one forward


@dataclass(frozen=True, slots=True)
class EngineGeometry:
    n_engines: int  # SGLang servers
    replicas_per_engine: int  # dp schedulers per server without DP-attention
    n_units: int  # simulated schedulers ("engines" in the result)
    unit_gpus: int  # GPUs of one scheduler (= tp)
    attn_tp: int
    attn_dp: int
    ep: int
    moe_tp: int
    moe_all_to_all: bool


def engine_geometry(scn: Scenario, params: RolloutParams | None = None) -> EngineGeometry:
    rl = rl_section(scn)
    ro = rl.rollout
    n_engines = rl.rollout_gpus // ro.engine_gpus
    if scn.stack.rollout_max_engines:  # a stack that serves the run with fewer engines than the GPUs allow
        n_engines = min(n_engines, scn.stack.rollout_max_engines)
    if ro.dp_attention:
        reps, unit, attn_dp = 1, ro.tp, ro.dp
    else:
        reps, unit, attn_dp = ro.dp, ro.tp, 1
    attn_tp = max(1, unit // attn_dp)
    ep = math.gcd(ro.ep, unit) if ro.ep > 1 else 1
    a2a = (params.moe_all_to_all if params and params.moe_all_to_all is not None else ro.dp_attention) and ep > 1
    return EngineGeometry(n_engines, reps, n_engines * reps, unit, attn_tp, attn_dp, ep, unit // ep, a2a)


def rl_section(scn: Scenario):
    if scn.run.rl is None:
        raise InputError("", "rl", "simulate_rollout needs an rl: section (kind: rl)")
    return scn.run.rl


def _wbytes(precision: str) -> float:
    """Bytes per weight at the rollout GEMM precision; FP8 carries one FP32 scale per 128x128 block."""
    return FP8_BLOCK_WEIGHT_BYTES if precision == "fp8" else 2.0


def _kv_elem_bytes(dtype: str) -> float:
    return 1.0 if dtype == "fp8" else 2.0


def _latent_entry_bytes(dims: int, rope: int, dtype: str) -> float:
    """One latent KV entry (MLA / DSV4): FP8 stores the non-RoPE part in FP8 with an FP32 scale per 128 elements and
    the RoPE part in BF16 (FlashMLA FP8 KV layout); BF16 stores everything in BF16."""
    if dtype != "fp8":
        return 2.0 * (dims + rope) if rope and dims else 2.0 * max(dims, rope)
    return dims + 2.0 * rope + 4.0 * math.ceil(dims / FP8_BLOCK)


@dataclass(frozen=True, slots=True)
class KVComponent:
    """Per request and per GPU: `min(ctx / ratio, cap)` KV entries read per decode step, each costing `time_s`
    (roofline of its bytes and FLOPs), and `flops` and `scores` per query token in prefill. (What the pool *holds*
    - all C4 entries, not the top-k read - comes from `perfmodel.cost.memory.rollout`.)"""

    ratio: float
    cap: float  # entries read per decode step saturate here (math.inf when unbounded)
    time_s: float  # summed over the layers that share (ratio, cap)
    flops: float
    label: str
    scores: float = 0.0  # softmax scores (query heads) per query token and entry in prefill: one exponential each


@dataclass(frozen=True, slots=True)
class EngineRates:
    """The rates an engine forward runs at on one GPU (before the stack's calibration scale)."""

    hbm_bytes_per_s: float
    gemm_flops_per_s: float  # DECODE_GEMM_CURVE off: the large-GEMM rate, no shape factor (floors price launches)
    attn_flops_per_s: float  # attention math in BF16, flash-style, below the GEMM rate (perfmodel.cost.compute)


def engine_recipe(precision: str) -> str:
    """The GEMM recipe of a rollout precision: SGLang's FP8 rollout is block-scaled (FP8_BLOCK, as the checkpoints
    Miles and the executor write)."""
    return "fp8_block" if precision == "fp8" else "bf16"


def engine_rates(hw: HardwareProfile, precision: str, scale: float = 1.0) -> EngineRates:
    return EngineRates(hbm_rate(hw) / scale, engine_gemm_rate(hw, engine_recipe(precision)) / scale,
                       gemm_rate(hw, "bf16", None, shape_factor=False) * hw.attention_fwd_rel_efficiency / scale)


def gqa_kv_entry(head_dim: int, kv_heads_per_gpu: float, heads_per_gpu: float, kv_dtype: str) -> tuple[float, float]:
    """(bytes, FLOPs) one decode query spends per cached token of a GQA/MHA layer: K and V read, QK and PV."""
    return 2.0 * head_dim * kv_heads_per_gpu * _kv_elem_bytes(kv_dtype), 4.0 * heads_per_gpu * head_dim


def decode_kv_heads(a: AttentionSpec, attn_tp: int) -> float:
    """KV heads a decode kernel walks per request on one GPU: GQA/MHA's (replicated below one per GPU), one latent
    head for MLA and DSV4 (every query head reads it)."""
    return max(1.0, a.num_kv_heads / attn_tp) if a.kind == "gqa" else 1.0


def experts_hit(experts: int, top_k: int, tokens: float) -> float:
    """Expected distinct experts hit when `tokens` tokens each route top-k of `experts` (uniform)."""
    if not experts:
        return 0.0
    return experts * (1.0 - (1.0 - top_k / experts) ** tokens)


def expert_rows(tokens: float, top_k: int, experts: int, ep: int) -> tuple[float, float, float]:
    """One engine GPU's share of an MoE layer: its expert rows (`tokens` x top-k over `ep` ranks), the experts
    they hit (uniform top-k, the rank's share) and its local experts."""
    return tokens * top_k / ep, experts_hit(experts, top_k, tokens) / ep, experts / ep


def expert_layer_s(hw: HardwareProfile, tokens: float, top_k: int, experts: int, ep: int, hidden: int,
                   intermediate: float, gated: bool, dtype: str, balanced: bool = False) -> float:
    """One MoE layer's gate-up and down grouped GEMMs on one engine GPU: `tokens` x top-k rows spread over `ep`
    ranks, reaching the experts they hit (uniform top-k), each expert [hidden, intermediate] on this GPU; each row
    routed at random (`balanced`: evenly over the hit experts, as a balanced benchmark routes them)."""
    if tokens <= 0:
        return 0.0
    rows, hit, local = expert_rows(tokens, top_k, experts, ep)
    up = 2.0 * intermediate if gated else intermediate
    local = 0.0 if balanced else local
    return (grouped_gemm_time_s(hw, rows, hit, up, hidden, dtype, engine=True, experts=local)
            + grouped_gemm_time_s(hw, rows, hit, hidden, intermediate, dtype, engine=True, experts=local))


class EngineCost:
    """Per-GPU cost of one engine (scheduler) forward. Built once per scenario; `decode_base(B)` is cached."""

    def __init__(self, scn: Scenario, params: RolloutParams | None = None) -> None:
        self.params = p = params or rollout_params_for(scn)
        self.hw = hw = scn.hardware
        self.model = m = scn.model
        rl = rl_section(scn)
        ro = rl.rollout
        self.geo = g = engine_geometry(scn, p)
        self.precision = ro.precision
        self.kv_dtype = ro.kv_cache_dtype or "bf16"  # SGLang kv_cache_dtype auto = the activation dtype (BF16)
        # the stack's multiplier on the engine's forwards (1.0 unless calibrated): every rate a forward runs at
        self.compute_scale = scale = scn.stack.rollout_compute_scale
        self.request_host_s = scn.stack.rollout_request_host_s  # once per request (admission, prefill)
        self.token_host_s = scn.stack.rollout_token_host_s  # per request per decode step
        rates = engine_rates(hw, ro.precision, scale)
        self.bw, self.peak_gemm, self.peak_attn = rates.hbm_bytes_per_s, rates.gemm_flops_per_s, rates.attn_flops_per_s
        # engine groups on consecutive GPUs: attention TP, the whole engine (MoE all-reduce), EP (stride moe_tp)
        self.attn_group = placement_from_stride(hw, g.attn_tp, 1)
        self.unit_group = placement_from_stride(hw, g.unit_gpus, 1)
        self.ep_group = placement_from_stride(hw, g.ep, g.moe_tp)
        wq = _wbytes(ro.precision)
        d = m.hidden_size

        # Parameters by role. Quantized linears (attention projections, experts, shared experts, dense MLPs) are at
        # the rollout precision; router and LM head BF16; mHC mixers and norms FP32/BF16 (as in the FP8 checkpoint).
        r = params_by_role(m)
        attn, shared, dense_mlp, router, small = r.attention, r.shared_experts, r.dense_mlp, r.router, r.small_bytes
        self.n_moe, self.num_experts, self.top_k = r.moe_layers, r.num_experts, r.top_k
        self.n_layers = len(m.layers)
        head = m.vocab_size * d
        u = g.unit_gpus
        # Bytes every decode step reads per GPU, whatever the batch.
        self.dense_bytes = (attn * wq / g.attn_tp + (shared + dense_mlp) * wq / u + router * 2.0
                            + head * 2.0 / u + small)
        self.dense_flops_per_token = 2.0 * (attn + shared + dense_mlp + router + head) / u
        moe = next((layer.ffn for layer in m.layers if layer.ffn.kind == "moe"), None)
        # one expert's GEMMs on one GPU: gate-up [h, 2i or i] and down [i, h], its intermediate split moe_tp ways
        self.expert_shape = (moe.hidden_size, moe.expert_intermediate_size / g.moe_tp, moe.gated) if moe else None
        self.grouped_dtype = "fp8" if ro.precision == "fp8" else "bf16"
        mem = rollout_memory(scn)
        self.weights_bytes_per_gpu = mem.weights_bytes
        self.kv_bytes_per_token = mem.kv_bytes_per_token
        self.kv_bytes_per_request_fixed = mem.kv_bytes_per_request_fixed
        ds = m.layers[0].attention
        self.kernels_per_layer = p.decode_kernels_per_layer or (
            DSV4_DECODE_KERNELS_PER_LAYER if ds.kind == "dsv4"
            else GQA_DENSE_DECODE_KERNELS_PER_LAYER + MLA_EXTRA_DECODE_KERNELS_PER_LAYER * (ds.kind == "mla")
            + MOE_EXTRA_DECODE_KERNELS_PER_LAYER * (self.n_moe > 0))
        self.components = self._kv_components()
        # per request per decode step: each attention layer's fixed time per KV head (its work item: one latent
        # head for MLA and DSV4) and per query head on the GPU (attention DP ranks split the requests), whatever
        # the context
        query_heads = sum(layer.attention.num_heads / g.attn_tp for layer in m.layers) / g.attn_dp
        kv_heads = sum(decode_kv_heads(layer.attention, g.attn_tp) for layer in m.layers) / g.attn_dp
        self.attn_query_s = (query_heads * hw.attention_decode_query_head_s
                             + kv_heads * hw.attention_decode_kv_head_s) * scale
        self.prefill_query_s = query_heads * hw.attention_prefill_query_head_s * scale  # per prompt token
        # FP8: the activations of each quantized dense linear pass through a quantize kernel first (its floor and
        # bytes: activation_quant_time_s), taken at the hidden size (the down projection's is larger: a floor)
        self.recipe = engine_recipe(ro.precision)
        # a release's measured ROCm FP8 dense GEMM calls (aiter's), less the floors floor_s counts for them
        call_s = scn.stack.rollout_rocm_dense_gemm_call_s if ro.precision == "fp8" and hw.vendor == "amd" else 0.0
        self.dense_gemm_measured_s = dense_gemm_calls(m) * max(0.0, call_s - p.kernel_floor_s) * scale
        self.quantized_inputs = sum(
            QUANTIZED_ATTENTION_INPUTS.get(layer.attention.kind, 2)
            + 2 * (layer.ffn.kind != "moe" or bool(layer.ffn.num_shared_experts)) for layer in m.layers)

        held, static = engine_reserved_bytes(scn), engine_static_bytes(scn)
        pool = static - self.weights_bytes_per_gpu - held
        if pool <= 0:
            raise InputError("", "rl.rollout.mem_fraction_static",
                             f"the rollout weights ({self.weights_bytes_per_gpu / 2**30:.1f} GiB per GPU at "
                             f"{ro.precision})" + (f" and the sampler's {held / 2**30:.1f} GiB" if held else "")
                             + f" do not fit in the engine's {static / 2**30:.1f} GiB ({ro.mem_fraction_static} of "
                             f"{hw.hbm_bytes / 2**30:.0f} GiB); use more GPUs per engine or a larger "
                             "mem_fraction_static")
        self.kv_pool_bytes = pool * g.attn_dp  # per unit, in per-GPU footprint units (one pool per attention rank)
        self.max_total_tokens = ro.max_total_tokens or math.inf
        self.max_running = ro.max_running_requests or SGLANG_DEFAULT_MAX_RUNNING_REQUESTS * g.attn_dp
        self._base_cache: dict[int, float] = {}

    # -- KV layout ------------------------------------------------------------------------------------------------
    def _kv_components(self) -> tuple[KVComponent, ...]:
        g, kvd = self.geo, self.kv_dtype
        acc: dict[tuple[float, float, str], list[float]] = {}

        def add(ratio: float, cap: float, bytes_: float, flops: float, label: str, scores: float = 0.0) -> None:
            t = roofline_s(bytes_, self.bw, flops, self.peak_attn) / g.attn_dp  # balanced over attention ranks
            slot = acc.setdefault((ratio, cap, label), [0.0, 0.0, 0.0])
            slot[0] += t
            slot[1] += flops / g.attn_dp
            slot[2] += scores / g.attn_dp

        for layer in self.model.layers:
            a = layer.attention
            hpr = a.num_heads / g.attn_tp  # query heads per GPU
            if a.kind == "dsv4":
                rope = a.qk_rope_head_dim
                e = _latent_entry_bytes(a.head_dim - rope, rope, kvd)
                fl = 4.0 * hpr * a.head_dim  # QK and PV over the 512-dim latent
                add(1.0, float(a.sliding_window), e, fl, "swa", hpr)
                if a.compress_ratio == 4:
                    add(4.0, float(a.index_topk), e, fl, "c4", hpr)  # reads the top-k of the ctx/4 entries
                    # Lightning indexer: one FP8 key of index_head_dim (+ FP32 scale) per compressed entry, scored by
                    # all index heads (kept whole on every TP rank).
                    ie = a.index_head_dim * _kv_elem_bytes(kvd) + (4.0 if kvd == "fp8" else 0.0)
                    add(4.0, math.inf, ie, 2.0 * a.index_n_heads * a.index_head_dim, "c4-indexer")
                elif a.compress_ratio:
                    add(float(a.compress_ratio), math.inf, e, fl, f"c{a.compress_ratio}", hpr)
            elif a.kind == "mla":
                c, rope = a.kv_lora_rank, a.qk_rope_head_dim
                e = _latent_entry_bytes(c, rope, kvd)
                add(1.0, math.inf, e, 2.0 * hpr * (c + rope + c), "mla", hpr)
            else:
                e, fl = gqa_kv_entry(a.head_dim, decode_kv_heads(a, g.attn_tp), hpr, kvd)
                cap = float(a.sliding_window) if a.sliding_window else math.inf
                add(1.0, cap, e, fl, "swa" if a.sliding_window else "full", hpr)
        return tuple(KVComponent(r, c, v[0], v[1], lab, v[2]) for (r, c, lab), v in acc.items())

    def kv_bytes(self, ctx: float) -> float:
        """KV pool bytes (per GPU of its attention rank) a request of `ctx` tokens holds
        (perfmodel.cost.memory.rollout)."""
        return self.kv_bytes_per_request_fixed + self.kv_bytes_per_token * ctx

    def attn_time(self, ctx: float) -> float:
        """Decode attention time of one request at context `ctx` (per GPU, balanced over attention ranks)."""
        return sum(c.time_s * min(ctx / c.ratio, c.cap) for c in self.components)

    def comm_s(self, tokens: float) -> float:
        """Per forward: TP all-reduce of the attention output per layer; per MoE layer either the TP all-reduce of
        SGLang's EP MoE output or a dispatch (FP8) + combine (BF16) all-to-all over the EP group."""
        g, d, hw = self.geo, self.model.hidden_size, self.hw
        t_rank = tokens / g.attn_dp
        ar_attn = graph_all_reduce_s(hw, t_rank * d * 2.0, self.attn_group)  # SGLang's custom all-reduce
        t = self.n_layers * ar_attn + (self.n_layers - self.n_moe) * ar_attn  # + dense-FFN layers' all-reduce
        if self.n_moe:
            if g.moe_all_to_all:  # FP8 dispatch, BF16 combine of this GPU's share of the tokens
                share = tokens / g.unit_gpus
                t += self.n_moe * sum(
                    dispatch_s(hw, Dispatch(share, d, self.top_k, self.num_experts, elem, ROLLOUT_DISPATCH,
                                            combine), self.ep_group) for elem, combine in ((1.0, False), (2.0, True)))
            else:
                t += self.n_moe * graph_all_reduce_s(hw, tokens * d * 2.0, self.unit_group)
        return t

    # -- forward costs --------------------------------------------------------------------------------------------
    def experts_hit(self, tokens: float) -> float:
        """Expected distinct experts hit per MoE layer when `tokens` tokens each route top-k of E (uniform)."""
        return experts_hit(self.num_experts, self.top_k, tokens)

    def gemm_s(self, tokens: float) -> float:
        """Dense GEMMs (weights read once) and each MoE layer's grouped expert GEMMs of one forward over `tokens`,
        with the activation quantize kernels of an FP8 forward."""
        return self.dense_gemm_s(tokens) + self.n_moe * self.expert_layer_s(tokens) + self.quantize_s(tokens)

    def dense_gemm_s(self, tokens: float) -> float:
        """The dense GEMMs of one forward over `tokens`: their weights read once (a roofline), or the calls' measured
        time where the stack's release states one (`rollout_rocm_dense_gemm_call_s`), whichever is longer."""
        t = roofline_s(self.dense_bytes, self.bw, tokens * self.dense_flops_per_token, self.peak_gemm)
        return max(t, self.dense_gemm_measured_s)

    def quantize_s(self, tokens: float) -> float:
        """The FP8 forward's activation quantize kernels (0 in BF16), at the stack's rollout compute scale."""
        if not self.quantized_inputs:
            return 0.0
        one = activation_quant_time_s(self.hw, tokens, self.model.hidden_size, self.recipe)
        return self.quantized_inputs * one * self.compute_scale

    def expert_layer_s(self, tokens: float) -> float:
        """One MoE layer's gate-up and down grouped GEMMs on one GPU (cost/compute.py grouped_gemm_time_s, as
        training prices them): the unit's `tokens` x top-k rows spread over its EP ranks, reaching the experts they
        hit, at the stack's rollout compute scale."""
        if not self.expert_shape:
            return 0.0
        d, il, gated = self.expert_shape
        return expert_layer_s(self.hw, tokens, self.top_k, self.num_experts, self.geo.ep, d, il, gated,
                              self.grouped_dtype) * self.compute_scale

    def floor_s(self, prefill: bool = False) -> float:
        """The fixed time of one forward's kernels: per layer, its attention kernel's floor (the profile's decode
        or prefill attention floor) and every other kernel's (`kernel_floor_s`), less an MoE layer's two grouped
        GEMMs (expert_layer_s prices their fixed time)."""
        attention = self.hw.attention_prefill_floor_s if prefill else self.hw.attention_decode_floor_s
        per_layer = (self.kernels_per_layer - 1) * self.params.kernel_floor_s + attention
        grouped = 2 * self.n_moe * self.params.kernel_floor_s
        return (per_layer * self.n_layers - grouped) * self.compute_scale

    def decode_base(self, batch: int) -> float:
        """Decode step time without the KV term, for `batch` running requests."""
        t = self._base_cache.get(batch)
        if t is None:
            t = (self.gemm_s(batch) + self.comm_s(batch) + self.floor_s() + self.params.decode_host_overhead_s
                 + batch * (self.token_host_s + self.attn_query_s))
            self._base_cache[batch] = t
        return t

    def prefill_s(self, prompts: list[int]) -> float:
        """Prefill of the admitted prompts, in chunks of `chunked_prefill_tokens` (each a full forward). A forward
        runs eagerly (no CUDA graph): it takes the longer of its device time and its kernels' issue time on the
        host (`prefill_kernel_host_s` per kernel, x the stack's multiplier; the attention and the per-row time
        spread over the chunks by their tokens), then the batch's scheduling (`prefill_host_overhead_s`)."""
        total = sum(prompts)
        if total <= 0:
            return 0.0
        # Causal attention over the prompt: sum_{x=1..p} min(x / r, cap) entries per component, compute-bound, and
        # the softmax's exponentials where they do not hide under the MMAs (cost/compute.py softmax_exp_s).
        flops = scores = 0.0
        counts = Counter(prompts)
        for c in self.components:
            for p_, mult in counts.items():
                if math.isinf(c.cap):
                    entries = mult * (p_ * (p_ + 1) / 2.0) / c.ratio
                else:
                    xs = min(p_, int(c.ratio * c.cap))
                    entries = mult * ((xs * (xs + 1) / 2.0) / c.ratio + (p_ - xs) * c.cap)
                flops += c.flops * entries
                scores += c.scores * entries
        attention = flops / self.peak_attn + softmax_exp_s(self.hw, scores) * self.compute_scale
        per_token = (attention + total * self.prefill_query_s) / total
        # the engine's multiplier scales the issue as it scales the kernels' floors (floor_s)
        issue = self.kernels_per_layer * self.n_layers * self.params.prefill_kernel_host_s * self.compute_scale
        chunk = max(1, self.params.chunked_prefill_tokens)
        t = len(prompts) * self.request_host_s
        left = total
        while left > 0:
            n = min(chunk, left)
            device = self.gemm_s(n) + self.comm_s(n) + self.floor_s(prefill=True) + n * per_token
            t += max(device, issue) + self.params.prefill_host_overhead_s
            left -= n
        return t

    def step_breakdown(self, batch: int, ctx: float) -> dict[str, float]:
        """One decode step of `batch` requests all at context `ctx`, by part (seconds)."""
        dense = self.dense_gemm_s(batch)
        quantize = self.quantize_s(batch)
        experts = self.gemm_s(batch) - dense - quantize
        out = {
            "dense_gemm_s": dense,
            "quantize_s": quantize,
            "expert_gemm_s": experts,
            "kv_attention_s": batch * self.attn_time(ctx),
            "attention_query_s": batch * self.attn_query_s,
            "comm_s": self.comm_s(batch),
            "kernel_floor_s": self.floor_s(),
            "host_s": self.params.decode_host_overhead_s + batch * self.token_host_s,
            "experts_hit_per_layer": self.experts_hit(batch),
        }
        out["total_s"] = sum(v for k, v in out.items() if k.endswith("_s"))
        return out


def decode_step_time_s(scn: Scenario, batch: int, context_tokens: float,
                       params: RolloutParams | None = None) -> dict[str, float]:
    """Breakdown of one decode step of `batch` requests at `context_tokens` each, on one rollout engine."""
    return EngineCost(scn, params).step_breakdown(batch, context_tokens)
