"""Nothing from a plan reaches a shell: every string option of a Miles plan, filled with shell metacharacters, comes
out of the job's entry point and out of the pasted dry run as the same literal argument, and no command in it runs
(a canary file would appear). Strings no quoting makes safe (line breaks, NUL, env names) are refused."""

from __future__ import annotations

import copy
import json
import os
import stat
import subprocess
import sys
import types
import typing
from pathlib import Path

import pytest
import yaml

from executor.backends.miles import build_miles_launch
from executor.backends.miles.dry_run import render_dry_run
from executor.backends.miles.options import MilesOptions, parse_miles_options
from executor.backends.miles.ray_job import _entrypoint
from perfmodel.errors import InputError
from perfmodel.inputs.loading import parse
from perfmodel.inputs.plan import Plan

REPO = Path(__file__).resolve().parents[2]
SEED = yaml.safe_load((REPO / "examples" / "seed-mi355x-dsv4.yaml").read_text())
NOT_FREE_TEXT = {"python", "ray_address", "head_ip", "dashboard_host", "run_id", "model_type", "model_args_format"}


def _payload(canary: Path) -> str:
    c = str(canary)
    return f"x';touch {c};'$(touch {c})`touch {c}`|touch {c}&&touch {c}>{c} \"q\" \\ * ~ # {{a,b}}"


def _string_fields() -> list[str]:
    out = []
    for name, f in MilesOptions.model_fields.items():
        ann = f.annotation
        args = set(typing.get_args(ann)) if typing.get_origin(ann) in (typing.Union, types.UnionType) else {ann}
        if str in args and args <= {str, type(None)} and name not in NOT_FREE_TEXT:
            out.append(name)
    return out


def _printer(folder: Path, out: Path) -> Path:
    """An executable that writes its arguments as JSON (the stand-in for python3 and for ray)."""
    script = folder / "print-argv"
    script.write_text(f"#!{sys.executable}\nimport json, sys\n"
                      f"open({str(out)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def test_every_string_option_stays_one_literal_argument(tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    payload = _payload(canary)
    fields = _string_fields()
    assert len(fields) >= 15, fields
    plan = copy.deepcopy(SEED)
    out = tmp_path / "argv.jsonl"
    opts = plan["executor"]["options"]
    opts.update({name: f"{payload}{name}" for name in fields})
    opts.update(python=str(_printer(tmp_path, out)), extra_args=["--note", payload], model_args=["--m", payload],
                extra_env={"MY_VAR": payload}, eval_prompt_data={"aime": payload})
    launch = build_miles_launch(parse(Plan, plan, "p.yaml"), "p.yaml")
    argv = launch.entrypoint_argv(["--m", payload])
    assert sum(payload in a for a in argv) >= 5  # the payload is in the arguments, whole
    # the job's entry point, as Ray's job runner starts it: through a shell
    subprocess.run(["bash", "-c", _entrypoint(launch, ["--m", payload])], check=True, cwd=tmp_path)
    (got,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert got == argv[1:] and not canary.exists()
    # the dry run, pasted into a shell (ray stands in as the printer): the submission carries the same arguments
    out.unlink()
    text = render_dry_run(launch, "p.yaml")
    ray = _printer(tmp_path, out)
    subprocess.run(["bash", "-c", f"ray() {{ {ray} \"$@\"; }}\n" + text], check=True, cwd=tmp_path,
                   env={**os.environ, "MASTER_ADDR": "10.0.0.1"})
    submitted = [json.loads(line) for line in out.read_text().splitlines()][-1]
    tail = submitted[submitted.index("--") + 1:]
    assert tail == argv  # MODEL_ARGS expanded by the pasted shell line, every other argument literal
    assert json.loads(submitted[submitted.index("--runtime-env-json") + 1])["env_vars"]["MY_VAR"] == payload
    assert not canary.exists()


@pytest.mark.parametrize("options, field", [
    ({"miles_root": "/a\nrm -rf /"}, "executor.options.miles_root"),
    ({"extra_args": ["--x", "a\rb"]}, "executor.options.extra_args"),
    ({"extra_env": {"A;B": "1"}}, "executor.options.extra_env"),
    ({"extra_env": {"A": "x\0y"}}, "executor.options.extra_env"),
    ({"head_ip": "10.0.0.1;reboot"}, "executor.options.head_ip"),
    ({"dashboard_host": "0.0.0.0 --x"}, "executor.options.dashboard_host"),
    ({"model_type": "../../etc"}, "executor.options.model_type"),
])
def test_what_no_quoting_makes_safe_is_refused(options: dict, field: str) -> None:
    with pytest.raises(InputError) as err:
        parse_miles_options(options, "p.yaml")
    assert err.value.field == field


def test_the_ray_dashboard_listens_on_loopback_unless_the_plan_says_otherwise() -> None:
    """The dashboard serves Ray's job API, which runs whatever is submitted to it."""
    def head(options: dict) -> list[str]:
        d = copy.deepcopy(SEED)
        d["executor"]["options"].update(options)
        cmd = list(build_miles_launch(parse(Plan, d, "p.yaml"), "p.yaml").ray_head)
        return cmd[cmd.index("--dashboard-host") + 1:cmd.index("--dashboard-host") + 2]

    assert head({}) == ["127.0.0.1"]
    assert head({"dashboard_host": "10.0.0.5"}) == ["10.0.0.5"]


def test_a_plan_path_with_a_line_break_stays_inside_its_comment(tmp_path: Path) -> None:
    """The dry run names the plan in a comment: a newline in the file name must not end the comment, or the pasted
    printout would run what follows it."""
    canary = tmp_path / "canary"
    launch = build_miles_launch(parse(Plan, copy.deepcopy(SEED), "p.yaml"), "p.yaml")
    text = render_dry_run(launch, f"plans/a\ntouch {canary}\n.yaml")
    assert all(not line.startswith("touch") for line in text.splitlines())
    subprocess.run(["bash", "-c", "ray() { :; }\n" + text], cwd=tmp_path, env={**os.environ, "MASTER_ADDR": "x"},
                   capture_output=True)
    assert not canary.exists()
