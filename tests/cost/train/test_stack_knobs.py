"""The first-principles training knobs of a stack, each checked against hand arithmetic: eager elementwise chains
(bytes and launches per fused kernel), the FP8 recipe's quantization bytes and kernels per GEMM input (forward X,
backward dY), and FSDP's parameter all-gathers per step (with and without pipeline parallelism, resharding after the
forward or not) and what prefetch hides of them."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from perfmodel.cost.compute import gemm_rate, gemm_time_s, memory_bound_time_s
from perfmodel.cost.train.layers import Gemm, Shard, Work, fp8_cast_work, layer_work
from perfmodel.cost.train.stage import (
    _param_gather_once_s,
    chunk_cost,
    dp_grad_sync_s,
    fsdp_units,
    param_gather_exposed_s,
    param_gather_mode,
)
from perfmodel.cost.train.timing import time_work
from perfmodel.inputs.case import ValidationCase, load_case
from perfmodel.inputs.model import load_model
from perfmodel.inputs.scenario import Scenario, build_scenario
from perfmodel.inputs.stack import KNOBS, NUMERIC_KNOBS, StackOptions, resolve_stack
from perfmodel.memo import Memo
from perfmodel.predict import simulate_scenario
from tests.conftest import REPO

FSDP_CASE = REPO / "studies/validation/mbridge-archive/cases/mb26.02-gb200-llama3-70b-fp8-64g-tp1pp1cp1vp1ep1-mbs2.yaml"

# Bytes per element of one cast, by hand: read BF16 (2 B), write rowwise + columnwise FP8 (1 + 1 B), plus the
# recipe's scales (blockwise: FP32 per 128 elements, each copy; mxfp8: 1 B E8M0 per 32, each copy) and current
# scaling's amax pass (another 2 B read, another kernel).
HAND = {"delayed": (4.0, 1), "tensorwise": (6.0, 2), "blockwise": (4.0 + 2 * 4 / 128, 1),
        "mxfp8": (4.0 + 2 / 32, 1)}


@pytest.mark.parametrize("recipe", sorted(HAND))
def test_fp8_cast_bytes_per_recipe(recipe: str) -> None:
    m, n, k = 4096, 1024, 512
    s = Shard(tokens=m, seq_len=m, precision="fp8", fp8_recipe=recipe)
    w = Work(gemms=(Gemm("fc", m, n, k, dtype="fp8"), Gemm("experts", m / 4, n, k, batch=4, dtype="fp8"),
                    Gemm("lm_head", m, n, k), Gemm("scores", m, m, 128, core_attention=True, dtype="fp8")))
    casts = fp8_cast_work(w, s).kernels
    per_el, launches = HAND[recipe]
    assert [c.name for c in casts] == ["fp8_cast_fc", "fp8_cast_experts"]  # BF16 and attention-core GEMMs: none
    for c in casts:
        assert c.hbm_bytes == pytest.approx(m * k * per_el)  # X [m, k] forward (the grouped GEMM: batch x m/4 rows)
        assert c.bwd_hbm_bytes == pytest.approx(m * n * per_el)  # dY [m, n] backward
        assert c.kernels == launches and c.kind == "mem" and not c.bwd_weight


def test_layer_work_adds_one_cast_per_fp8_gemm_and_none_in_bf16() -> None:
    llama = load_model("llama3-8b")
    layer = llama.layers[0]
    fp8 = layer_work(llama, layer, Shard(tokens=8192, seq_len=8192, precision="fp8", fp8_recipe="mxfp8"))
    bf16 = layer_work(llama, layer, Shard(tokens=8192, seq_len=8192))
    casts = [k for k in fp8.kernels if k.name.startswith("fp8_cast_")]
    fp8_gemms = [g for g in fp8.gemms if g.dtype == "fp8"]
    assert len(casts) == len(fp8_gemms) == 4  # qkv, o_proj, fc1, fc2
    per_el = HAND["mxfp8"][0]
    assert sum(k.hbm_bytes for k in casts) == pytest.approx(sum(g.m * g.k for g in fp8_gemms) * per_el)
    assert not [k for k in bf16.kernels if k.name.startswith("fp8_cast_")]


def test_fp8_gemm_time_excludes_its_cast_in_training() -> None:
    """time_work prices an FP8 GEMM without compute.py's own A-operand cast: the recipe's casts are in the Work."""
    scn = build_scenario(load_case(FSDP_CASE))
    hw = scn.hardware
    g = Gemm("fc", 8192, 8192, 8192, dtype="fp8")
    t = time_work(hw, Work(gemms=(g,)), {})
    assert t.fwd == pytest.approx(gemm_time_s(hw, g.m, g.n, g.k, "fp8", quantize=False))
    assert t.fwd < gemm_time_s(hw, g.m, g.n, g.k, "fp8")
    cast = fp8_cast_work(Work(gemms=(g,)), Shard(tokens=8192, seq_len=8192, precision="fp8",
                                                 fp8_recipe="tensorwise"))
    tc = time_work(hw, cast, {})
    assert tc.fwd == pytest.approx(memory_bound_time_s(hw, 8192 * 8192 * 6.0, 2))
    assert tc.bwd_in == pytest.approx(memory_bound_time_s(hw, 8192 * 8192 * 6.0, 2))


def _with(scn: Scenario, **knobs) -> Scenario:
    return dataclasses.replace(scn, stack=scn.stack.with_knobs(knobs, "test"))


def test_fp8_recipe_reaches_the_memoized_chunk_cost() -> None:
    """The recipe changes the Work of a layer, so one memo must not hand one recipe's layer times to another."""
    scn = build_scenario(load_case(FSDP_CASE))
    # the casts alone: MXFP8's GEMMs at per-tensor FP8's rate (test_mxfp8_gemms_run_at_the_profiles_rate)
    scn = dataclasses.replace(scn, hardware=dataclasses.replace(scn.hardware, train_gemm_mxfp8_rel_efficiency=1.0))
    memo = Memo()
    cost = {r: chunk_cost(_with(scn, fp8_recipe=r), 0, 2 * 8192, 8192, memo=memo) for r in HAND}
    # more HBM bytes and launches per cast: tensorwise > mxfp8 = blockwise-ish > delayed
    assert cost["tensorwise"].fwd_compute_s > cost["mxfp8"].fwd_compute_s > cost["delayed"].fwd_compute_s
    assert cost["tensorwise"].bwd_input_s > cost["delayed"].bwd_input_s
    # the extra time of tensorwise over delayed is exactly its extra amax pass: 2 B per cast element, one launch
    layers = scn.stage_layers[0]
    s = Shard(tokens=2 * 8192, seq_len=8192, precision="fp8")
    w = layer_work(scn.model, scn.model.layers[0], s)
    elems = sum(g.m * g.k * g.batch for g in w.gemms if g.dtype == "fp8")
    n_casts = sum(1 for g in w.gemms if g.dtype == "fp8")
    hbm = scn.hardware.hbm_bandwidth_bytes_per_s * scn.hardware.hbm_efficiency
    extra = layers * (elems * 2.0 / hbm + n_casts * memory_bound_time_s(scn.hardware, 0, 1))
    assert cost["tensorwise"].fwd_compute_s - cost["delayed"].fwd_compute_s == pytest.approx(extra, rel=1e-6)


def test_mxfp8_gemms_run_at_the_profiles_rate() -> None:
    """An MXFP8 run's FP8 GEMMs (dense and grouped) run at the profile's `train_gemm.mxfp8` share of per-tensor
    FP8's rate (GB300: 0.951, TransformerEngine's B300 GEMM profiling guide); other recipes' and BF16 GEMMs keep
    the fp8 curve's rate."""
    scn = build_scenario(load_case(FSDP_CASE))
    hw = scn.hardware
    assert hw.train_gemm_mxfp8_rel_efficiency == pytest.approx(0.951)
    g = Gemm("fc1", 8192, 8192, 8192, dtype="fp8")
    per_tensor = time_work(hw, Work(gemms=(g,)), {}, fp8_recipe="tensorwise")
    mx = time_work(hw, Work(gemms=(g,)), {}, fp8_recipe="mxfp8")
    rate = gemm_rate(hw, "fp8")  # compute-bound: only the FLOPs' time grows, the kernel's fixed time stays
    assert mx.fwd - per_tensor.fwd == pytest.approx(g.flops / (rate * 0.951) - g.flops / rate, rel=1e-9)
    bf16 = Gemm("fc1", 8192, 8192, 8192, dtype="bf16")
    assert time_work(hw, Work(gemms=(bf16,)), {}, fp8_recipe="mxfp8").fwd == time_work(hw, Work(gemms=(bf16,)), {}).fwd
    grouped = Gemm("experts", 4096, 2048, 4096, batch=8, dtype="fp8", grouped=True)
    assert (time_work(hw, Work(gemms=(grouped,)), {}, fp8_recipe="mxfp8").fwd
            > time_work(hw, Work(gemms=(grouped,)), {}, fp8_recipe="delayed").fwd)
    # a profile without the field (Hopper: no MXFP8) runs every recipe at the fp8 curve
    h100 = build_scenario(load_case(REPO / "studies/validation/cases/mbridge-h100-sxm-gpt-oss-120b-bf16.yaml")).hardware
    assert h100.train_gemm_mxfp8_rel_efficiency == 1.0


def _fsdp(pp: int, reshard: bool | None, fsdp: bool = True) -> Scenario:
    case = load_case(FSDP_CASE)
    train = case.train.model_copy(update={"fsdp": fsdp, "layout": case.train.layout.model_copy(update={"pp": pp}),
                                          "activation_offload_layers": 0})  # megatron offloads only without PP
    scn = build_scenario(case.model_copy(update={"train": train}))
    return _with(scn, fsdp_reshard_after_forward=reshard)


@pytest.mark.parametrize(("pp", "reshard", "mode", "per_mb"), [
    (1, True, "forward_backward", 2),  # ZeRO-3: forward and backward of every micro-batch
    (1, False, "forward", 1),  # kept to the backward, resharded after it (FSDP2 reshard_after_backward)
    (1, None, "forward_backward", 2),  # torchtitan's default without PP: reshard
    (4, None, "step", 0),  # torchtitan's default under PP: gathered once per step and stage
    (4, False, "step", 0),
    (4, True, "forward_backward", 2),
])
def test_fsdp_gathers_per_step(pp: int, reshard: bool | None, mode: str, per_mb: int) -> None:
    scn = _fsdp(pp, reshard)
    assert param_gather_mode(scn) == mode
    once = _param_gather_once_s(scn, 0)
    assert once > 0
    gathers = per_mb * scn.num_microbatches if per_mb else 1
    assert dp_grad_sync_s(scn, 0)[1] == pytest.approx(gathers * once)


def test_distributed_optimizer_gathers_once_per_step_whatever_the_knob() -> None:
    scn = _fsdp(1, True, fsdp=False)
    assert param_gather_mode(scn) == "step"
    assert dp_grad_sync_s(scn, 0)[1] == pytest.approx(_param_gather_once_s(scn, 0))


def test_fsdp_prefetch_hides_all_but_the_first_unit() -> None:
    scn = _fsdp(1, True)
    once = _param_gather_once_s(scn, 0)
    units = fsdp_units(scn)
    assert units == 1 + 80  # llama3-70b: 80 blocks + the root
    # long passes: each exposes only its first unit's gather; 2 micro-batches x (forward + backward)
    assert param_gather_exposed_s(scn, 0, [10.0, 10.0], [20.0, 20.0]) == pytest.approx(4 * once / units)
    # passes shorter than the gather: the excess shows
    short = once / 2
    assert param_gather_exposed_s(scn, 0, [short, short], [short, short]) == pytest.approx(4 * (once - short))
    # kept to the backward: forward passes only
    keep = _fsdp(1, False)
    assert param_gather_exposed_s(keep, 0, [short, short], [0.0, 0.0]) == pytest.approx(2 * (once - short))
    # once per step (PP): under the first forward only
    step = _fsdp(4, None)
    o4 = _param_gather_once_s(step, 0)
    assert param_gather_exposed_s(step, 0, [o4 / 4, 0.0], [0.0, 0.0]) == pytest.approx(o4 * 3 / 4)


def test_knobs_resolve_from_profiles_and_options() -> None:
    assert {"fp8_recipe", "fsdp_reshard_after_forward"} <= set(KNOBS)
    assert not {"fp8_recipe", "fsdp_reshard_after_forward"} & set(NUMERIC_KNOBS)
    assert resolve_stack("default").fp8_recipe == "delayed"
    assert resolve_stack("default").fsdp_reshard_after_forward is True
    assert resolve_stack("megatron-bridge@26.02").fp8_recipe == "tensorwise"
    tt = resolve_stack("torchtitan@compiled")
    assert tt.fsdp_reshard_after_forward is None and tt.fp8_recipe == "tensorwise"
    opt = resolve_stack("megatron-bridge@26.02", StackOptions(fp8_recipe="mxfp8", fsdp_reshard_after_forward=False))
    assert opt.fp8_recipe == "mxfp8" and opt.fsdp_reshard_after_forward is False
    assert not opt.ignored_options and "fp8_recipe" in opt.sources


# Eager elementwise chains, by hand (cost/train/eager.py): bytes x (forward, backward), launches x
EAGER_HAND = {"attn_norm": (9.0, 8.0, 7), "ffn_norm": (9.0, 8.0, 7), "rope": (5.0, 5.0, 3),
              "mlp_glu": (5 / 3, 4 / 3, 2)}


def test_eager_chains_multiply_the_fused_kernels_bytes_and_launches() -> None:
    from perfmodel.cost.train.eager import as_eager

    llama = load_model("llama3-8b")
    w = layer_work(llama, llama.layers[0], Shard(tokens=8192, seq_len=8192))
    fused = {k.name: k for k in w.kernels}
    assert set(EAGER_HAND) <= set(fused)
    for k in w.kernels:
        e = as_eager(k)
        fwd, bwd, launches = EAGER_HAND.get(k.name, (1.0, 1.0, 1))  # residual adds, attention: one kernel anyway
        assert e.hbm_bytes == pytest.approx(k.hbm_bytes * fwd), k.name
        assert e.bwd_hbm_bytes == pytest.approx(k.bwd_hbm_bytes * bwd), k.name
        assert e.kernels == k.kernels * launches and e.flops == k.flops, k.name


def test_eager_time_is_the_extra_bytes_and_launches_and_compiling_gains_what_pytorch_reports() -> None:
    from perfmodel.cost.train.eager import as_eager
    from perfmodel.cost.train.stage import _places

    scn = build_scenario(load_case(FSDP_CASE))
    s = Shard(tokens=2 * 8192, seq_len=8192)
    w = layer_work(scn.model, scn.model.layers[0], s)
    places = _places(scn)
    fused, eager = time_work(scn.hardware, w, places), time_work(scn.hardware, w, places, eager=True)
    hw = scn.hardware
    extra = sum(memory_bound_time_s(hw, as_eager(k).hbm_bytes, as_eager(k).kernels)
                - memory_bound_time_s(hw, k.hbm_bytes, k.kernels) for k in w.kernels if k.kind == "mem")
    assert eager.fwd - fused.fwd == pytest.approx(extra, rel=1e-9) and extra > 0
    assert eager.bwd_in > fused.bwd_in and eager.bwd_w == fused.bwd_w  # weight gradients are GEMMs only
    # torchtitan eager vs compiled (or stack_options.torch_compile), Llama 3 8B BF16 FSDP on 8 A100s: PyTorch
    # reports torch.compile adding 10-23% MFU on FSDP training of 7B-70B models on A100s
    # (https://pytorch.org/blog/maximizing-training-throughput/); bytes and launches alone give the lower end
    d = yaml.safe_load(FSDP_CASE.read_text())
    d.update(hardware="a100-80gb", gpus=8, model={"id": "llama3-8b"})
    d["train"].update(precision="bf16", seq_len=4096, micro_batch=2, global_batch=256, recompute="selective",
                      layout={"tp": 1, "pp": 1, "dp": 8}, activation_offload_layers=0)

    def tokens_per_s(stack: str, options: dict | None = None) -> float:
        case = ValidationCase.model_validate({**d, "stack": stack, "stack_options": options})
        return simulate_scenario(build_scenario(case)).metrics()["tokens_per_s_per_gpu"]

    eager_tps, compiled_tps = tokens_per_s("torchtitan"), tokens_per_s("torchtitan@compiled")
    assert 1.05 < compiled_tps / eager_tps < 1.25
    assert tokens_per_s("torchtitan", {"torch_compile": True}) == pytest.approx(compiled_tps, rel=1e-12)
