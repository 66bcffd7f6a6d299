"""Times of a work list (`work.py`) on a GPU: each GEMM forward, input gradient and weight gradient, each fused
kernel on its roofline, each collective on its group placement; what runs in which Megatron submodule, so that
`stage.py` can replay the recomputed ones.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from perfmodel.cost.comm import GroupPlacement, collective_s
from perfmodel.cost.compute import (
    attention_time_s,
    gemm_time_s,
    grouped_gemm_time_s,
    memory_bound_time_s,
    rows_hit_experts,
    train_fp8_gemm_rel,
)
from perfmodel.cost.dispatch import dispatch_s
from perfmodel.cost.train.eager import as_eager
from perfmodel.cost.train.work import Gemm, Kernel, Work, replayed
from perfmodel.inputs.hardware import HardwareProfile

COMM_KINDS = ("tp", "cp", "ep_a2a", "etp")
WGRAD_OUT_BYTES = 8.0  # weight-gradient GEMMs accumulate into the FP32 main_grad (read + write 4 B), Megatron
# gradient_accumulation_fusion default


@dataclass
class Times:
    fwd: float = 0.0
    bwd_in: float = 0.0
    bwd_w: float = 0.0
    fwd_comm: dict[str, float] = dataclasses.field(default_factory=lambda: dict.fromkeys(COMM_KINDS, 0.0))
    bwd_comm: dict[str, float] = dataclasses.field(default_factory=lambda: dict.fromkeys(COMM_KINDS, 0.0))
    # forward compute and exposed forward communication by submodule path (work.py), what recompute replays
    module_fwd: dict[str, float] = dataclasses.field(default_factory=dict)
    module_comm: dict[tuple[str, str], float] = dataclasses.field(default_factory=dict)  # (path, kind)
    # the EP all-to-all by (phase, is the combine kernel): which of them an F&B pair hides under what (sim/pipeline)
    ep_parts: dict[tuple[str, bool], float] = dataclasses.field(default_factory=dict)

    def add(self, o: Times) -> None:
        """Sum into a chunk's totals; the per-submodule times stay per layer (what recompute replays is read from
        each layer's own Times)."""
        self.fwd += o.fwd
        self.bwd_in += o.bwd_in
        self.bwd_w += o.bwd_w
        for k in COMM_KINDS:
            self.fwd_comm[k] += o.fwd_comm[k]
            self.bwd_comm[k] += o.bwd_comm[k]
        for part, dt in o.ep_parts.items():
            self.ep_parts[part] = self.ep_parts.get(part, 0.0) + dt

    def scaled(self, fwd: float, bwd: float) -> Times:
        """Compute times x `fwd` (forward) and `bwd` (backward); communication as it was."""
        return Times(self.fwd * fwd, self.bwd_in * bwd, self.bwd_w * bwd, dict(self.fwd_comm), dict(self.bwd_comm),
                     {path: dt * fwd for path, dt in self.module_fwd.items()}, dict(self.module_comm),
                     dict(self.ep_parts))

    def replayed_fwd(self, recomputed: frozenset[str]) -> tuple[float, dict[str, float]]:
        """(forward compute, forward communication by kind) of the submodules `recomputed` replays."""
        comm = dict.fromkeys(COMM_KINDS, 0.0)
        for (path, kind), dt in self.module_comm.items():
            if replayed(path, recomputed):
                comm[kind] += dt
        return sum(dt for path, dt in self.module_fwd.items() if replayed(path, recomputed)), comm


def _kernel_time(hw: HardwareProfile, k: Kernel, backward: bool) -> float:
    flops, nbytes = (k.bwd_flops, k.bwd_hbm_bytes) if backward else (k.flops, k.hbm_bytes)
    if flops <= 0 and nbytes <= 0:
        return 0.0
    if k.kind == "attn":
        return attention_time_s(hw, flops, nbytes, k.dtype, backward, k.query_heads, k.scores, k.sparse)
    return memory_bound_time_s(hw, nbytes, k.kernels)


def _grouped_times(hw: HardwareProfile, g: Gemm, t: Times, rel: float, multi_stream: bool) -> float:
    """An MoE layer's grouped GEMM into `t`: forward, its input gradient (the same rows against the transposed
    weights) and its weight gradients, over the experts its rows reach (cost/compute.py grouped_gemm_time_s).
    `multi_stream`: one GEMM per expert (cost/compute.py grouped_gemm_time_s). Returns the input-gradient time
    (what Megatron's async all-gather can hide under)."""
    rows = g.m * g.batch  # routed over g.batch local experts, each row to one at random
    hit = rows_hit_experts(g.batch, rows)
    how = {"experts": g.batch, "rel_efficiency": rel, "multi_stream": multi_stream}
    t.fwd += grouped_gemm_time_s(hw, rows, hit, g.n, g.k, g.dtype, **how)
    dgrad_s = grouped_gemm_time_s(hw, rows, hit, g.k, g.n, g.dtype, **how)
    t.bwd_in += dgrad_s
    t.bwd_w += grouped_gemm_time_s(hw, rows, hit, g.n, g.k, g.dtype, wgrad=True,
                                   out_bytes_per_element=WGRAD_OUT_BYTES, **how)
    return dgrad_s


def time_work(hw: HardwareProfile, w: Work, places: dict[str, GroupPlacement], eager: bool = False,
              fp8_recipe: str = "delayed", multi_stream: bool = False) -> Times:
    """Times of a work list; `eager`: its fused elementwise kernels run as chains of ATen ops (eager.py); its FP8
    GEMMs at `fp8_recipe`'s kernel rate (train_fp8_gemm_rel); `multi_stream`: its grouped GEMMs one GEMM per
    expert (the stack's `grouped_gemm_launch`)."""
    t = Times()
    dgrad_s = 0.0
    fp8_rel = train_fp8_gemm_rel(hw, fp8_recipe)

    def in_module(path: str, fwd_s: float) -> None:
        if path:
            t.module_fwd[path] = t.module_fwd.get(path, 0.0) + fwd_s

    for g in w.gemms:
        rel = fp8_rel if g.dtype == "fp8" else 1.0
        if g.grouped:
            before = t.fwd
            dgrad_s += _grouped_times(hw, g, t, rel, multi_stream)
            in_module(g.module, t.fwd - before)
            continue
        # FP8 casts are kernels of the Work (layers.py fp8_cast_work), not part of the GEMM's time; a materialized
        # attention's scores and values are one batched kernel each (Megatron's baddbmm / bmm), its gradients too
        one = g.core_attention
        f = gemm_time_s(hw, g.m, g.n, g.k, g.dtype, g.batch, quantize=False, one_kernel=one, rel_efficiency=rel)
        t.fwd += f
        in_module(g.module, f)
        dx = gemm_time_s(hw, g.m, g.k, g.n, g.dtype, g.batch, quantize=False, one_kernel=one,
                         rel_efficiency=rel)  # dX = dY W^T
        t.bwd_in += dx
        if g.core_attention:  # activation x activation (scores, PV): the second gradient is an input gradient too
            t.bwd_in += gemm_time_s(hw, g.k, g.n, g.m, g.dtype, g.batch, quantize=False, one_kernel=True,
                                    rel_efficiency=rel)
        else:
            dgrad_s += dx
            t.bwd_w += gemm_time_s(hw, g.k, g.n, g.m, g.dtype, g.batch, out_bytes_per_element=WGRAD_OUT_BYTES,
                                   quantize=False, rel_efficiency=rel)
    attn_fwd = attn_bwd = 0.0
    for k in w.kernels:
        k = as_eager(k) if eager else k
        f, b = _kernel_time(hw, k, False), _kernel_time(hw, k, True)
        t.fwd += f
        if k.bwd_weight:
            t.bwd_w += b
        else:
            t.bwd_in += b
        if k.kind == "attn":
            attn_fwd += f
            attn_bwd += b
        in_module(k.module, f)
    overlapped = {"fwd": 0.0, "bwd": 0.0}
    under_dgrad: dict[str, float] = {}
    for c in w.comms:
        if c.dispatch is not None:
            dt = dispatch_s(hw, c.dispatch, places[c.kind])
        else:
            dt = collective_s(hw, c.op, c.nbytes, places[c.kind])
        if c.overlaps_attention:
            overlapped[c.phase] += dt
        elif c.overlaps_dgrad:
            under_dgrad[c.kind] = under_dgrad.get(c.kind, 0.0) + dt
        else:
            (t.fwd_comm if c.phase == "fwd" else t.bwd_comm)[c.kind] += dt
            if c.dispatch is not None:
                part = (c.phase, c.dispatch.combine)
                t.ep_parts[part] = t.ep_parts.get(part, 0.0) + dt
            if c.phase == "fwd" and c.module:
                t.module_comm[c.module, c.kind] = t.module_comm.get((c.module, c.kind), 0.0) + dt
    for kind, dt in under_dgrad.items():  # only what outlasts the input-gradient GEMMs it runs under is exposed
        t.bwd_comm[kind] += max(0.0, dt - dgrad_s)
    t.fwd_comm["cp"] += max(0.0, overlapped["fwd"] - attn_fwd)
    t.bwd_comm["cp"] += max(0.0, overlapped["bwd"] - attn_bwd)
    return t
