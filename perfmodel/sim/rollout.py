"""SGLang rollout simulator: `simulate_rollout(scn, seed=0) -> RolloutResult`.

What is modelled
----------------
* **Engines.** `rollout_gpus / engine_gpus` SGLang engines. Without DP-attention an engine of `tp x dp` GPUs is `dp`
  independent TP replicas (SGLang's DP controller starts one scheduler per replica), so the simulated unit - called
  an *engine* below and in the result - is one scheduler of `tp` GPUs. With DP-attention an engine of `tp` GPUs is
  one unit whose attention runs `dp` ways (`tp/dp` GPUs per attention rank) and whose MoE sees the whole batch.
* **Requests.** `prompts_per_step x samples_per_prompt`, every prompt `round(prompt_tokens_mean)` tokens (only the
  mean is given), response lengths drawn from `response_lengths()` (a heavy-tailed, truncated law; see there).
  Seeded and deterministic.
* **Client and router.** Miles sends requests through a semaphore of `sglang_server_concurrency x engines`
  (default 512 per engine, slime/miles `GenerateState`), so for RL batch sizes every request is sent at t = 0; the
  router places each request on an engine by round robin (default) or least outstanding requests. SGLang-router's
  cache-aware policy (samples of a prompt sticking to one engine) is not modelled.
* **Continuous batching.** Each engine admits waiting requests in FIFO order (SGLang PrefillAdder stops at the first
  request that does not fit) while it has fewer than `max_running_requests` running and their KV fits: the pool is
  `HBM x mem_fraction_static - weights` per GPU (SGLang `profile_max_num_token`), capped by `max_total_tokens`
  (logical tokens). A request reserves its *final* footprint (prompt + its actual response): SGLang reserves an
  estimate (`new_token_ratio`) and retracts requests when the pool overflows; retraction and its recompute are NOT
  modelled, so admission against the true final footprint stands for "the pool is kept full, nothing is retracted".
  `RolloutParams.kv_admission = "max"` reserves prompt + max response instead (SGLang with conservativeness 1 and no
  ratio decay). Requests that do not fit wait (back-pressure).
* **Prefill.** Admitted requests are prefilled together (chunks of `chunked_prefill_tokens`), pausing decode, as
  SGLang does without mixed chunking. The prefill emits the first response token. Cost: GEMM FLOPs at the rollout
  precision (FP8 / BF16) and the weights read once, attention FLOPs (causal, DSV4 sliding window + compressed
  entries), TP all-reduce / EP all-to-all per layer, a kernel floor per kernel.
* **Decode step.** Per GPU, summed over sequential kernel groups, each a roofline `max(bytes / HBM, FLOPs / peak)`:
  dense weights (attention projections, shared experts, router, LM head, mHC), routed-expert weights of the experts
  the live batch hits - per MoE layer `E (1 - (1 - k/E)^B)` distinct experts for B tokens routing top-k of E -, the
  KV read (per request and layer: DSV4 sliding window of 128 raw tokens, C4 top-512 of ctx/4 entries + indexer keys
  of ctx/4, C128 ctx/128 entries; MLA latent; GQA heads), a TP all-reduce per layer (attention output; MoE output
  without DP-attention, SGLang's EP MoE) or EP dispatch + combine all-to-all per MoE layer (DP-attention / DeepEP),
  and a fixed per-step kernel floor (kernels per layer x layers x `kernel_floor_s`).
* **Speed.** Between two changes of an engine's batch (a request finishing or admitted, or a KV term saturating,
  e.g. a C4 layer reaching its top-512 cap) every decode step has the same batch, and the KV term grows linearly, so
  a whole segment of `n` steps costs `n (base(B) + A) + beta n (n - 1) / 2` in closed form. One simpy timeout per
  segment: the event count grows with requests (about 2 per request), not with tokens.

Not modelled. Would lengthen the rollout: retraction, CUDA-graph batch caps (batches above `cuda_graph_max_bs` run
eager), reward computation and Miles' own overhead between requests, R3 routing-replay copies, deterministic-mode
kernels, stragglers, load imbalance between experts (the hit formula assumes uniform routing) and between
DP-attention ranks (balanced). Would shorten it: speculative decoding (MTP/EAGLE), radix-cache prefix sharing
between the samples of a prompt (prefill is counted per sample; Miles disables the radix cache in the AMD
recipes).

Shared pieces: collectives from `perfmodel.cost.comm` (engine groups placed on consecutive GPUs), the kernel
overhead and flash-attention efficiency from `perfmodel.cost.compute`, weights per GPU and the KV footprint
(bytes per token + fixed bytes per request) from `perfmodel.memory.rollout_memory`. Decode GEMMs use the profile's
large-GEMM efficiency (`max_efficiency`) rather than the saturating curve, because the fixed cost of every kernel is
charged once, explicitly, by the per-step kernel floor.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter, deque
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal, NamedTuple

import numpy as np
import simpy

from perfmodel.cost.comm import all_reduce_s, all_to_all_s, placement_from_stride
from perfmodel.cost.compute import ATTENTION_FWD_REL_EFFICIENCY, KERNEL_OVERHEAD_S
from perfmodel.errors import InputError
from perfmodel.memory import rollout_memory
from perfmodel.sim.invariants import PhysicsError, check_parts_non_negative
from perfmodel.inputs.job import ResponseTokens
from perfmodel.inputs.scenario import Scenario

# ---------------------------------------------------------------------------------------------------------------
# Named constants (each with its source). Calibratable ones are the defaults of `RolloutParams`.

KERNEL_FLOOR_S = KERNEL_OVERHEAD_S
"""Fixed GPU time of one kernel (launch, ramp, tail): `perfmodel.cost.compute.KERNEL_OVERHEAD_S`, AMD-AGI/Primus
projection `kernel_launch_latency` 2.8 us (hardware.md S4), the number the hardware profiles also use for the GEMM
half-efficiency point. Cross-check:
sgl-project/sglang issue #29960 (DSV4-Flash decode, 2 x RTX PRO 6000, TP2) reports a 12.0 ms GPU span for a graph of
2,876 nodes whose weight reads take about 3 ms, i.e. about 3 us per node."""

DSV4_DECODE_KERNELS_PER_LAYER = 67.0
"""Kernels per decoder layer in SGLang's DSV4 decode graph: 2,876 CUDA-graph nodes for 43 layers (sglang issue
#29960, DeepSeek-V4-Flash target-verify graph) = 66.9 per layer (mHC pre/post with Sinkhorn, compressor, indexer,
sparse + SWA attention, MoE, shared expert, all-reduces)."""

GQA_DENSE_DECODE_KERNELS_PER_LAYER = 14.0
"""Assumption (counted, not measured): a Llama-style SGLang decode layer runs about 14 kernels: 2 RMSNorm(+residual),
QKV GEMM, RoPE/KV store, attention, O GEMM, all-reduce, gate_up GEMM, SiLU-mul, down GEMM, all-reduce, plus a few
small copies."""

MOE_EXTRA_DECODE_KERNELS_PER_LAYER = 8.0
"""Assumption (counted): an MoE FFN adds about 8 kernels over a dense one: router GEMM, top-k, align/sort, two grouped
GEMMs, activation, combine/scatter, shared-expert gate."""

MLA_EXTRA_DECODE_KERNELS_PER_LAYER = 6.0
"""Assumption (counted): MLA adds q_a / kv_a projections, their norms, the absorbed q_b x k_b and v_b x o GEMMs."""

DEFAULT_RESPONSE_SIGMA = 1.0
"""Assumption: log-space standard deviation of the response-length law when `truncated_fraction` is not given. It
gives a long tail; with the DAPO-Math GB300 case (mean 3020 of a 4096 cap) it puts 46% of the responses at the cap,
near the 55-60% truncation the AMD Miles DSV4 blog reports for DAPO-Math at a 4K cap
(dsv4-flash-and-miles.md section 2.1)."""

DEFAULT_MEDIAN_FRACTION_OF_MAX = 0.5
"""Assumption when only `response_tokens.max` is given: median response = max / 2 (with sigma 1.0: mean about 0.47
max, 24% truncated)."""

SGLANG_DEFAULT_MAX_RUNNING_REQUESTS = 2048
"""SGLang ModelRunner: without --max-running-requests, max_num_reqs = clamp(pool tokens / context_len x 512, 2048,
4096) per scheduler (DP worker); the lower clamp 2048 is used (it never binds at RL batch sizes)."""

SGLANG_CHUNKED_PREFILL_TOKENS = 8192
"""SGLang --chunked-prefill-size default for large-memory GPUs (the Miles DSV4 docs use 8192 as well)."""

MILES_SERVER_CONCURRENCY_PER_ENGINE = 512
"""slime / Miles `--sglang-server-concurrency` default 512; the client semaphore is that x number of engines
(`GenerateState`: sglang_server_concurrency * rollout_num_gpus // rollout_num_gpus_per_engine)."""

FP8_BLOCK = 128
"""Block-wise FP8: one FP32 scale per 128 x 128 weight block (DSV4 quantization_config weight_block_size [128, 128])
and one per 128 KV elements (FlashMLA FP8 KV layout: 512 FP8 + 4 FP32 scales + 64 BF16 RoPE = 656 B per token for
DeepSeek-V3.2; the same layout `perfmodel.memory` uses for the pool)."""


@dataclass(frozen=True, slots=True)
class RolloutParams:
    """Calibratable rollout parameters (named, documented defaults)."""

    kernel_floor_s: float = KERNEL_FLOOR_S
    decode_kernels_per_layer: float | None = None  # None: by attention kind (DSV4 67, MLA/GQA counted)
    decode_host_overhead_s: float = 0.0
    """CPU time per decode step not hidden by the GPU. 0: SGLang's overlap scheduler runs one batch ahead and the
    LMSYS SGLang v0.4 blog's Nsight profile shows no GPU idle time between decode batches."""
    prefill_host_overhead_s: float = 5.0e-3
    """Assumption: a prefill forward runs eagerly (no CUDA graph) and its Python scheduling (PrefillAdder, radix
    bookkeeping, batch preparation) is not overlapped: ~5 ms per prefill batch."""
    chunked_prefill_tokens: int = SGLANG_CHUNKED_PREFILL_TOKENS
    client_concurrency_per_engine: int = MILES_SERVER_CONCURRENCY_PER_ENGINE
    router: Literal["round_robin", "least_loaded"] = "round_robin"
    kv_admission: Literal["actual", "max"] = "actual"
    response_sigma: float = DEFAULT_RESPONSE_SIGMA
    moe_all_to_all: bool | None = None  # None: all-to-all with DP-attention, all-reduce (SGLang EP MoE) without


# ---------------------------------------------------------------------------------------------------------------
# Response lengths


@dataclass(frozen=True, slots=True)
class ResponseLaw:
    """The response-length law actually used: `kind` lognormal (mu, sigma in log space, truncated at `max`) or
    histogram; `mean` and `truncated_fraction` are its expected values after truncation."""

    kind: str
    max: int
    mu: float = 0.0
    sigma: float = 0.0
    mean: float = 0.0
    truncated_fraction: float = 0.0
    note: str = ""


def _norm_sf(x: float) -> float:
    return 0.5 * math.erfc(x / math.sqrt(2.0))


def _norm_cdf(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def _lognormal_capped_mean(mu: float, sigma: float, cap: float) -> float:
    """E[min(X, cap)] for X ~ LogNormal(mu, sigma)."""
    z = (math.log(cap) - mu) / sigma
    return math.exp(mu + 0.5 * sigma * sigma) * _norm_cdf(z - sigma) + cap * _norm_sf(z)


def _bisect(f, lo: float, hi: float, iters: int = 200) -> float:
    flo = f(lo)
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        fm = f(mid)
        if (fm > 0) == (flo > 0):
            lo, flo = mid, fm
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, abs(hi)):
            break
    return 0.5 * (lo + hi)


def _norm_isf(p: float) -> float:
    """Inverse survival function of the standard normal (bisection on erfc; p in (0, 1))."""
    return _bisect(lambda x: _norm_sf(x) - p, -40.0, 40.0)


_ACKLAM_A = (-3.969683028665376e01, 2.209460984245205e02, -2.759285104469687e02, 1.383577518672690e02,
             -3.066479806614716e01, 2.506628277459239e00)
_ACKLAM_B = (-5.447609879822406e01, 1.615858368580409e02, -1.556989798598866e02, 6.680131188771972e01,
             -1.328068155288572e01)
_ACKLAM_C = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e00, -2.549732539343734e00,
             4.374664141464968e00, 2.938163982698783e00)
_ACKLAM_D = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00, 3.754408661907416e00)


def _ndtri(u: np.ndarray) -> np.ndarray:
    """Standard-normal quantile, vectorised (P. J. Acklam's rational approximation, relative error < 1.2e-9);
    avoids importing scipy.special on the hot path."""
    a, b, c, d = _ACKLAM_A, _ACKLAM_B, _ACKLAM_C, _ACKLAM_D
    u = np.asarray(u, dtype=float)
    out = np.empty_like(u)
    lo, hi = u < 0.02425, u > 1 - 0.02425
    mid = ~(lo | hi)
    q = u[mid] - 0.5
    r = q * q
    out[mid] = ((((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q
                / (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1))
    for mask, sign, tail in ((lo, 1.0, u[lo]), (hi, -1.0, 1 - u[hi])):
        q = np.sqrt(-2 * np.log(tail))
        out[mask] = sign * ((((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5])
                            / ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1))
    return out


@lru_cache(maxsize=256)
def _law(rt: ResponseTokens, sigma_default: float) -> ResponseLaw:
    cap = float(rt.max)
    if rt.histogram is not None:
        toks = np.array([t for t, _ in rt.histogram], dtype=float)
        w = np.array([w for _, w in rt.histogram], dtype=float)
        if w.sum() <= 0:
            raise InputError("", "rl.response_tokens.histogram", "weights must not all be zero")
        w = w / w.sum()
        return ResponseLaw("histogram", rt.max, mean=float((toks * w).sum()),
                           truncated_fraction=float(w[toks >= cap].sum()), note="user histogram")
    f, mean = rt.truncated_fraction, rt.mean
    if f is not None and f >= 1.0:
        if mean is not None and mean < cap:
            raise InputError("", "rl.response_tokens", f"truncated_fraction 1 means every response is {rt.max} "
                             f"tokens; mean {mean} must then equal max")
        return ResponseLaw("histogram", rt.max, mean=cap, truncated_fraction=1.0, note="all responses at the cap")
    if f is not None and f <= 0.0:
        f = 1e-6  # a lognormal always has a tail; 'none truncated' is read as one in a million
    if f is not None and mean is not None:
        if mean <= f * cap + 1.0:
            raise InputError("", "rl.response_tokens", f"mean {mean} is too small for {f:.0%} of the responses at "
                             f"the cap {rt.max} (needs mean > truncated_fraction x max)")
        if mean >= cap:
            raise InputError("", "rl.response_tokens", "mean equal to max needs truncated_fraction 1")
        z = _norm_isf(f)

        def g(s: float) -> float:
            return _lognormal_capped_mean(math.log(cap) - s * z, s, cap) - mean

        lo, hi = 1e-3, 30.0
        if g(lo) * g(hi) > 0:
            raise InputError("", "rl.response_tokens", f"no lognormal has mean {mean} with {f:.0%} truncated at "
                             f"{rt.max}; give a histogram instead")
        s = _bisect(g, lo, hi)
        return ResponseLaw("lognormal", rt.max, math.log(cap) - s * z, s, mean, f,
                           "lognormal, mean and truncated_fraction as given")
    s = sigma_default
    if mean is not None:
        if mean >= cap:
            return ResponseLaw("histogram", rt.max, mean=cap, truncated_fraction=1.0, note="mean = max")
        mu = _bisect(lambda m: _lognormal_capped_mean(m, s, cap) - mean, -50.0, math.log(cap) + 50.0)
        note = f"lognormal, mean as given, default sigma {s}"
    elif f is not None:
        mu = math.log(cap) - s * _norm_isf(f)
        note = f"lognormal, truncated_fraction as given, default sigma {s}"
    else:
        mu = math.log(DEFAULT_MEDIAN_FRACTION_OF_MAX * cap)
        note = f"lognormal, only max given: median max/2, default sigma {s}"
    return ResponseLaw("lognormal", rt.max, mu, s, _lognormal_capped_mean(mu, s, cap),
                       _norm_sf((math.log(cap) - mu) / s), note)


def response_law(rt: ResponseTokens, sigma_default: float = DEFAULT_RESPONSE_SIGMA) -> ResponseLaw:
    """The law `response_lengths` draws from.

    * `histogram` given: that empirical law (tokens, weights), nothing else is read.
    * `mean` and `truncated_fraction`: a lognormal LN(mu, sigma) truncated at `max` with exactly that mass at the cap
      (mu = ln max - sigma z_f) and that capped mean (sigma solved).
    * `mean` only: sigma = `DEFAULT_RESPONSE_SIGMA` (1.0), mu solved for the capped mean.
    * `truncated_fraction` only: sigma 1.0, mu from the fraction.
    * `max` only: sigma 1.0, median = max / 2 (about 24% truncated, mean about 0.47 max).
    """
    return _law(rt, sigma_default)


def response_lengths(rt: ResponseTokens, n: int, seed: int = 0,
                     sigma_default: float = DEFAULT_RESPONSE_SIGMA) -> np.ndarray:
    """`n` response lengths (ints in [1, max]). Stratified inverse-CDF sampling (one uniform per 1/n stratum, then
    shuffled), so the truncated fraction and the mean match the law closely even for small n; seeded."""
    law = response_law(rt, sigma_default)
    rng = np.random.default_rng(seed)
    u = (np.arange(n) + rng.random(n)) / n
    u = u[rng.permutation(n)]
    if law.kind == "histogram":
        if rt.histogram is None:  # all at the cap
            return np.full(n, rt.max, dtype=np.int64)
        toks = np.array([t for t, _ in rt.histogram], dtype=np.int64)
        w = np.array([w for _, w in rt.histogram], dtype=float)
        order = np.argsort(toks, kind="stable")
        toks, w = toks[order], w[order]
        cdf = np.cumsum(w) / w.sum()
        idx = np.minimum(np.searchsorted(cdf, u, side="right"), len(toks) - 1)
        return toks[idx]
    # Inverse CDF of the lognormal: exp(mu + sigma * Phi^-1(u)).
    x = np.exp(law.mu + law.sigma * _ndtri(np.clip(u, 1e-15, 1 - 1e-15)))
    return np.clip(np.ceil(x), 1, rt.max).astype(np.int64)


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
    rl = _rl(scn)
    ro = rl.rollout
    n_engines = rl.rollout_gpus // ro.engine_gpus
    if ro.dp_attention:
        reps, unit, attn_dp = 1, ro.tp, ro.dp
    else:
        reps, unit, attn_dp = ro.dp, ro.tp, 1
    attn_tp = max(1, unit // attn_dp)
    ep = math.gcd(ro.ep, unit) if ro.ep > 1 else 1
    a2a = (params.moe_all_to_all if params and params.moe_all_to_all is not None else ro.dp_attention) and ep > 1
    return EngineGeometry(n_engines, reps, n_engines * reps, unit, attn_tp, attn_dp, ep, unit // ep, a2a)


def _rl(scn: Scenario):
    if scn.run.rl is None:
        raise InputError("", "rl", "simulate_rollout needs an rl: section (kind: rl)")
    return scn.run.rl


def _wbytes(precision: str) -> float:
    """Bytes per weight at the rollout GEMM precision; FP8 carries one FP32 scale per 128x128 block."""
    return 1.0 + 4.0 / (FP8_BLOCK * FP8_BLOCK) if precision == "fp8" else 2.0


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
    (roofline of its bytes and FLOPs), and `flops` per query token in prefill. (What the pool *holds* - all C4
    entries, not the top-k read - comes from `perfmodel.memory`.)"""

    ratio: float
    cap: float  # entries read per decode step saturate here (math.inf when unbounded)
    time_s: float  # summed over the layers that share (ratio, cap)
    flops: float
    label: str


class EngineCost:
    """Per-GPU cost of one engine (scheduler) forward. Built once per scenario; `decode_base(B)` is cached."""

    def __init__(self, scn: Scenario, params: RolloutParams | None = None) -> None:
        self.params = p = params or RolloutParams()
        self.hw = hw = scn.hardware
        self.model = m = scn.model
        rl = _rl(scn)
        ro = rl.rollout
        self.geo = g = engine_geometry(scn, p)
        self.precision = ro.precision
        self.kv_dtype = ro.kv_cache_dtype or "bf16"  # SGLang kv_cache_dtype auto = the activation dtype (BF16)
        self.bw = hw.hbm_bandwidth_bytes_per_s * hw.hbm_efficiency
        gemm_dtype = "fp8" if ro.precision == "fp8" else "bf16"
        self.peak_gemm = hw.peak(gemm_dtype) * hw.gemm_curve(gemm_dtype).max_efficiency
        # attention math runs in BF16, flash-style, below the GEMM rate (perfmodel.cost.compute)
        self.peak_attn = hw.peak("bf16") * hw.gemm_curve("bf16").max_efficiency * ATTENTION_FWD_REL_EFFICIENCY
        # engine groups on consecutive GPUs: attention TP, the whole engine (MoE all-reduce), EP (stride moe_tp)
        self.attn_group = placement_from_stride(hw, g.attn_tp, 1)
        self.unit_group = placement_from_stride(hw, g.unit_gpus, 1)
        self.ep_group = placement_from_stride(hw, g.ep, g.moe_tp)
        wq = _wbytes(ro.precision)
        d = m.hidden_size

        # Parameters by role. Quantized linears (attention projections, experts, shared experts, dense MLPs) are at
        # the rollout precision; router and LM head BF16; mHC mixers and norms FP32/BF16 (as in the FP8 checkpoint).
        attn = shared = dense_mlp = router = small = 0.0
        self.n_moe = 0
        self.n_layers = len(m.layers)
        expert_params = 0.0
        self.num_experts = self.top_k = 0
        for layer in m.layers:
            attn += layer.attention.params()
            small += layer.norm_params * 2 + layer.hc_params * 4  # bytes
            f = layer.ffn
            if f.kind == "moe":
                self.n_moe += 1
                shared += f.num_shared_experts * f.mlp_params(f.shared_intermediate_size)
                router += f.router_params
                expert_params = f.mlp_params(f.expert_intermediate_size)
                self.num_experts, self.top_k = f.num_experts, f.top_k
            else:
                dense_mlp += f.params_total()
        head = m.vocab_size * d
        u = g.unit_gpus
        # Bytes every decode step reads per GPU, whatever the batch.
        self.dense_bytes = (attn * wq / g.attn_tp + (shared + dense_mlp) * wq / u + router * 2.0
                            + head * 2.0 / u + small)
        self.dense_flops_per_token = 2.0 * (attn + shared + dense_mlp + router + head) / u
        self.expert_bytes = expert_params * wq / u  # one expert's share on one GPU
        self.expert_flops_per_token = 2.0 * self.top_k * expert_params * self.n_moe / u
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

        pool = hw.hbm_bytes * ro.mem_fraction_static - self.weights_bytes_per_gpu
        if pool <= 0:
            raise InputError("", "rl.rollout.mem_fraction_static",
                             f"the rollout weights ({self.weights_bytes_per_gpu / 2**30:.1f} GiB per GPU at "
                             f"{ro.precision}) do not fit in {ro.mem_fraction_static} x {hw.hbm_bytes / 2**30:.0f} GiB;"
                             " use more GPUs per engine or a larger mem_fraction_static")
        self.kv_pool_bytes = pool * g.attn_dp  # per unit, in per-GPU footprint units (one pool per attention rank)
        self.max_total_tokens = ro.max_total_tokens or math.inf
        self.max_running = ro.max_running_requests or SGLANG_DEFAULT_MAX_RUNNING_REQUESTS * g.attn_dp
        self._base_cache: dict[int, float] = {}

    # -- KV layout ------------------------------------------------------------------------------------------------
    def _kv_components(self) -> tuple[KVComponent, ...]:
        g, kvd = self.geo, self.kv_dtype
        acc: dict[tuple[float, float, str], list[float]] = {}

        def add(ratio: float, cap: float, bytes_: float, flops: float, label: str) -> None:
            t = max(bytes_ / self.bw, flops / self.peak_attn) / g.attn_dp  # balanced over attention ranks
            slot = acc.setdefault((ratio, cap, label), [0.0, 0.0])
            slot[0] += t
            slot[1] += flops / g.attn_dp

        for layer in self.model.layers:
            a = layer.attention
            hpr = a.num_heads / g.attn_tp  # query heads per GPU
            if a.kind == "dsv4":
                rope = a.qk_rope_head_dim
                e = _latent_entry_bytes(a.head_dim - rope, rope, kvd)
                fl = 4.0 * hpr * a.head_dim  # QK and PV over the 512-dim latent
                add(1.0, float(a.sliding_window), e, fl, "swa")
                if a.compress_ratio == 4:
                    add(4.0, float(a.index_topk), e, fl, "c4")  # reads the top-k of the ctx/4 entries
                    # Lightning indexer: one FP8 key of index_head_dim (+ FP32 scale) per compressed entry, scored by
                    # all index heads (kept whole on every TP rank).
                    ie = a.index_head_dim * _kv_elem_bytes(kvd) + (4.0 if kvd == "fp8" else 0.0)
                    add(4.0, math.inf, ie, 2.0 * a.index_n_heads * a.index_head_dim, "c4-indexer")
                elif a.compress_ratio:
                    add(float(a.compress_ratio), math.inf, e, fl, f"c{a.compress_ratio}")
            elif a.kind == "mla":
                c, rope = a.kv_lora_rank, a.qk_rope_head_dim
                e = _latent_entry_bytes(c, rope, kvd)
                add(1.0, math.inf, e, 2.0 * hpr * (c + rope + c), "mla")
            else:
                kv_per_gpu = max(1.0, a.num_kv_heads / g.attn_tp)
                e = 2.0 * a.head_dim * kv_per_gpu * _kv_elem_bytes(kvd)
                cap = float(a.sliding_window) if a.sliding_window else math.inf
                add(1.0, cap, e, 4.0 * hpr * a.head_dim, "swa" if a.sliding_window else "full")
        return tuple(KVComponent(r, c, v[0], v[1], lab) for (r, c, lab), v in acc.items())

    def kv_bytes(self, ctx: float) -> float:
        """KV pool bytes (per GPU of its attention rank) a request of `ctx` tokens holds (perfmodel.memory)."""
        return self.kv_bytes_per_request_fixed + self.kv_bytes_per_token * ctx

    def attn_time(self, ctx: float) -> float:
        """Decode attention time of one request at context `ctx` (per GPU, balanced over attention ranks)."""
        return sum(c.time_s * min(ctx / c.ratio, c.cap) for c in self.components)

    def comm_s(self, tokens: float) -> float:
        """Per forward: TP all-reduce of the attention output per layer; per MoE layer either the TP all-reduce of
        SGLang's EP MoE output or a dispatch (FP8) + combine (BF16) all-to-all over the EP group."""
        g, d, hw = self.geo, self.model.hidden_size, self.hw
        t_rank = tokens / g.attn_dp
        ar_attn = all_reduce_s(hw, t_rank * d * 2.0, self.attn_group)
        t = self.n_layers * ar_attn + (self.n_layers - self.n_moe) * ar_attn  # + dense-FFN layers' all-reduce
        if self.n_moe:
            if g.moe_all_to_all:
                per_gpu = tokens / g.unit_gpus * self.top_k * d  # send buffer: FP8 dispatch, BF16 combine
                t += self.n_moe * (all_to_all_s(hw, per_gpu * 1.0, self.ep_group)
                                   + all_to_all_s(hw, per_gpu * 2.0, self.ep_group))
            else:
                t += self.n_moe * all_reduce_s(hw, tokens * d * 2.0, self.unit_group)
        return t

    # -- forward costs --------------------------------------------------------------------------------------------
    def experts_hit(self, tokens: float) -> float:
        """Expected distinct experts hit per MoE layer when `tokens` tokens each route top-k of E (uniform)."""
        e, k = self.num_experts, self.top_k
        if not e:
            return 0.0
        return e * (1.0 - (1.0 - k / e) ** tokens)

    def gemm_s(self, tokens: float) -> float:
        """Dense and routed-expert GEMMs of one forward over `tokens` tokens (weights read once)."""
        t = max(self.dense_bytes / self.bw, tokens * self.dense_flops_per_token / self.peak_gemm)
        if self.n_moe:
            hit_bytes = self.experts_hit(tokens) * self.n_moe * self.expert_bytes
            t += max(hit_bytes / self.bw, tokens * self.expert_flops_per_token / self.peak_gemm)
        return t

    def floor_s(self) -> float:
        return self.kernels_per_layer * self.n_layers * self.params.kernel_floor_s

    def decode_base(self, batch: int) -> float:
        """Decode step time without the KV term, for `batch` running requests."""
        t = self._base_cache.get(batch)
        if t is None:
            t = self.gemm_s(batch) + self.comm_s(batch) + self.floor_s() + self.params.decode_host_overhead_s
            self._base_cache[batch] = t
        return t

    def prefill_s(self, prompts: list[int]) -> float:
        """Prefill of the admitted prompts, in chunks of `chunked_prefill_tokens` (each a full forward)."""
        total = sum(prompts)
        if total <= 0:
            return 0.0
        chunk = max(1, self.params.chunked_prefill_tokens)
        t = 0.0
        left = total
        while left > 0:
            n = min(chunk, left)
            t += self.gemm_s(n) + self.comm_s(n) + self.floor_s() + self.params.prefill_host_overhead_s
            left -= n
        # Causal attention over the prompt: sum_{x=1..p} min(x / r, cap) entries per component, compute-bound.
        flops = 0.0
        counts = Counter(prompts)
        for c in self.components:
            for p_, mult in counts.items():
                if math.isinf(c.cap):
                    flops += mult * c.flops * (p_ * (p_ + 1) / 2.0) / c.ratio
                else:
                    xs = min(p_, int(c.ratio * c.cap))
                    flops += mult * c.flops * ((xs * (xs + 1) / 2.0) / c.ratio + (p_ - xs) * c.cap)
        return t + flops / self.peak_attn

    def step_breakdown(self, batch: int, ctx: float) -> dict[str, float]:
        """One decode step of `batch` requests all at context `ctx`, by part (seconds)."""
        dense = max(self.dense_bytes / self.bw, batch * self.dense_flops_per_token / self.peak_gemm)
        experts = self.gemm_s(batch) - dense
        out = {
            "dense_gemm_s": dense,
            "expert_gemm_s": experts,
            "kv_attention_s": batch * self.attn_time(ctx),
            "comm_s": self.comm_s(batch),
            "kernel_floor_s": self.floor_s(),
            "host_s": self.params.decode_host_overhead_s,
            "experts_hit_per_layer": self.experts_hit(batch),
        }
        out["total_s"] = sum(v for k, v in out.items() if k.endswith("_s"))
        return out


def decode_step_time_s(scn: Scenario, batch: int, context_tokens: float,
                       params: RolloutParams | None = None) -> dict[str, float]:
    """Breakdown of one decode step of `batch` requests at `context_tokens` each, on one rollout engine."""
    return EngineCost(scn, params).step_breakdown(batch, context_tokens)


# ---------------------------------------------------------------------------------------------------------------
# Result


class TimelineSegment(NamedTuple):
    engine: int
    start_s: float
    end_s: float
    batch: int
    kind: str  # "prefill" | "decode"


@dataclass(frozen=True, slots=True)
class RolloutResult:
    rollout_time_s: float
    tokens_generated: int  # response tokens (what Miles' perf/tokens_per_gpu_per_sec counts)
    prompt_tokens: int
    tokens_per_s_per_gpu: float
    rollout_gpus: int
    num_engines: int  # simulated schedulers (SGLang engines x dp replicas without DP-attention)
    engine_gpus: int  # GPUs per simulated scheduler
    engine_busy_s: tuple[float, ...]
    engine_last_finish_s: tuple[float, ...]
    engine_decode_steps: tuple[int, ...]
    engine_max_batch: tuple[int, ...]
    batch_curves: tuple[tuple[tuple[float, int], ...], ...]  # per engine: (t_s, running batch) at each change
    idle_tail_gpu_s: float  # sum over engines of (rollout end - last finish) x engine GPUs
    prefill_time_s: float  # summed over engines
    decode_time_s: float  # summed over engines
    timeline: tuple[TimelineSegment, ...]
    response_lengths: tuple[int, ...]
    law: ResponseLaw
    kv_pool_bytes_per_gpu: float
    weights_bytes_per_gpu: float
    max_running_requests: float
    sim_events: int  # simpy events processed (the speed metric: grows with segments, not tokens)
    decode_segments: int
    notes: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        where = f"rollout on {self.rollout_gpus} GPUs, {self.num_engines} engines"
        check_parts_non_negative("rollout times >= 0", where, {
            "rollout_time_s": self.rollout_time_s, "prefill_time_s": self.prefill_time_s,
            "decode_time_s": self.decode_time_s, "idle_tail_gpu_s": self.idle_tail_gpu_s}
            | {f"engine_busy_s[{i}]": b for i, b in enumerate(self.engine_busy_s)})
        if self.rollout_time_s <= 0:
            raise PhysicsError("rollout > 0", where, f"rollout_time_s = {self.rollout_time_s}")
        for i, (busy, last) in enumerate(zip(self.engine_busy_s, self.engine_last_finish_s)):
            if busy > self.rollout_time_s * (1 + 1e-6) + 1e-9 or last > self.rollout_time_s * (1 + 1e-6) + 1e-9:
                raise PhysicsError("an engine is busy within the rollout", where, f"engine {i} busy {busy:.6g} s, "
                                   f"last finish {last:.6g} s, rollout {self.rollout_time_s:.6g} s")

    @property
    def prefill_fraction(self) -> float:
        busy = self.prefill_time_s + self.decode_time_s
        return self.prefill_time_s / busy if busy else 0.0

    @property
    def idle_tail_fraction(self) -> float:
        """Share of the rollout GPU-time spent idle in the tail."""
        total = self.rollout_time_s * self.rollout_gpus
        return self.idle_tail_gpu_s / total if total else 0.0

    def spans(self, offset_s: float = 0.0) -> list:
        from perfmodel.trace import Span

        return [Span(f"engine {s.engine}", "compute", f"{s.kind} B={s.batch}", s.start_s + offset_s,
                     s.end_s - s.start_s, {"batch": s.batch}) for s in self.timeline]

    def to_json(self) -> dict:
        return {
            "rollout_time_s": self.rollout_time_s,
            "tokens_generated": self.tokens_generated,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
            "num_engines": self.num_engines,
            "engine_gpus": self.engine_gpus,
            "idle_tail_gpu_s": self.idle_tail_gpu_s,
            "idle_tail_fraction": self.idle_tail_fraction,
            "prefill_time_s": self.prefill_time_s,
            "decode_time_s": self.decode_time_s,
            "engine_busy_s": list(self.engine_busy_s),
            "response_law": {"kind": self.law.kind, "mean": self.law.mean,
                             "truncated_fraction": self.law.truncated_fraction, "note": self.law.note},
            "notes": list(self.notes),
        }


# ---------------------------------------------------------------------------------------------------------------
# Simulation


class _CountingEnv(simpy.Environment):
    """simpy Environment that counts processed events (the benchmark metric)."""

    def __init__(self) -> None:
        super().__init__()
        self.n_events = 0

    def step(self) -> None:
        self.n_events += 1
        super().step()


_FINISH, _BREAK = 0, 1


class _Engine:
    """One SGLang scheduler: waiting queue, running batch, decode-step clock, segment-wise advance."""

    def __init__(self, sim: _Rollout, idx: int) -> None:
        self.sim, self.idx = sim, idx
        self.waiting: deque[int] = deque()
        self.running: set[int] = set()
        self.heap: list[tuple[int, int, int, int, float]] = []
        self.step = 0  # decode steps executed
        self.attn = 0.0  # sum of per-request KV-term cost at the current step
        self.beta = 0.0  # its growth per step
        self.tok_reserved = 0.0
        self.kv_reserved = 0.0
        self.busy_prefill = 0.0
        self.busy_decode = 0.0
        self.last_finish = 0.0
        self.max_batch = 0
        self.curve: list[tuple[float, int]] = [(0.0, 0)]
        self.timeline: list[TimelineSegment] = []
        self.wake: simpy.Event | None = None
        self.seq = 0
        self.segments = 0

    # -- admission --------------------------------------------------------------------------------------------
    def outstanding(self) -> int:
        return len(self.waiting) + len(self.running)

    def _admit(self) -> list[int]:
        sim, cost = self.sim, self.sim.cost
        out: list[int] = []
        while self.waiting:
            r = self.waiting[0]
            if len(self.running) + len(out) >= cost.max_running:
                break
            tok, kv = sim.res_tokens[r], sim.res_bytes[r]
            if self.tok_reserved + tok > cost.max_total_tokens or self.kv_reserved + kv > cost.kv_pool_bytes:
                if not self.running and not out:
                    sim.unfit(r)
                break
            self.waiting.popleft()
            self.tok_reserved += tok
            self.kv_reserved += kv
            out.append(r)
        return out

    def _start(self, r: int) -> None:
        """Request `r` finished its prefill (one response token out) and joins the decode batch at `self.step`."""
        sim = self.sim
        L = int(sim.lengths[r])
        if L <= 1:
            self._finish(r, count_attn=False)
            return
        s0 = self.step
        fin = s0 + L - 1
        f0, slope, finite, unbounded = sim.kv_profile(sim.prompts[r] + 1.0)
        # (step at which a term stops growing, its slope, whether a break event removes the slope before the end)
        bps: list[tuple[int, float, bool]] = [(fin, unbounded, False)] if unbounded else []
        heap = self.heap
        for off, sl in finite:
            bp = s0 + off
            if bp < fin:
                bps.append((bp, sl, True))
                self.seq += 1
                heapq.heappush(heap, (bp, self.seq, _BREAK, r, sl))
            else:
                bps.append((fin, sl, False))
        sim.req_state[r] = (s0, f0, bps)
        self.attn += f0
        self.beta += slope
        self.running.add(r)
        self.seq += 1
        heapq.heappush(heap, (fin, self.seq, _FINISH, r, 0.0))

    def _finish(self, r: int, count_attn: bool = True) -> None:
        sim = self.sim
        if count_attn:
            s0, f0, bps = sim.req_state[r]
            val, sl_left = f0, 0.0
            for bp, sl, early in bps:  # bp <= self.step: a request finishes at or after each of its bps
                val += sl * (bp - s0)
                if not early:
                    sl_left += sl
            self.attn -= val
            self.beta -= sl_left
            self.running.discard(r)
        self.tok_reserved -= sim.res_tokens[r]
        self.kv_reserved -= sim.res_bytes[r]
        self.last_finish = sim.env.now
        sim.on_finish(self)

    def _record_batch(self) -> None:
        b = len(self.running)
        if b != self.curve[-1][1]:
            self.curve.append((self.sim.env.now, b))
        if b > self.max_batch:
            self.max_batch = b
        if b == 0:
            self.attn = self.beta = 0.0  # drop float residue

    # -- process ---------------------------------------------------------------------------------------------
    def run(self):
        # simpy re-creates an exception escaping a process from its args, which InputError does not survive: keep
        # it on the simulation and raise it once the event loop has stopped.
        try:
            yield from self._run()
        except InputError as err:
            self.sim.error = err

    def _run(self):
        sim, cost, env = self.sim, self.sim.cost, self.sim.env
        while True:
            admitted = self._admit()
            if admitted:
                t0 = env.now
                dt = cost.prefill_s([sim.prompts[r] for r in admitted])
                yield env.timeout(dt)
                self.busy_prefill += dt
                self.timeline.append(TimelineSegment(self.idx, t0, env.now, len(admitted), "prefill"))
                for r in admitted:
                    self._start(r)
                self._record_batch()
                continue
            if not self.running:
                if sim.pending_total() == 0 and not self.waiting:
                    return
                self.wake = env.event()
                yield self.wake
                self.wake = None
                continue
            b = len(self.running)
            n = self.heap[0][0] - self.step
            base = cost.decode_base(b) + self.attn
            beta = self.beta
            dt = n * base + beta * n * (n - 1) * 0.5
            t0 = env.now
            if sim.pending:  # a request may still arrive mid-segment: allow a wake-up
                self.wake = env.event()
                yield env.timeout(dt) | self.wake
                woke = self.wake.triggered and env.now - t0 < dt
                self.wake = None
                if woke:
                    e = env.now - t0
                    # whole steps done by now: largest k with k*base + beta*k*(k-1)/2 <= e; the one in flight ends
                    if beta > 0:
                        a2, b1 = 0.5 * beta, base - 0.5 * beta
                        k = int((-b1 + math.sqrt(b1 * b1 + 4 * a2 * e)) / (2 * a2))
                    else:
                        k = int(e / base) if base > 0 else n
                    k = min(n, k + 1)
                    end = k * base + beta * k * (k - 1) * 0.5
                    if end > e:
                        yield env.timeout(end - e)
                    n, dt = k, end
            else:
                yield env.timeout(dt)
            self.busy_decode += dt
            self.segments += 1
            tl = self.timeline
            if tl and tl[-1].kind == "decode" and tl[-1].batch == b and tl[-1].end_s == t0:
                tl[-1] = TimelineSegment(self.idx, tl[-1].start_s, env.now, b, "decode")
            else:
                tl.append(TimelineSegment(self.idx, t0, env.now, b, "decode"))
            self.attn += beta * n
            self.step += n
            heap = self.heap
            while heap and heap[0][0] == self.step:
                _, _, kind, r, sl = heapq.heappop(heap)
                if kind == _FINISH:
                    self._finish(r)
                else:
                    self.beta -= sl
            self._record_batch()


class _Rollout:
    def __init__(self, scn: Scenario, seed: int, params: RolloutParams) -> None:
        rl = _rl(scn)
        self.scn, self.params = scn, params
        self.cost = cost = EngineCost(scn, params)
        g = cost.geo
        n = rl.responses_per_step
        self.law = response_law(rl.response_tokens, params.response_sigma)
        self.lengths = response_lengths(rl.response_tokens, n, seed, params.response_sigma)
        p = max(1, int(round(rl.prompt_tokens_mean)))
        self.prompts = [p] * n
        final = (self.lengths + p) if params.kv_admission == "actual" else np.full(n, p + rl.response_tokens.max)
        self.res_tokens = final.astype(float).tolist()
        self.res_bytes = (cost.kv_bytes_per_request_fixed + cost.kv_bytes_per_token * final).tolist()
        self._profiles: dict[float, tuple] = {}
        self.req_state: list = [None] * n
        self.env = _CountingEnv()
        self.engines = [_Engine(self, i) for i in range(g.n_units)]
        self.pending: deque[int] = deque(range(n))  # not yet sent by the client (prompt-major order)
        self.slots = max(1, params.client_concurrency_per_engine * g.n_engines)
        self.rr = 0
        self.error: InputError | None = None

    def kv_profile(self, c0: float) -> tuple[float, float, tuple[tuple[int, float], ...], float]:
        """KV-term profile of a request entering decode at context c0: its cost f0, its total growth per step,
        the (steps until saturation, slope) of each capped term still growing, and the slope of unbounded terms."""
        prof = self._profiles.get(c0)
        if prof is None:
            f0 = slope = unbounded = 0.0
            finite: list[tuple[int, float]] = []
            for comp in self.cost.components:
                f0 += comp.time_s * min(c0 / comp.ratio, comp.cap)
                if c0 < comp.ratio * comp.cap:
                    sl = comp.time_s / comp.ratio
                    slope += sl
                    if math.isinf(comp.cap):
                        unbounded += sl
                    else:
                        finite.append((math.ceil(comp.ratio * comp.cap - c0), sl))
            prof = self._profiles[c0] = (f0, slope, tuple(finite), unbounded)
        return prof

    def pending_total(self) -> int:
        return len(self.pending)

    def unfit(self, r: int) -> None:
        c = self.cost
        raise InputError("", "rl.rollout.max_total_tokens",
                         f"one request of {self.res_tokens[r]:.0f} tokens ({self.res_bytes[r] / 2**20:.1f} MiB of KV "
                         f"per GPU) cannot fit an empty engine (max_total_tokens {c.max_total_tokens}, KV pool "
                         f"{c.kv_pool_bytes / 2**30:.2f} GiB); SGLang would reject it")

    def _route(self) -> _Engine:
        es = self.engines
        if self.params.router == "least_loaded":
            return min(es, key=lambda e: (e.outstanding(), e.idx))
        e = es[self.rr % len(es)]
        self.rr += 1
        return e

    def dispatch(self) -> None:
        while self.pending and self.slots > 0:
            r = self.pending.popleft()
            self.slots -= 1
            e = self._route()
            e.waiting.append(r)
            if e.wake is not None and not e.wake.triggered:
                e.wake.succeed()

    def on_finish(self, engine: _Engine) -> None:
        self.slots += 1
        if self.pending:
            self.dispatch()

    def run(self) -> None:
        self.dispatch()
        for e in self.engines:
            self.env.process(e.run())
        self.env.run()
        if self.error is not None:
            raise self.error


def simulate_rollout(scn: Scenario, seed: int = 0, params: RolloutParams | None = None) -> RolloutResult:
    """Simulate one synchronous rollout (all prompts x samples of one RL step) on the rollout engines."""
    params = params or RolloutParams()
    sim = _Rollout(scn, seed, params)
    sim.run()
    rl = _rl(scn)
    es = sim.engines
    end = max((e.last_finish for e in es), default=0.0)
    g = sim.cost.geo
    tokens = int(sim.lengths.sum())
    notes = [f"response lengths: {sim.law.note} (mean {sim.law.mean:.0f}, {sim.law.truncated_fraction:.0%} at the "
             f"cap {rl.response_tokens.max})",
             "not modelled: retraction, speculative decoding, CUDA-graph batch caps, radix prefix sharing, "
             "reward and Miles overhead"]
    return RolloutResult(
        rollout_time_s=end,
        tokens_generated=tokens,
        prompt_tokens=int(sum(sim.prompts)),
        tokens_per_s_per_gpu=tokens / end / rl.rollout_gpus if end > 0 else 0.0,
        rollout_gpus=rl.rollout_gpus,
        num_engines=g.n_units,
        engine_gpus=g.unit_gpus,
        engine_busy_s=tuple(e.busy_prefill + e.busy_decode for e in es),
        engine_last_finish_s=tuple(e.last_finish for e in es),
        engine_decode_steps=tuple(e.step for e in es),
        engine_max_batch=tuple(e.max_batch for e in es),
        batch_curves=tuple(tuple(e.curve) for e in es),
        idle_tail_gpu_s=sum((end - e.last_finish) * g.unit_gpus for e in es),
        prefill_time_s=sum(e.busy_prefill for e in es),
        decode_time_s=sum(e.busy_decode for e in es),
        timeline=tuple(s for e in es for s in e.timeline),
        response_lengths=tuple(int(x) for x in sim.lengths),
        law=sim.law,
        kv_pool_bytes_per_gpu=sim.cost.kv_pool_bytes / g.attn_dp,
        weights_bytes_per_gpu=sim.cost.weights_bytes_per_gpu,
        max_running_requests=sim.cost.max_running,
        sim_events=sim.env.n_events,
        decode_segments=sum(e.segments for e in es),
        notes=tuple(notes),
    )
