"""Kernel times on a roofline: GEMMs, flash-attention cores and memory-bound kernels (SI units).

A kernel takes the longer of its compute time (FLOPs at the dtype's peak times an efficiency) and its HBM time
(bytes at the profile's HBM bandwidth times `hbm_efficiency`). The GEMM efficiency comes from the profile's
saturating curve `gemm_curve(dtype).efficiency(flops)`, whose `half_flops` encodes the fixed per-kernel cost,
so small GEMMs fall off the peak on their own.
"""

from __future__ import annotations

import functools
import math

from perfmodel.cost.dtypes import LOW_PRECISION, dtype_bytes
from perfmodel.inputs.hardware import HardwareProfile

# Fixed cost of one launched kernel that is not a GEMM (norms, activations, permutes): the Primus projection's
# kernel_launch_latency 2.8 us (docs/reference/hardware.md 2e, S4 collective_args.py); the GEMM curves carry their own.
KERNEL_OVERHEAD_S = 2.8e-6

# Training GEMM shapes run below the best shape a MAMF sweep finds (the profiles' `max`): SemiAnalysis measured
# Llama-70B training shapes at 720 of the 794.5 TFLOP/s best shape on H100 BF16 (0.906), 1280 of 1402.6 in FP8
# (0.913) and 620 of 668.4 on MI300X BF16 (0.928) (docs/reference/hardware.md 2a, S27 vs S2). Mean 0.916, rounded
# to 0.91.
PRODUCTION_SHAPE_FACTOR = 0.91


def gemm_flops(m: float, n: float, k: float, batch: int = 1) -> float:
    """FLOPs of `batch` GEMMs C[m, n] = A[m, k] @ B[k, n] (one multiply-add = 2 FLOPs)."""
    return 2.0 * m * n * k * batch


def gemm_hbm_bytes(
    m: float, n: float, k: float, dtype: str, batch: int = 1, out_bytes_per_element: float = 2.0
) -> float:
    """HBM bytes of `batch` GEMMs: A (activations) and B (weights) read once, C written once.

    FP8/FP4 GEMMs read the low-precision copy of A (the quantize kernel that writes it is priced apart,
    `quantize_hbm_bytes`); the weights are quantized once per optimizer step and cached across micro-batches
    (TE's `is_first_microbatch` weight caching), so they cost their low-precision size only; C comes out in BF16.
    """
    q = dtype_bytes(dtype)
    return (m * k * q + k * n * q + m * n * out_bytes_per_element) * batch


def quantize_hbm_bytes(m: float, k: float, dtype: str, batch: int = 1) -> float:
    """HBM bytes of the kernel that casts a GEMM's BF16 A operand [m, k] to FP8/FP4 before the GEMM: read it in
    BF16, write the low-precision copy (TransformerEngine's cast-then-GEMM path). 0 for BF16 GEMMs."""
    if dtype not in LOW_PRECISION:
        return 0.0
    return m * k * (dtype_bytes("bf16") + dtype_bytes(dtype)) * batch


def hbm_rate(hw: HardwareProfile, efficiency: float | None = None) -> float:
    """Bytes/s a kernel streams through HBM: the profile's bandwidth x `hbm_efficiency` (or another of its
    efficiencies, e.g. the optimizer's). The one HBM rate every caller prices with."""
    return hw.hbm_bandwidth_bytes_per_s * (hw.hbm_efficiency if efficiency is None else efficiency)


def roofline_s(nbytes: float, bytes_per_s: float, flops: float, flops_per_s: float) -> float:
    """A kernel bound by its bytes or its FLOPs, whichever takes longer."""
    return max(nbytes / bytes_per_s, flops / flops_per_s)


def overlapped_s(compute_s: float, memory_s: float, norm: float) -> float:
    """A kernel's compute and memory times combined as their p-norm, p = `norm`: the max (the streams overlap
    fully) when `norm` is 0, their sum at 1. Between, the time near the ridge (compute = memory) exceeds the max by
    up to 2^(1/p), where a kernel's tiles alternate between waiting for bytes and computing; far from it the
    larger term rules."""
    hi, lo = max(compute_s, memory_s), min(compute_s, memory_s)
    if norm <= 0 or lo <= 0:
        return hi
    return hi * (1.0 + (lo / hi) ** norm) ** (1.0 / norm)


def memory_bound_time_s(hw: HardwareProfile, nbytes: float, kernels: int = 0) -> float:
    """Time to stream `nbytes` through HBM at `hbm_rate`, plus a fixed cost per kernel."""
    if nbytes <= 0 and kernels <= 0:
        return 0.0
    return nbytes / hbm_rate(hw) + kernels * KERNEL_OVERHEAD_S


def gemm_rate(hw: HardwareProfile, dtype: str, one_gemm_flops: float | None = None,
              shape_factor: bool = True) -> float:
    """FLOP/s of a GEMM: peak(dtype) x the profile's curve at `one_gemm_flops` (its large-GEMM `max_efficiency`
    when None) x PRODUCTION_SHAPE_FACTOR (`shape_factor`). The one GEMM rate training and serving both read."""
    curve = hw.gemm_curve(dtype)
    eff = curve.max_efficiency if one_gemm_flops is None else curve.efficiency(one_gemm_flops)
    if shape_factor:
        eff = eff * PRODUCTION_SHAPE_FACTOR
    return hw.peak(dtype) * eff


def compute_time_s(hw: HardwareProfile, flops: float, dtype: str, rel_efficiency: float = 1.0) -> float:
    """FLOPs at peak(dtype) x gemm_curve(dtype).efficiency(flops) x rel_efficiency; one kernel of `flops`."""
    if flops <= 0:
        return 0.0
    return flops / (gemm_rate(hw, dtype, flops, shape_factor=False) * rel_efficiency * PRODUCTION_SHAPE_FACTOR)


def gemm_time_s(
    hw: HardwareProfile,
    m: float,
    n: float,
    k: float,
    dtype: str,
    batch: int = 1,
    *,
    out_bytes_per_element: float = 2.0,
    quantize: bool = True,
    one_kernel: bool = False,
    rel_efficiency: float = 1.0,
) -> float:
    """Time of `batch` same-shape GEMMs [m, k] @ [k, n]: each kernel's fixed time (the curve's
    half_flops / (peak(dtype) x max_efficiency)), then the longer of its FLOPs at the large-GEMM rate and its bytes
    at hbm_bw x hbm_efficiency. Compute-bound, that is FLOPs / (peak x curve.efficiency(FLOPs)), the curve read at
    one GEMM's FLOPs (separate kernels, each paying the fixed cost), or with `one_kernel` at the whole batch's: one
    batched kernel (bmm / baddbmm, as the unfused attention's scores and values run) pays it once and its batch
    fills the device together. Memory-bound, the fixed time does not hide under the weight stream: an H200 runs a
    one-row GEMM over a 29-32 MB weight in 10-13 us where the stream alone takes 7-8 us
    (studies/kernels/h200/tables/gemm.csv; aiconfigurator-core's H200 rows of the same shapes agree within 7%). A
    low-precision GEMM adds the cast of its A operand (`quantize_hbm_bytes`) unless `quantize` is False: training
    prices its FP8 casts per recipe as kernels of the layer's Work (`cost/train/layers.py::fp8_cast_work`).
    `rel_efficiency` scales the compute rate (a recipe's kernel vs the dtype's curve: `train_fp8_gemm_rel`).
    """
    if m <= 0 or n <= 0 or k <= 0 or batch <= 0:
        return 0.0
    one = gemm_flops(m, n, k)
    large_rate = gemm_rate(hw, dtype)
    fixed = (1 if one_kernel else batch) * hw.gemm_curve(dtype).half_flops / large_rate
    nbytes = gemm_hbm_bytes(m, n, k, dtype, batch, out_bytes_per_element)
    t = fixed + max(one * batch / (large_rate * rel_efficiency), memory_bound_time_s(hw, nbytes))
    if quantize and dtype in LOW_PRECISION:  # the cast of A is its own kernel before the GEMM: it cannot hide under it
        t += memory_bound_time_s(hw, quantize_hbm_bytes(m, k, dtype, batch), kernels=1)
    return t


def train_fp8_gemm_rel(hw: HardwareProfile, fp8_recipe: str) -> float:
    """A training FP8 GEMM kernel's rate under `fp8_recipe` relative to per-tensor FP8 (the fp8 curve): MXFP8's
    block-scaled kernels at the profile's `train_gemm_mxfp8_rel_efficiency`, every other recipe at 1 (its casts
    are priced apart, cost/train/layers.py fp8_cast_work)."""
    return hw.train_gemm_mxfp8_rel_efficiency if fp8_recipe == "mxfp8" else 1.0


ENGINE_RECIPES = ("bf16", "fp8", "fp8_block", "fp4")
"""An engine linear's recipes: BF16; FP8 with per-tensor / per-token scales; FP8 with block scales (DeepSeek-style
128x128 weights, 1x128 activation groups; MXFP8 alike); FP4 (NVFP4 / MXFP4)."""


def engine_gemm_rate(hw: HardwareProfile, recipe: str, one_gemm_flops: float | None = None) -> float:
    """FLOP/s of an inference engine's GEMM: the dense curve of the recipe's dtype (no production-shape factor: the
    engine's shapes are what they are) x the profile's engine efficiency for a low-precision recipe. The one rate
    the engine (cost/serve/engine.py) and the kernel check both read."""
    dtype = "fp8" if recipe == "fp8_block" else recipe
    rate = gemm_rate(hw, dtype, one_gemm_flops, shape_factor=False)
    rel = {"fp8": hw.engine_gemm_fp8_rel_efficiency, "fp8_block": hw.engine_gemm_fp8_block_rel_efficiency,
           "fp4": hw.engine_gemm_fp4_rel_efficiency}.get(recipe, 1.0)
    return rate * rel


def activation_quant_time_s(hw: HardwareProfile, m: float, k: float, recipe: str) -> float:
    """The engine's dynamic quantize of a low-precision GEMM's activations [m, k] (its own kernel before the GEMM):
    the profile's `engine_quant_fixed_s`, then the BF16 read and the low-precision write at `hbm_rate`. 0 for BF16,
    and where the profile's fixed time is 0: an engine with no low-precision GEMM (cpu-local: SGLang on CPU runs the
    dequantized BF16 weights) quantizes nothing."""
    if recipe == "bf16" or m <= 0 or k <= 0 or hw.engine_quant_fixed_s <= 0:
        return 0.0
    dtype = "fp8" if recipe == "fp8_block" else recipe
    return hw.engine_quant_fixed_s + quantize_hbm_bytes(m, k, dtype) / hbm_rate(hw)


def engine_gemm_time_s(hw: HardwareProfile, m: float, n: float, k: float, recipe: str,
                       quantize: bool = True) -> float:
    """One inference-engine linear [m, k] @ [k, n] in `recipe` (ENGINE_RECIPES): the GEMM kernel's fixed time
    (KERNEL_OVERHEAD_S, the engine's per-kernel floor), its roofline at `engine_gemm_rate` (the curve's efficiency
    at this GEMM's FLOPs), and for FP8/FP4 the activation quantize kernel before it (not with `quantize` False:
    the kernel alone, as a tuner times it)."""
    if m <= 0 or n <= 0 or k <= 0:
        return 0.0
    dtype = "fp8" if recipe == "fp8_block" else recipe
    flops = gemm_flops(m, n, k)
    t = roofline_s(gemm_hbm_bytes(m, n, k, dtype), hbm_rate(hw), flops, engine_gemm_rate(hw, recipe, flops))
    return KERNEL_OVERHEAD_S + t + (activation_quant_time_s(hw, m, k, recipe) if quantize else 0.0)


def softmax_exp_s(hw: HardwareProfile, scores: float) -> float:
    """The softmax exponentials of `scores` attention scores (query-key pairs x query heads, one exponential
    each) at the profile's `attention_softmax_exp_per_s`, where they run between the two MMAs of the attention
    loop rather than under them: on Blackwell the second MMA waits for the softmax of the first's tile (NVIDIA,
    "Making Softmax More Efficient with NVIDIA Blackwell Ultra"); 0 where the profile has no rate (the kernels hide
    it, or the fitted attention terms carry it)."""
    rate = hw.attention_softmax_exp_per_s
    return scores / rate if rate > 0 and scores > 0 else 0.0


def attention_time_s(
    hw: HardwareProfile, flops: float, nbytes: float, dtype: str = "bf16", backward: bool = False,
    query_heads: float = 0.0, scores: float = 0.0, sparse: bool = False,
) -> float:
    """A fused attention kernel (flash style): its fixed time (the profile's prefill attention floor), then
    GEMM-like compute at a lower relative efficiency plus the softmax's exponentials (`scores`, softmax_exp_s; a
    backward recomputes them once), or HBM; a forward also pays its time per query row and head (`query_heads`:
    rows x heads; measured on forwards only, so a backward is priced without it). `sparse`: DeepSeek-V4's
    sparse-MLA core, at its own relative efficiencies."""
    if flops <= 0 and nbytes <= 0:
        return 0.0
    if sparse:
        rel = hw.attention_sparse_bwd_rel_efficiency if backward else hw.attention_sparse_fwd_rel_efficiency
    else:
        rel = hw.attention_bwd_rel_efficiency if backward else hw.attention_fwd_rel_efficiency
    rows = 0.0 if backward else query_heads * hw.attention_prefill_query_head_s
    compute = compute_time_s(hw, flops, dtype, rel) + softmax_exp_s(hw, scores)
    return hw.attention_prefill_floor_s + rows + max(compute, memory_bound_time_s(hw, nbytes))


def rows_hit_experts(experts: float, rows: float) -> float:
    """Expected experts with at least one of `rows` expert rows when each row lands on one of `experts` uniformly
    (learned routing at its most even): all of them once rows far exceed experts, about `rows` when rows are few."""
    if experts <= 0 or rows <= 0:
        return 0.0
    if experts <= 1:
        return 1.0
    return experts * -math.expm1(rows * math.log1p(-1.0 / experts))


@functools.lru_cache(maxsize=65536)
def expected_tiles(mean_rows: float, tile: int, experts: float = 0.0) -> float:
    """E[ceil(X / tile)] for one expert's rows X when rows land on `experts` experts uniformly at random, `mean_rows`
    each on average: X ~ Binomial(rows, 1 / experts), Poisson below 50 rows (exactly summed), normal above (with
    the binomial's variance; `experts` 0: Poisson's). An expert with no rows has no tile."""
    if mean_rows <= 0:
        return 0.0
    if tile <= 1:
        return mean_rows
    if mean_rows < 50.0:  # sum over j of P(X > j tile), the Poisson pmf built term by term
        p = cdf = math.exp(-mean_rows)
        total, x, limit = 0.0, 0, mean_rows + 12.0 * math.sqrt(mean_rows) + 20.0
        while x < limit:
            if x % tile == 0:
                total += 1.0 - cdf
            x += 1
            p *= mean_rows / x
            cdf += p
        return total
    sigma = math.sqrt(mean_rows * (1.0 - 1.0 / experts if experts > 1 else 1.0))
    j = max(0, math.floor((mean_rows - 8.0 * sigma) / tile))  # P(X > i tile) is 1 for every i < j
    total = float(j)
    while j * tile <= mean_rows + 8.0 * sigma:
        total += 0.5 * math.erfc((j * tile + 0.5 - mean_rows) / (sigma * math.sqrt(2.0)))
        j += 1
    return total


def grouped_tile_rows(hw: HardwareProfile, rows: float, experts_hit: float, engine: bool = False,
                      experts: float = 0.0) -> tuple[int, float]:
    """The grouped kernel's row tile and the rows it computes: each expert's rows in whole tiles (the engine's
    fused MoE `grouped_gemm_tile_rows`, the training kernel's `grouped_gemm_train_tile_rows`); with `experts`, each
    expert's random share of the rows (`expected_tiles`), else the rows spread evenly over the `experts_hit`."""
    tile = hw.grouped_gemm_tile_rows if engine else hw.grouped_gemm_train_tile_rows
    if experts > 0:
        return tile, experts * expected_tiles(rows / experts, tile, experts) * tile
    return tile, experts_hit * math.ceil(rows / experts_hit / tile - 1e-9) * tile


def grouped_gemm_time_s(
    hw: HardwareProfile,
    rows: float,
    experts_hit: float,
    n: float,
    k: float,
    dtype: str,
    *,
    wgrad: bool = False,
    out_bytes_per_element: float = 2.0,
    engine: bool = False,
    experts: float = 0.0,
    rel_efficiency: float = 1.0,
    multi_stream: bool = False,
) -> float:
    """One grouped GEMM kernel over an MoE layer's local experts: `rows` expert rows in all over the `experts_hit`
    experts that received any (experts without rows cost nothing: no weight read, no tile), each
    [rows_e, k] @ [k, n]; `wgrad`: the weight gradients [k, n] = X_e^T dY_e over the same rows.

    Each expert's rows run in tiles (a partly filled tile costs a whole one): `grouped_gemm_train_tile_rows` for
    the training kernel, `grouped_gemm_tile_rows` for the engine's fused MoE. `experts`: the local experts the rows
    were routed over, each row to one uniformly at random (learned routing at its most even): the tiles are
    `expected_tiles` of each expert's random share, so at 256 rows an expert on average and 128-row tiles most
    experts take three tiles, not two (an H200 ran such a layer 1.27-1.35x slower than one with exactly 256 rows
    each, studies/kernels/h200/README.md); 0: the rows spread evenly over the hit experts (a balanced routing, as
    aiconfigurator's `balanced` tables). The FLOPs of the tiles run at peak x the dense curve's max efficiency x
    `grouped_gemm_rel_efficiency` (no production-shape factor: the rows per expert set the shape); the bytes are
    each hit expert's weight (or weight gradient) once and the activations in and out. A fixed
    `grouped_gemm_fixed_s` per kernel, plus `grouped_gemm_per_expert_s` per hit expert where experts run one GEMM
    each (a sequential loop: 0 for a fused grouped kernel). `engine`: the inference engine's fused MoE kernel, at
    `grouped_gemm_engine_rel_efficiency` (a kernel family of its own); `rel_efficiency` scales the compute rate
    as in gemm_time_s. `multi_stream`: a training grouped GEMM run as one GEMM per expert spread over a few streams
    (TransformerEngine's GroupedLinear module by default, the stack's `grouped_gemm_launch`), each hit expert's GEMM
    adding `grouped_gemm_train_per_expert_s` to the one grouped launch."""
    if rows <= 0 or n <= 0 or k <= 0 or experts_hit <= 0:
        return 0.0
    _, padded_rows = grouped_tile_rows(hw, rows, experts_hit, engine, experts)
    rel = hw.grouped_gemm_engine_rel_efficiency if engine else hw.grouped_gemm_rel_efficiency
    rate = hw.peak(dtype) * hw.gemm_curve(dtype).max_efficiency * rel * rel_efficiency
    compute = gemm_flops(padded_rows, n, k) / rate
    q = dtype_bytes(dtype)
    if wgrad:  # reads X [rows, k] and dY [rows, n], writes each hit expert's [k, n] gradient
        nbytes = rows * (k + n) * q + experts_hit * k * n * out_bytes_per_element
    else:  # reads A [rows, k] and each hit expert's B [k, n], writes C [rows, n]
        nbytes = rows * k * q + experts_hit * k * n * q + rows * n * out_bytes_per_element
    per_expert = hw.grouped_gemm_per_expert_s + (hw.grouped_gemm_train_per_expert_s if multi_stream else 0.0)
    fixed = hw.grouped_gemm_fixed_s + experts_hit * per_expert
    return fixed + overlapped_s(compute, nbytes / hbm_rate(hw), hw.grouped_gemm_overlap_norm)
