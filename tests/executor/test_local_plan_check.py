"""Plan checks of the local backend: every bad input is one line `error: <file>: <field>: <message>`, exit 2."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from executor.backends.local.plan_check import Machine, check_plan
from perfmodel.errors import InputError

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "local-grpo.yaml"
CPU2 = Machine(cpu_cores=2, gpus=0)


def _plan() -> dict[str, Any]:
    return copy.deepcopy(yaml.safe_load(EXAMPLE.read_text()))


def _write(tmp_path: Path, data: dict[str, Any]) -> Path:
    p = tmp_path / "plan.yaml"
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return p


@pytest.mark.parametrize(
    "name", ["local-grpo.yaml", "local-grpo-bf16.yaml", "local-grpo-pp2.yaml", "local-grpo-ep2.yaml"])
def test_shipped_examples_pass(name: str) -> None:
    checked = check_plan(REPO / "examples" / name, CPU2, need_software=False)
    assert checked.processes in (1, 2)


def _mutations() -> list[tuple[str, Any, str]]:
    def opt(d: dict[str, Any]) -> None:
        d["executor"]["options"]["colour"] = "blue"

    def procs(d: dict[str, Any]) -> None:
        d["gpus"] = d["rl"]["actor_gpus"] = d["rl"]["rollout_gpus"] = 4

    def tp(d: dict[str, Any]) -> None:
        d["gpus"] = d["rl"]["actor_gpus"] = d["rl"]["rollout_gpus"] = 2
        d["train"]["layout"]["tp"] = 2

    def hw(d: dict[str, Any]) -> None:
        d["hardware"] = "mi355x"

    def top(d: dict[str, Any]) -> None:
        d["flavour"] = 1

    def kv(d: dict[str, Any]) -> None:
        del d["rl"]["rollout"]["max_total_tokens"]

    def ep(d: dict[str, Any]) -> None:
        d["gpus"] = d["rl"]["actor_gpus"] = d["rl"]["rollout_gpus"] = 2
        d["train"]["layout"]["ep"] = 2

    def mb(d: dict[str, Any]) -> None:
        d["train"]["micro_batch"] = 100

    def arch(d: dict[str, Any]) -> None:
        d["model"]["hf_config"]["architectures"] = ["GPT2LMHeadModel"]

    def task(d: dict[str, Any]) -> None:
        d["executor"]["options"]["task"] = "chess"

    def bcast(d: dict[str, Any]) -> None:
        d["rl"]["weight_update"]["mode"] = "broadcast"

    def deepep(d: dict[str, Any]) -> None:
        d["train"]["moe_dispatcher"] = "deepep"

    def recompute(d: dict[str, Any]) -> None:
        d["train"]["recompute"] = "full"

    def act_offload(d: dict[str, Any]) -> None:
        d["train"]["activation_offload_layers"] = 1

    return [
        ("executor.options.colour", opt, "unknown key"),
        ("gpus", procs, "4 trainer processes but this machine has 2 CPU cores"),
        ("train.layout.tp", tp, "tensor parallelism needs GPUs"),
        ("hardware", hw, "no GPU"),
        ("flavour", top, "unknown key"),
        ("rl.rollout.max_total_tokens", kv, "bound the KV pool"),
        ("train.layout.ep", ep, "needs an MoE model"),
        ("train.micro_batch", mb, "multiple of micro_batch"),
        ("model.hf_config.architectures", arch, "LlamaForCausalLM"),
        ("executor.options.task", task, "Input should be"),
        ("rl.weight_update.mode", bcast, "use ipc"),
        ("train.moe_dispatcher", deepep, "alltoall dispatcher"),
        ("train.recompute", recompute, "no activation recompute"),
        ("train.activation_offload_layers", act_offload, "offloads no activations"),
    ]


@pytest.mark.parametrize("field,mutate,text", _mutations(), ids=[m[0] for m in _mutations()])
def test_bad_plans_name_the_field(tmp_path: Path, field: str, mutate: Any, text: str) -> None:
    data = _plan()
    mutate(data)
    path = _write(tmp_path, data)
    with pytest.raises(InputError) as err:
        check_plan(path, CPU2, need_software=False)
    assert err.value.field == field
    assert text in err.value.message
    assert "\n" not in str(err.value)


def test_missing_sglang_is_an_input_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import executor.backends.local.plan_check as pc

    monkeypatch.setattr(pc, "_missing", lambda module: module == "sglang")
    with pytest.raises(InputError) as err:
        check_plan(_write(tmp_path, _plan()), CPU2, need_software=True)
    assert err.value.field == "executor.backend" and "sglang==0.5.23" in err.value.message


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "executor", *args], capture_output=True, text=True, cwd=cwd,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, timeout=120)


def test_cli_bad_plan_exits_2_with_one_line_before_starting(tmp_path: Path) -> None:
    data = _plan()
    data["gpus"] = data["rl"]["actor_gpus"] = data["rl"]["rollout_gpus"] = 64
    path = _write(tmp_path, data)
    res = _cli("launch", "--plan", str(path), "--store", str(tmp_path / "s.sqlite"), cwd=tmp_path)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}: gpus: 64 trainer processes"), res.stderr
    assert not (tmp_path / "s.sqlite").exists() and not (tmp_path / "runs").exists()


def test_cli_unknown_field_and_debug_traceback(tmp_path: Path) -> None:
    data = _plan()
    data["train"]["flavour"] = 1
    path = _write(tmp_path, data)
    res = _cli("launch", "--plan", str(path), cwd=tmp_path)
    assert res.returncode == 2 and res.stderr.strip() == (
        f"error: {path}: train.flavour: unknown key; remove it or check its spelling")
    res = _cli("launch", "--plan", str(path), "--debug", cwd=tmp_path)
    assert res.returncode == 2 and "Traceback" in res.stderr


def test_cli_missing_file_and_store(tmp_path: Path) -> None:
    res = _cli("launch", "--plan", "nope.yaml", cwd=tmp_path)
    assert res.returncode == 2 and res.stderr.strip() == "error: nope.yaml: file not found"
    res = _cli("runs", "--store", "none.sqlite", cwd=tmp_path)
    assert res.returncode == 2 and res.stderr.startswith("error: none.sqlite: --store:")
