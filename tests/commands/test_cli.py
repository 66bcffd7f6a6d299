"""CLI conventions: accurate help, one-line errors with exit 2, no traceback unless --debug."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from perfmodel.cli import main
from tests.conftest import CASES_DIR, REPO, write_yaml


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def test_help_lists_commands(capsys):
    with pytest.raises(SystemExit) as ex:
        main(["--help"])
    assert ex.value.code == 0
    out = capsys.readouterr().out
    for cmd in ("validate", "models", "hardware", "check"):
        assert cmd in out


def test_validate_bundled_cases_lists_every_case(capsys):
    rc, out, _ = _run(["validate", str(CASES_DIR), "--json"], capsys)
    assert rc == 0
    report = json.loads(out)
    ids = {r["id"] for r in report["cases"]}
    assert len(ids) == len(list(CASES_DIR.glob("*.yaml")))
    assert report["summary"]["cases"] == len(ids)
    for row in report["cases"]:
        assert set(row) == {"id", "metric", "measured", "predicted", "rel_error"}
    # every case is either scored or listed with a reason: never skipped silently
    failed = {f["id"] for f in report["failed"]}
    scored = {r["id"] for r in report["cases"] if r["predicted"] is not None}
    assert failed | scored == ids
    assert all(f["reason"] for f in report["failed"])


def test_validate_piped_prints_full_names_grouped_by_case(capsys):
    """Piped (a log, grep, a file), the table keeps every case and metric name whole, each case's id once with
    its metrics under it; --format csv gives the same rows as data."""
    import csv
    import io

    rc, out, _ = _run(["validate", str(CASES_DIR), "--json"], capsys)
    rows = json.loads(out)["cases"]
    ids = list(dict.fromkeys(r["id"] for r in rows))
    proc = subprocess.run([sys.executable, "-m", "perfmodel.cli", "validate", str(CASES_DIR)], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0
    lines = proc.stdout.splitlines()
    for cid in ids:  # whole, once: the first row of its section
        assert sum(f"│ {cid} " in line for line in lines) == 1, cid
    for metric in {r["metric"] for r in rows}:
        assert any(f"│ {metric} " in line for line in lines), metric
    assert not any("…" in line for line in lines)
    proc = subprocess.run([sys.executable, "-m", "perfmodel.cli", "validate", str(CASES_DIR), "--format", "csv"],
                          capture_output=True, text=True, timeout=300)
    got = list(csv.DictReader(io.StringIO(proc.stdout)))
    assert [(r["id"], r["metric"]) for r in got] == [(r["id"], r["metric"]) for r in rows]
    assert all(float(g["measured"]) == r["measured"] for g, r in zip(got, rows))


def test_malformed_case_one_line_exit_2(tmp_path, capsys):
    p = tmp_path / "bad.yaml"
    p.write_text("id: x\nkind: [\n")
    rc, out, err = _run(["validate", str(p)], capsys)
    assert rc == 2
    assert err.count("\n") == 1 and str(p) in err and "malformed YAML" in err
    assert "Traceback" not in err


def test_unknown_key_in_case_exit_2(tmp_path, case_dict, capsys):
    case_dict["train"]["layot"] = {}
    p = write_yaml(tmp_path / "c.yaml", case_dict)
    rc, _, err = _run(["validate", str(p)], capsys)
    assert rc == 2 and "train.layot" in err and "unknown key" in err


def test_unknown_hardware_id_exit_2(capsys):
    rc, _, err = _run(["hardware", "mi999x"], capsys)
    assert rc == 2
    assert err.count("\n") == 1 and "unknown hardware id 'mi999x'" in err and "mi355x" in err


def test_unknown_hardware_in_case_is_listed_as_failed(tmp_path, case_dict, capsys):
    case_dict["hardware"] = "tpu-v9"
    p = write_yaml(tmp_path / "c.yaml", case_dict)
    rc, out, _ = _run(["validate", str(p), "--json"], capsys)
    assert rc == 0
    report = json.loads(out)
    assert report["summary"]["failed_cases"] == 1
    assert "unknown hardware id" in report["failed"][0]["reason"]


def test_impossible_layout_exit_2(tmp_path, case_dict, capsys):
    case_dict["train"]["layout"]["tp"] = 3
    p = write_yaml(tmp_path / "c.yaml", case_dict)
    rc, _, err = _run(["check", str(p)], capsys)
    assert rc == 2
    assert err.count("\n") == 1 and "train.layout" in err and str(p) in err


def test_check_prints_resolved_layout(capsys):
    rc, out, _ = _run(["check", str(CASES_DIR / "miles-gb300-dsv4flash-bf16train.yaml")], capsys)
    assert rc == 0
    assert "TP2/PP8/CP2/EP4/DP1" in out and "pipeline split" in out and "recompute         full" in out
    archive = (REPO / "studies/validation/mbridge-archive/cases"
               / "mb26.04-gb300-deepseek-v3-mxfp8-256g-tp1pp2cp1vp8ep32-mbs2.yaml")
    assert "recompute         selective (mla_up_proj)" in _run(["check", str(archive)], capsys)[1]
    sglang = _run(["check", str(CASES_DIR / "miles-gb300-dsv4flash-bf16train.yaml")], capsys)[1]
    assert "KV pool" in sglang and "GiB per GPU" in sglang and "sampler" not in sglang  # SGLang holds none
    nemo = REPO / "studies/validation/nemo-rl/cases/nemorl-h100-qwen3-30b-a3b-grpo-colocated.yaml"
    assert "after the sampler's 3.2 GiB (rollout_memory_rule vllm)" in _run(["check", str(nemo)], capsys)[1]  # vLLM
    eight = nemo.with_name("nemorl-h100-qwen3-30b-a3b-grpo-async-8off.yaml")
    assert "disaggregated async, 8 steps in flight" in _run(["check", str(eight)], capsys)[1]


def test_debug_shows_traceback(tmp_path):
    p = tmp_path / "missing.yaml"
    proc = subprocess.run([sys.executable, "-m", "perfmodel.cli", "--debug", "validate", str(p)],
                          capture_output=True, text=True)
    assert proc.returncode != 0 and "Traceback" in proc.stderr


def test_models_summary(capsys):
    rc, out, _ = _run(["models", "deepseek-v4-flash"], capsys)
    assert rc == 0 and "DeepseekV4ForCausalLM" in out


def test_unknown_model_id_exit_2(capsys):
    rc, _, err = _run(["models", "gpt-5"], capsys)
    assert rc == 2 and "gpt-5" in err and "llama3-8b" in err


def test_debug_after_the_subcommand(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "perfmodel.cli", "validate", str(tmp_path / "none.yaml"), "--debug"],
                          capture_output=True, text=True)
    assert proc.returncode != 0 and "Traceback" in proc.stderr


def test_simulate_a_case_file_with_a_flag_override(capsys, tmp_path):
    case = str(CASES_DIR / "mbridge-h100-sxm-llama3-70b-fp8.yaml")
    assert main(["simulate", case, "--json"]) == 0
    base = json.loads(capsys.readouterr().out)
    assert base["layout"] == "TP4/PP8/VPP5/DP2" and base["metrics"]["step_time_s"] > 0
    trace = tmp_path / "t.json"
    assert main(["simulate", case, "--tp", "8", "--json", "--trace", str(trace)]) == 0
    assert json.loads(capsys.readouterr().out)["layout"] == "TP8/PP8/VPP5/DP1"  # dp re-derived
    assert json.loads(trace.read_text())["traceEvents"]


def test_simulate_refuses_an_unknown_key_in_the_file(tmp_path, case_dict, capsys):
    case_dict["train"]["layout"]["pq"] = 2
    p = write_yaml(tmp_path / "c.yaml", case_dict)
    rc, _, err = _run(["simulate", str(p)], capsys)
    assert rc == 2 and err.count("\n") == 1 and "train.layout.pq" in err


def test_a_misspelled_key_is_named_with_the_key_it_was_meant_to_be(tmp_path, capsys):
    """A required key typed wrong is reported as the unknown key the user typed, with a did-you-mean, not as the
    missing one; an optional key typed wrong gets the suggestion from the section's valid keys."""
    from perfmodel.cli import main

    base = ("kind: pretrain\nhardware: h100-sxm\ngpus: 8\nmodel: {id: llama3-8b}\ntrain:\n  precision: bf16\n"
            "  seq_len: 4096\n  global_batch: 64\n  micro_batch: 1\n  layout: {tp: 1, pp: 1}\n")
    for typo, fixed, field in (("global_bach: 64", "global_batch: 64", "train.global_bach"),
                               ("micro_btch: 1", "micro_batch: 1", "train.micro_btch"),
                               ("flavour: 1", None, "train.flavour")):
        text = base.replace(fixed, typo) if fixed else base + "  " + typo + "\n"
        path = tmp_path / "run.yaml"
        path.write_text(text)
        assert main(["simulate", str(path)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and f"{field}: unknown key" in err, err
        if fixed:
            assert f"did you mean {fixed.split(':')[0]!r}?" in err, err
        else:
            assert "remove it or check its spelling" in err, err


def test_a_wrong_id_is_reported_before_missing_fields_with_the_rest_counted(tmp_path, capsys):
    """Every problem is collected; the first in file order is reported (a mistyped id is never hidden behind a
    missing field), with a did-you-mean, and the others are counted and named on the same line."""
    rc, _, err = _run(["simulate", "--hardware", "mi355", "--model", "dsv4-flahs", "--gpus", "16"], capsys)
    assert rc == 2 and err.count("\n") == 1, err
    assert "hardware: unknown hardware id 'mi355' (did you mean 'mi355x'?)" in err, err
    assert "(also 3 more: model.id, train.seq_len, train.global_batch)" in err, err
    path = tmp_path / "run.yaml"
    path.write_text("kind: pretrain\nhardware: h100-sxm\ngpus: 8\nmodel: {id: llama3-8bb}\ntrain:\n"
                    "  precision: bf16\n  global_batch: 64\n  layout: {tp: 1, pp: 1}\n")
    rc, _, err = _run(["simulate", str(path)], capsys)
    assert rc == 2 and err.count("\n") == 1, err
    assert f"{path}: model.id: unknown model id 'llama3-8bb' (did you mean 'llama3-8b'?)" in err, err
    assert "(also 1 more: train.seq_len)" in err, err


def test_an_impossible_result_is_refused_in_one_line_with_exit_3(tmp_path, capsys, monkeypatch):
    """A stack whose compute knob beats the hardware's peak (MFU > 1): refused by its invariant, one line naming
    it and the knobs that cause it, exit 3, no traceback and no figures."""
    import yaml

    from perfmodel.inputs import stack as stack_module

    stack = yaml.safe_load((REPO / "stacks" / "local-cpu.yaml").read_text())
    stack["id"] = "too-fast"
    stack["knobs"]["train_compute_scale"]["value"] = 0.01
    (tmp_path / "default.yaml").write_text((REPO / "stacks" / "default.yaml").read_text())
    write_yaml(tmp_path / "too-fast.yaml", stack)
    case = yaml.safe_load((REPO / "studies" / "calibration-loop" / "measured" / "loop-pp1-fp8-b256-r3.yaml")
                          .read_text()) | {"stack": "too-fast"}
    monkeypatch.setattr(stack_module, "stacks_dir", lambda: tmp_path)
    stack_module.load_stack_profile.cache_clear()
    try:
        rc, out, err = _run(["simulate", str(write_yaml(tmp_path / "case.yaml", case)), "--json"], capsys)
    finally:
        stack_module.load_stack_profile.cache_clear()
    assert rc == 3 and out == ""
    assert err.startswith("error: impossible result (MFU <= 1)") and err.count("\n") == 1, err
    assert "train_compute_scale" in err


def test_python_dash_m_perfmodel_is_the_console_script():
    res = subprocess.run([sys.executable, "-m", "perfmodel", "--version"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and res.stdout.startswith("perfmodel"), res.stderr
    bad = subprocess.run([sys.executable, "-m", "perfmodel", "validate", "/nonexistent/case.yaml"], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
