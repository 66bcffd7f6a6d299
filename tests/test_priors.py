"""Zero-shot priors per component (perfmodel/priors.py): the spreads are the ones scripts/prior_sigmas.py measured,
each run gets the multipliers of the components it has, and the maximum-likelihood fit recovers known spreads."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from perfmodel.inputs.case import load_case
from perfmodel.inputs.scenario import build_scenario
from perfmodel.priors import (
    COMPONENTS,
    HOST,
    ROLLOUT,
    SERVE_ROLLOUT,
    SIGMAS_FILE,
    TRAIN,
    WEIGHT_UPDATE,
    ZERO_SHOT_SIGMA_LOG,
    zero_shot_parameters,
)
from scripts.prior_sigmas import fit
from tests.conftest import REPO


def test_the_spreads_are_the_measured_ones() -> None:
    measured = json.loads((REPO / SIGMAS_FILE).read_text())
    assert measured["sigma_log"] == ZERO_SHOT_SIGMA_LOG
    # what the spreads must do on the cases they came from, and on each case left out of its own fit
    for check in ("bands_in_sample", "bands_leave_one_case_out"):
        for kind, v in measured[check].items():
            assert 0.7 <= v["coverage"] <= 0.9, (check, kind, v)
    # training's compute, priced from first principles and checked on hundreds of runs, is known better than the
    # weight update, the serving engine and the trainer's host (tens to a hundred figures each, priced by
    # mechanism), and than an RL run's rollout (43 figures, NeMo-RL's vLLM DeepSeek-V3 rollouts among them)
    assert ZERO_SHOT_SIGMA_LOG[TRAIN] < min(ZERO_SHOT_SIGMA_LOG[k]
                                            for k in (ROLLOUT, WEIGHT_UPDATE, SERVE_ROLLOUT, HOST))


@pytest.mark.parametrize(("case", "components"), [
    ("studies/validation/cases/megatron2021-gpt-18.4b.yaml", [TRAIN, HOST]),
    ("studies/validation/cases/miles-gb300-dsv4flash-bf16train.yaml", [TRAIN, ROLLOUT, WEIGHT_UPDATE, HOST]),
])
def test_each_run_gets_the_multipliers_of_its_components(case: str, components: list[str]) -> None:
    assert zero_shot_parameters(build_scenario(load_case(REPO / case))) == components


def test_a_serving_benchmark_depends_on_the_engine_alone() -> None:
    serve = sorted((REPO / "studies/validation/serving/cases").glob("*.yaml"))[0]
    assert zero_shot_parameters(build_scenario(load_case(serve))) == [ROLLOUT]


def test_the_fit_recovers_known_spreads() -> None:
    """Synthetic figures whose errors are drawn with known spreads through known sensitivities: the fit finds
    them (to the sampling error of a few hundred cases)."""
    rng = np.random.default_rng(7)
    truth = np.array([0.3, 0.8, 1.2, 0.5])
    rows = []
    for i in range(1200):
        g = np.zeros(len(COMPONENTS))
        g[i % 4] = rng.uniform(0.5, 1.0)  # each figure informed by one component, as a phase time is
        sd = math.sqrt(0.1 ** 2 + float(g ** 2 @ truth ** 2))
        rows.append((f"case{i}", "m", float(rng.normal(0.0, sd)), 1.0, g, "rl"))
    assert fit(rows) == pytest.approx(truth, rel=0.12)
