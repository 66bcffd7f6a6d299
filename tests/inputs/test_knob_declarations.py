"""Each stack knob is declared once (a `Stack` field made by `knob()`): the tuples callers import, the parts' cache
keys, the typed stack_options, validation of knob names and the table in docs/stacks.md all derive from it, and
the derived tuples keep the order they had when they were written out by hand (cache keys, calibration's order)."""

from __future__ import annotations

import pytest

from perfmodel.errors import InputError
from perfmodel.inputs import stack as stack_module
from perfmodel.inputs.stack import (
    KNOB_SPECS,
    KNOBS,
    NUMERIC_KNOBS,
    PART_KNOBS,
    RL_STEP_KNOBS,
    ROLLOUT_KNOBS,
    TRAIN_FIT_KNOBS,
    WEIGHT_UPDATE_KNOBS,
    Stack,
    StackOptions,
    knob_table_markdown,
    resolve_stack,
)
from scripts.knob_table import DOC, doc_table

# The tuples as they were written out by hand before the declarations (copied once).
WRITTEN_NUMERIC = ("train_compute_scale", "backward_compute_scale", "log_probs_compute_scale", "host_op_time_scale",
                   "microbatch_host_s", "optimizer_host_s", "rollout_compute_scale", "rollout_decode_host_s",
                   "rollout_request_host_s", "rollout_token_host_s", "rollout_prefill_host_s",
                   "weight_update_fixed_s", "weight_update_tensor_s")
WRITTEN_ROLLOUT = ("rollout_compute_scale", "rollout_decode_host_s", "rollout_request_host_s", "rollout_token_host_s",
                   "rollout_prefill_host_s", "rollout_max_engines")
WRITTEN_WEIGHT_UPDATE = ("memory_saver", "weight_update_fixed_s", "weight_update_tensor_s",
                         "weight_update_gather_bytes", "weight_update_pipelined")
WRITTEN_RL_STEP = ("rl_step_host_s", "rl_sample_host_s", "rl_token_bytes", "rl_host_bytes_per_s",
                   "rl_advantage_token_s", "rl_weight_restore", "rl_weight_backup", "rl_comm_init_s",
                   "rl_log_probs_timer_has_ref")
WRITTEN_KNOBS = ("attention_kernel", "host_device_overlap", "cuda_graph_scope", "pack_sequences", "memory_saver",
                 "rollout_max_engines", "weight_update_gather_bytes", "weight_update_pipelined",
                 "fsdp_reshard_after_forward", "fp8_recipe", "elementwise_fusion", *WRITTEN_NUMERIC, *WRITTEN_RL_STEP)
WRITTEN_PARTS = {
    "rollout": WRITTEN_ROLLOUT,
    "weight_update": (*WRITTEN_WEIGHT_UPDATE, "rollout_max_engines"),
    "rl_step": WRITTEN_RL_STEP,
    "train": tuple(k for k in WRITTEN_KNOBS if k not in WRITTEN_ROLLOUT + WRITTEN_WEIGHT_UPDATE + WRITTEN_RL_STEP),
}
WRITTEN_TRAIN_FIT = ("train_compute_scale", "backward_compute_scale", "host_op_time_scale", "microbatch_host_s",
                     "optimizer_host_s")


def _written(names: tuple[str, ...]) -> tuple[str, ...]:
    """The names that were written out by hand, in the derived order (a knob declared since may sit anywhere)."""
    return tuple(k for k in names if k in WRITTEN_KNOBS)


def test_derived_tuples_keep_the_written_order() -> None:
    assert _written(NUMERIC_KNOBS) == WRITTEN_NUMERIC and _written(TRAIN_FIT_KNOBS) == WRITTEN_TRAIN_FIT
    assert tuple(map(_written, (ROLLOUT_KNOBS, WEIGHT_UPDATE_KNOBS, RL_STEP_KNOBS))) == (
        WRITTEN_ROLLOUT, WRITTEN_WEIGHT_UPDATE, WRITTEN_RL_STEP)
    assert _written(KNOBS) == WRITTEN_KNOBS and set(WRITTEN_KNOBS) <= set(KNOBS)
    assert {part: _written(names) for part, names in PART_KNOBS.items()} == WRITTEN_PARTS
    assert list(PART_KNOBS) == list(WRITTEN_PARTS)
    st = resolve_stack(None)
    assert st.knobs == tuple(getattr(st, k) for k in KNOBS)  # the cache key: every knob, the written ones in order


def test_the_default_profile_states_each_knob_at_its_declared_default() -> None:
    declared = Stack(id="declared", requested="")
    default = resolve_stack(None)
    assert {k: getattr(default, k) for k in KNOBS} == {k: getattr(declared, k) for k in KNOBS}


def test_every_knob_is_in_its_parts_key_and_fitted_knobs_are_bounded_numbers() -> None:
    assert set(KNOBS) == set(KNOB_SPECS) and len(KNOBS) == len(set(KNOBS))
    for name, spec in KNOB_SPECS.items():
        assert all(name in PART_KNOBS[p] for p in (spec.part, *spec.also_reads)), name
        assert spec.doc.strip(), name
        if spec.fit:
            assert spec.annotation is float and spec.bound, name
    assert set().union(*map(set, PART_KNOBS.values())) == set(KNOBS)


def test_stack_options_types_the_option_knobs_and_passes_others_through() -> None:
    typed = {"torch_compile", "attention_kernel", "cuda_graph_scope", "fsdp_reshard_after_forward", "fp8_recipe",
             "elementwise_fusion", "grad_reduce_in_bf16", "deterministic", "grouped_gemm_launch"}
    assert set(StackOptions.model_fields) == typed
    with pytest.raises(ValueError):
        StackOptions(fp8_recipe="fp4")
    opts = StackOptions(backward_compute_scale=1.25, unpriced=1)
    assert opts.model_extra == {"backward_compute_scale": 1.25, "unpriced": 1}
    s = resolve_stack(None, opts)
    assert s.backward_compute_scale == 1.25 and s.ignored_options == ("unpriced",)


def test_knob_names_are_validated_against_the_declarations(tmp_path, monkeypatch) -> None:
    with pytest.raises(InputError, match="not a stack knob"):
        resolve_stack(None).with_knobs({"id": "y"}, "overlay")  # a Stack field, not a knob
    (tmp_path / "bad.yaml").write_text("id: bad\nname: Bad\nknobs:\n  notes: {value: [], source: x}\n")
    monkeypatch.setattr(stack_module, "stacks_dir", lambda: tmp_path)
    stack_module.load_stack_profile.cache_clear()
    try:
        with pytest.raises(InputError, match="unknown knob"):
            stack_module.load_stack_profile("bad")
    finally:
        stack_module.load_stack_profile.cache_clear()


def test_the_docs_knob_table_is_written_from_the_declarations() -> None:
    assert doc_table(DOC.read_text(encoding="utf-8")) == knob_table_markdown(), "run python scripts/knob_table.py"
