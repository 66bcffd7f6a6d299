"""`executor align` on real engines (SGLang serving, megatron-core training, the FP32 reference), with components
broken on purpose: align must name the layer and component where the break is, and with nothing broken both engines
stay within the precision's own noise. Each session runs in a process of its own (tests/executor/align_driver.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from executor.align.compare import NOISE_FLOOR
from tests.executor.test_local_launch import REPO, needs_stack

pytestmark = [pytest.mark.slow]
MINI = REPO / "examples" / "local-grpo-dsv4mini.yaml"
BREAKS = [  # one side configured otherwise, and where align must say the two part
    ({"hash_seed": 8}, [0, "routing"]),  # another hash table: its first hash-routed layer
    ({"sliding_window": 5}, [0, "attention"]),  # the window off by one
    ({"hc_sinkhorn_iters": 1}, [0, "attention_residual"]),  # one Sinkhorn pass instead of 20: the first mixing
]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}


def _session(tmp: Path, *args: str) -> list[dict]:
    out = tmp / "results.json"
    run = subprocess.run([sys.executable, str(REPO / "tests" / "executor" / "align_driver.py"), str(MINI), str(out),
                          *args], capture_output=True, text=True, env=_env(), timeout=600)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    return json.loads(out.read_text())


def _departure(result: dict, engine: str) -> list | None:
    found = [[d["layer"], d["component"]] for d in result["departures"] if d["engine"] == engine]
    return found[0] if found else None


@pytest.fixture(scope="module")
def bf16(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """One BF16 session: nothing broken, then each break on the trainer's side (the engine as the plan says)."""
    return _session(tmp_path_factory.mktemp("align"), "--precision", "bf16",
                    *(x for over, _ in BREAKS for x in ("--trainer-set", json.dumps(over))))


@needs_stack
@pytest.mark.timeout(900)
def test_nothing_broken_agrees_within_the_precisions_noise(bf16: list[dict]) -> None:
    result = bf16[0]
    assert result["rollout_layers"] and result["departures"] == []
    for row in result["rows"]:
        if row["component"] == "routing":
            assert row["trainer_vs_reference"] == row["rollout_vs_reference"] == 1.0  # hash and learned alike
        else:
            assert row["trainer_vs_reference"] < NOISE_FLOOR / 2 and row["rollout_vs_reference"] < NOISE_FLOOR / 2
            assert row["precision_alone"] == 0.0  # BF16 rollout: the trainer's weights
    assert all(b["mean_abs"] < 0.01 for b in result["gap"])


@needs_stack
@pytest.mark.timeout(900)
@pytest.mark.parametrize("index", range(len(BREAKS)))
def test_a_component_broken_on_the_trainer_is_named(bf16: list[dict], index: int) -> None:
    overrides, where = BREAKS[index]
    result = bf16[index + 1]
    assert result["trainer_set"] == overrides
    assert _departure(result, "trainer") == where, [d for d in result["departures"]]
    assert _departure(result, "rollout") is None  # the engine is as configured


@needs_stack
@pytest.mark.timeout(900)
def test_an_fp8_scale_block_of_64_on_the_engine_is_named(tmp_path: Path) -> None:
    (result,) = _session(tmp_path, "--precision", "fp8", "--fp8-block", "64", "--samples", "6")
    assert _departure(result, "rollout") == [0, "attention"], result["departures"]
    assert _departure(result, "trainer") is None
    assert result["rows"][0]["precision_alone"] > NOISE_FLOOR / 10  # FP8's own effect, shown apart


@needs_stack
@pytest.mark.timeout(600)
def test_the_command_on_the_llama_example(tmp_path: Path) -> None:
    """SGLang's own Llama class shows no layers: the rollout is judged by its log-probs; the table, the JSON and
    the figure are written."""
    out = subprocess.run([sys.executable, "-m", "executor", "align", "--plan", str(REPO / "examples" /
                          "local-grpo.yaml"), "--samples", "4", "--out", str(tmp_path)], capture_output=True,
                         text=True, env=_env(), timeout=500)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    assert "does not expose its layers" in out.stdout and "no departure" in out.stdout
    data = json.loads((tmp_path / "align.json").read_text())
    assert data["rollout_layers"] is False and data["meta"]["precision"] == "fp8"
    assert all(r["rollout_vs_reference"] is None and r["trainer_vs_reference"] < NOISE_FLOOR
               for r in data["rows"] if r["component"] != "routing")
    assert data["gap_vs_reference"]["rollout"] < 0.05
    assert (tmp_path / "align.html").stat().st_size > 100_000
