"""Collectives and point-to-point transfers: `latency + bytes / effective bandwidth`, busbw conventions.

Byte arguments are the full buffer as NCCL/RCCL name it: all-reduce and broadcast the buffer, all-gather the
gathered output, reduce-scatter the input before scattering, all-to-all the per-GPU send buffer (its own chunk
included), send/recv the message. Each GPU moves 2(n-1)/n of the buffer for all-reduce and (n-1)/n for
all-gather, reduce-scatter and all-to-all (docs/reference/hardware.md "Bandwidth conventions", S2 network/README).

Where the ranks sit decides the link. A group lies inside one scale-up domain (an xGMI node, an NVSwitch node,
a 72-GPU NVL72 rack) or spans several; `GroupPlacement` says how many of its ranks share a domain.
- xGMI full mesh: a GPU reaches each peer over one dedicated link, so a k-GPU group uses k-1 links, not the
  aggregate: TP2 on an 8-GPU MI300X node gets 1/7 of it (docs/reference/hardware.md 2c: 2 of 8 MI300X, 47.7 vs
  312.9 GB/s busbw, "6.5x slower"; 2g "Partial-node jobs on an xGMI mesh").
- NVSwitch: every group gets the GPU's full NVLink bandwidth.
- Across domains: the GPU's own NIC (one per GPU in every profile). All-reduce is hierarchical: reduce-scatter
  inside the domain, all-reduce of 1/g of the buffer across domains over the NICs, all-gather inside the domain.
Bus efficiencies and per-call latencies are the profile's (scale-up vs scale-out).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from perfmodel.inputs.hardware import HardwareProfile

if TYPE_CHECKING:
    from perfmodel.inputs.scenario import Scenario

GroupKind = Literal["tp", "cp", "ep", "etp", "dp", "dp_cp", "expert_dp", "pp"]
CollectiveOp = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv", "broadcast"]


@dataclass(frozen=True, slots=True)
class GroupPlacement:
    """A process group: `size` ranks, of which `gpus_per_node_in_group` share one scale-up domain."""

    size: int
    gpus_per_node_in_group: int

    def __post_init__(self) -> None:
        if self.size < 1 or not 1 <= self.gpus_per_node_in_group <= self.size:
            raise ValueError(f"bad placement: size {self.size}, per domain {self.gpus_per_node_in_group}")

    @property
    def domains(self) -> int:
        return -(-self.size // self.gpus_per_node_in_group)

    @property
    def intra(self) -> bool:
        return self.domains == 1


def placement_from_stride(hw: HardwareProfile, size: int, stride: int) -> GroupPlacement:
    """The group {0, stride, 2 stride, ...}: ranks fill scale-up domains of `scale_up_domain_gpus` in order."""
    domain = max(1, hw.scale_up_domain_gpus)
    counts: dict[int, int] = {}
    for i in range(size):
        d = (i * stride) // domain
        counts[d] = counts.get(d, 0) + 1
    return GroupPlacement(size, max(counts.values()))


def group_strides(scn: Scenario) -> dict[str, tuple[int, int]]:
    """(size, stride) of every group in Megatron's default rank order tp-cp-ep-dp-pp (TP innermost, PP
    outermost; megatron/core/parallel_state.py RankGenerator order "tp-cp-ep-dp-pp"). Experts use their own
    order etp-ep-edp-pp over the same ranks."""
    lay = scn.layout
    tp, cp, dp, pp = lay.tp, lay.cp, scn.dp, lay.pp
    etp, ep, edp = lay.etp, lay.ep, scn.expert_dp
    return {
        "tp": (tp, 1),
        "cp": (cp, tp),
        "dp": (dp, tp * cp),
        "dp_cp": (dp * cp, tp),  # dense gradients are reduced over data x context parallel ranks
        "pp": (pp, tp * cp * dp),
        "etp": (etp, 1),
        "ep": (ep, etp),
        "expert_dp": (edp, etp * ep),
    }


def group_placement(scn: Scenario, kind: GroupKind) -> GroupPlacement:
    size, stride = group_strides(scn)[kind]
    return placement_from_stride(scn.hardware, size, stride)


# ---------------------------------------------------------------------------------------------------------------
# Bandwidths (bytes/s per GPU, one direction)


def scale_up_raw_bytes_per_s(hw: HardwareProfile, ranks_in_domain: int) -> float:
    """Raw per-GPU bandwidth a GPU can use towards the other ranks of its group inside one domain."""
    if ranks_in_domain <= 1:
        return hw.scale_up_gpu_bytes_per_s
    if hw.scale_up_topology == "full_mesh":
        return min((ranks_in_domain - 1) * hw.scale_up_link_bytes_per_s, hw.scale_up_gpu_bytes_per_s)
    return hw.scale_up_gpu_bytes_per_s


# The group size the profiles' scale-up bus efficiencies are quoted at (nccl-tests on one 8-GPU node: 7 peers).
REFERENCE_PEERS = 7


def peer_ramp(hw: HardwareProfile, k: int) -> float:
    """The share of its 8-GPU bus efficiency a ring collective over `k` ranks of one switch domain reaches:
    p (7 + c) / (7 (p + c)) for p = k - 1 < 7 peers, c the profile's `collective_peer_ramp`; 1 from 7 peers on and
    on a full mesh (whose links per peer `scale_up_raw_bytes_per_s` counts). NCCL on NVSwitch moves a 2-GPU
    group's buffers at 0.66-0.83 and a 4-GPU group's at 0.84-0.98 of the 8-GPU busbw, on every NVIDIA GPU
    measured (aiconfigurator-core 0.12.0 nccl tables: A100, H100, H200, B200, GB200, GB300)."""
    p = k - 1
    c = hw.collective_peer_ramp
    if hw.scale_up_topology == "full_mesh" or c <= 0 or p >= REFERENCE_PEERS or p < 1:
        return 1.0
    return p * (REFERENCE_PEERS + c) / (REFERENCE_PEERS * (p + c))


def _busbw_up(hw: HardwareProfile, k: int) -> float:
    return scale_up_raw_bytes_per_s(hw, k) * hw.collective_bus_efficiency_scale_up * peer_ramp(hw, k)


def _busbw_out(hw: HardwareProfile) -> float:
    return hw.nic_bytes_per_s * hw.collective_bus_efficiency_scale_out


def _latency(hw: HardwareProfile, g: GroupPlacement, ring_steps_up: int = 0, ring_steps_out: int = 0) -> float:
    """A collective's fixed time: the per-call base of the fabric it crosses, plus a step latency per ring step on
    each fabric (NCCL's small-message time grows with the ring: on 8 H100s an all-reduce's 14 steps take 16 us
    where 2 GPUs' 2 steps take 6.6 us; the profiles' collective_step_latency_s)."""
    base = hw.collective_latency_scale_up_s if g.intra else hw.collective_latency_scale_out_s
    return (base + ring_steps_up * hw.collective_step_latency_scale_up_s
            + ring_steps_out * hw.collective_step_latency_scale_out_s)


# ---------------------------------------------------------------------------------------------------------------
# Collectives


def all_reduce_s(hw: HardwareProfile, nbytes: float, g: GroupPlacement) -> float:
    n = g.size
    if n <= 1 or nbytes <= 0:
        return 0.0
    if g.intra:
        return _scale_up(hw, _latency(hw, g, 2 * (n - 1)), 2 * (n - 1) / n * nbytes / _busbw_up(hw, n))
    k, d = g.gpus_per_node_in_group, g.domains
    t = 2 * (d - 1) / d * (nbytes / k) / _busbw_out(hw)  # inter-domain all-reduce of this GPU's 1/k slice
    if k > 1:
        t += 2 * (k - 1) / k * nbytes / _busbw_up(hw, k)  # intra reduce-scatter + intra all-gather
    return _latency(hw, g, 2 * (k - 1), 2 * (d - 1)) + t


def _protocols(fixed_s: float, transfer_s: float, small_bw_fraction: float, bulk_extra_s: float) -> float:
    """The faster of two protocols for one message (NCCL's tuner picks per size): a low-latency one moving the bytes
    at a fraction of the bus bandwidth, and a bulk one at the full bus bandwidth after an extra latency. Small
    messages take the first, large ones the second; in between both are slower than `fixed + transfer` (8 H100s
    all-reduce 1-64 MiB 1.5x slower than that line, the aiconfigurator-core tables)."""
    return fixed_s + min(transfer_s / small_bw_fraction, bulk_extra_s + transfer_s)


def _scale_up(hw: HardwareProfile, fixed_s: float, transfer_s: float) -> float:
    return _protocols(fixed_s, transfer_s, hw.small_protocol_bw_fraction, hw.small_protocol_bulk_extra_latency_s)


# The most GPUs an engine's custom all-reduce takes: vLLM's CustomAllreduce._SUPPORTED_WORLD_SIZES = [2, 4, 6, 8]
# (vllm/distributed/device_communicators/custom_all_reduce.py) and SGLang's the same (its custom_all_reduce.py); a
# larger tensor-parallel group, even inside one NVL72 rack, all-reduces through NCCL.
CUSTOM_ALL_REDUCE_MAX_GPUS = 8


def graph_all_reduce_s(hw: HardwareProfile, nbytes: float, g: GroupPlacement) -> float:
    """An inference engine's all-reduce inside one scale-up domain, captured in a CUDA/HIP graph (SGLang's and
    vLLM's custom all-reduce: one kernel, no NCCL launch or protocol set-up): the profile's in-graph floor plus the
    bus-bandwidth term; across domains, or over more GPUs than the custom all-reduce takes
    (CUSTOM_ALL_REDUCE_MAX_GPUS), the engine falls back to the NCCL all-reduce."""
    n = g.size
    if n <= 1 or nbytes <= 0:
        return 0.0
    if not g.intra or n > CUSTOM_ALL_REDUCE_MAX_GPUS:
        return all_reduce_s(hw, nbytes, g)
    return _protocols(hw.graph_all_reduce_latency_s, 2 * (n - 1) / n * nbytes / _busbw_up(hw, n),
                      hw.graph_small_protocol_bw_fraction, hw.graph_small_protocol_bulk_extra_latency_s)


def all_gather_s(hw: HardwareProfile, nbytes: float, g: GroupPlacement) -> float:
    """`nbytes` = the gathered output (size x each rank's input)."""
    n = g.size
    if n <= 1 or nbytes <= 0:
        return 0.0
    if g.intra:
        return _scale_up(hw, _latency(hw, g, n - 1), (n - 1) / n * nbytes / _busbw_up(hw, n))
    k, d = g.gpus_per_node_in_group, g.domains
    t = (d - 1) / d * (nbytes / k) / _busbw_out(hw)
    if k > 1:
        t += (k - 1) / k * nbytes / _busbw_up(hw, k)
    return _latency(hw, g, k - 1, d - 1) + t


def reduce_scatter_s(hw: HardwareProfile, nbytes: float, g: GroupPlacement) -> float:
    """`nbytes` = the input buffer before scattering; the mirror of all-gather."""
    return all_gather_s(hw, nbytes, g)


def all_to_all_s(hw: HardwareProfile, nbytes: float, g: GroupPlacement) -> float:
    """`nbytes` = this GPU's send buffer, evenly split over the group; (n-1)/n of it leaves the GPU. Peers in
    the domain are reached over scale-up, the rest over the NIC, both at once: the slower part sets the time."""
    n = g.size
    if n <= 1 or nbytes <= 0:
        return 0.0
    k = g.gpus_per_node_in_group
    return a2a_split_s(hw, g, (k - 1) / n * nbytes, (n - k) / n * nbytes)


def a2a_split_s(hw: HardwareProfile, g: GroupPlacement, intra_bytes: float, inter_bytes: float) -> float:
    """An all-to-all moving `intra_bytes` over scale-up and `inter_bytes` over the NIC from one GPU, both at once:
    the per-call floor plus the slower part."""
    k = g.gpus_per_node_in_group
    intra = intra_bytes / (scale_up_raw_bytes_per_s(hw, k) * hw.all_to_all_efficiency_scale_up) if k > 1 else 0.0
    inter = inter_bytes / (hw.nic_bytes_per_s * hw.all_to_all_efficiency_scale_out) if g.size > k else 0.0
    if g.intra:
        return _scale_up(hw, hw.all_to_all_latency_scale_up_s, intra)
    return hw.all_to_all_latency_scale_out_s + max(intra, inter)


def send_recv_s(hw: HardwareProfile, nbytes: float, same_domain: bool) -> float:
    """One message between two GPUs: one xGMI link on a mesh, the full NVLink bandwidth on a switch, else the
    NIC. Bus efficiency as for collectives (Primus uses p2p_bw_eff 0.80, docs/reference/hardware.md 2e)."""
    if nbytes <= 0:
        return 0.0
    if same_domain:
        raw = hw.scale_up_link_bytes_per_s if hw.scale_up_topology == "full_mesh" else hw.scale_up_gpu_bytes_per_s
        return (hw.collective_latency_scale_up_s + hw.collective_step_latency_scale_up_s
                + nbytes / (raw * hw.collective_bus_efficiency_scale_up))
    return hw.collective_latency_scale_out_s + hw.collective_step_latency_scale_out_s + nbytes / _busbw_out(hw)


def host_copy_s(hw: HardwareProfile, nbytes: float) -> float:
    """Bytes between one GPU and host memory over its host link (PCIe / C2C), at the profile's efficiency."""
    return nbytes / (hw.host_link_bytes_per_s * hw.host_link_efficiency)


def broadcast_s(hw: HardwareProfile, nbytes: float, g: GroupPlacement,
                root_ranks_in_domain: int | None = None) -> float:
    """Pipelined ring broadcast: busbw = algbw (nccl-tests convention). Across domains every rank still receives
    the whole buffer (its scale-up link bounds it), and each domain takes it in over the NICs of its ranks in the
    group: the rings' channels cross a domain boundary on different NICs, as the hierarchical all-gather's GPUs
    each move their slice over their own NIC. The root's domain bounds it too: a root alone in its domain
    (`root_ranks_in_domain` 1: a sender whose node-mates are not in the group) sends through its one NIC."""
    if g.size <= 1 or nbytes <= 0:
        return 0.0
    k = g.gpus_per_node_in_group
    if g.intra:
        bw = _busbw_up(hw, g.size)
    else:
        nics = min(k, root_ranks_in_domain or k)
        bw = min(nics * _busbw_out(hw), _busbw_up(hw, k))
    return _latency(hw, g, k - 1, g.domains - 1) + nbytes / bw


def collective_s(hw: HardwareProfile, op: CollectiveOp, nbytes: float, g: GroupPlacement) -> float:
    if op == "all_reduce":
        return all_reduce_s(hw, nbytes, g)
    if op == "all_gather":
        return all_gather_s(hw, nbytes, g)
    if op == "reduce_scatter":
        return reduce_scatter_s(hw, nbytes, g)
    if op == "all_to_all":
        return all_to_all_s(hw, nbytes, g)
    if op == "broadcast":
        return broadcast_s(hw, nbytes, g)
    if op == "send_recv":
        return send_recv_s(hw, nbytes, g.intra) if g.size > 1 else 0.0
    raise ValueError(f"unknown collective {op!r}")


def bus_bandwidth_bytes_per_s(op: CollectiveOp, nbytes: float, n: int, time_s: float) -> float:
    """nccl-tests busbw of a measured or modelled call: algbw x 2(n-1)/n (all-reduce), x (n-1)/n (all-gather,
    reduce-scatter, all-to-all), x 1 (broadcast, send/recv)."""
    if time_s <= 0:
        return 0.0
    algbw = nbytes / time_s
    factor = {"all_reduce": 2 * (n - 1) / n, "all_gather": (n - 1) / n, "reduce_scatter": (n - 1) / n,
              "all_to_all": (n - 1) / n}.get(op, 1.0)
    return algbw * factor
