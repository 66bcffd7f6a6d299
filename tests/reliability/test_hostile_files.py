"""Every loader takes hostile files (issue 25): a valid shipped file of each kind, made hostile (aliases, a key given
twice, a value of the wrong type, over the size limit, bytes that are not UTF-8, cut short at any point), must load
or fail with one InputError naming the file, quickly and in bounded memory: never another exception, never a hang."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfmodel.errors import InputError
from perfmodel.inputs.loading import MAX_INPUT_BYTES
from tests.conftest import REPO


def _overlay(path: Path) -> Any:
    from perfmodel.calibration import load_calibration

    return load_calibration(path)


def _plan(path: Path) -> Any:
    from perfmodel.inputs.plan import load_plan

    return load_plan(path)


def _sweep(path: Path) -> Any:
    from perfmodel.sweep.spec import load_sweep_spec

    return load_sweep_spec(path)


def _case(path: Path) -> Any:
    from perfmodel.inputs.case import load_case

    return load_case(path)


def _hardware(path: Path) -> Any:
    from perfmodel.inputs.hardware import load_hardware_file

    return load_hardware_file(path)


def _model(path: Path) -> Any:
    from perfmodel.inputs.model import load_model

    return load_model(str(path))


def _run(path: Path) -> Any:
    from perfmodel.inputs.run_file import load_run_file

    return load_run_file(str(path))


OVERLAY = "stack: miles\nstack_params: {train_compute_scale: 1.2}\nhardware_params: {}\n"
# (loader, a valid file of its kind: a shipped one, or the text of one)
LOADERS: dict[str, tuple[Callable[[Path], Any], str]] = {
    "plan": (_plan, (REPO / "examples" / "local-grpo.yaml").read_text()),
    "sweep file": (_sweep, (REPO / "perfmodel" / "defaults" / "seed-sweep.yaml").read_text()),
    "case": (_case, (REPO / "studies" / "validation" / "cases" / "miles-gb300-dsv4flash-bf16train.yaml").read_text()),
    "hardware profile": (_hardware, (REPO / "hwprofiles" / "mi355x.yaml").read_text()),
    "calibration overlay": (_overlay, OVERLAY),
    "run file": (_run, (REPO / "examples" / "seed-mi355x-dsv4.yaml").read_text()),
    "model config": (_model, (REPO / "perfmodel" / "catalogue" / "qwen3-30b-a3b.json").read_text()),
}
BOMB = "b0: &b0 [x, x, x, x, x, x, x, x]\n" + "".join(
    f"b{i}: &b{i} [{', '.join([f'*b{i - 1}'] * 8)}]\n" for i in range(1, 9))


def _load(kind: str, text: str | bytes, tmp_path: Path) -> Exception | None:
    """Load `text` as a file of `kind`; the InputError it raised, or None when it loaded. Anything else fails."""
    loader, original = LOADERS[kind]
    path = tmp_path / ("config.json" if kind == "model config" else f"input-{kind.replace(' ', '-')}.yaml")
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass"))
    t0 = time.perf_counter()
    try:
        loader(path)
    except InputError as err:
        assert str(path) in str(err) or path.name in str(err), f"the error does not name the file: {err}"
        assert "\n" not in err.one_line()
        return err
    finally:
        assert time.perf_counter() - t0 < 10, f"{kind}: loading took {time.perf_counter() - t0:.1f} s"
    return None


@pytest.mark.parametrize("kind", sorted(LOADERS))
def test_the_valid_file_loads(kind: str, tmp_path: Path) -> None:
    assert _load(kind, LOADERS[kind][1], tmp_path) is None


@pytest.mark.parametrize("kind", sorted(set(LOADERS) - {"model config"}))  # JSON has no aliases
def test_an_alias_bomb_is_refused_before_it_expands(kind: str, tmp_path: Path) -> None:
    err = _load(kind, BOMB + LOADERS[kind][1], tmp_path)
    assert err is not None and "aliases" in str(err)


@pytest.mark.parametrize("kind", sorted(LOADERS))
def test_a_key_given_twice_is_refused(kind: str, tmp_path: Path) -> None:
    text = LOADERS[kind][1]
    if kind == "model config":
        doubled = text.replace('"hidden_size"', '"hidden_size": 1, "hidden_size"', 1)
    else:
        first = next(ln for ln in text.splitlines() if ln and ln[0].isalpha() and ":" in ln)
        doubled = text.replace(first + "\n", first + "\n" + first + "\n", 1)
    err = _load(kind, doubled, tmp_path)
    assert err is not None and "given twice" in str(err)


@pytest.mark.parametrize("kind", sorted(LOADERS))
def test_a_file_over_the_size_limit_is_refused_unread(kind: str, tmp_path: Path) -> None:
    pad = ("#" + "x" * 1023 + "\n") if kind != "model config" else " " * 1024
    err = _load(kind, LOADERS[kind][1] + pad * (MAX_INPUT_BYTES // 1024 + 1), tmp_path)
    assert err is not None and "MB" in str(err)


@pytest.mark.parametrize("kind", sorted(LOADERS))
def test_bytes_that_are_not_utf8_are_refused(kind: str, tmp_path: Path) -> None:
    err = _load(kind, LOADERS[kind][1].encode() + b"\n# \xff\xfe\x80\n", tmp_path)
    assert err is not None


def test_a_quoted_number_is_not_a_number(tmp_path: Path) -> None:
    text = LOADERS["plan"][1].replace("gpus: 1\n", 'gpus: "1"\n', 1)
    err = _load("plan", text, tmp_path)
    assert err is not None and "gpus" in str(err)


def test_yes_is_not_true(tmp_path: Path) -> None:
    text = LOADERS["sweep file"][1].replace("distributed_optimizer: true", "distributed_optimizer: true") + \
        "space: {dp_attention: ['yes']}\n"
    err = _load("sweep file", text, tmp_path)
    assert err is not None and "dp_attention" in str(err)


def test_a_number_in_exponent_form_is_a_number(tmp_path: Path) -> None:
    """YAML 1.1 reads 180.0e9 as a string; strict types would then refuse what every profile writes."""
    data = yaml.safe_load(LOADERS["plan"][1])
    data["rl"]["reward_host_s"] = "REPLACE"
    text = yaml.safe_dump(data).replace("REPLACE", "1e-6")
    assert _load("plan", text, tmp_path) is None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(sorted(LOADERS)), cut=st.floats(0.0, 1.0))
def test_a_file_cut_short_anywhere_loads_or_fails_in_one_line(kind: str, cut: float, tmp_path: Path) -> None:
    text = LOADERS[kind][1]
    _load(kind, text[: int(len(text) * cut)], tmp_path)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(sorted(set(LOADERS) - {"model config"})), line=st.integers(0, 10_000),
       value=st.sampled_from(['"8"', "yes", "8.5", "-1", "1.0e300", ".nan", ".inf", "[]", "{}", "null", "'x' ",
                              "99999999999999999999", "~", "!!binary aGk=", "2026-01-01", "[*]"]))
def test_any_value_replaced_by_a_hostile_one_loads_or_fails_in_one_line(kind: str, line: int, value: str,
                                                                       tmp_path: Path) -> None:
    lines = LOADERS[kind][1].splitlines()
    keyed = [i for i, ln in enumerate(lines) if ":" in ln and not ln.lstrip().startswith(("#", "-"))]
    i = keyed[line % len(keyed)]
    key = lines[i].split(":", 1)[0]
    lines[i] = f"{key}: {value}"
    _load(kind, "\n".join(lines) + "\n", tmp_path)


@pytest.mark.parametrize("special", ["/dev/zero", "fifo"])
def test_a_path_that_is_not_a_regular_file_is_refused_unread(special: str, tmp_path: Path) -> None:
    """/dev/zero never ends and a FIFO blocks: neither is read."""
    import os

    from perfmodel.inputs.loading import read_mapping

    path = Path(special)
    if special == "fifo":
        path = tmp_path / "plan.yaml"
        os.mkfifo(path)
    with pytest.raises(InputError, match="not a regular file"):
        read_mapping(path)


@pytest.mark.parametrize("kind", sorted(set(LOADERS) - {"model config"}))
def test_an_escape_sequence_in_a_string_is_refused(kind: str, tmp_path: Path) -> None:
    """A name that would drive the terminal when printed (ESC ] 8: a hidden link) is refused where it is read."""
    text = LOADERS[kind][1] + 'zz_note: "x\\e]8;;https://e.vil\\e\\\\y"\n'
    err = _load(kind, text, tmp_path)
    assert err is not None and "control character" in str(err)


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf"])
def test_a_number_that_is_not_finite_is_refused_in_every_file(value: str, tmp_path: Path) -> None:
    """Not only in the specs that forbid it: a hardware profile's peak rate of .inf would price every GEMM at 0 s."""
    text = LOADERS["hardware profile"][1]
    first = next(ln for ln in text.splitlines() if "{value: " in ln)
    number = first.split("{value: ")[1].split(",")[0]
    err = _load("hardware profile", text.replace(first, first.replace(number, value, 1), 1), tmp_path)
    assert err is not None and "not a finite number" in str(err)
