"""Each measured kernel priced by the functions a step uses: the training GEMM and flash core, the engine's
rates and per-kernel floor, the collectives of `cost/comm.py` and the EP dispatch of `cost/dispatch.py`.

A lane is one way the model prices one kind of kernel: `gemm bf16` (the one GEMM function, training and
serving alike), `attention_prefill train` (the training flash core) and `attention_prefill engine` (the engine's
prefill attention) price the same rows two ways. A row goes to every lane of its op and variant.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

from perfmodel.cost.comm import GroupPlacement, collective_s, graph_all_reduce_s, peer_ramp
from perfmodel.cost.compute import (
    attention_time_s,
    engine_gemm_time_s,
    gemm_time_s,
    grouped_gemm_time_s,
    grouped_tile_rows,
    memory_bound_time_s,
    roofline_s,
    rows_hit_experts,
    softmax_exp_s,
)
from perfmodel.cost.dispatch import Dispatch, dispatch_s
from perfmodel.cost.serve.engine import KERNEL_FLOOR_S, engine_rates, expert_layer_s, expert_rows, gqa_kv_entry
from perfmodel.cost.train.attention import flash_core
from perfmodel.cost.train.work import ACT_BYTES, ATTN_BWD_FACTOR
from perfmodel.inputs.hardware import HardwareProfile
from perfmodel.kernels.table import KernelRow

# The model's dtype for a table's: block-scaled FP8 and MXFP8 run at the FP8 peak (their scales are priced as the
# FP8 GEMM's bytes); FP16 at BF16's. (FP32 appears only for collectives, priced by bytes.)
MODEL_DTYPE = {"fp32": "bf16", "bf16": "bf16", "fp16": "bf16", "fp8": "fp8", "fp8_block": "fp8", "mxfp8": "fp8",
               "fp4": "fp4"}


@dataclass(frozen=True, slots=True)
class Lane:
    name: str
    op: str
    variants: tuple[str, ...]
    price: Callable[[KernelRow, HardwareProfile], float]
    accepts: Callable[[KernelRow], bool] = lambda r: True


def _gemm(r: KernelRow, hw: HardwareProfile) -> float:
    # The GEMM kernel alone: training prices its FP8 casts as kernels of their own (cost/train/stage.py)
    return gemm_time_s(hw, r.get("m"), r.get("n"), r.get("k"), MODEL_DTYPE[r.dtype], quantize=False)


def _gemm_engine(r: KernelRow, hw: HardwareProfile) -> float:
    """An engine's linear layer as the engine prices it (cost/compute.py engine_gemm_time_s): the recipe's rate
    and, in FP8/FP4, the activation quantize kernel the measured op runs first (variant `engine-kernel`: the GEMM
    kernel alone, as AITER's tuner times it, its input already quantized)."""
    return engine_gemm_time_s(hw, r.get("m"), r.get("n"), r.get("k"), _gemm_lane_dtype(r.dtype),
                              quantize=r.variant != "engine-kernel")


def _flash_core(r: KernelRow) -> tuple[float, float]:
    """(FLOPs, bytes) of the training GQA core's forward (cost/train/attention.py flash_core): fresh sequences."""
    b, seq, d = r.get("batch"), r.get("seq"), r.get("head_dim")
    return flash_core(float(b * seq), float(b * seq), seq, r.get("heads"), r.get("kv_heads"), d, d, r.get("window"))


def _prefill_train(r: KernelRow, hw: HardwareProfile) -> float:
    """The training GQA core's forward, no cached prefix."""
    flops, nbytes = _flash_core(r)
    return attention_time_s(hw, flops, nbytes, "bf16", query_heads=_attention_fixed(r, hw)[0], scores=_scores(r))


def _backward_train(r: KernelRow, hw: HardwareProfile) -> float:
    """The training core's backward (cost/train/work.py Builder.attn, timed by cost/train/timing.py): the forward's
    FLOPs and bytes x ATTN_BWD_FACTOR at the profile's backward attention efficiency, the softmax's exponentials
    recomputed once, no per-query-row time (measured on forwards only)."""
    flops, nbytes = _flash_core(r)
    return attention_time_s(hw, ATTN_BWD_FACTOR * flops, ATTN_BWD_FACTOR * nbytes, "bf16", backward=True,
                            scores=_scores(r))


def _attention_fixed(r: KernelRow, hw: HardwareProfile) -> tuple[float, float, float, float]:
    """An attention row's fixed times beside its (query, key) pairs: (query rows x heads, time per query row and
    head, requests x KV heads' time (decode only), the kernel floor): what its price adds and `explain` lists."""
    if r.op == "attention_backward":  # a backward pays no per-query-row time (cost/compute.py attention_time_s)
        return (r.get("batch") * r.get("seq") * r.get("heads"), 0.0, 0.0, hw.attention_prefill_floor_s)
    if r.op == "attention_prefill":
        return (r.get("batch") * r.get("seq") * r.get("heads"), hw.attention_prefill_query_head_s, 0.0,
                hw.attention_prefill_floor_s)
    return (r.get("batch") * r.get("heads"), hw.attention_decode_query_head_s,  # EngineCost.attn_query_s
            r.get("batch") * max(1, r.get("kv_heads")) * hw.attention_decode_kv_head_s, hw.attention_decode_floor_s)


def _keys(r: KernelRow, before: int, new: int) -> float:
    """(query, key) pairs of `new` causal queries after `before` cached tokens, each capped by the window."""
    w = r.get("window")

    def upto(x: int) -> float:  # sum of min(p, w) for p = 1..x
        return x * (x + 1) / 2.0 if not w or x <= w else w * (w + 1) / 2.0 + (x - w) * w

    return upto(before + new) - upto(before)


def _scores(r: KernelRow) -> float:
    """A prefill row's softmax scores: its causal (query, key) pairs x query heads, one exponential each."""
    cached = r.get("cached") if r.op == "attention_prefill" else 0
    return r.get("batch") * _keys(r, cached, r.get("seq")) * r.get("heads")


def _prefill_engine(r: KernelRow, hw: HardwareProfile) -> float:
    """EngineCost.prefill_s: the causal (query, key) pairs' FLOPs at the engine's attention rate and their softmax
    exponentials (softmax_exp_s), each query row and head's fixed time (EngineCost.prefill_query_s), plus the
    prefill attention kernel's floor (EngineCost.floor_s)."""
    rates = engine_rates(hw, "bf16")
    _, entry_flops = gqa_kv_entry(r.get("head_dim"), r.get("kv_heads"), r.get("heads"), "bf16")
    pairs = r.get("batch") * _keys(r, r.get("cached"), r.get("seq"))
    queries, per, _, floor = _attention_fixed(r, hw)
    scores = pairs * r.get("heads")  # _scores: each pair once per query head
    return pairs * entry_flops / rates.attn_flops_per_s + softmax_exp_s(hw, scores) + queries * per + floor


def _decode_engine(r: KernelRow, hw: HardwareProfile) -> float:
    """EngineCost.attn_time: per request and cached token, the K/V read and its QK/PV on a roofline; per request,
    KV head and query head their fixed times (EngineCost.attn_query_s); plus the decode attention kernel's floor
    (EngineCost.floor_s)."""
    rates = engine_rates(hw, "bf16")
    kv_dtype = "fp8" if r.dtype in ("fp8", "fp8_block") else "bf16"
    e, fl = gqa_kv_entry(r.get("head_dim"), r.get("kv_heads"), r.get("heads"), kv_dtype)
    per_token = roofline_s(e, rates.hbm_bytes_per_s, fl, rates.attn_flops_per_s)
    kv = min(r.get("kv_len"), r.get("window")) if r.get("window") else r.get("kv_len")
    queries, per, kv_heads_s, floor = _attention_fixed(r, hw)
    return r.get("batch") * kv * per_token + queries * per + kv_heads_s + floor


def _moe_shape(r: KernelRow) -> tuple[float, float, float, int, float]:
    """rows on this GPU, hidden, intermediate per GPU, local experts, tokens (balanced routing)."""
    ep, tp = r.get("ep"), r.get("tp")
    local = max(1, r.get("experts") // ep)
    rows = r.get("tokens") * r.get("topk") / ep
    return rows, float(r.get("hidden")), r.get("inter") / tp, local, float(r.get("tokens"))


def misread(r: KernelRow, hw: HardwareProfile) -> bool:
    """A grouped GEMM row whose FLOPs at its measured time exceed the GPU's peak for its dtype: no kernel runs
    there, so the row is not what the project reads it as (its token count is another group's)."""
    if r.op != "grouped_gemm":
        return False
    rows, h, il, _, _ = _moe_shape(r)
    return 2.0 * rows * h * 3 * il / r.latency_s > hw.peak(MODEL_DTYPE[r.dtype])


def _moe_train(r: KernelRow, hw: HardwareProfile) -> float:
    """cost/train/layers.py `ffn_work`, timed as cost/train/stage.py times it: the gate-up and down grouped GEMMs
    over the local experts the rows reach, the GLU between."""
    rows, h, il, local, _ = _moe_shape(r)
    dt = MODEL_DTYPE[r.dtype]
    hit = rows_hit_experts(local, rows)
    spread = local if r.get("random_routing") else 0  # a balanced table's rows spread evenly
    fc1 = grouped_gemm_time_s(hw, rows, hit, 2 * il, h, dt, experts=spread)
    fc2 = grouped_gemm_time_s(hw, rows, hit, h, il, dt, experts=spread)
    return fc1 + fc2 + memory_bound_time_s(hw, rows * (2 * il + il) * ACT_BYTES, kernels=1)


def _moe_engine(r: KernelRow, hw: HardwareProfile) -> float:
    """EngineCost.gemm_s, expert part (engine.expert_layer_s: the grouped GEMMs over the experts the tokens hit),
    plus the engine's other MoE kernels' floors (router top-k, align/sort, activation)."""
    _, h, il, _, tokens = _moe_shape(r)
    dt = "fp8" if MODEL_DTYPE[r.dtype] == "fp8" else "bf16"
    return (expert_layer_s(hw, tokens, r.get("topk"), r.get("experts"), r.get("ep"), int(h), il, True, dt,
                           balanced=not r.get("random_routing")) + 3 * KERNEL_FLOOR_S)


def _placement(r: KernelRow, hw: HardwareProfile) -> GroupPlacement:
    nodes = max(1, r.get("nodes"))
    per = max(1, math.ceil(r.world_size / nodes))
    return GroupPlacement(r.world_size, min(per, r.world_size))


def _collective(r: KernelRow, hw: HardwareProfile) -> float:
    return collective_s(hw, r.op, float(r.get("bytes")), _placement(r, hw))  # type: ignore[arg-type]


def _graph_all_reduce(r: KernelRow, hw: HardwareProfile) -> float:
    """cost/comm.py graph_all_reduce_s: the engine's in-graph custom all-reduce (EngineCost.comm_s)."""
    return graph_all_reduce_s(hw, float(r.get("bytes")), _placement(r, hw))


def _dispatch(r: KernelRow, hw: HardwareProfile) -> float:
    """cost/dispatch.py: DeepEP-style deduplicated dispatch (FP8 in) or combine (BF16 out) of this GPU's tokens."""
    elem = 1.0 if r.op == "ep_dispatch" and r.dtype in ("fp8", "fp8_block") else 2.0
    d = Dispatch(r.get("tokens"), r.get("hidden"), r.get("topk"), r.get("experts"), elem, "deepep",
                 combine=r.op == "ep_combine")
    return dispatch_s(hw, d, _placement(r, hw))


LANES: tuple[Lane, ...] = (
    *(Lane(f"gemm {dt}", "gemm", ("",), _gemm) for dt in ("bf16", "fp8", "fp8_block", "fp4")),
    *(Lane(f"gemm {dt} engine", "gemm", ("engine", "engine-kernel"), _gemm_engine)
      for dt in ("bf16", "fp8", "fp8_block", "fp4")),
    Lane("attention_prefill train", "attention_prefill", ("", "engine"), _prefill_train,
         lambda r: r.get("cached") == 0),
    Lane("attention_prefill engine", "attention_prefill", ("", "engine"), _prefill_engine),
    Lane("attention_backward train", "attention_backward", ("",), _backward_train),
    Lane("attention_decode engine", "attention_decode", ("", "engine"), _decode_engine),
    Lane("grouped_gemm train", "grouped_gemm", ("", "engine"), _moe_train),
    Lane("grouped_gemm engine", "grouped_gemm", ("engine",), _moe_engine),  # a training kernel's rows: not the engine's
    *(Lane(f"{op} nccl", op, ("",), _collective)
      for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")),
    Lane("all_reduce graph", "all_reduce", ("graph",), _graph_all_reduce),
    Lane("ep_dispatch normal", "ep_dispatch", ("",), _dispatch),
    Lane("ep_combine normal", "ep_combine", ("",), _dispatch),
)
# Not priced: DeepEP's low-latency kernels (variant `ll`): no step the model simulates runs them (the engine's EP
# dispatch is SGLang's plain all-to-all; issue 23 adds engine EP), so their rows are counted as skipped.
LANE_NAMES = tuple(lane.name for lane in LANES)


def lanes_for(row: KernelRow) -> list[Lane]:
    return [lane for lane in _candidate_lanes(row.op, row.variant, row.dtype) if lane.accepts(row)]


@functools.cache
def _candidate_lanes(op: str, variant: str, dtype: str) -> tuple[Lane, ...]:
    """The lanes a row of this op, variant and dtype can go to, before each lane's own test of the row (asked once
    per combination: a full check reads 3.8 M rows)."""
    return tuple(lane for lane in LANES if lane.op == op and variant in lane.variants
                 and not (op == "gemm" and lane.name.split()[1] != _gemm_lane_dtype(dtype)))


def _gemm_lane_dtype(dtype: str) -> str:
    return {"fp16": "bf16", "mxfp8": "fp8_block"}.get(dtype, dtype)


def regime(row: KernelRow) -> str:
    """small: M < 256 rows (tokens) or a message under 1 MiB; bulk: training-sized (M >= 2048 with N and K >= 1024,
    a message of 64 MiB or more, 2048+ tokens per GPU); large: between."""
    op = row.op
    if op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
        b = row.get("bytes")
        return "small" if b < 2**20 else "bulk" if b >= 64 * 2**20 else "large"
    if op == "gemm":
        m, n, k = row.get("m"), row.get("n"), row.get("k")
        return "small" if m < 256 else "bulk" if m >= 2048 and min(n, k) >= 1024 else "large"
    tokens = {"attention_prefill": lambda: row.get("batch") * row.get("seq"),
              "attention_backward": lambda: row.get("batch") * row.get("seq"),
              "attention_decode": lambda: row.get("batch"),
              }.get(op, lambda: row.get("tokens"))()
    return "small" if tokens < 256 else "bulk" if tokens >= 2048 else "large"


Term = tuple[str, float, str]


def explain(lane: Lane, row: KernelRow, hw: HardwareProfile) -> list[Term]:
    """The terms of one row's price in `lane`, ending with the price itself (the lane's own function: the terms
    explain it, they do not recompute it)."""
    total = lane.price(row, hw)
    terms: list[Term] = []
    if row.op == "gemm":
        terms = _gemm_terms(row, hw)
    elif row.op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
        g = _placement(row, hw)
        # the fixed part is the same function's price of a 1-byte message (base + ring steps)
        floor = lane.price(dataclasses.replace(row, shape={**row.shape, "bytes": 1}), hw)
        terms = [("GPUs, per scale-up domain", g.size, f"x {g.gpus_per_node_in_group}"),
                 *([("small group's share of the 8-GPU bus efficiency (peer ramp)",
                     peer_ramp(hw, g.gpus_per_node_in_group), "")] if row.op != "all_to_all" else []),
                 ("per-call latency floor", floor * 1e6, "us"),
                 ("bytes moved / bus bandwidth", (total - floor) * 1e6, "us"),
                 ("bus bandwidth (nccl-tests busbw)", _busbw_gbs(row, total), "GB/s")]
    elif row.op in ("attention_prefill", "attention_decode", "attention_backward"):
        terms = _attention_terms(row, hw, total)
    elif row.op == "grouped_gemm":
        terms = _grouped_terms(row, hw, engine=lane.name.endswith("engine"))
    return [*terms, ("price", total * 1e6, "us")]


def _grouped_terms(row: KernelRow, hw: HardwareProfile, engine: bool) -> list[Term]:
    """cost/compute.py grouped_gemm_time_s for the layer's rows as the lane prices them: the experts they reach and
    the tiles they fill (each expert's random share, or spread evenly for a balanced table's row)."""
    rows, _, _, local, tokens = _moe_shape(row)
    if engine:  # engine.expert_layer_s's count: uniform top-k over all experts, an EP rank's share
        rows, hit, local = expert_rows(tokens, row.get("topk"), row.get("experts"), row.get("ep"))
    else:
        hit = rows_hit_experts(local, rows)
    routing = "random" if row.get("random_routing") else "balanced"
    tile, padded = grouped_tile_rows(hw, rows, hit, engine, local if row.get("random_routing") else 0.0)
    rel = hw.grouped_gemm_engine_rel_efficiency if engine else hw.grouped_gemm_rel_efficiency
    return [("expert rows on this GPU", rows, ""), ("local experts", local, ""),
            ("experts with rows (expected)", hit, ""),
            (f"row tile ({'engine' if engine else 'training'} kernel)", tile, "rows"),
            (f"rows in whole tiles ({routing} routing)", padded, ""),
            ("rate relative to the dense curve's max", rel, ""),
            ("compute, memory as p-norm: p (0: max)", hw.grouped_gemm_overlap_norm, ""),
            ("fixed time per kernel", hw.grouped_gemm_fixed_s * 1e6, "us")]


def _attention_terms(row: KernelRow, hw: HardwareProfile, total: float) -> list[Term]:
    prefill = row.op in ("attention_prefill", "attention_backward")  # a causal pass over fresh tokens
    queries, per, kv, floor = _attention_fixed(row, hw)
    softmax = softmax_exp_s(hw, _scores(row)) if prefill else 0.0
    return [("attention kernel floor", floor * 1e6, "us"),
            ("query rows x heads", queries, ""),
            ("time per query row and head", per * 1e9, "ns"),
            ("query rows' time", queries * per * 1e6, "us"),
            *([("requests x KV heads' time", kv * 1e6, "us")] if not prefill else []),
            *([("softmax exponentials' time", softmax * 1e6, "us")] if prefill else []),
            ("(query, key) pairs: compute or K/V reads", (total - floor - queries * per - kv - softmax) * 1e6, "us")]


def _gemm_terms(row: KernelRow, hw: HardwareProfile) -> list[Term]:
    """cost/compute.py gemm_time_s: the price is the fixed time plus the longer of the compute and memory times."""
    from perfmodel.cost.compute import PRODUCTION_SHAPE_FACTOR, gemm_flops, gemm_hbm_bytes, hbm_rate

    dt = MODEL_DTYPE[row.dtype]
    m, n, k = row.get("m"), row.get("n"), row.get("k")
    flops = gemm_flops(m, n, k)
    curve = hw.gemm_curve(dt)
    large_rate = hw.peak(dt) * curve.max_efficiency * PRODUCTION_SHAPE_FACTOR
    nbytes = gemm_hbm_bytes(m, n, k, dt)
    return [("FLOPs", flops, "FLOP"),
            (f"peak {dt}", hw.peak(dt) / 1e12, "TFLOP/s"),
            ("curve max efficiency", curve.max_efficiency, ""),
            ("production shape factor", PRODUCTION_SHAPE_FACTOR, ""),
            ("curve half_flops", curve.half_flops, "FLOP"),
            ("fixed time (half_flops at the large-GEMM rate)", curve.half_flops / large_rate * 1e6, "us"),
            ("compute time", flops / large_rate * 1e6, "us"),
            ("HBM bytes (A, B read; C written)", nbytes, "B"),
            ("HBM rate", hbm_rate(hw) / 1e9, "GB/s"),
            ("memory time", nbytes / hbm_rate(hw) * 1e6, "us")]


def _busbw_gbs(row: KernelRow, time_s: float) -> float:
    from perfmodel.cost.comm import bus_bandwidth_bytes_per_s

    return bus_bandwidth_bytes_per_s(row.op, row.get("bytes"), row.world_size, time_s) / 1e9  # type: ignore[arg-type]
