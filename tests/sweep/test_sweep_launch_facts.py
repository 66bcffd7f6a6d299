"""What a sweep file says about the launch and the machine reaches every plan it writes: the executor backend and
its options (a local sweep's plans launch locally, not on Miles), and the hardware facts measured on the host (the
local executor's probe), which every candidate is priced with, as the runs measured there are calibrated with."""

from __future__ import annotations

from pathlib import Path

import yaml

from perfmodel.api import sweep
from perfmodel.inputs.plan import load_plan
from perfmodel.sweep.spec import SweepSpec
from tests.conftest import REPO

LOCAL_SWEEP = REPO / "studies" / "active-measurement" / "local-sweep.yaml"


def test_a_sweep_files_executor_and_hardware_facts_reach_every_plan(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PERFMODEL_CACHE_DIR", str(tmp_path / "cache"))
    spec = yaml.safe_load(LOCAL_SWEEP.read_text())
    profile = sweep(SweepSpec.model_validate(spec), out=tmp_path / "profile", top=3, workers=1, report=False)
    spec["hardware_options"] = {"peak_tflops_bf16": 0.2, "peak_tflops_fp8": 0.2, "source": "a host probe (test)"}
    probed = sweep(SweepSpec.model_validate(spec), out=tmp_path / "probed", top=3, workers=1, report=False)
    plans = sorted((tmp_path / "probed" / "plans").glob("*.yaml"))
    assert len(plans) == len(probed.top) == 3
    for path in plans:
        plan = load_plan(path)
        assert plan.executor.backend == "local" and plan.executor.options["torch_threads"] == 1
        assert plan.hardware_options is not None and plan.hardware_options.peak_tflops_bf16 == 0.2
    # a host 34x faster at matmuls than the profile's: every plan priced faster, none the same
    slow = {r["label"]: r["step_time_s"] for r in profile.top}
    fast = {r["label"]: r["step_time_s"] for r in probed.top}
    assert slow.keys() == fast.keys() and all(fast[k] < slow[k] for k in slow)


def test_without_an_executor_section_plans_launch_on_miles(tmp_path: Path, monkeypatch) -> None:
    from tests.sweep.test_sweep import small_spec

    monkeypatch.setenv("PERFMODEL_CACHE_DIR", str(tmp_path / "cache"))
    sweep(small_spec(), out=tmp_path / "s", top=1, workers=1, report=False)
    (path,) = (tmp_path / "s" / "plans").glob("*.yaml")
    assert load_plan(path).executor.backend == "miles"


def test_a_bad_executor_or_hardware_fact_in_a_sweep_file_is_one_line_naming_the_field(tmp_path: Path, capsys) -> None:
    from perfmodel.cli import main

    spec = yaml.safe_load(LOCAL_SWEEP.read_text())
    for field, value, said in (("executor", {"backend": "slurm"}, "executor.backend"),
                               ("hardware_options", {"peak_tflops_bf16": -1.0, "source": "probe"},
                                "hardware_options.peak_tflops_bf16")):
        bad = tmp_path / f"bad-{field}.yaml"
        bad.write_text(yaml.safe_dump(spec | {field: value}))
        assert main(["sweep", str(bad), "--out", str(tmp_path / field), "--no-report"]) == 2
        err = capsys.readouterr().err
        assert str(bad) in err and said in err and "Traceback" not in err
        assert not (tmp_path / field / "summary.json").exists()
