"""`kind: serve` cases: a serving benchmark priced by the rollout's own engine model, its client keeping
`concurrency` requests in flight, TTFT and TPOT per request as bench_serving computes them, and bad input."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from perfmodel.cli import main
from perfmodel.inputs.case import load_case
from perfmodel.inputs.scenario import build_scenario
from perfmodel.invariants import PhysicsError
from perfmodel.predict import predict_metrics
from perfmodel.sim.serving import ServeResult, simulate_serving
from tests.conftest import REPO, write_yaml

RL_FORM = REPO / "studies" / "validation" / "sglang-serving" / "cases" / "serve-b200-dsr1-fp8-tp8-1k1k-c64.yaml"
SERVE = {
    "id": "serve-b200-dsr1-fp8-tp8-1k1k-c64", "source": "InferenceX PR #3363 (the RL-form case's source)",
    "kind": "serve", "hardware": "b200", "stack": "sglang", "gpus": 8, "model": {"id": "deepseek-v3"},
    "serve": {"engine_gpus": 8, "tp": 8, "precision": "fp8", "concurrency": 64, "requests": 640,
              "input_tokens": 1024, "output_tokens": 1024},
    "measured": {"output_tokens_per_s_per_gpu": 338.97},
}


def _serve(tmp_path: Path, **serve: object) -> dict[str, float]:
    d = copy.deepcopy(SERVE)
    d["serve"].update(serve)
    return predict_metrics(build_scenario(load_case(write_yaml(tmp_path / "c.yaml", d))))


def test_one_engine_model_for_rollouts_and_serving(tmp_path: Path) -> None:
    """The shipped RL-form reading of the benchmark (every request queued at once, the engine capped at the
    concurrency) and the serve case (the client keeps 64 in flight) price the same throughput."""
    rl = predict_metrics(build_scenario(load_case(RL_FORM)))["rollout_tokens_per_gpu_s"]
    serve = _serve(tmp_path)
    assert serve["output_tokens_per_s_per_gpu"] == pytest.approx(rl, rel=1e-9)
    assert serve["total_tokens_per_s_per_gpu"] == pytest.approx(2 * rl, rel=1e-9)  # 1k in, 1k out


def test_concurrency_trades_latency_for_throughput(tmp_path: Path) -> None:
    runs = {c: _serve(tmp_path, concurrency=c, requests=4 * c) for c in (1, 8, 64)}
    tput = [runs[c]["output_tokens_per_s_per_gpu"] for c in (1, 8, 64)]
    tpot = [runs[c]["tpot_median_ms"] for c in (1, 8, 64)]
    ttft = [runs[c]["ttft_median_ms"] for c in (1, 8, 64)]
    assert tput == sorted(tput) and tpot == sorted(tpot) and ttft == sorted(ttft)
    # one request at a time: throughput is one request's tokens over its latency
    one = runs[1]
    latency_s = (one["ttft_median_ms"] + 1023 * one["tpot_median_ms"]) / 1e3
    assert one["output_tokens_per_s_per_gpu"] == pytest.approx(1024 / latency_s / 8, rel=1e-6)


def test_the_client_keeps_concurrency_requests_in_flight_and_first_tokens_come_by_chunk(tmp_path: Path) -> None:
    d = copy.deepcopy(SERVE)
    d["serve"].update(concurrency=4, requests=12, input_tokens=8192, output_tokens=64)
    scn = build_scenario(load_case(write_yaml(tmp_path / "c.yaml", d)))
    from perfmodel.sim.rollout import simulate_rollout

    res = simulate_serving(scn)
    assert len(res.ttft_s) == 12
    # 4 prompts of one 8192-token chunk each, prefilled together: the first token of each with its own chunk
    first_wave = res.ttft_s[:4]  # requests 0-3, sent at once
    assert first_wave[1] == pytest.approx(2 * first_wave[0], rel=0.05)
    assert first_wave[3] == pytest.approx(4 * first_wave[0], rel=0.05)
    rollout = simulate_rollout(scn)  # the same scenario as an RL rollout: every request queued at once
    assert max(rollout.engine_max_batch) == 12
    import dataclasses

    from perfmodel.cost.serve.engine import rollout_params_for
    from perfmodel.sim.rollout import run_requests

    sim = run_requests(scn, 0, dataclasses.replace(rollout_params_for(scn), client_concurrency=4))
    assert max(e.max_batch for e in sim.engines) == 4


def test_a_length_range_is_drawn_as_the_benchmark_draws_it() -> None:
    d = copy.deepcopy(SERVE)
    d["serve"].update(input_tokens=1000, output_tokens=1000, range_ratio=0.8)
    from perfmodel.inputs.serve import ServeCase

    case = ServeCase.model_validate(d)
    hist = case.serve.output_lengths().histogram
    assert min(n for n, _ in hist) == 800 and max(n for n, _ in hist) == 1000 and len(hist) <= 32
    assert case.rl.prompt_tokens_mean == pytest.approx(900, abs=1)
    assert case.rl.prompts_per_step == 640 and case.rl.rollout.tp == 8


def test_an_impossible_serving_result_is_refused() -> None:
    scn = build_scenario(load_case(RL_FORM))
    with pytest.raises(PhysicsError):
        ServeResult(scn, 10.0, 2, 100, 100, 8, (0.1, -0.2), (0.01, 0.01))


@pytest.mark.parametrize("change,field,rc", [
    ({"concurrency": 0}, "serve.concurrency", 2),
    ({"ignore_eos": False}, "serve.ignore_eos", 2),
    ({"concurency": 4}, "serve.concurency", 2),
    ({"input_tokens": 200000}, "serve.input_tokens", 0),  # loads; listed as not predicted, with the reason
    ({"tp": 4}, "serve.engine_gpus", 0),
    ({"max_total_tokens": 500}, "serve.max_total_tokens", 0),
])
def test_bad_serve_input_is_one_line_naming_the_field(tmp_path: Path, capsys, change: dict, field: str,
                                                      rc: int) -> None:
    d = copy.deepcopy(SERVE)
    d["serve"].update(change)
    path = write_yaml(tmp_path / "bad.yaml", d)
    assert main(["validate", str(path)]) == rc
    out, err = capsys.readouterr()
    text = out + err
    assert field in text and "Traceback" not in text, text
    if rc == 0:
        assert "not predicted" in text


def test_an_unknown_engine_version_falls_back_with_a_note(tmp_path: Path, capsys) -> None:
    d = copy.deepcopy(SERVE)
    d["stack"] = "sglang@9.9"
    path = write_yaml(tmp_path / "c.yaml", d)
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "output_tokens_per_s_per_gpu" in out and "9.9" in out, out
    assert yaml.safe_load(path.read_text())["kind"] == "serve"
