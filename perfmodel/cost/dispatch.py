"""MoE expert-parallel dispatch and combine: the one place EP all-to-all traffic is priced, for training
(`cost/train/layers.py`) and serving (`cost/serve/engine.py`) alike.

A `Dispatch` says what one GPU sends (its tokens, their width and element size, the routing fan-out) and with which
kernels; `dispatch_s` times it on the EP group: Megatron's alltoall dispatcher sends one copy per (token, expert)
pair; a DeepEP-style dispatcher (`deepep`, and NVIDIA's Hybrid-EP, `hybridep`) one copy per destination GPU and,
across nodes, per destination node.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfmodel.cost.comm import GroupPlacement, all_to_all_s, scale_up_raw_bytes_per_s
from perfmodel.inputs.hardware import HardwareProfile
from perfmodel.inputs.job import MoEDispatcher

# NVIDIA Hybrid-EP (TMA copies on NVLink, warp-specialised pipelines; deepseek-ai/DeepEP branch hybrid-ep,
# docs/README_Hybrid-EP.md, "Performance Results"): its algorithm bandwidth inside one NVLink domain, 4,096 tokens of
# hidden 7,168, top-8 over 8 local experts a rank, through the torch API (the call's own fixed costs included), as a
# share of the raw per-GPU NVLink rate (900 GB/s on Blackwell) once counted as this model counts bytes (a rank's
# copies to the other ranks: the algorithm bandwidth's received bytes include the rank's own share, x (n - 1) / n).
# B200, 8 ranks, 16 SMs: dispatch BF16 535.94, FP8 409.71, combine 530.86 GB/s; GB200 at 16 and 32 SMs over 8-36
# ranks holds BF16 dispatch at 470-550 and combine at 418-569 GB/s: the link binds, not the SMs (DeepEP at 16 SMs on
# the same B200 test: 348 / 246 / 302). BF16: 536 x 7/8 / 900 = 0.52; FP8 bytes: 410 x 7/8 / 900 = 0.40 (half the
# bytes a token, not half the time). Hopper's NVLink takes the same shares (assumption: the document measures
# Hybrid-EP on H100 only across InfiniBand nodes, where this model prices the NIC as for DeepEP).
HYBRID_EP_LINK_SHARE = {("dispatch", 2.0): 0.52, ("dispatch", 1.0): 0.40, ("combine", 2.0): 0.52}


@dataclass(frozen=True, slots=True)
class Dispatch:
    tokens: float  # tokens this GPU routes (the busiest rank's, expert-load imbalance included)
    hidden: int
    top_k: int
    experts: int
    elem_bytes: float  # FP8 dispatch, BF16 combine
    kernel: MoEDispatcher = "alltoall"  # deepep / hybridep: one copy per destination GPU (and node)
    combine: bool = False  # the return trip (expert outputs back to their tokens' GPUs): the combine kernel

    @property
    def dedup(self) -> bool:
        """One copy per destination GPU (and node), not per (token, expert): the DeepEP-style kernels."""
        return self.kernel != "alltoall"

    @property
    def send_bytes(self) -> float:
        """This GPU's send buffer: one copy per token when deduplicating (the fan-out is priced from top_k and
        experts), else one per (token, expert) pair."""
        return self.tokens * self.hidden * self.elem_bytes * (1 if self.dedup else self.top_k)


def dispatch_s(hw: HardwareProfile, d: Dispatch, g: GroupPlacement) -> float:
    if d.dedup:
        hybrid = d.elem_bytes if d.kernel == "hybridep" else 0.0
        return dedup_all_to_all_s(hw, d.send_bytes, d.top_k, d.experts, g, d.combine, hybrid_elem_bytes=hybrid)
    return all_to_all_s(hw, d.send_bytes, g)


def overlap_share(hw: HardwareProfile, kernel: MoEDispatcher, hybridep_units: int) -> float:
    """The share of a GPU's SMs (CUs) an EP all-to-all's kernels take while they run beside compute (an F&B pair's
    overlap): Hybrid-EP's `hybridep_units` (megatron-core --moe-hybridep-num-sms), DeepEP's the profile's
    `ep_kernel.units`; Megatron's alltoall dispatcher (NCCL / RCCL all-to-all, one CTA per channel) taken at the
    same count (assumption). 0 where the profile does not give its SM count."""
    if hw.compute_units <= 0:
        return 0.0
    units = hybridep_units if kernel == "hybridep" else hw.ep_units
    return min(1.0, units / hw.compute_units)


def _hit_probability(experts: int, top_k: int, owned: float) -> float:
    """Chance that a token's top_k distinct experts, drawn uniformly from `experts`, include at least one of the
    `owned` experts (those of one GPU, or of one node)."""
    miss = 1.0
    for i in range(top_k):
        if experts - i <= 0:
            return 1.0
        miss *= max(0.0, (experts - owned - i) / (experts - i))
    return 1.0 - miss


def dedup_all_to_all_s(hw: HardwareProfile, token_bytes: float, top_k: int, experts: int, g: GroupPlacement,
                       combine: bool = False, hybrid_elem_bytes: float = 0.0) -> float:
    """A DeepEP-style MoE dispatch (or combine) of `token_bytes` (one copy of each of this GPU's tokens): a token
    goes once to each GPU of the node that holds one of its experts and, across nodes, once to each destination
    node over the NIC, where the receiving GPU forwards it on scale-up to the node's other destination GPUs
    (DeepEP normal kernels; https://github.com/deepseek-ai/DeepEP). Experts are spread evenly and hit uniformly;
    learned-routing skew is in `token_bytes` (the busiest rank's load).

    The kernel, not the link, sets the pace inside the domain: it runs on the `ep_units` SMs (CUs) the framework
    gives it, each moving `ep_*_unit_bytes_per_s`, and pays a per-call floor (notify and layout kernels, the host
    sync of the receive counts): the profile's ep_kernel block (fitted to measured DeepEP normal-mode kernels).
    With `hybrid_elem_bytes` (the element size of a Hybrid-EP call), NVIDIA's Hybrid-EP kernels instead: inside the
    scale-up domain its measured share of the raw link (HYBRID_EP_LINK_SHARE, call costs included), across nodes the
    NIC as DeepEP's."""
    n = g.size
    if n <= 1 or token_bytes <= 0:
        return 0.0
    k = max(1, g.gpus_per_node_in_group)
    nodes = max(1, n // k)
    p_gpu = _hit_probability(experts, top_k, experts / n)
    p_node = _hit_probability(experts, top_k, experts * k / n)
    inter_bytes = token_bytes * (nodes - 1) * p_node
    intra_bytes = token_bytes * (k - 1) * p_gpu
    if nodes > 1 and k > 1 and p_node > 0:
        # tokens that arrived over the NIC go on to the node's other destination GPUs
        intra_bytes += inter_bytes * max(0.0, k * p_gpu / p_node - 1.0)
    inter = inter_bytes / (hw.nic_bytes_per_s * hw.all_to_all_efficiency_scale_out) if n > k else 0.0
    if hybrid_elem_bytes:
        key = ("combine", 2.0) if combine else ("dispatch", 1.0 if hybrid_elem_bytes < 2 else 2.0)
        share = HYBRID_EP_LINK_SHARE[key]
        intra = intra_bytes / (scale_up_raw_bytes_per_s(hw, k) * share) if k > 1 else 0.0
        return max(intra, inter)
    unit_rate = hw.ep_units * (hw.ep_combine_unit_bytes_per_s if combine else hw.ep_dispatch_unit_bytes_per_s)
    link_rate = scale_up_raw_bytes_per_s(hw, k) * hw.all_to_all_efficiency_scale_up
    intra = intra_bytes / min(unit_rate, link_rate) if k > 1 else 0.0
    return ep_call_floor_s(hw, combine) + max(intra, inter)


def ep_call_floor_s(hw: HardwareProfile, combine: bool = False) -> float:
    """A DeepEP normal-mode call's fixed time. A combine's is the profile's combine floor (its notify kernel and
    launch). A dispatch's adds what the combine does not make, the host's round trip: after its notify kernel the
    CPU busy-waits on the host-mapped receive counts, then allocates the receive tensors and launches the dispatch
    kernel, the GPU idle meanwhile (deepseek-ai/DeepEP csrc/deep_ep.cpp Buffer::intranode_dispatch, "Synchronize
    total received tokens and tokens per expert", commit 2df3680; Buffer::intranode_combine has no such wait).
    That part, the dispatch floor less the combine floor (both fitted on x86 hosts), runs at the host CPU's pace
    (`host_op_time_factor`: a Grace issues host work 2.75x slower)."""
    if combine:
        return hw.ep_combine_floor_s
    host_s = max(0.0, hw.ep_dispatch_floor_s - hw.ep_combine_floor_s)
    return hw.ep_combine_floor_s + host_s * hw.host_op_time_factor
