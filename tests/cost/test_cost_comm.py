"""Collectives: busbw conventions, xGMI mesh vs NVSwitch, hierarchical cross-node all-reduce, placement."""

from __future__ import annotations

import pytest

from perfmodel.cost.comm import (
    GroupPlacement,
    all_gather_s,
    all_reduce_s,
    all_to_all_s,
    bus_bandwidth_bytes_per_s,
    group_placement,
    peer_ramp,
    placement_from_stride,
    reduce_scatter_s,
    send_recv_s,
)
from perfmodel.cost.dispatch import dedup_all_to_all_s
from perfmodel.inputs.case import ValidationCase
from perfmodel.inputs.hardware import load_hardware
from perfmodel.inputs.scenario import build_scenario

GIB = 2**30


def _busbw(hw, op, fn, nbytes, g):
    t = fn(hw, nbytes, g) - fn(hw, 1e-9, g)  # less the fixed part (the base and the ring steps)
    return bus_bandwidth_bytes_per_s(op, nbytes, g.size, t)


def test_busbw_conventions():
    hw = load_hardware("mi355x")
    g = GroupPlacement(8, 8)
    lat = hw.collective_latency_scale_up_s
    bus = 7 * hw.scale_up_link_bytes_per_s * hw.collective_bus_efficiency_scale_up
    b = 1 * GIB
    assert all_reduce_s(hw, b, g) == pytest.approx(lat + 2 * 7 / 8 * b / bus)
    assert all_gather_s(hw, b, g) == pytest.approx(lat + 7 / 8 * b / bus)
    assert reduce_scatter_s(hw, b, g) == pytest.approx(lat + 7 / 8 * b / bus)
    a2a = 7 * hw.scale_up_link_bytes_per_s * hw.all_to_all_efficiency_scale_up
    assert all_to_all_s(hw, b, g) == pytest.approx(hw.all_to_all_latency_scale_up_s + 7 / 8 * b / a2a)
    assert hw.all_to_all_latency_scale_up_s == pytest.approx(150e-6)  # RCCL's measured floor (Primus, S4)
    # the busbw of the modelled all-reduce is the effective bus bandwidth
    assert _busbw(hw, "all_reduce", all_reduce_s, b, g) == pytest.approx(bus)
    assert all_reduce_s(hw, b, GroupPlacement(1, 1)) == 0.0


def test_xgmi_tp2_is_one_link_hardware_md_2c():
    """docs/reference/hardware.md 2c: 8xMI300X all-reduce 4 GiB busbw 312.9 GB/s; 2 of 8 MI300X 47.7 GB/s
    ("6.5x slower")."""
    hw = load_hardware("mi300x")
    tp8 = _busbw(hw, "all_reduce", all_reduce_s, 4 * GIB, GroupPlacement(8, 8))
    tp2 = _busbw(hw, "all_reduce", all_reduce_s, 4 * GIB, GroupPlacement(2, 2))
    assert tp8 == pytest.approx(312.9e9, rel=0.05)
    assert tp2 == pytest.approx(47.7e9, rel=0.10)
    assert tp2 == pytest.approx(tp8 / 7)  # one of seven links
    assert 5.5 < tp8 / tp2 < 7.5


def test_nvswitch_gives_every_group_the_full_bandwidth_at_a_small_groups_ramp():
    """NVSwitch: every group reaches the GPU's full NVLink bandwidth, a ring over p < 7 peers at p (7 + c) /
    (7 (p + c)) of the 8-GPU bus efficiency (peer_ramp: NCCL's 2- and 4-GPU groups in the kernel tables)."""
    hw = load_hardware("h100-sxm")
    c = hw.collective_peer_ramp
    assert c == pytest.approx(0.35)
    tp = {n: _busbw(hw, "all_reduce", all_reduce_s, 4 * GIB, GroupPlacement(n, n)) for n in (2, 4, 8)}
    # the bulk protocol's extra latency is 0.1% of 4 GiB's time
    assert tp[2] / tp[8] == pytest.approx(1 * (7 + c) / (7 * (1 + c)), rel=0.01)  # 0.78
    assert tp[4] / tp[8] == pytest.approx(3 * (7 + c) / (7 * (3 + c)), rel=0.01)  # 0.94
    assert tp[8] == pytest.approx(hw.scale_up_gpu_bytes_per_s * hw.collective_bus_efficiency_scale_up, rel=0.01)
    assert peer_ramp(hw, 8) == peer_ramp(load_hardware("gb200"), 72) == 1.0  # from 7 peers on: the 8-GPU figure
    assert _busbw(hw, "all_gather", all_gather_s, 4 * GIB, GroupPlacement(2, 2)) / tp[8] == pytest.approx(
        tp[2] / tp[8], rel=0.01)  # the ring collectives alike
    mesh = load_hardware("mi355x")
    assert peer_ramp(mesh, 2) == 1.0  # a mesh counts its links per peer instead (scale_up_raw_bytes_per_s)
    # same GPU count, same message: on the mesh TP2 is much slower than on the switch relative to TP8
    r_mesh = all_reduce_s(mesh, GIB, GroupPlacement(2, 2)) / all_reduce_s(mesh, GIB, GroupPlacement(8, 8))
    r_switch = all_reduce_s(hw, GIB, GroupPlacement(2, 2)) / all_reduce_s(hw, GIB, GroupPlacement(8, 8))
    assert r_mesh > 3 and r_switch < 1


def test_hierarchical_cross_node_all_reduce():
    hw = load_hardware("mi355x")
    b = 1 * GIB
    g = GroupPlacement(16, 8)  # 2 nodes x 8 GPUs
    intra = 7 * hw.scale_up_link_bytes_per_s * hw.collective_bus_efficiency_scale_up
    nic = hw.nic_bytes_per_s * hw.collective_bus_efficiency_scale_out
    expected = hw.collective_latency_scale_out_s + 2 * 7 / 8 * b / intra + 2 * 1 / 2 * (b / 8) / nic
    assert all_reduce_s(hw, b, g) == pytest.approx(expected)
    flat_ring_over_nics = 2 * 15 / 16 * b / nic
    assert all_reduce_s(hw, b, g) < flat_ring_over_nics / 3
    # one rank per node: a plain ring over the NICs
    g1 = GroupPlacement(4, 1)
    assert all_reduce_s(hw, b, g1) == pytest.approx(hw.collective_latency_scale_out_s + 2 * 3 / 4 * b / nic)
    assert all_reduce_s(hw, b, g) > all_reduce_s(hw, b, GroupPlacement(8, 8))


def test_all_to_all_across_nodes_is_nic_bound():
    hw = load_hardware("mi355x")
    b = 256e6
    intra = all_to_all_s(hw, b, GroupPlacement(8, 8))
    inter = all_to_all_s(hw, b, GroupPlacement(16, 8))
    assert inter > 3 * intra
    nic = hw.nic_bytes_per_s * hw.all_to_all_efficiency_scale_out
    assert inter == pytest.approx(hw.all_to_all_latency_scale_out_s + 8 / 16 * b / nic)


def test_deepep_dispatch_sends_a_token_once_per_destination():
    hw = load_hardware("mi355x")
    token_bytes = 64e6
    for g in (GroupPlacement(8, 8), GroupPlacement(32, 8)):
        # one expert per token: one copy either way, the alltoall's bytes exactly (each kernel with its own floor;
        # on MI355X the EP kernel's SMs do not bind, the xGMI links do)
        a2a_floor = hw.all_to_all_latency_scale_up_s if g.intra else hw.all_to_all_latency_scale_out_s
        assert (dedup_all_to_all_s(hw, token_bytes, 1, 256, g) - hw.ep_dispatch_floor_s
                == pytest.approx(all_to_all_s(hw, token_bytes, g) - a2a_floor))
        # top-8 of 256: tokens sharing a GPU (or, across nodes, a node) travel once
        dedup = dedup_all_to_all_s(hw, token_bytes, 8, 256, g)
        alltoall = all_to_all_s(hw, 8 * token_bytes, g)
        assert dedup < alltoall
    # across nodes the NIC carries one copy per destination node: at most (nodes - 1) copies per token
    g = GroupPlacement(32, 8)
    nic = hw.nic_bytes_per_s * hw.all_to_all_efficiency_scale_out
    assert (dedup_all_to_all_s(hw, token_bytes, 8, 256, g)
            <= hw.ep_dispatch_floor_s + 3 * token_bytes / nic + 1e-12)
    # with every node hit, the NIC carries exactly (nodes - 1) copies (the scale-up forwarding may take longer)
    assert (dedup_all_to_all_s(hw, token_bytes, 64, 256, g)
            >= hw.ep_dispatch_floor_s + 0.999 * 3 * token_bytes / nic)


def test_send_recv_link_choice():
    mesh, switch = load_hardware("mi355x"), load_hardware("h100-sxm")
    b = 100e6
    assert send_recv_s(mesh, b, True) == pytest.approx(
        mesh.collective_latency_scale_up_s
        + b / (mesh.scale_up_link_bytes_per_s * mesh.collective_bus_efficiency_scale_up))
    assert send_recv_s(switch, b, True) < send_recv_s(switch, b, False)


def test_placement_from_stride():
    hw = load_hardware("mi355x")  # 8-GPU xGMI domains
    assert placement_from_stride(hw, 8, 1) == GroupPlacement(8, 8)
    assert placement_from_stride(hw, 4, 2) == GroupPlacement(4, 4)
    assert placement_from_stride(hw, 4, 8) == GroupPlacement(4, 1)
    assert placement_from_stride(hw, 16, 1) == GroupPlacement(16, 8)
    nvl72 = load_hardware("gb300")
    assert placement_from_stride(nvl72, 8, 4).intra  # 32 GPUs fit one 72-GPU NVLink domain


def test_group_placement_follows_megatron_order(rl_case_dict):
    d = rl_case_dict
    d["hardware"] = "mi355x"
    d["gpus"] = 64
    d["rl"]["actor_gpus"] = d["rl"]["rollout_gpus"] = 64
    d["train"]["layout"] = {"tp": 2, "cp": 2, "pp": 4, "ep": 8, "etp": 1, "vpp": 1, "dp": 4}
    scn = build_scenario(ValidationCase.model_validate(d))
    assert group_placement(scn, "tp") == GroupPlacement(2, 2)
    assert group_placement(scn, "cp") == GroupPlacement(2, 2)  # stride 2
    assert group_placement(scn, "dp") == GroupPlacement(4, 2)  # stride 4: two per node
    assert group_placement(scn, "dp_cp") == GroupPlacement(8, 4)
    assert group_placement(scn, "pp") == GroupPlacement(4, 1)  # stride 16: one stage per two nodes
    assert group_placement(scn, "ep") == GroupPlacement(8, 8)
    assert group_placement(scn, "etp") == GroupPlacement(1, 1)
    assert group_placement(scn, "expert_dp") == GroupPlacement(2, 1)  # stride 8


def test_dispatch_send_buffer():
    """The one EP volume formula: one copy per (token, expert) pair for alltoall, one per token when
    deduplicating (the fan-out is priced from top_k and experts); the busiest rank's imbalance is in `tokens`."""
    from perfmodel.cost.dispatch import Dispatch

    assert Dispatch(4096, 7168, 8, 256, 1.0).send_bytes == pytest.approx(4096 * 8 * 7168 * 1)
    assert Dispatch(4096 * 1.25, 7168, 8, 256, 2.0).send_bytes == pytest.approx(4096 * 1.25 * 8 * 7168 * 2)
    assert Dispatch(4096, 7168, 8, 256, 2.0, "deepep").send_bytes == pytest.approx(4096 * 7168 * 2)


def test_a_cross_node_broadcast_enters_each_node_on_its_ranks_nics_and_leaves_a_lone_root_by_one():
    """A ring broadcast over full nodes takes the buffer into each node over the NICs of its ranks (the channels
    cross on different NICs) and into each GPU over its scale-up link; a root whose node-mates are not in the
    group sends through its own NIC."""
    from perfmodel.cost.comm import _busbw_out, _busbw_up, broadcast_s

    hw = load_hardware("h100-sxm")
    full = GroupPlacement(288, 8)
    big, small = 1.0e12, 2.0e12
    bw = (small - big) / (broadcast_s(hw, small, full) - broadcast_s(hw, big, full))
    assert bw == pytest.approx(min(8 * _busbw_out(hw), _busbw_up(hw, 8)), rel=1e-9)
    lone = (small - big) / (broadcast_s(hw, small, full, 1) - broadcast_s(hw, big, full, 1))
    assert lone == pytest.approx(_busbw_out(hw), rel=1e-9)
    assert bw > 6 * lone
    # one rank a node: one NIC, with or without the root's say
    spread = GroupPlacement(8, 1)
    assert broadcast_s(hw, big, spread) == pytest.approx(broadcast_s(hw, big, spread, 1))
