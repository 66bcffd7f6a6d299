"""MoE expert-parallel dispatch and combine: the one place EP all-to-all traffic is priced, for training
(`cost/train/layers.py`) and serving (`cost/serve/engine.py`) alike.

A `Dispatch` says what one GPU sends (its tokens, their width and element size, the routing fan-out); `dispatch_s`
times it on the EP group: Megatron's alltoall dispatcher sends one copy per (token, expert) pair; a DeepEP-style
dispatcher (`dedup`) one copy per destination GPU and, across nodes, per destination node.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfmodel.cost.comm import GroupPlacement, all_to_all_s, scale_up_raw_bytes_per_s
from perfmodel.inputs.hardware import HardwareProfile


@dataclass(frozen=True, slots=True)
class Dispatch:
    tokens: float  # tokens this GPU routes (the busiest rank's, expert-load imbalance included)
    hidden: int
    top_k: int
    experts: int
    elem_bytes: float  # FP8 dispatch, BF16 combine
    dedup: bool = False  # DeepEP-style: one copy per destination GPU (and node), not per (token, expert)
    combine: bool = False  # the return trip (expert outputs back to their tokens' GPUs): the combine kernel

    @property
    def send_bytes(self) -> float:
        """This GPU's send buffer: one copy per token when deduplicating (the fan-out is priced from top_k and
        experts), else one per (token, expert) pair."""
        return self.tokens * self.hidden * self.elem_bytes * (1 if self.dedup else self.top_k)


def dispatch_s(hw: HardwareProfile, d: Dispatch, g: GroupPlacement) -> float:
    if d.dedup:
        return dedup_all_to_all_s(hw, d.send_bytes, d.top_k, d.experts, g, d.combine)
    return all_to_all_s(hw, d.send_bytes, g)


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
                       combine: bool = False) -> float:
    """A DeepEP-style MoE dispatch (or combine) of `token_bytes` (one copy of each of this GPU's tokens): a token
    goes once to each GPU of the node that holds one of its experts and, across nodes, once to each destination
    node over the NIC, where the receiving GPU forwards it on scale-up to the node's other destination GPUs
    (DeepEP normal kernels; https://github.com/deepseek-ai/DeepEP). Experts are spread evenly and hit uniformly;
    learned-routing skew is in `token_bytes` (the busiest rank's load).

    The kernel, not the link, sets the pace inside the domain: it runs on the `ep_units` SMs (CUs) the framework
    gives it, each moving `ep_*_unit_bytes_per_s`, and pays a per-call floor (notify and layout kernels, the host
    sync of the receive counts): the profile's ep_kernel block (fitted to measured DeepEP normal-mode kernels)."""
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
    unit_rate = hw.ep_units * (hw.ep_combine_unit_bytes_per_s if combine else hw.ep_dispatch_unit_bytes_per_s)
    link_rate = scale_up_raw_bytes_per_s(hw, k) * hw.all_to_all_efficiency_scale_up
    intra = intra_bytes / min(unit_rate, link_rate) if k > 1 else 0.0
    inter = inter_bytes / (hw.nic_bytes_per_s * hw.all_to_all_efficiency_scale_out) if n > k else 0.0
    return (hw.ep_combine_floor_s if combine else hw.ep_dispatch_floor_s) + max(intra, inter)
