"""megatron-core's --deterministic-mode: each layer's compute at its measured cost by kind (Megatron-LM's
determinism notes: about 4% on a dense model, 17% on an MoE one), its communication and the host's floor as they
were, and the knob stated by a run's stack_options."""

from __future__ import annotations

import pytest

from perfmodel.cost.train.determinism import DENSE_LAYER_SCALE, MOE_LAYER_SCALE, deterministic_scale
from perfmodel.cost.train.moe import MoEAssumptions
from perfmodel.cost.train.stage import _on_stack
from perfmodel.cost.train.timing import Times
from perfmodel.inputs.stack import StackOptions, resolve_stack
from tests.cost.test_stack_costs import _scn


def _times() -> Times:
    t = Times(fwd=1.0e-3, bwd_in=2.0e-3, bwd_w=1.0e-3)
    t.fwd_comm["ep_a2a"] = t.bwd_comm["ep_a2a"] = 0.5e-3
    return t


@pytest.mark.parametrize("moe_layer", [True, False])
def test_deterministic_mode_scales_a_layers_compute_by_its_kind_and_leaves_its_communication(moe_layer: bool) -> None:
    off = _on_stack(_scn(host_op_time_scale=0.0), _times(), moe_layer, MoEAssumptions())
    on = _on_stack(_scn(host_op_time_scale=0.0, deterministic=True), _times(), moe_layer, MoEAssumptions())
    scale = MOE_LAYER_SCALE if moe_layer else DENSE_LAYER_SCALE
    assert scale == deterministic_scale(moe_layer)
    assert (on.fwd, on.bwd_in, on.bwd_w) == pytest.approx((scale * off.fwd, scale * off.bwd_in, scale * off.bwd_w))
    assert on.fwd_comm == off.fwd_comm and on.bwd_comm == off.bwd_comm


def test_the_measured_costs_are_the_sources() -> None:
    assert (DENSE_LAYER_SCALE, MOE_LAYER_SCALE) == (1.04, 1.17)  # "approximately four percent ... 17%"


def test_a_host_bound_layer_stays_at_the_hosts_floor() -> None:
    # the host's time is not the GPU's kernels: under its floor, the deterministic kernels' extra time hides
    gpu = {"host_op_time_scale": 1e3, "host_device_overlap": True}  # the loop plan's CPU stack adds host time
    floor = _on_stack(_scn(**gpu), _times(), True, MoEAssumptions())
    det = _on_stack(_scn(**gpu, deterministic=True), _times(), True, MoEAssumptions())
    assert det.fwd == pytest.approx(floor.fwd)


def test_a_runs_stack_options_state_it() -> None:
    assert resolve_stack("miles").deterministic is False
    st = resolve_stack("miles", StackOptions(deterministic=True), "case.yaml")
    assert st.deterministic is True and "stack_options of case.yaml" in st.sources["deterministic"]
