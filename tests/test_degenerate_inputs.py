"""Degenerate but valid inputs simulate to finite, non-negative figures that obey physics: one GPU, one layer, one
micro-batch, one-token responses, one prompt with one sample, a one-token sequence of pretraining."""

from __future__ import annotations

import copy
import math

import pytest
import yaml

import perfmodel
from tests.conftest import REPO

PLAN = yaml.safe_load((REPO / "examples" / "local-grpo.yaml").read_text())
MOE = yaml.safe_load((REPO / "examples" / "local-grpo-ep2.yaml").read_text())


def _run(base: dict, **edits: dict) -> dict:
    run = {k: copy.deepcopy(v) for k, v in base.items() if k in ("kind", "hardware", "stack", "gpus", "model", "train",
                                                                 "rl")}
    for section, values in edits.items():
        if isinstance(run.get(section), dict):
            run[section].update(values)
        else:
            run[section] = values
    return run


def _sane(result: perfmodel.RunResult) -> dict[str, float]:
    m = result.metrics()
    for k, v in m.items():
        assert math.isfinite(v) and v >= 0, (k, v)
    return m


@pytest.mark.parametrize("layers", [1, 2])
def test_one_gpu_one_layer_one_micro_batch_one_token_responses(layers: int) -> None:
    model = copy.deepcopy(PLAN["model"])
    model["hf_config"]["num_hidden_layers"] = layers
    run = _run(PLAN, model=model, train={"global_batch": 1, "micro_batch": 1, "seq_len": 8},
               rl={"prompts_per_step": 1, "samples_per_prompt": 1, "response_tokens": {"max": 1},
                   "prompt_tokens_mean": 1})
    m = _sane(perfmodel.simulate(run))
    assert m["step_time_s"] >= m["rollout_time_s"] + m["train_time_s"]


def test_a_one_layer_moe_with_one_micro_batch() -> None:
    model = copy.deepcopy(MOE["model"])
    model["hf_config"]["num_hidden_layers"] = 1
    run = _run(MOE, model=model, train={"global_batch": 2, "micro_batch": 1},
               rl={"prompts_per_step": 1, "samples_per_prompt": 2, "response_tokens": {"max": 1}})
    _sane(perfmodel.simulate(run))


def test_pretraining_one_gpu_one_sequence_of_one_token() -> None:
    run = {"kind": "pretrain", "hardware": "h100-sxm", "gpus": 1, "model": {"id": "llama3-8b"},
           "train": {"precision": "bf16", "seq_len": 1, "global_batch": 1, "micro_batch": 1,
                     "layout": {"tp": 1, "pp": 1, "ep": 1}}}
    m = _sane(perfmodel.simulate(run))
    assert 0 < m["mfu"] <= 1
