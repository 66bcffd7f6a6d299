"""Activation CPU offloading (megatron-core --cpu-offloading, activations of the first n layers): the GPU keeps
the other layers' and one offloaded layer in transit, the host the rest; the copies cost time only when the host
link is slower than the layers' passes; megatron-core's rules refused in one line."""

from __future__ import annotations

import dataclasses

import pytest

from perfmodel.cost.memory.activations import layer_activation_bytes, tokens_per_microbatch
from perfmodel.cost.memory.training import training_memory
from perfmodel.cost.train.stage import chunk_cost
from perfmodel.errors import InputError
from perfmodel.inputs.case import ValidationCase
from perfmodel.inputs.scenario import build_scenario


def _run(offload: int, pp: int = 1, recompute: str = "none", hardware: str = "gb200"):
    train = dict(precision="bf16", seq_len=8192, global_batch=64, micro_batch=1, layout=dict(tp=1, pp=pp),
                 recompute=recompute, fsdp=pp == 1, activation_offload_layers=offload)
    d = dict(id="t", source="test", kind="pretrain", hardware=hardware, gpus=8, model={"id": "llama3-8b"},
             train=train, measured=dict(step_time_s=1.0))
    return build_scenario(ValidationCase.model_validate(d), source="t.yaml")


def test_offloaded_layers_leave_the_gpu_but_one_in_transit():
    base, off = training_memory(_run(0)), training_memory(_run(12))
    layer = _run(0).model.layers[0]
    one = layer_activation_bytes(layer, tokens_per_microbatch(_run(0)), dropout=False)
    assert base.activations_host_bytes == 0
    assert off.activations_host_bytes == pytest.approx(12 * one)
    assert base.activations_bytes - off.activations_bytes == pytest.approx(11 * one)
    assert off.host_bytes == off.optimizer_host_bytes + off.activations_host_bytes


def test_the_copies_show_only_where_the_host_link_is_slower_than_the_passes():
    def priced(link_scale: float):
        scn = _run(12)
        hw = dataclasses.replace(scn.hardware, host_link_bytes_per_s=scn.hardware.host_link_bytes_per_s * link_scale)
        return chunk_cost(dataclasses.replace(scn, hardware=hw), 0, 8192, 8192)

    kept = chunk_cost(_run(0), 0, 8192, 8192)
    fast, slow = priced(1e6), priced(1e-3)
    assert fast.fwd_compute_s == pytest.approx(kept.fwd_compute_s) and fast.bwd_input_s == pytest.approx(
        kept.bwd_input_s)
    assert slow.fwd_compute_s > kept.fwd_compute_s and slow.bwd_input_s > kept.bwd_input_s


@pytest.mark.parametrize(("kwargs", "says"), [(dict(offload=4, pp=2), "pipeline parallelism"),
                                              (dict(offload=4, recompute="full"), "recompute"),
                                              (dict(offload=32), "at most 31")])
def test_megatron_cores_rules_are_one_line_errors(kwargs, says):
    with pytest.raises(InputError, match=says) as err:
        _run(**kwargs)
    assert err.value.field == "train.activation_offload_layers" and "\n" not in str(err.value)
