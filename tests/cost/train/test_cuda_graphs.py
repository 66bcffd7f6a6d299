"""The host's floor under a training layer: what a CUDA graph scope leaves the host to issue (its parts' measured op
counts), the host CPU's per-op factor (a Grace against an x86 server), and a scope the project does not know."""

from __future__ import annotations

import dataclasses

import pytest

from perfmodel.cost.train.cuda_graphs import FWD_OPS, host_share
from perfmodel.cost.train.moe import MoEAssumptions
from perfmodel.cost.train.stage import chunk_cost
from perfmodel.errors import InputError
from perfmodel.inputs.hardware import load_hardware
from perfmodel.inputs.stack import resolve_stack
from tests.conftest import hardware_file_without
from tests.cost.test_stack_costs import _scn


def test_each_scope_leaves_the_host_the_ops_of_the_parts_it_does_not_capture() -> None:
    assert host_share("none", True) == host_share("none", False) == 1.0
    assert host_share("full_iteration", True) == host_share("full_iteration", False) == 0.0
    moe, dense = sum(FWD_OPS["moe"].values()), sum(FWD_OPS["dense"].values())
    assert (moe, dense) == (139.0, 101.0)  # benchmarks/results/host-ops.json's per-layer forward counts
    # Megatron-Bridge's MoE recipes: attention, router and the dispatcher's preprocess replayed; left: dispatch,
    # the grouped experts, combine and postprocess
    assert host_share("attn+moe_router+moe_preprocess", True) == pytest.approx(24 / 139)
    assert host_share("moe_router+moe_preprocess", True) == pytest.approx((139 - 36) / 139)
    assert host_share("attn", False) == pytest.approx(22 / 101)
    assert host_share("attn+mlp", False) == pytest.approx(0.0)
    assert host_share("attn+mlp", True) == pytest.approx(60 / 139)  # an MoE block is not an `mlp` part
    assert host_share("attn+moe", True) == pytest.approx(0.0)


def test_a_grace_host_issues_each_op_in_its_factor_times_an_x86_servers_time() -> None:
    gb200 = load_hardware("gb200")
    assert gb200.host_op_time_factor == pytest.approx(2.75)
    assert load_hardware("h100-sxm").host_op_time_factor == load_hardware("mi355x").host_op_time_factor == 1.0
    scn = _scn(host_device_overlap=False)  # the host's time adds: its share shows whole
    none = chunk_cost(_scn(host_device_overlap=False, host_op_time_scale=0.0), 0, 64 * 9, 9)
    base = chunk_cost(scn, 0, 64 * 9, 9)
    grace = chunk_cost(dataclasses.replace(scn, hardware=dataclasses.replace(scn.hardware, host_op_time_factor=2.75)),
                       0, 64 * 9, 9)
    host = base.fwd_compute_s - none.fwd_compute_s
    assert host == pytest.approx(2 * MoEAssumptions().dense_host_fwd_s, rel=1e-9)  # two dense layers
    assert grace.fwd_compute_s - none.fwd_compute_s == pytest.approx(2.75 * host, rel=1e-9)


@pytest.mark.parametrize("scope", ["attn+router", "graphs", ""])
def test_an_unknown_scope_is_refused_naming_the_parts(scope: str) -> None:
    with pytest.raises(InputError) as err:
        resolve_stack("megatron-bridge", None, "case.yaml").with_knobs({"cuda_graph_scope": scope}, "case.yaml")
    assert "moe_preprocess" in str(err.value) and "full_iteration" in str(err.value)


def test_a_hardware_file_without_the_factor_is_an_x86_host(tmp_path) -> None:
    assert load_hardware(hardware_file_without(tmp_path, "gb200", "op_time_factor")).host_op_time_factor == 1.0
