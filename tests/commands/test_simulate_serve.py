"""`perfmodel simulate` and `check` on a serving benchmark (`kind: serve`): the engine model the validation scores,
one decode step by part, and one-line refusals of what only a training run takes."""

from __future__ import annotations

import json

import pytest
import yaml

import perfmodel
from perfmodel.cli import main
from perfmodel.inputs.case import load_case
from perfmodel.inputs.scenario import build_scenario
from perfmodel.sim.serving import simulate_serving
from tests.conftest import REPO

CASE = REPO / "studies/validation/serving/cases/serve-h200-dsr1-sglang-tp8-1k1k-c8.yaml"


def _bare_run(tmp_path):
    """The case without its measurement, id or source: a serving setup a user wants priced."""
    data = yaml.safe_load(CASE.read_text())
    for key in ("id", "source", "measured", "notes"):
        data.pop(key, None)
    p = tmp_path / "serve.yaml"
    p.write_text(yaml.safe_dump(data))
    return p, data


def test_simulate_prints_the_validated_figures_and_a_decode_step(capsys):
    assert main(["simulate", str(CASE), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    expected = simulate_serving(build_scenario(load_case(CASE))).metrics()
    assert out["kind"] == "serve" and out["metrics"] == pytest.approx(expected)
    step = out["decode_step"]
    assert step["batch"] == 8  # concurrency 8 on one engine
    parts = {k: v for k, v in step["parts_ms"].items() if k != "total"}
    assert sum(parts.values()) == pytest.approx(step["parts_ms"]["total"])
    assert all(v >= 0 for v in parts.values())
    assert main(["simulate", str(CASE)]) == 0
    text = capsys.readouterr().out
    assert "one decode step" in text and "tpot_mean_ms" in text


def test_a_serve_run_without_a_measurement_is_simulated(tmp_path, capsys):
    p, data = _bare_run(tmp_path)
    assert main(["simulate", str(p), "--json"]) == 0
    from_file = json.loads(capsys.readouterr().out)["metrics"]
    assert perfmodel.simulate(data).metrics() == pytest.approx(from_file)  # the API takes the same run as a dict


@pytest.mark.parametrize(("flags", "named"), [(["--tp", "4"], "--tp"), (["--write-plan"], "--write-plan"),
                                              (["--trace", "t.json"], "--trace")])
def test_training_flags_on_a_serve_run_are_refused_in_one_line(tmp_path, capsys, flags, named):
    p, _ = _bare_run(tmp_path)
    flags = [str(tmp_path / f) if f.endswith(".json") else f for f in flags]
    rc = main(["simulate", str(p), *flags])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and named in err and str(p) in err


def test_check_prints_the_engines_kv_pool_and_client(capsys):
    assert main(["check", str(CASE)]) == 0
    out = capsys.readouterr().out
    assert "1 x 8 GPUs (TP8/EP1/DP1)" in out and "KV pool" in out and "8 in flight" in out


def test_an_unknown_engine_is_the_files_error_in_one_line(tmp_path, capsys):
    p, data = _bare_run(tmp_path)
    p.write_text(yaml.safe_dump({**data, "stack": "tgi@3.0"}))
    rc = main(["simulate", str(p)])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "stack" in err and "sglang" in err and str(p) in err


def test_an_unknown_engine_release_falls_back_to_the_engine_with_a_note(tmp_path, capsys):
    p, data = _bare_run(tmp_path)
    p.write_text(yaml.safe_dump({**data, "stack": "sglang@9.9.9"}))
    assert main(["simulate", str(p), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["stack"] == "sglang" and any("9.9.9" in n for n in out["stack_notes"])
    assert main(["simulate", str(p)]) == 0
    assert "note: release '9.9.9' of sglang" in capsys.readouterr().out


@pytest.mark.parametrize(("stack", "hardware", "said"), [
    ("vllm@0.15.1", "mi355x", True), ("vllm@0.15.1", "h200", False), ("sglang@0.5.7", "mi355x", False)])
def test_vllm_on_amd_says_its_attention_kernel_is_not_priced(tmp_path, capsys, stack, hardware, said):
    p, data = _bare_run(tmp_path)
    p.write_text(yaml.safe_dump({**data, "stack": stack, "hardware": hardware}))
    assert main(["simulate", str(p), "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["stack_notes"]
    assert any("Triton's unified attention" in n for n in notes) is said


def test_validate_says_a_note_once_for_the_cases_it_concerns(capsys):
    cases = sorted((REPO / "studies/validation/serving/cases").glob("serve-mi355x-llama3.3-70b-vllm-tp8-4k4k-*.yaml"))
    assert len(cases) == 3
    assert main(["validate", *map(str, cases)]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and notes[0].startswith("note: 3 cases (") and "Triton's unified attention" in notes[0]


def test_a_larger_prefill_chunk_delays_the_first_tokens_of_a_burst(tmp_path, capsys):
    p, data = _bare_run(tmp_path)
    burst = {k: v for k, v in data["serve"].items() if k != "chunked_prefill_tokens"} | {"concurrency": 32,
                                                                                         "requests": 64}
    ttft = {}
    for chunk in (None, 32768):
        serve = burst if chunk is None else {**burst, "chunked_prefill_tokens": chunk}
        p.write_text(yaml.safe_dump({**data, "serve": serve}))
        assert main(["simulate", str(p), "--json"]) == 0
        ttft[chunk] = json.loads(capsys.readouterr().out)["metrics"]["ttft_mean_ms"]
    # 32 prompts of about 0.9k tokens: 8,192-token chunks let the first prompts out after the first chunk
    assert ttft[32768] > 1.05 * ttft[None]
    assert main(["check", str(p)]) == 0
    assert "32,768 prompt tokens per forward" in capsys.readouterr().out


def test_a_prefill_chunk_below_one_token_is_refused_in_one_line(tmp_path, capsys):
    p, data = _bare_run(tmp_path)
    p.write_text(yaml.safe_dump({**data, "serve": {**data["serve"], "chunked_prefill_tokens": 0}}))
    assert main(["simulate", str(p)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "serve.chunked_prefill_tokens" in err and str(p) in err
