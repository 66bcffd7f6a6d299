"""Weight update: the GB300 bucket derivation, bucket-size behaviour, colocated IPC vs disaggregated broadcast vs
P2P vs disk, FP8 vs BF16 rollout, the P2P per-tensor derivation."""

from __future__ import annotations

import dataclasses

import pytest

from perfmodel.cost.comm import send_recv_s
from perfmodel.cost.serve.refit_anchors import (
    GB300_BUCKET_RUNS,
    RESHARD_FIXED_S,
    RESHARD_RUNS,
    RESHARD_TENSOR_S,
    bucket_fit,
    hf_tensors,
)
from perfmodel.cost.serve.weight_update import (
    MIB,
    P2P_RUNS,
    P2P_TENSOR_S,
    PER_BUCKET_S,
    PIPELINE_BYTES_PER_S,
    POST_PROCESS_FIXED_S,
    RESUME_S,
    WeightUpdateParams,
    _params,
    weight_update_time,
)
from perfmodel.errors import InputError
from perfmodel.inputs.case import load_case
from perfmodel.inputs.scenario import build_scenario
from tests.conftest import REPO
from tests.sim.gb300_case import GB300
from tests.sim.gb300_case import gb300_case as _base
from tests.sim.gb300_case import scenario_of as _scn


def _with_bucket(mb: float) -> dict:
    d = _base()
    d["rl"]["weight_update"]["bucket_mb"] = mb
    return d


def test_bucket_fit_reproduces_both_measurements():
    c, r = bucket_fit()
    assert (c, r) == (PER_BUCKET_S, PIPELINE_BYTES_PER_S)
    assert c == pytest.approx(0.0134, rel=0.01)
    assert r == pytest.approx(15.7e9, rel=0.01)
    for _, n, t, _ in GB300_BUCKET_RUNS:
        assert n * c + 2130 * 256 * MIB / r == pytest.approx(t, rel=0.01)  # same model bytes in both runs


def test_gb300_case_bucket_sizes():
    t = {mb: weight_update_time(_scn(_with_bucket(mb))) for mb in (64, 256, 1024)}
    ratio = t[64].total_s / t[256].total_s
    assert 2.0 <= ratio <= 2.6  # measured 150.7 / 65.0 = 2.32
    assert t[256].num_buckets == pytest.approx(2130, rel=0.01)
    assert t[64].num_buckets == pytest.approx(8537, rel=0.01)
    # 1 GiB only saves bucket costs; it can never beat the bandwidth part
    saved = (t[256].num_buckets - t[1024].num_buckets) * PER_BUCKET_S
    assert t[256].total_s - t[1024].total_s == pytest.approx(saved, rel=1e-9)
    assert t[1024].total_s > t[1024].parts["pipeline_s"]
    assert any("stalled" in x for x in t[1024].risks) and not any("stalled" in x for x in t[256].risks)
    for r in t.values():
        assert sum(r.parts.values()) == pytest.approx(r.total_s)


def test_gb300_case_total_is_in_the_measured_range():
    r = weight_update_time(build_scenario(load_case(GB300)))
    assert r.mode == "ipc" and r.placement == "colocated"
    assert r.parts["trainer_sleep_s"] > 0 and r.after_rollout_s > 0
    assert r.transferred_bytes < 0.55 * r.bf16_bytes  # FP8 rollout: quantized before transfer
    assert r.parts["quantize_s"] > 0
    assert 55 < r.total_s < 85  # measured 69.31 s (sleep + update + wake); the bucket loop alone was ~65 s


def _mi355x(mode: str) -> dict:
    d = _base()
    d["hardware"] = "mi355x"
    if mode == "ipc":
        d["train"]["layout"] = {"tp": 4, "pp": 4, "cp": 1, "ep": 8, "etp": 1}
    else:  # the AMD blog layout: 16 trainer + 16 rollout GPUs
        d["rl"].update(placement="disaggregated", actor_gpus=16, rollout_gpus=16)
        d["train"]["layout"] = {"tp": 1, "pp": 4, "cp": 1, "ep": 4, "etp": 1}
    d["rl"]["weight_update"]["mode"] = mode
    return d


def test_colocated_ipc_vs_disaggregated_broadcast():
    ipc, bc = weight_update_time(_scn(_mi355x("ipc"))), weight_update_time(_scn(_mi355x("broadcast")))
    # colocated: trainer offload / engine wake around the update, onload after the rollout
    assert ipc.parts["trainer_sleep_s"] > 0 and ipc.after_rollout_parts["trainer_onload_s"] > 0
    assert "trainer_sleep_s" not in bc.parts and bc.after_rollout_s == 0
    # broadcast crosses the 50 GB/s NICs to every rollout GPU; IPC is an HBM copy on the same GPU
    assert bc.parts["link_s"] > 10 * ipc.parts["link_s"]
    assert bc.parts["link_s"] == pytest.approx(bc.transferred_bytes / (50e9 * 0.80), rel=1e-3)
    # colocated: every GPU gathers the whole model across nodes and quantizes all of it
    assert ipc.parts["gather_s"] > bc.parts["gather_s"]
    assert ipc.parts["quantize_s"] > bc.parts["quantize_s"]
    # the IPC path's per-bucket cost and software pipeline (flattened buckets, IPC handles) are not a broadcast's
    assert ipc.parts["pipeline_s"] > 0 and bc.parts["pipeline_s"] == 0 == bc.parts["bucket_fixed_s"]


def test_disk_mode_has_no_buckets():
    d = _mi355x("broadcast")
    d["rl"]["weight_update"]["mode"] = "disk"
    r = weight_update_time(_scn(d))
    assert r.num_buckets == 0 and r.parts["bucket_fixed_s"] == 0
    p = WeightUpdateParams()
    engines = 16 // 4
    expected = r.transferred_bytes / p.disk_write_bytes_per_s + engines * r.transferred_bytes / p.disk_read_bytes_per_s
    assert r.parts["link_s"] == pytest.approx(expected)


def test_bf16_rollout_skips_quantization():
    d = _base()
    d["rl"]["rollout"]["precision"] = "bf16"
    r = weight_update_time(_scn(d))
    assert r.parts["quantize_s"] == 0 and r.transferred_bytes == r.bf16_bytes


def test_pipeline_scaling_by_link_is_opt_in():
    d = _mi355x("broadcast")
    d["rl"]["weight_update"]["mode"] = "disk"
    scn = _scn(d)
    plain = weight_update_time(scn)
    scaled = weight_update_time(scn, WeightUpdateParams(scale_pipeline_by_link=True))
    assert scaled.parts["pipeline_s"] == pytest.approx(plain.parts["pipeline_s"] * 900e9 / (50e9 * 0.80))
    gb = weight_update_time(_scn(_base()), WeightUpdateParams(scale_pipeline_by_link=True))
    assert gb.parts["pipeline_s"] > weight_update_time(_scn(_base())).parts["pipeline_s"]  # NVLink eff < 900 GB/s


WU_CASES = REPO / "studies" / "validation" / "weight-update" / "cases"


def test_p2p_tensor_time_is_derived_from_the_two_uncatalogued_runs():
    timer_fixed = POST_PROCESS_FIXED_S + RESUME_S  # in Miles' timer; the pause is not
    each = [(t - timer_fixed) / n for _, n, t, _ in P2P_RUNS]
    assert P2P_TENSOR_S == pytest.approx(sum(each) / 2) and 80e-6 < P2P_TENSOR_S < 120e-6
    assert [n for _, n, _, _ in P2P_RUNS] == [69_732, 17_742]  # Kimi-K2, GLM-4.5-Air as _params counts tensors


def test_hf_tensors_counts_as_the_update_does():
    scn = build_scenario(load_case(WU_CASES / "miles-h100-qwen3-30b-a3b-wu-p2p.yaml"))
    assert _params(scn).tensors == hf_tensors(48, 0, 128)  # Qwen3-30B-A3B: 48 MoE layers, 128 experts


def test_p2p_converts_every_tensor_and_hides_the_writes_under_it():
    wp = WeightUpdateParams()
    case = load_case(WU_CASES / "miles-h100-qwen3-235b-a22b-wu-p2p.yaml")
    scn = build_scenario(case)
    r = weight_update_time(scn, wp)
    assert r.parts["convert_s"] == pytest.approx(_params(scn).tensors * wp.p2p_tensor_s)
    assert r.parts["pipeline_s"] == r.parts["bucket_fixed_s"] == 0
    assert r.parts["link_s"] == 0  # a 32-way shard over a 400 Gb/s NIC takes less than the conversion
    # a slow enough NIC: the writes outlast the loading, and only what they outlast is added
    slow = dataclasses.replace(scn.hardware, nic_bytes_per_s=0.2e9)
    r2 = weight_update_time(dataclasses.replace(scn, hardware=slow), wp)
    from perfmodel.cost.memory.rollout import rollout_memory

    shard = rollout_memory(scn).weights_bytes  # one source per engine rank: 64 sources, 64 targets
    loading = r2.parts["gather_s"] + r2.parts["quantize_s"] + r2.parts["convert_s"]
    assert r2.parts["link_s"] == pytest.approx(send_recv_s(slow, shard, same_domain=False) - loading)
    # the same run by broadcast: the whole model through one sender's NIC, slower on this MoE model
    bc = weight_update_time(build_scenario(load_case(WU_CASES / "miles-h100-qwen3-235b-a22b-wu-nccl.yaml")), wp)
    assert bc.parts["convert_s"] == 0 and bc.total_s > 2 * r.total_s


@pytest.mark.parametrize("mode", ["p2p", "reshard"])
def test_writes_to_other_gpus_need_disaggregated_placement(mode):
    d = _base()
    d["rl"]["weight_update"]["mode"] = mode
    with pytest.raises(InputError) as err:
        _scn(d)
    assert err.value.field == "rl.weight_update.mode" and "disaggregated" in str(err.value)


def test_reshard_costs_come_from_two_rows_of_nemo_rls_table():
    (_, n4, t4, l4), (_, n30, t30, l30) = RESHARD_RUNS
    assert (n4, n30) == (hf_tensors(36, 36, 0), hf_tensors(48, 0, 128))  # Qwen3-4B dense, Qwen3-30B-A3B
    assert RESHARD_FIXED_S + n4 * RESHARD_TENSOR_S + l4 == pytest.approx(t4)
    assert RESHARD_FIXED_S + n30 * RESHARD_TENSOR_S + l30 == pytest.approx(t30)
    assert 15e-6 < RESHARD_TENSOR_S < 35e-6 and 0.1 < RESHARD_FIXED_S < 0.4


def test_reshard_sends_shards_as_they_are_and_the_busier_side_sets_the_link():
    """DeepSeek-V3 PP16 x EP16 -> 8 engines of TP32: no gather, no bucket; each engine GPU receives 1/32 of the
    model and each of the 256 training GPUs sends 8 / 256 of it; one fixed cost for the timer's calls."""
    scn = build_scenario(load_case(WU_CASES / "nemorl-h100-deepseek-v3-wu-reshard.yaml"))
    r = weight_update_time(scn)
    p = _params(scn)
    xfer = r.transferred_bytes
    assert r.parts["gather_s"] == 0 and r.parts["pipeline_s"] == r.parts["bucket_fixed_s"] == 0
    assert r.parts["convert_s"] == pytest.approx(p.tensors * RESHARD_TENSOR_S)
    assert r.parts["pause_flush_s"] == RESHARD_FIXED_S and r.parts["resume_s"] == 0
    assert r.parts["link_s"] == pytest.approx(send_recv_s(scn.hardware, max(xfer / 32, xfer * 8 / 256), False))
    fewer = dict(load_case(WU_CASES / "nemorl-h100-deepseek-v3-wu-reshard.yaml").model_dump(mode="json",
                                                                                              by_alias=True))
    fewer["rl"]["rollout_gpus"], fewer["gpus"] = 64, 320  # 2 engines: the senders send a quarter as much
    from perfmodel.inputs.case import ValidationCase
    from perfmodel.inputs.loading import parse

    r2 = weight_update_time(build_scenario(parse(ValidationCase, fewer, "test")))
    assert r2.parts["link_s"] == pytest.approx(send_recv_s(scn.hardware, xfer / 32, False))  # the receivers' now
    assert r2.parts["link_s"] < r.parts["link_s"] + 1e-12


def test_the_stacks_multiplier_scales_every_part_and_nothing_after_the_rollout():
    scn = _scn(_base())
    base = weight_update_time(scn)
    scaled = weight_update_time(dataclasses.replace(
        scn, stack=scn.stack.with_knobs({"weight_update_time_scale": 2.5}, source="test")))
    assert scaled.parts.keys() == base.parts.keys()
    assert all(scaled.parts[k] == pytest.approx(2.5 * v, rel=1e-12) for k, v in base.parts.items())
    assert scaled.total_s == pytest.approx(2.5 * base.total_s, rel=1e-12)
    assert scaled.after_rollout_s == pytest.approx(base.after_rollout_s, rel=1e-12)  # the onload: a host copy


def test_verls_sender_assembles_and_its_engines_apply_every_full_tensor():
    """verl's nccl checkpoint engine (its PR #6974 profile): the sender's full-tensor assembly and packing and the
    engines' apply, each at its stack rate over the BF16 model, on top of the broadcast; Miles has neither stage."""
    scn = build_scenario(load_case(WU_CASES / "verl-h100-qwen2.5-7b-wu-nccl.yaml"))
    r = weight_update_time(scn)
    bf16 = 2.0 * _params(scn).total
    assert r.parts["assemble_s"] == pytest.approx(bf16 / 9.2e9) and r.parts["apply_s"] == pytest.approx(bf16 / 12.7e9)
    assert 1.4 < r.parts["assemble_s"] < 1.9 and r.parts["apply_s"] == pytest.approx(1.2, rel=0.02)  # the profile's
    none = weight_update_time(dataclasses.replace(scn, stack=scn.stack.with_knobs(
        {"weight_update_assemble_bytes_per_s": 0.0, "weight_update_apply_bytes_per_s": 0.0}, source="test")))
    assert none.parts["assemble_s"] == none.parts["apply_s"] == 0
    assert r.total_s == pytest.approx(none.total_s + r.parts["assemble_s"] + r.parts["apply_s"])
    miles = weight_update_time(build_scenario(load_case(WU_CASES / "miles-h100-qwen3-30b-a3b-wu-nccl.yaml")))
    assert miles.parts["assemble_s"] == miles.parts["apply_s"] == 0


def test_an_fp8_reshard_pays_the_fp8_paths_extra_time_per_tensor():
    """NeMo-RL's FP8 reshard, priced from its PR's BF16/FP8 pair on one mapping (neither a case): the same run with
    a BF16 rollout pays RESHARD_TENSOR_S per HF tensor, FP8 RESHARD_FP8_TENSOR_S more; about 127 us."""
    from perfmodel.cost.serve.refit_anchors import RESHARD_FP8_PAIR, RESHARD_FP8_TENSOR_S

    assert RESHARD_FP8_TENSOR_S == pytest.approx((3.75 - 1.365) / RESHARD_FP8_PAIR[0]) and \
        100e-6 < RESHARD_FP8_TENSOR_S < 150e-6
    case = load_case(WU_CASES / "nemorl-h100-qwen3-30b-a3b-fp8-wu-reshard.yaml")
    fp8 = weight_update_time(build_scenario(case))
    data = case.model_dump(mode="json", by_alias=True)
    data["rl"]["rollout"]["precision"] = "bf16"
    from perfmodel.inputs.case import ValidationCase
    from perfmodel.inputs.loading import parse

    scn = build_scenario(parse(ValidationCase, data, "test"))
    bf16 = weight_update_time(scn)
    tensors = _params(scn).tensors
    assert bf16.parts["convert_s"] == pytest.approx(tensors * RESHARD_TENSOR_S)
    assert fp8.parts["convert_s"] == pytest.approx(tensors * (RESHARD_TENSOR_S + RESHARD_FP8_TENSOR_S))


def test_colocated_gather_moves_local_slices_across_stages_then_gathers_within_them():
    """NeMo-RL v0.3's DeepSeek-V3 refit (EP64 x PP8 on 512 H100s): the exporters broadcast each stage's local slices
    over PP and gather experts over EP after, so every GPU's NIC carries 1/64 of the experts across stages, not all
    of them; the blog's whole gather took 12.2 s, the full model through one NIC would take over 20."""
    from perfmodel.cost.comm import all_gather_s, broadcast_s, group_placement

    scn = build_scenario(load_case(WU_CASES / "nemorl03-h100-deepseek-v3-wu-ipc.yaml"))
    r, p, hw, lay = weight_update_time(scn), _params(scn), scn.hardware, scn.layout
    gb = scn.stack.weight_update_gather_bytes
    dense, expert = sum(p.stage_dense), sum(p.stage_expert)
    pp_g, ep_g = group_placement(scn, "pp"), group_placement(scn, "ep")
    assert lay.tp == lay.etp == 1 and lay.pp == 8 and lay.ep == 64
    expected = (broadcast_s(hw, gb * (dense + expert / 64) * 7 / 8, pp_g) + all_gather_s(hw, gb * expert, ep_g))
    assert r.parts["gather_s"] == pytest.approx(expected, rel=1e-9)
    whole_model_over_pp = broadcast_s(hw, gb * p.total * 7 / 8, pp_g)
    assert whole_model_over_pp > 20.0 and r.parts["gather_s"] < 12.2 < whole_model_over_pp
    # one stage: nothing crosses stages, every GPU gathers the whole model over TP and EP
    one = build_scenario(load_case(WU_CASES / "nemorl03-h100-qwen3-30b-a3b-grpo-colocated.yaml"))
    lay1, p1 = one.layout, _params(one)
    assert lay1.pp == 1 and lay1.tp == 2 and lay1.ep == 8
    expected1 = (all_gather_s(one.hardware, 2.0 * sum(p1.stage_dense), group_placement(one, "tp"))
                 + all_gather_s(one.hardware, 2.0 * sum(p1.stage_expert) / lay1.etp, group_placement(one, "ep"))
                 + all_gather_s(one.hardware, 2.0 * sum(p1.stage_expert), group_placement(one, "etp")))
    assert weight_update_time(one).parts["gather_s"] == pytest.approx(expected1, rel=1e-9)


def test_a_trainer_wide_broadcast_exports_everywhere_and_hides_the_ring_under_the_export():
    """NeMo-RL v0.4+ (stack knob weight_update_broadcast_group: trainer): every training rank and every rollout GPU
    join one group and every training rank runs the exporter; the ring crosses full nodes on all their NICs, and the
    exporter's next buffer overlaps this one's broadcast (PR #1379). The same case with the default group (one
    sender on its own NIC, stage leaders exporting their stage, nothing overlapped) is the old price."""
    from perfmodel.cost.comm import GroupPlacement, _busbw_out, broadcast_s

    scn = build_scenario(load_case(WU_CASES / "nemorl-h100-deepseek-v3-wu-nccl.yaml"))
    assert scn.stack.weight_update_broadcast_group == "trainer" and scn.stack.weight_update_pipelined
    r, hw = weight_update_time(scn), scn.hardware
    assert scn.run.rl.actor_gpus + scn.run.rl.rollout_gpus == 288
    assert r.parts["gather_s"] > 5.0  # every rank gathers every stage's tensors, not one stage's
    ring = broadcast_s(hw, r.transferred_bytes, GroupPlacement(288, 8))
    assert ring < r.parts["gather_s"] and r.parts["link_s"] == 0.0  # hidden under the export
    sources = dataclasses.replace(scn, stack=scn.stack.with_knobs(
        {"weight_update_broadcast_group": "sources", "weight_update_pipelined": False}, source="test"))
    old = weight_update_time(sources)
    assert old.parts["link_s"] == pytest.approx(r.transferred_bytes / _busbw_out(hw), rel=0.01)
    assert old.parts["gather_s"] < 0.1 * r.parts["gather_s"]  # only the stage leaders, one stage each
    assert old.total_s > 3 * r.total_s
