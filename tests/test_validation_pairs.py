"""`perfmodel validate --pairs`: which measured pairs count, and whether the prediction orders them right."""

from __future__ import annotations

import csv
import io
import json

import pytest

from perfmodel.cli import main
from perfmodel.inputs.run import ModelRef
from perfmodel.validation_pairs import PairMember, framework_of, model_key, ordered_pairs
from tests.conftest import REPO


def _m(case_id: str, measured: float, predicted: float, *, model: str = "m", stack: str = "megatron-bridge@26.02",
       hardware: str = "b200", metric: str = "tflops_per_gpu", kind: str = "pretrain") -> PairMember:
    return PairMember(case_id, kind, model, stack, hardware, metric, measured, predicted)


def test_a_pair_is_right_when_the_prediction_orders_it_as_measured() -> None:
    p = ordered_pairs([_m("a", 100, 90), _m("b", 120, 95), _m("c", 150, 80)])
    # a<b right, a<c wrong (c predicted lower), b<c wrong
    assert (p["n"], p["right"]) == (3, 1) and abs(p["share"] - 1 / 3) < 1e-12
    assert [(w["higher"]["id"], w["lower"]["id"]) for w in p["wrong"]] == [("c", "a"), ("c", "b")]
    assert p["same_hardware_and_stack"]["n"] == 3


def test_close_measurements_other_models_and_frameworks_make_no_pair() -> None:
    members = [_m("a", 100, 90), _m("b", 104.9, 80),  # 4.9% apart: noise, not a pair
               _m("c", 200, 10, model="other"), _m("d", 300, 10, stack="nemo-rl@0.6"),
               _m("e", 300, 10, metric="tokens_per_s_per_gpu")]
    assert ordered_pairs(members)["n"] == 0


def test_a_predicted_tie_is_wrong_and_the_subsets_are_counted_apart() -> None:
    p = ordered_pairs([_m("a", 100, 90), _m("b", 120, 90, stack="megatron-bridge@26.04"),
                       _m("c", 150, 200, hardware="h100", kind="rl")])
    assert (p["n"], p["right"]) == (3, 2)
    (tie,) = p["wrong"]
    assert tie["tie"] and tie["same_hardware"] and not tie["same_stack"]
    assert (p["same_hardware"]["n"], p["same_hardware"]["right"]) == (1, 0)
    assert p["same_hardware_and_stack"]["n"] == 0 and p["same_hardware_and_stack"]["share"] is None
    assert p["by_kind"] == {"pretrain": {"n": 1, "right": 0, "share": 0.0},
                            "pretrain/rl": {"n": 2, "right": 2, "share": 1.0}}


def test_the_model_and_framework_a_case_is_paired_by() -> None:
    assert model_key(ModelRef(id="qwen3-30b-a3b")) == "qwen3-30b-a3b"
    small = ModelRef(hf_config={"architectures": ["GPT2LMHeadModel"], "n_embd": 1536})
    large = ModelRef(hf_config={"architectures": ["GPT2LMHeadModel"], "n_embd": 3072})
    assert model_key(small) != model_key(large) and model_key(small).startswith("GPT2LMHeadModel#")
    assert framework_of("megatron-bridge@26.04.01") == "megatron-bridge" and framework_of(None) == "default"


def test_validate_pairs_on_the_nemo_rl_cases(capsys) -> None:
    folder = str(REPO / "studies" / "validation" / "nemo-rl" / "cases")
    assert main(["validate", folder, "--json"]) == 0
    pairs = json.loads(capsys.readouterr().out)["pairs"]
    assert pairs["n"] >= 4 and pairs["n"] == pairs["by_kind"]["rl"]["n"]
    assert pairs["right"] + len(pairs["wrong"]) == pairs["n"]
    assert main(["validate", folder, "--pairs"]) == 0
    out = capsys.readouterr().out
    assert f"all: {pairs['right']} of {pairs['n']} pairs ordered right" in out and "same hardware:" in out
    assert main(["validate", folder, "--pairs", "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [r["metric"] for r in rows] == [w["metric"] for w in pairs["wrong"]]
    assert {r["metric"] for r in rows} <= {"step_time_s", "tokens_per_s_per_gpu", "rollout_time_s"}


@pytest.mark.xdist_group("validation_report")  # on the worker that simulates the case folders once
def test_the_sweeps_plan_sigma_is_what_the_published_pairs_give() -> None:
    """perfmodel/priors.py PLAN_SIGMA_LOG is the scatter of predicted about measured ln-ratios over the
    published pairs on one hardware and stack release, per kind, over sqrt(2): a change of pricing that moves it
    must move the constant (and the sweep's p_best) with it. The pairs run across every case folder, as
    `perfmodel validate --pairs` over all of them pairs them."""
    import math

    from perfmodel.priors import PLAN_SIGMA_LOG
    from perfmodel.validation import pair_members
    from scripts.snapshot_predictions import case_folders
    from tests.conftest import validation_report

    members = [m for folder in case_folders() for m in pair_members(validation_report(folder)["_results"])]
    by_kind = ordered_pairs(members)["same_hardware_and_stack"]["ratio_error_sigma_log_by_kind"]
    for kind, sigma in PLAN_SIGMA_LOG.items():
        assert by_kind[kind] is not None and abs(by_kind[kind] / math.sqrt(2) - sigma) < 0.005, (kind, by_kind)
