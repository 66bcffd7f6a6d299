"""Selective recompute of named submodules (megatron-core --recompute-modules) and full recompute of the first N
layers of each chunk (--recompute-method block --recompute-num-layers): what a layer no longer keeps, by hand,
and what the backward replays (the forward of exactly the recomputed submodules' work items)."""

from __future__ import annotations

import itertools

import pytest

from perfmodel.cost.dtypes import BF16, FP8
from perfmodel.cost.memory.activations import layer_activation_bytes
from perfmodel.cost.memory.training import training_memory
from perfmodel.cost.train.layers import layer_work
from perfmodel.cost.train.stage import _places, chunk_cost, shard_of
from perfmodel.cost.train.timing import time_work
from perfmodel.cost.train.work import Work
from perfmodel.errors import InputError
from perfmodel.inputs.case import ValidationCase
from perfmodel.inputs.loading import parse
from perfmodel.inputs.model import load_model
from perfmodel.inputs.scenario import build_scenario

TOKENS = 4096
MODULES = ("core_attn", "layernorm", "mla_up_proj", "moe_act", "mlp", "moe", "shared_experts")


def _run(model: str = "deepseek-v3", recompute: str = "selective", modules=None, num_layers=None, pp: int = 16,
         precision: str = "bf16"):
    train = dict(precision=precision, seq_len=TOKENS, global_batch=256, micro_batch=1,
                 layout=dict(tp=1, pp=pp, ep=1 if model == "llama3-8b" else 8), recompute=recompute)
    if modules is not None:
        train["recompute_modules"] = list(modules)
    if num_layers is not None:
        train["recompute_num_layers"] = num_layers
    d = dict(id="t", source="test", kind="pretrain", hardware="b200", gpus=256, model={"id": model}, train=train,
             measured=dict(step_time_s=1.0))
    return build_scenario(parse(ValidationCase, d, "t.yaml"), source="t.yaml")


def _bytes(layer, modules, precision="bf16") -> float:
    return layer_activation_bytes(layer, TOKENS, recompute="selective", recomputed=frozenset(modules),
                                  precision=precision, dropout=False)


def test_each_submodule_keeps_what_megatron_discards_by_hand():
    m = load_model("deepseek-v3")
    dense, moe = m.layers[0], m.layers[5]
    a, f = moe.attention, moe.ffn
    h = m.hidden_size
    base = _bytes(moe, ["core_attn"])
    # up-projected Q, K (192 each) and V (128) of 128 heads
    assert base - _bytes(moe, ["mla_up_proj"]) == pytest.approx(TOKENS * BF16 * a.num_heads * (2 * 192 + 128))
    # the experts' activation output (fc2's saved input), top-8 copies of 2048
    assert base - _bytes(moe, ["moe_act"]) == pytest.approx(TOKENS * f.top_k * f.expert_intermediate_size * BF16)
    # the separate norms' outputs: MLA's down projections' input and the MoE layer's router / expert input
    assert base - _bytes(moe, ["layernorm"]) == pytest.approx(TOKENS * 2 * BF16 * h)
    # the shared expert's fc1 output (gate and up) and activation output
    shared = f.num_shared_experts * f.shared_intermediate_size
    assert base - _bytes(moe, ["shared_experts"]) == pytest.approx(TOKENS * shared * 3 * BF16)
    # a whole MoE layer checkpointed keeps its input (the norm output) only
    ffn_kept = base - _bytes(moe, ["moe"])
    assert _bytes(moe, ["moe"]) - _bytes(moe, ["moe", "layernorm"]) == pytest.approx(TOKENS * 2 * BF16 * h)
    assert ffn_kept > base - _bytes(moe, ["moe_act", "shared_experts"])
    # a dense MLP checkpointed keeps nothing of its own (its input is the residual stream, kept for the norm)
    mlp = m.layers[0].ffn.intermediate_size
    assert _bytes(dense, ["core_attn"]) - _bytes(dense, ["mlp"]) == pytest.approx(TOKENS * (BF16 * h + 3 * BF16 * mlp))
    # FP8: the saved linear inputs are FP8, so is what layernorm recompute drops
    fp8 = _bytes(moe, ["core_attn"], "fp8") - _bytes(moe, ["layernorm"], "fp8")
    assert fp8 == pytest.approx(TOKENS * 2 * FP8 * h)


@pytest.mark.parametrize("model", ["deepseek-v3", "qwen3-30b-a3b", "llama3-8b"])
def test_more_submodules_never_keep_more_and_never_replay_less(model):
    scn = _run(model, recompute="none", pp=1 if model == "llama3-8b" else 16)
    allowed = [x for x in MODULES if x in _allowed(model)]
    for layer in {layer.ffn.kind: layer for layer in scn.model.layers}.values():
        for k in range(len(allowed)):
            for subset in itertools.combinations(allowed, k):
                more = [*subset, allowed[-1]] if allowed[-1] not in subset else subset
                assert _bytes(layer, more) <= _bytes(layer, subset) + 1e-6
                assert _bytes(layer, subset) >= 0


def _allowed(model: str) -> set[str]:
    return {"deepseek-v3": set(MODULES), "qwen3-30b-a3b": {"core_attn", "layernorm", "moe_act", "moe"},
            "llama3-8b": {"core_attn", "mlp"}}[model]


def test_the_backward_replays_the_forward_of_exactly_the_recomputed_items():
    scn = _run(modules=["mla_up_proj", "moe_act"])
    s = shard_of(scn, TOKENS, TOKENS)
    layer = scn.model.layers[5]
    w = layer_work(scn.model, layer, s)
    picked = Work(tuple(g for g in w.gemms if g.module in ("mla_up_proj", "moe/moe_act")),
                  tuple(k for k in w.kernels if k.module in ("mla_up_proj", "moe/moe_act")))
    assert {g.name for g in picked.gemms} == {"q_b", "kv_b"}
    assert {k.name for k in picked.kernels} == {"rope", "experts_glu"}
    expected = time_work(scn.hardware, picked, _places(scn)).fwd
    none = chunk_cost(_run(recompute="none"), 1, TOKENS, TOKENS)
    got = chunk_cost(scn, 1, TOKENS, TOKENS)
    assert all(x.ffn.kind == "moe" for x in scn.model.layers[scn.stage_layers[0]:sum(scn.stage_layers[:2])])
    assert got.recompute_s == pytest.approx(expected * scn.stage_layers[1])  # the chunk's layers are alike
    assert got.fwd_compute_s == pytest.approx(none.fwd_compute_s)  # recompute adds to the backward only
    assert got.bwd_comm_s == none.bwd_comm_s  # nothing of these two communicates


def test_recomputing_the_moe_layer_replays_its_dispatch_and_combine():
    moe = chunk_cost(_run(modules=["moe"]), 1, TOKENS, TOKENS)
    act = chunk_cost(_run(modules=["moe_act"]), 1, TOKENS, TOKENS)
    none = chunk_cost(_run(recompute="none"), 1, TOKENS, TOKENS)
    assert moe.bwd_comm_s["ep_a2a"] - none.bwd_comm_s["ep_a2a"] == pytest.approx(none.fwd_comm_s["ep_a2a"])
    assert moe.recompute_s > act.recompute_s > 0


def test_full_recompute_of_the_first_layers_of_each_chunk():
    every = _run(recompute="full", pp=8)
    first = _run(recompute="full", num_layers=1, pp=8)
    none = _run(recompute="none", pp=8)
    assert len(first.stage_layers) == 8 and first.stage_layers[1] > 1
    c_every, c_first = chunk_cost(every, 1, TOKENS, TOKENS), chunk_cost(first, 1, TOKENS, TOKENS)
    assert 0 < c_first.recompute_s < c_every.recompute_s
    assert c_first.recompute_s == pytest.approx(c_every.recompute_s / every.stage_layers[1], rel=0.02)
    m_every, m_first, m_none = (training_memory(x).activations_bytes for x in (every, first, none))
    assert m_every < m_first < m_none


@pytest.mark.parametrize(("kwargs", "field", "says"), [
    (dict(recompute="none", modules=["moe_act"]), "train", "applies to recompute: selective"),
    (dict(recompute="selective", num_layers=2), "train", "applies to recompute: full"),
    (dict(model="llama3-8b", modules=["mla_up_proj"], pp=1), "train.recompute_modules", "no MLA attention"),
    (dict(model="llama3-8b", modules=["layernorm"], pp=1), "train.recompute_modules", "a norm of its own"),
    (dict(model="qwen3-30b-a3b", modules=["shared_experts"]), "train.recompute_modules", "no shared experts"),
    (dict(modules=["gdn_norm_out"]), "train.recompute_modules", "gdn_norm_out"),
])
def test_a_submodule_with_nothing_to_recompute_is_a_one_line_error(kwargs, field, says):
    with pytest.raises(InputError, match=says) as err:
        _run(**kwargs)
    assert err.value.field.startswith(field) and "\n" not in str(err.value)
