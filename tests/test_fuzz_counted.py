"""Bad input, counted: for every kind of input the project reads, random, truncated, type-swapped and extreme
documents (0, negative, NaN, inf, 1e30, a million GPUs) go through the command a user would run, in process. Each
is either rejected with the one-line error and exit 2, or accepted and simulated to finite, non-negative figures;
anything else (a traceback) fails. The counts per kind are printed at the end of the run (tests/conftest.py) and
must reach FUZZ_TOTAL_MIN across the kinds (BUDGET sets how many of each)."""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import json
import math
import os
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfmodel.cli import main as perfmodel_main
from perfmodel.errors import InputError
from tests.conftest import CASES_DIR, REPO

# under pytest-xdist every kind runs on one worker, so the last test sees every count
pytestmark = pytest.mark.xdist_group("fuzz")
COUNTS: Counter[tuple[str, str]] = Counter()  # (kind, rejected | accepted) -> inputs tried
# Inputs per kind in CI: 10,200 in all, more of the kinds that cost little (a log line parses in 3 ms; a
# plan, sweep file, record or model config takes 30-40 ms): about 2.5 minutes on an AVX2 2-core host.
# FUZZ_SCALE=0.1 for a quick local look.
BUDGET = {"Miles log line": 4600, "measurement record": 900, "sweep file": 900, "model config": 800, "case": 600,
          "plan": 600, "hardware profile": 600, "stack profile": 600, "calibration overlay": 600}
SCALE = float(os.environ.get("FUZZ_SCALE", "1"))
FUZZ_TOTAL_MIN = 10_000
KINDS = tuple(BUDGET)


def _examples(kind: str) -> int:
    return max(1, round(BUDGET[kind] * SCALE))


def _settings(kind: str) -> settings:
    return settings(max_examples=_examples(kind), deadline=None, database=None,
                    suppress_health_check=list(HealthCheck))

EXTREMES = [0, -1, -1e30, 1e30, float("nan"), float("inf"), -float("inf"), 10**6, 10**12, 1, 0.5, -0.0, True,
            False, None, "", "x", "1e30", [], {}, [1, 2], {"a": 1}]
scalars = st.one_of(st.sampled_from(EXTREMES), st.integers(-10**7, 10**13),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=10))
values = st.recursive(scalars, lambda c: st.one_of(st.lists(c, max_size=3),
                                                   st.dictionaries(st.text(max_size=6), c, max_size=3)), max_leaves=5)

LOOP_CASE = REPO / "studies" / "calibration-loop" / "measured" / "loop-pp1-fp8-b256-r3.yaml"
SMALL_CASES = [LOOP_CASE, REPO / "studies" / "validation" / "cases" / "mbridge-h100-sxm-llama3-8b-fp8.yaml"]
PLANS = [REPO / "examples" / "local-grpo.yaml", REPO / "examples" / "local-ppo.yaml"]
ALL_CASES = sorted(CASES_DIR.glob("*.yaml"))


@functools.cache
def _parsed(path: Path) -> dict[str, Any]:
    return yaml.load(path.read_text(), Loader=yaml.CSafeLoader)


def _load(path: Path) -> dict[str, Any]:
    """A shipped file as data: parsed once (libyaml), a fresh copy each time."""
    return copy.deepcopy(_parsed(path))


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, prefix + (i,))
    return out


def _mutate(doc: Any, data: st.DataObject) -> Any:
    """1-4 edits: a value replaced (any type, extremes likely), a key deleted, a key added."""
    doc = copy.deepcopy(doc)
    for _ in range(data.draw(st.integers(1, 4))):
        paths = [p for p in _paths(doc) if p]
        if not paths:
            break
        path = data.draw(st.sampled_from(paths))
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        action = data.draw(st.sampled_from(["replace", "replace", "delete", "add"]))
        if action == "replace":  # a copy: EXTREMES' lists and dicts are shared by every example
            parent[path[-1]] = copy.deepcopy(data.draw(values))
        elif action == "delete" and isinstance(parent, dict):
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[data.draw(st.text(min_size=1, max_size=8))] = copy.deepcopy(data.draw(values))
    return doc


def _document(base: Any, data: st.DataObject) -> str:
    """The YAML text of a mutated document, sometimes cut short (a truncated file), sometimes random text."""
    how = data.draw(st.sampled_from(["mutated"] * 6 + ["truncated", "random"]))
    if how == "random":
        return data.draw(st.text(max_size=200))
    text = yaml.dump(_mutate(base, data) if how == "mutated" else base, Dumper=yaml.CSafeDumper, sort_keys=False)
    return text[: data.draw(st.integers(0, len(text)))] if how == "truncated" else text


def _cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = perfmodel_main(argv)
    return rc, out.getvalue(), err.getvalue()


def _finite_non_negative(figures: dict[str, Any], where: str) -> None:
    for k, v in figures.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            assert math.isfinite(v) and v >= 0, (where, k, v)


def _simulate(kind: str, argv: list[str]) -> None:
    """Through `perfmodel simulate ... --json`: exit 2 with one line, 3 with one line refusing an impossible result
    (a knob scaling compute past the hardware's peak), or 0 with sane figures."""
    rc, out, err = _cli(["simulate", *argv, "--json"])
    if rc == 2 or (rc == 3 and err.startswith("error: impossible result")):
        assert err.startswith("error: ") and err.count("\n") == 1, err
        COUNTS[kind, "rejected"] += 1
        return
    assert rc == 0, (rc, err[-2000:])
    result = json.loads(out)
    _finite_non_negative(result["metrics"], kind)
    _finite_non_negative(result.get("phases_s", {}), kind)
    COUNTS[kind, "accepted"] += 1


def _one_line(kind: str, err: InputError) -> None:
    assert "\n" not in str(err)
    COUNTS[kind, "rejected"] += 1


@_settings("case")
@given(data=st.data())
def test_cases(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    """Small cases go through `perfmodel simulate`; every other shipped case (too slow to simulate 1,000 times)
    through loading and every layout rule (`build_scenario`)."""
    from perfmodel.inputs.case import load_case
    from perfmodel.inputs.scenario import build_scenario

    base = data.draw(st.sampled_from(SMALL_CASES * 4 + ALL_CASES))
    path = tmp_path_factory.mktemp("case") / "case.yaml"
    path.write_text(_document(_load(base), data))
    if base in SMALL_CASES:
        _simulate("case", [str(path)])
        return
    try:
        build_scenario(load_case(path), source=str(path))
    except InputError as err:
        _one_line("case", err)
        return
    COUNTS["case", "accepted"] += 1


@_settings("plan")
@given(data=st.data())
def test_plans(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    path = tmp_path_factory.mktemp("plan") / "plan.yaml"
    path.write_text(_document(_load(data.draw(st.sampled_from(PLANS))), data))
    _simulate("plan", [str(path)])


@_settings("hardware profile")
@given(data=st.data())
def test_hardware_profiles(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    base = _load(REPO / "hwprofiles" / data.draw(st.sampled_from(["mi355x.yaml", "h100-sxm.yaml"])))
    folder = tmp_path_factory.mktemp("hw")
    path = folder / f"{base['id']}.yaml"  # a profile's id must equal its file name
    path.write_text(_document(base, data))
    gpus = data.draw(st.sampled_from([8, 16, 10**6]))
    _simulate("hardware profile", ["--hardware", str(path), "--model", "llama3-8b", "--gpus", str(gpus),
                                   "--tp", "8", "--seq-len", "1024", "--global-batch", str(gpus)])


@_settings("stack profile")
@given(data=st.data())
def test_stack_profiles(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    from perfmodel.inputs import stack as stack_module

    folder = tmp_path_factory.mktemp("stacks")
    (folder / "default.yaml").write_text((REPO / "stacks" / "default.yaml").read_text())
    (folder / "fuzz.yaml").write_text(_document(_load(REPO / "stacks" / "local-cpu.yaml"), data))
    case = _load(LOOP_CASE) | {"stack": "fuzz"}
    path = folder / "case.yaml"
    path.write_text(yaml.safe_dump(case, sort_keys=False))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(stack_module, "stacks_dir", lambda: folder)
        stack_module.load_stack_profile.cache_clear()
        try:
            _simulate("stack profile", [str(path)])
        finally:
            stack_module.load_stack_profile.cache_clear()


@_settings("model config")
@given(data=st.data())
def test_model_configs(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    base = data.draw(st.sampled_from([_load(PLANS[0])["model"]["hf_config"],
                                      json.loads((REPO / "perfmodel" / "catalogue" / "llama3-8b.json").read_text())]))
    path = tmp_path_factory.mktemp("model") / "config.json"
    doc = _mutate(base, data)
    path.write_text(json.dumps(doc) if data.draw(st.booleans()) else json.dumps(doc)[: data.draw(st.integers(0, 300))])
    _simulate("model config", ["--hardware", "mi355x", "--model", str(path), "--gpus", "8", "--seq-len", "256",
                               "--global-batch", "8"])


@_settings("sweep file")
@given(data=st.data())
def test_sweep_files(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    from perfmodel.inputs.run import RunSpec
    from perfmodel.inputs.scenario import build_scenario
    from perfmodel.sweep.space import enumerate_candidates
    from perfmodel.sweep.spec import default_sweep_path, load_sweep_spec

    path = tmp_path_factory.mktemp("sweep") / "sweep.yaml"
    path.write_text(_document(_load(default_sweep_path()), data))
    try:
        spec = load_sweep_spec(path)
        for i, cand in enumerate(enumerate_candidates(spec, 8, 256, 43)):  # the first few: priced or refused
            if i >= 3:
                break
            try:
                build_scenario(RunSpec.model_validate(cand.run))
            except InputError as err:
                assert "\n" not in str(err)
            except ValueError:  # pydantic on a candidate the enumeration should not produce: the sweep prunes it
                pass
    except InputError as err:
        _one_line("sweep file", err)
        return
    COUNTS["sweep file", "accepted"] += 1


@pytest.fixture(scope="module")
def overlay_base(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    import perfmodel

    out = tmp_path_factory.mktemp("cal") / "cal.yaml"
    perfmodel.calibrate([LOOP_CASE], out=out)
    return _load(out)


@_settings("calibration overlay")
@given(data=st.data())
def test_calibration_overlays(tmp_path_factory: pytest.TempPathFactory, overlay_base: dict[str, Any],
                              data: st.DataObject) -> None:
    path = tmp_path_factory.mktemp("overlay") / "cal.yaml"
    path.write_text(_document(overlay_base, data))
    _simulate("calibration overlay", [str(LOOP_CASE), "--calibration", str(path)])


MEASUREMENT = {"step": 3, "rollout_time_s": 71.5, "log_probs_time_s": 76.2, "train_time_s": 177.2,
               "weight_update_time_s": 63.1, "step_time_s": 334.7, "reward_mean": 0.39,
               "train_rollout_logprob_abs_diff": 0.0218, "train_rollout_kl": 0.0023, "perf": {"perf/tflops": 101.3}}


@_settings("measurement record")
@given(data=st.data())
def test_measurement_records(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    from executor.measurement_sink import MeasurementSink
    from executor.store import Store

    store_path = tmp_path_factory.mktemp("store") / "s.sqlite"
    measurement = _mutate(MEASUREMENT, data)
    sink = MeasurementSink(Store(store_path))
    try:
        sink.add_step(run_id="r", plan_id="p", backend="miles", measurement=measurement)
    except InputError as err:
        _one_line("measurement record", err)
        return
    finally:
        sink.close()
    (step,) = Store(store_path).steps("r")
    _finite_non_negative({k: v for k, v in step["phases_s"].items() if v is not None}, "measurement record")
    COUNTS["measurement record", "accepted"] += 1


LOG_LINES = [
    "(MegatronTrainRayActor pid=4121) [2026-08-09 10:06:36.001 actor-0] train_metric_utils.py:56 - perf 0: "
    "{'perf/update_weights_time': 63.1, 'perf/log_probs_time': 76.22, 'perf/train_time': 177.15, "
    "'perf/step_time': 334.7}",
    "(RolloutManager pid=2210) metrics.py:89 - perf 0: {'perf/rollout_time': 71.48, 'rollout/response_len/mean': 3020}",
    "(MegatronTrainRayActor pid=4121) model.py:854 - step 0: {'train/loss': -0.0123, 'train/step': 0}",
]


@_settings("Miles log line")
@given(data=st.data())
def test_miles_log_lines(data: st.DataObject) -> None:
    from executor.backends.miles.logs import parse_metric_line, parse_miles_log

    line = data.draw(st.sampled_from(LOG_LINES))
    how = data.draw(st.sampled_from(["cut", "splice", "random", "numbers"]))
    if how == "cut":
        line = line[: data.draw(st.integers(0, len(line)))]
    elif how == "splice":
        at = data.draw(st.integers(0, len(line)))
        line = line[:at] + data.draw(st.text(max_size=20)) + line[at:]
    elif how == "random":
        line = data.draw(st.text(max_size=200))
    else:
        rng = random.Random(data.draw(st.integers(0, 10**6)))
        bad = ["nan", "inf", "-1e400", "1e30", "None", "'x'", "[]", "{", "-0"]
        line = line.replace("63.1", rng.choice(bad)).replace("334.7", rng.choice(bad))
    parse_metric_line(line)  # a line is parsed or ignored, never a crash
    steps = parse_miles_log([line] * 2)
    for s in steps:
        _finite_non_negative({k: v for k, v in s.items() if k.endswith("_time_s")}, "Miles log line")
    COUNTS["Miles log line", "accepted" if steps else "rejected"] += 1


def test_zz_at_least_ten_thousand_inputs_across_kinds() -> None:
    tried = {kind: sum(n for (k, _), n in COUNTS.items() if k == kind) for kind in KINDS}
    if not all(tried.values()):
        pytest.skip(f"only part of the fuzz kinds ran: {tried}")
    assert all(n >= _examples(k) for k, n in tried.items()), tried  # every example asked for ran
    if SCALE >= 1:
        assert sum(tried.values()) >= FUZZ_TOTAL_MIN, tried
