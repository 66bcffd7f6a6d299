"""Layout rules: each broken rule is named; valid layouts resolve dp, the pipeline split and micro-batches."""

from __future__ import annotations

import pytest

from perfmodel.errors import InputError
from perfmodel.inputs.case import ValidationCase
from perfmodel.inputs.scenario import balanced_split, build_scenario


def _case(d: dict) -> ValidationCase:
    return ValidationCase.model_validate(d)


def _err(d: dict) -> InputError:
    with pytest.raises(InputError) as err:
        build_scenario(_case(d), source="case.yaml")
    return err.value


def test_valid_layout_resolves(case_dict):
    s = build_scenario(_case(case_dict))
    assert s.dp == 2
    assert s.num_microbatches == 64  # 128 / (1 x 2)
    assert s.schedule == "interleaved"
    assert len(s.stage_layers) == 40 and sum(s.stage_layers) == 80


def test_world_size_mismatch(case_dict):
    case_dict["train"]["layout"]["dp"] = 4
    e = _err(case_dict)
    assert e.field == "train.layout.dp"  # written as the user checks it: their numbers, multiplied out
    assert e.message.startswith("tp x pp x cp x dp = 4 x 8 x 1 x 4 = 128 GPUs, but the run trains on 64: dp must "
                                "be 64 / 32 = 2"), e.message


def test_gpus_not_divisible_by_model_parallel(case_dict):
    case_dict["gpus"] = 48
    case_dict["train"]["layout"].pop("dp")
    e = _err(case_dict)
    assert e.field == "train.layout" and "does not divide" in e.message


def test_heads_not_divisible_by_tp(case_dict):
    case_dict["train"]["layout"].update(tp=3, dp=None)
    case_dict["gpus"] = 3 * 8 * 2
    case_dict["train"]["layout"].pop("dp")
    e = _err(case_dict)
    assert e.field == "train.layout.tp" and "heads" in e.message


def test_kv_heads_vs_tp(case_dict):
    # Llama 3 70B: 64 heads, 8 KV heads. tp 16 is fine (each KV head replicated); heads divisible.
    case_dict["train"]["layout"].update(tp=16, pp=2, vpp=1)
    case_dict["train"]["layout"].pop("dp")
    s = build_scenario(_case(case_dict))
    assert s.dp == 2


def test_experts_not_divisible_by_ep(rl_case_dict):
    rl_case_dict["train"]["layout"].update(ep=3)
    e = _err(rl_case_dict)
    assert e.field == "train.layout.ep" and "256 experts" in e.message


def test_layers_cannot_split(case_dict):
    case_dict["train"]["layout"].update(pp=8, vpp=20)  # 160 virtual stages for 80 layers
    e = _err(case_dict)
    assert e.field == "train.layout.pp"


def test_microbatches_do_not_divide_global_batch(case_dict):
    case_dict["train"]["global_batch"] = 127
    e = _err(case_dict)
    assert e.field == "train.global_batch" and "not divisible" in e.message


def test_pipeline_layers_must_sum(rl_case_dict):
    rl_case_dict["train"]["pipeline_layers"] = [6, 6, 6, 6, 6, 6, 6, 6]
    e = _err(rl_case_dict)
    assert e.field == "train.pipeline_layers" and "43" in e.message


def test_interleaved_needs_vpp(case_dict):
    case_dict["train"]["layout"]["vpp"] = 1
    case_dict["train"]["schedule"] = "interleaved"
    assert _err(case_dict).field == "train.schedule"


def test_rl_colocated_gpu_accounting(rl_case_dict):
    rl_case_dict["rl"]["rollout_gpus"] = 16
    e = _err(rl_case_dict)
    assert e.field == "rl.actor_gpus" and "colocated" in e.message


def test_rl_disaggregated_gpu_accounting(rl_case_dict):
    rl_case_dict["rl"].update(placement="disaggregated", actor_gpus=32, rollout_gpus=16)
    rl_case_dict["rl"]["weight_update"]["mode"] = "broadcast"
    e = _err(rl_case_dict)
    assert e.field == "rl.rollout_gpus"


def test_rl_engine_size(rl_case_dict):
    rl_case_dict["rl"]["rollout"]["engine_gpus"] = 8
    e = _err(rl_case_dict)
    assert e.field == "rl.rollout.engine_gpus" and "tp x dp" in e.message


def test_ipc_needs_colocated(rl_case_dict):
    rl_case_dict["gpus"] = 48
    rl_case_dict["rl"].update(placement="disaggregated", actor_gpus=32, rollout_gpus=16)
    e = _err(rl_case_dict)
    assert e.field == "rl.weight_update.mode"


def test_seed_layout_split_matches_miles():
    # DSV4-Flash 43 layers on PP4: Miles uses --decoder-last-pipeline-num-layers 10 -> 11, 11, 11, 10.
    assert balanced_split(43, 4) == (11, 11, 11, 10)
    # Llama 3.1 405B, 126 layers over PP8 x VPP8: first and last virtual stage give a layer to embedding/loss.
    split = balanced_split(126, 64)
    assert split[0] == 1 and split[-1] == 1 and set(split[1:-1]) == {2}
    # DeepSeek-V3, 61 layers on PP16.
    split = balanced_split(61, 16)
    assert sum(split) == 61 and max(split) - min(split) <= 2
    assert max(c + (i == 0) + (i == 15) for i, c in enumerate(split)) == 4
    # 126 layers over PP16 x VPP8 = 128 virtual stages (Megatron-Bridge GB200 405B): the embedding and the loss
    # get a virtual stage each, with no decoder layer.
    split = balanced_split(126, 128)
    assert split[0] == 0 and split[-1] == 0 and set(split[1:-1]) == {1}
    with pytest.raises(ValueError):
        balanced_split(1, 4)  # a middle stage would be empty
    # layers that divide evenly take Megatron's default even split when it is no worse with the embedding and
    # loss counted (Llama 3 70B on PP8 x VPP5; the 1T GPT of Megatron 2021 on PP64): no stage of 3
    assert balanced_split(80, 40) == (2,) * 40
    assert balanced_split(128, 64) == (2,) * 64
    assert balanced_split(32, 4) == (8, 8, 8, 8)


def test_balanced_split_is_balanced_property():
    for layers in range(1, 130, 7):
        for stages in range(1, min(layers, 40) + 1):
            split = balanced_split(layers, stages)
            assert sum(split) == layers and min(split) >= 1
            costs = [c + (i == 0) + (i == stages - 1) for i, c in enumerate(split)]
            assert max(costs) <= -(-(layers + 2) // stages) + 1
