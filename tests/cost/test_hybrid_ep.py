"""NVIDIA's Hybrid-EP dispatch and combine (cost/dispatch.py HYBRID_EP_LINK_SHARE): inside one NVLink domain they
run at the share of the raw link their own published benchmark measured, whatever the SMs; DeepEP keeps its fitted
SM-bound rate; the dispatcher is refused where the kernels do not run."""

from __future__ import annotations

import pytest

from perfmodel.cost.comm import GroupPlacement
from perfmodel.cost.dispatch import Dispatch, _hit_probability, dispatch_s
from perfmodel.errors import InputError
from perfmodel.inputs.hardware import load_hardware

B200 = load_hardware("b200")
TOKENS, HIDDEN, TOP_K, EXPERTS, RANKS = 4096, 7168, 8, 64, 8  # the benchmark: 8 local experts a rank


@pytest.mark.parametrize(("elem", "combine", "published_gb_s"), [(2.0, False, 535.94), (1.0, False, 409.71),
                                                                  (2.0, True, 530.86)])
def test_the_published_b200_benchmark_comes_back(elem: float, combine: bool, published_gb_s: float) -> None:
    """Its algorithm bandwidth is the bytes a rank receives (its own share included) over the call's time."""
    d = Dispatch(TOKENS, HIDDEN, TOP_K, EXPERTS, elem, "hybridep", combine)
    t = dispatch_s(B200, d, GroupPlacement(RANKS, RANKS))
    received = TOKENS * HIDDEN * elem * RANKS * _hit_probability(EXPERTS, TOP_K, EXPERTS / RANKS)
    assert received / t / 1e9 == pytest.approx(published_gb_s, rel=0.02)


def test_hybrid_ep_runs_where_deepeps_fitted_sms_cannot() -> None:
    g = GroupPlacement(RANKS, RANKS)
    for combine in (False, True):
        hybrid = dispatch_s(B200, Dispatch(TOKENS, HIDDEN, TOP_K, EXPERTS, 2.0, "hybridep", combine), g)
        deepep = dispatch_s(B200, Dispatch(TOKENS, HIDDEN, TOP_K, EXPERTS, 2.0, "deepep", combine), g)
        assert hybrid < deepep
    assert dispatch_s(B200, Dispatch(TOKENS, HIDDEN, TOP_K, EXPERTS, 2.0, "hybridep"), GroupPlacement(1, 1)) == 0.0


def test_across_nodes_the_nic_sets_the_pace_as_for_deepep() -> None:
    h100 = load_hardware("h100-sxm")
    g = GroupPlacement(64, 8)
    hybrid = dispatch_s(h100, Dispatch(TOKENS, HIDDEN, TOP_K, 256, 2.0, "hybridep"), g)
    deepep = dispatch_s(h100, Dispatch(TOKENS, HIDDEN, TOP_K, 256, 2.0, "deepep"), g)
    assert hybrid == pytest.approx(deepep - h100.ep_dispatch_floor_s)  # the NIC's share; the floor is in the share


def test_hybrid_ep_is_refused_off_nvidia() -> None:
    from perfmodel.inputs.run import RunSpec
    from perfmodel.inputs.scenario import build_scenario

    spec = {"kind": "pretrain", "hardware": "mi355x", "gpus": 8, "model": {"id": "qwen3-30b-a3b"},
            "train": {"seq_len": 4096, "global_batch": 64, "micro_batch": 1, "layout": {"ep": 8},
                      "moe_dispatcher": "hybridep"}}
    with pytest.raises(InputError) as e:
        build_scenario(RunSpec.model_validate(spec))
    assert e.value.field == "train.moe_dispatcher" and "deepep" in str(e.value)
    spec["hardware"] = "b200"
    assert build_scenario(RunSpec.model_validate(spec)).train.moe_dispatcher == "hybridep"
