"""Software stacks: profiles load with a source for every knob, names resolve with fallback notes (never an error),
stated options override the profile, and a stack's attention kernel changes the priced step."""

from __future__ import annotations

import copy

import pytest
import yaml

from perfmodel.errors import InputError
from perfmodel.inputs.case import case_paths, load_case
from perfmodel.inputs.run import RunSpec
from perfmodel.inputs.scenario import build_scenario
from perfmodel.inputs.stack import KNOBS, StackOptions, load_stack_profile, resolve_stack, stack_ids
from perfmodel.predict import simulate_scenario
from tests.conftest import REPO

SHIPPED = ("default", "megatron-bridge", "megatron-core", "megatron-lm", "torchtitan", "primus", "miles", "nemo-rl",
           "verl", "sglang", "vllm", "local-cpu")


def test_every_shipped_profile_loads_with_sources() -> None:
    assert set(SHIPPED) <= set(stack_ids())
    for sid in stack_ids():
        prof = load_stack_profile(sid)
        assert prof is not None and prof.id == sid
        assert set(prof.knobs) <= set(KNOBS), sid  # a profile states what differs from the default
        assert all(k.source.strip() for k in prof.knobs.values())
    assert set(load_stack_profile("default").knobs) == set(KNOBS)  # the default states every knob


def test_a_known_release_uses_its_profile() -> None:
    s = resolve_stack("megatron-bridge@25.11")
    assert s.id == "megatron-bridge@25.11" and s.notes == () and s.attention_kernel == "flash"
    old = resolve_stack("megatron-lm@2021")
    assert old.attention_kernel == "materialized" and "v2.5" in old.sources["attention_kernel"]


def test_unknown_release_and_framework_fall_back_with_a_note() -> None:
    rel = resolve_stack("megatron-bridge@99.01")
    assert rel.id == "megatron-bridge" and len(rel.notes) == 1 and "99.01" in rel.notes[0]
    fw = resolve_stack("jaxformer@2.0")
    assert fw.id == "default" and len(fw.notes) == 1 and "jaxformer" in fw.notes[0]
    assert resolve_stack(None).id == "default" and resolve_stack(None).notes == ()


def test_stated_options_override_the_profile_and_unpriced_ones_are_recorded() -> None:
    s = resolve_stack("torchtitan@compiled", StackOptions(attention_kernel="materialized", torch_compile=True,
                                                           some_new_fact=3))
    assert s.attention_kernel == "materialized" and "stack_options" in s.sources["attention_kernel"]
    assert s.elementwise_fusion == "fused" and "stack_options" in s.sources["elementwise_fusion"]
    assert set(s.ignored_options) == {"some_new_fact"}
    assert any("not priced yet" in n for n in s.notes)


def _gpt3(stack: str | None, options: dict | None = None) -> dict:
    d = yaml.safe_load((REPO / "tests" / "data" / "gpt3-175b-a100-interleaved.yaml").read_text())
    d["gpus"] = 64
    d["train"].update(global_batch=64, layout={"tp": 8, "pp": 8})
    d["stack"] = stack
    if options:
        d["stack_options"] = options
    return d


def test_the_stacks_attention_kernel_is_priced() -> None:
    flash = simulate_scenario(build_scenario(RunSpec.model_validate(_gpt3("megatron-core")))).train
    old = simulate_scenario(build_scenario(RunSpec.model_validate(_gpt3("megatron-lm@2021")))).train
    stated = simulate_scenario(build_scenario(RunSpec.model_validate(
        _gpt3("megatron-core", {"attention_kernel": "materialized"})))).train
    assert old.step_time_s > flash.step_time_s * 1.01
    assert stated.step_time_s == pytest.approx(old.step_time_s)


def test_a_materialized_stack_refuses_latent_attention_by_name() -> None:
    case = load_case(REPO / "studies" / "validation" / "cases" / "miles-gb300-dsv4flash-bf16train.yaml")
    d = case.model_dump(mode="json", by_alias=True, exclude={"id", "source", "measured", "notes"})
    d = copy.deepcopy(d) | {"stack": "local-cpu"}
    with pytest.raises(InputError) as err:
        build_scenario(RunSpec.model_validate(d))
    assert err.value.field == "stack" and "local-cpu" in err.value.message


def test_every_shipped_case_names_a_stack_it_resolves_without_fallback() -> None:
    folders = [REPO / "studies" / "validation" / "cases", *sorted((REPO / "studies" / "validation").glob("*/cases"))]
    for path in case_paths([str(f) for f in folders]):
        case = load_case(path)
        assert case.stack, f"{path.name}: no stack"
        s = resolve_stack(case.stack, case.stack_options, str(path))
        assert s.notes == () or s.ignored_options, f"{path.name}: {s.notes}"


@pytest.mark.parametrize("knob", ["weight_update_apply_bytes_per_s", "weight_update_tensor_s"])
def test_a_stack_option_out_of_its_bounds_is_named_with_its_bound(knob: str) -> None:
    """A stated option below a knob's bound: one line naming stack_options.<knob>, the bound and the value given
    (it was pydantic's whole multi-line report, squeezed)."""
    with pytest.raises(InputError) as err:
        resolve_stack("verl", StackOptions(**{knob: -5}), "case.yaml")
    assert str(err.value) == f"case.yaml: stack_options.{knob}: Input should be greater than or equal to 0 (got -5)"
