"""Validation case loader: every public case loads, unknown keys and bad values are refused by name."""

from __future__ import annotations

import pytest

from perfmodel.errors import InputError
from perfmodel.inputs.case import load_case
from tests.conftest import CASES_DIR, write_yaml


def test_every_public_case_loads():
    paths = sorted(CASES_DIR.glob("*.yaml"))
    assert len(paths) >= 20
    ids = [load_case(p).id for p in paths]
    assert len(set(ids)) == len(ids)


def test_bundled_cases_equal_shared_copies():
    """The bundled copies are the shared cases plus the one line this project adds: the stack that ran them."""
    shared = CASES_DIR.parents[3] / "shared" / "reference" / "validation"
    if not shared.is_dir():
        pytest.skip("no ../shared beside the checkout")
    def without_stack(text: str) -> list[str]:  # the shared copies now name their stack too
        return [line for line in text.splitlines() if not line.startswith(("stack:", "stack_options:"))]

    copies = list(shared.glob("*.yaml"))
    assert copies
    for p in copies:
        assert without_stack((CASES_DIR / p.name).read_text()) == without_stack(p.read_text()), p.name


def test_unknown_top_level_key_is_refused(tmp_path, case_dict):
    case_dict["speed"] = 3
    with pytest.raises(InputError) as err:
        load_case(write_yaml(tmp_path / "c.yaml", case_dict))
    assert err.value.field == "speed"
    assert "unknown key" in str(err.value)


def test_unknown_nested_key_names_the_path(tmp_path, case_dict):
    case_dict["train"]["layout"]["xp"] = 2
    with pytest.raises(InputError) as err:
        load_case(write_yaml(tmp_path / "c.yaml", case_dict))
    assert err.value.field == "train.layout.xp"


def test_bad_enum_names_field_and_valid_values(tmp_path, case_dict):
    case_dict["train"]["recompute"] = "sometimes"
    with pytest.raises(InputError) as err:
        load_case(write_yaml(tmp_path / "c.yaml", case_dict))
    assert err.value.field == "train.recompute"
    assert "'none'" in str(err.value) and "'full'" in str(err.value)


def test_model_needs_exactly_one_of_id_or_config(tmp_path, case_dict):
    case_dict["model"] = {"id": "llama3-70b", "hf_config": {"architectures": ["LlamaForCausalLM"]}}
    with pytest.raises(InputError) as err:
        load_case(write_yaml(tmp_path / "c.yaml", case_dict))
    assert err.value.field == "model"


def test_rl_section_required_for_rl(tmp_path, rl_case_dict):
    del rl_case_dict["rl"]
    with pytest.raises(InputError, match="rl"):
        load_case(write_yaml(tmp_path / "c.yaml", rl_case_dict))


def test_rl_async_alias_and_fields(rl_case_dict, tmp_path):
    case = load_case(write_yaml(tmp_path / "c.yaml", rl_case_dict))
    assert case.rl is not None and case.rl.async_ is False
    assert case.rl.responses_per_step == 256
    assert case.rl.rollout.kv_cache_dtype == "fp8"


def test_measured_needs_a_metric(tmp_path, case_dict):
    case_dict["measured"] = {}
    with pytest.raises(InputError) as err:
        load_case(write_yaml(tmp_path / "c.yaml", case_dict))
    assert err.value.field == "measured"


def test_malformed_yaml(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("id: [unclosed\n")
    with pytest.raises(InputError, match="malformed YAML"):
        load_case(p)


def test_response_mean_above_max(tmp_path, rl_case_dict):
    rl_case_dict["rl"]["response_tokens"]["mean"] = 9000
    with pytest.raises(InputError) as err:
        load_case(write_yaml(tmp_path / "c.yaml", rl_case_dict))
    assert err.value.field == "rl.response_tokens"
