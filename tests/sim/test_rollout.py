"""Rollout simulator: long tail, KV back-pressure, engine count, FP8 vs BF16, determinism, the closed-form segments
against a token-by-token reference, and the event count (the speed metric) growing with segments, not tokens.

`python tests/sim/test_rollout.py` prints the wall time of the two speed targets (not asserted)."""

from __future__ import annotations

import dataclasses
import time

import pytest

from perfmodel.cost.serve.engine import (
    EngineCost,
    RolloutParams,
    decode_kv_heads,
    decode_step_time_s,
    engine_geometry,
    rollout_params_for,
)
from perfmodel.errors import InputError
from perfmodel.inputs.case import ValidationCase, load_case
from perfmodel.inputs.loading import parse
from perfmodel.inputs.scenario import build_scenario
from perfmodel.sim.response_law import response_law, response_lengths
from perfmodel.sim.rollout import simulate_rollout
from tests.sim.gb300_case import GB300
from tests.sim.gb300_case import gb300_case as _base
from tests.sim.gb300_case import scenario_of as _scn


def _disagg(d: dict, rollout_gpus: int) -> dict:
    """Same trainer (32 GPUs), `rollout_gpus` separate rollout GPUs."""
    d["rl"].update(placement="disaggregated", actor_gpus=32, rollout_gpus=rollout_gpus)
    d["rl"]["weight_update"]["mode"] = "broadcast"
    d["gpus"] = 32 + rollout_gpus
    return d


def _mi355x(gpus: int, prompts: int, samples: int, max_len: int, engine: int = 8) -> dict:
    """DSV4-Flash on MI355X, colocated, engines of `engine` GPUs (TP = EP = engine)."""
    d = _base()
    d["hardware"] = "mi355x"
    d["gpus"] = gpus
    d["train"]["layout"] = {"tp": 4, "pp": 4, "cp": 1, "ep": 8, "etp": 1}
    d["train"]["seq_len"] = max_len + 512
    d["train"]["global_batch"] = prompts * samples
    d["rl"].update(actor_gpus=gpus, rollout_gpus=gpus, prompts_per_step=prompts, samples_per_prompt=samples)
    d["rl"]["response_tokens"] = {"max": max_len}
    d["rl"]["rollout"].update(engine_gpus=engine, tp=engine, ep=engine)
    return d


def test_gb300_case_runs_and_is_consistent():
    scn = build_scenario(load_case(GB300))
    r = simulate_rollout(scn)
    assert r.num_engines == 8 and r.engine_gpus == 4
    assert r.tokens_generated == sum(r.response_lengths)
    assert abs(r.tokens_generated / 256 - 3020) < 30  # the law's capped mean matches the case
    assert r.tokens_per_s_per_gpu == pytest.approx(r.tokens_generated / r.rollout_time_s / 32)
    assert max(r.engine_last_finish_s) == pytest.approx(r.rollout_time_s)
    assert all(b <= r.rollout_time_s + 1e-9 for b in r.engine_busy_s)
    assert r.prefill_time_s + r.decode_time_s == pytest.approx(sum(r.engine_busy_s))
    assert 0 < r.prefill_fraction < 0.05  # 140-token prompts: decode dominates
    assert 20 < r.rollout_time_s < 200  # sanity band only; the measured 71.48 s is not fitted
    for e in range(r.num_engines):  # timeline segments of an engine never overlap and add up to its busy time
        segs = [s for s in r.timeline if s.engine == e]
        assert all(b.start_s >= a.end_s - 1e-9 for a, b in zip(segs, segs[1:]))
        assert sum(s.end_s - s.start_s for s in segs) == pytest.approx(r.engine_busy_s[e])
    assert r.spans() and r.spans()[0].group.startswith("engine")


def test_single_long_response_leaves_an_idle_tail():
    d = _base()
    d["rl"].update(prompts_per_step=8, samples_per_prompt=1)
    # 7 of 8 responses are short, exactly one is at the cap (stratified sampling draws one per 1/8 stratum)
    d["rl"]["response_tokens"] = {"max": 4096, "histogram": [[200, 7], [4096, 1]]}
    r = simulate_rollout(_scn(d))
    assert sorted(r.response_lengths) == [200] * 7 + [4096]
    long_engine = max(range(r.num_engines), key=lambda e: r.engine_last_finish_s[e])
    others = [t for e, t in enumerate(r.engine_last_finish_s) if e != long_engine]
    assert max(others) < 0.2 * r.rollout_time_s  # the others finished long before
    assert r.idle_tail_gpu_s > 0.5 * (r.num_engines - 1) * r.engine_gpus * r.rollout_time_s
    curve = r.batch_curves[long_engine]
    assert curve[-1][1] == 0 and curve[-2][1] == 1  # one request running at the end
    assert curve[-1][0] == pytest.approx(r.rollout_time_s)
    assert r.idle_tail_fraction > 0.5


def test_straggler_fraction_is_the_time_with_under_half_the_peak_requests_running():
    from perfmodel.sim.rollout_result import straggler_fraction

    d = _base()
    d["rl"].update(prompts_per_step=8, samples_per_prompt=1)
    d["rl"]["response_tokens"] = {"max": 4096, "histogram": [[200, 7], [4096, 1]]}
    r = simulate_rollout(_scn(d))
    assert r.straggler_fraction > 0.8  # one response at the cap, seven short ones: the tail is most of the rollout
    # by hand: two engines, 4 + 4 running to 1 s, 4 + 0 to 2 s (not under half of 8), 1 + 0 to 4 s
    assert r.straggler_fraction == straggler_fraction(r.batch_curves, r.rollout_time_s)
    hand = (((0.0, 4), (2.0, 1), (4.0, 0)), ((0.0, 4), (1.0, 0)))
    assert straggler_fraction(hand, 4.0) == pytest.approx(0.5)
    assert straggler_fraction((((0.0, 3), (4.0, 0)),), 4.0) == 0.0


def test_kv_capacity_back_pressure_caps_the_batch_and_lengthens_the_rollout():
    free = simulate_rollout(_scn(_base()))
    d = _base()
    cap_requests = 3
    d["rl"]["rollout"]["max_total_tokens"] = cap_requests * (140 + 4096)
    tight = simulate_rollout(_scn(d))
    assert max(free.engine_max_batch) == 32  # 256 requests / 8 engines, all admitted at once
    assert max(tight.engine_max_batch) < 10  # reserves actual lengths: a few more than 3 fit
    assert tight.rollout_time_s > 2.0 * free.rollout_time_s
    assert tight.tokens_generated == free.tokens_generated
    worst = simulate_rollout(_scn(d), params=dataclasses.replace(rollout_params_for(_scn(d)), kv_admission="max"))
    assert max(worst.engine_max_batch) == cap_requests
    assert worst.rollout_time_s >= tight.rollout_time_s


def test_kv_pool_from_hbm_caps_the_batch():
    d = _base()
    d["rl"]["rollout"]["mem_fraction_static"] = 0.245  # 72.8 of the GB300's 297 GB: weights 71.9 GB
    scn = _scn(d)
    cost = EngineCost(scn)
    per_request = cost.kv_bytes(140 + 4096)
    fits = int(cost.kv_pool_bytes // per_request)
    assert 0 < fits < 32
    r = simulate_rollout(scn, params=RolloutParams(kv_admission="max"))
    assert max(r.engine_max_batch) == fits


def test_request_that_never_fits_is_an_input_error():
    d = _base()
    d["rl"]["rollout"]["max_total_tokens"] = 1000  # below prompt + most responses
    with pytest.raises(InputError) as err:
        simulate_rollout(_scn(d))
    assert err.value.field == "rl.rollout.max_total_tokens"


def test_weights_that_do_not_fit_are_an_input_error():
    d = _base()
    d["rl"]["rollout"]["mem_fraction_static"] = 0.1
    with pytest.raises(InputError) as err:
        simulate_rollout(_scn(d))
    assert err.value.field == "rl.rollout.mem_fraction_static"


def test_more_engines_shorten_the_rollout():
    times = [simulate_rollout(_scn(_disagg(_base(), g))).rollout_time_s for g in (16, 32, 64)]
    assert times[0] > times[1] > times[2]


def test_fp8_decode_is_faster_than_bf16_when_memory_bound():
    d8, d16 = _base(), _base()
    d16["rl"]["rollout"]["precision"] = "bf16"
    s8, s16 = _scn(d8), _scn(d16)
    a, b = decode_step_time_s(s8, 32, 2000), decode_step_time_s(s16, 32, 2000)
    # 32 tokens over ~136 experts per layer: the expert GEMMs read weights, so halving the bytes halves them
    # (past the grouped GEMMs' fixed time, the same in both)
    cost = EngineCost(s8)
    fixed = 2 * cost.n_moe * s8.hardware.grouped_gemm_fixed_s * cost.compute_scale
    assert (b["expert_gemm_s"] - fixed) / (a["expert_gemm_s"] - fixed) == pytest.approx(2.0, rel=0.02)
    assert a["total_s"] < b["total_s"]
    assert a["comm_s"] == b["comm_s"] and a["kernel_floor_s"] == b["kernel_floor_s"]
    assert simulate_rollout(s8).rollout_time_s < simulate_rollout(s16).rollout_time_s


def test_expert_hit_formula():
    cost = EngineCost(_scn(_base()))
    e, k = 256, 6
    assert cost.experts_hit(1) == pytest.approx(6)
    assert cost.experts_hit(32) == pytest.approx(e * (1 - (1 - k / e) ** 32))
    assert cost.experts_hit(10_000) == pytest.approx(256)


def test_determinism_with_the_seed():
    scn = _scn(_base())
    a, b, c = simulate_rollout(scn, seed=7), simulate_rollout(scn, seed=7), simulate_rollout(scn, seed=8)
    assert a == b
    assert a.response_lengths != c.response_lengths
    assert a.rollout_time_s != c.rollout_time_s


def test_response_law_matches_mean_and_truncated_fraction():
    from perfmodel.inputs.job import ResponseTokens

    rt = ResponseTokens(max=4096, mean=3020, truncated_fraction=0.55)
    law = response_law(rt)
    assert law.kind == "lognormal" and law.mean == pytest.approx(3020, rel=1e-6)
    assert law.truncated_fraction == pytest.approx(0.55)
    x = response_lengths(rt, 4096, seed=1)
    assert (x == 4096).mean() == pytest.approx(0.55, abs=2 / 4096)
    assert x.mean() == pytest.approx(3020, rel=0.01)
    only_mean = response_law(ResponseTokens(max=4096, mean=3020))
    assert only_mean.mean == pytest.approx(3020, rel=1e-6) and 0.3 < only_mean.truncated_fraction < 0.6
    only_max = response_law(ResponseTokens(max=8192))
    assert only_max.truncated_fraction == pytest.approx(0.244, abs=0.01)
    with pytest.raises(InputError):
        response_law(ResponseTokens(max=4096, mean=1000, truncated_fraction=0.5))  # mean < f x max


def test_geometry_dp_attention_and_dp_replicas():
    d = _base()
    d["rl"]["rollout"].update(engine_gpus=4, tp=4, dp=4, ep=4, dp_attention=True)
    g = engine_geometry(_scn(d))
    assert (g.n_units, g.unit_gpus, g.attn_tp, g.attn_dp, g.moe_all_to_all) == (8, 4, 1, 4, True)
    assert simulate_rollout(_scn(d)).rollout_time_s > 0
    d = _base()
    d["rl"]["rollout"].update(engine_gpus=8, tp=4, dp=2, ep=4, dp_attention=False)
    g = engine_geometry(_scn(d))
    assert (g.n_engines, g.replicas_per_engine, g.n_units, g.unit_gpus) == (4, 2, 8, 4)


def test_client_concurrency_limit_and_least_loaded_router():
    scn = _scn(_base())
    free = simulate_rollout(scn)
    for router in ("round_robin", "least_loaded"):
        r = simulate_rollout(scn, params=RolloutParams(client_concurrency_per_engine=2, router=router))
        assert r.tokens_generated == free.tokens_generated
        assert sum(len([s for s in r.timeline if s.kind == "prefill" and s.engine == e]) for e in range(8)) >= 256 // 8
        assert r.rollout_time_s > 2 * free.rollout_time_s  # at most 16 requests in flight instead of 256
        for e in range(r.num_engines):
            segs = [s for s in r.timeline if s.engine == e]
            assert all(b.start_s >= a.end_s - 1e-9 for a, b in zip(segs, segs[1:]))


def test_closed_form_segments_match_token_by_token_reference():
    d = _base()
    d["rl"].update(prompts_per_step=8, samples_per_prompt=4)
    d["rl"]["response_tokens"] = {"max": 4096, "mean": 2500, "truncated_fraction": 0.3}
    scn = _scn(d)
    r = simulate_rollout(scn, seed=3)
    cost = EngineCost(scn)
    lengths, p = r.response_lengths, 140
    for e in range(r.num_engines):  # round robin: request i on engine i % 8; all admitted at t = 0
        reqs = [lengths[i] for i in range(len(lengths)) if i % r.num_engines == e]
        t = cost.prefill_s([p] * len(reqs))
        live, j = [x for x in reqs if x > 1], 0
        while live:  # one decode step at a time: context p + 1 + j for every live request
            t += cost.decode_base(len(live)) + len(live) * cost.attn_time(p + 1 + j)
            j += 1
            live = [x for x in live if x - 1 > j]
        assert r.engine_last_finish_s[e] == pytest.approx(t, rel=1e-9)


# ---------------------------------------------------------------------------------------------------------------
# Speed: the event count grows with decode segments (request arrivals / completions), not with tokens.


def bench_rollout_events(max_len: int, prompts: int = 32, samples: int = 8, gpus: int = 32,
                         engine: int = 8) -> dict[str, float]:
    """One rollout of DSV4-Flash on MI355X; returns events, segments, tokens and wall seconds."""
    scn = _scn(_mi355x(gpus, prompts, samples, max_len, engine))
    t0 = time.perf_counter()
    r = simulate_rollout(scn, seed=1)
    wall = time.perf_counter() - t0
    return {"events": r.sim_events, "segments": r.decode_segments, "tokens": r.tokens_generated,
            "requests": prompts * samples, "engines": r.num_engines, "wall_s": wall, "rollout_s": r.rollout_time_s}


def test_event_count_grows_with_segments_not_tokens():
    short, long = bench_rollout_events(4096), bench_rollout_events(8192)
    assert long["tokens"] > 1.8 * short["tokens"]
    assert long["events"] < 1.3 * short["events"]
    for b in (short, long):
        # per engine: a prefill, a wait, and per request at most a finish and a KV-saturation boundary
        assert b["events"] <= 2 * b["requests"] + 3 * b["engines"]
        assert b["events"] >= b["segments"]
    big = bench_rollout_events(8192, prompts=1024, samples=8, gpus=256)
    assert big["events"] <= 2 * big["requests"] + 3 * big["engines"]


if __name__ == "__main__":
    for label, kw in (("256 responses x 8192 max on 32 MI355X", {}),
                      ("8192 responses x 8192 max on 256 MI355X (TP8)", {"prompts": 1024, "gpus": 256}),
                      ("8192 responses x 8192 max on 256 MI355X (TP4)", {"prompts": 1024, "gpus": 256, "engine": 4})):
        bench_rollout_events(8192, **kw)  # warm caches
        b = bench_rollout_events(8192, **kw)
        print(f"{label}: {b['wall_s'] * 1e3:.1f} ms wall, {b['events']} events, {b['segments']} segments, "
              f"{b['tokens']} tokens, simulated rollout {b['rollout_s']:.1f} s")


def test_the_engine_prices_its_experts_with_the_grouped_gemm_at_the_engines_efficiency():
    from perfmodel.cost.compute import grouped_gemm_time_s
    from perfmodel.cost.serve.engine import experts_hit

    cost = EngineCost(_scn(_base()))
    d, il, gated = cost.expert_shape
    hw, tokens, ep = cost.hw, 64.0, cost.geo.ep
    rows, hit = tokens * cost.top_k / ep, experts_hit(cost.num_experts, cost.top_k, tokens) / ep
    local = cost.num_experts / ep  # each row routed at random over the local experts
    expected = (grouped_gemm_time_s(hw, rows, hit, 2 * il if gated else il, d, cost.grouped_dtype, engine=True,
                                    experts=local)
                + grouped_gemm_time_s(hw, rows, hit, d, il, cost.grouped_dtype, engine=True, experts=local)
                ) * cost.compute_scale
    assert cost.expert_layer_s(tokens) == pytest.approx(expected)
    dense = cost.gemm_s(tokens) - cost.n_moe * cost.expert_layer_s(tokens)
    assert dense > 0 and cost.expert_layer_s(0) == 0.0


def test_an_fp8_forward_quantizes_the_activations_of_each_quantized_dense_linear():
    from perfmodel.cost.compute import activation_quant_time_s
    from perfmodel.cost.serve.engine import QUANTIZED_ATTENTION_INPUTS

    d8, d16 = _base(), _base()
    d16["rl"]["rollout"]["precision"] = "bf16"
    c8, c16 = EngineCost(_scn(d8)), EngineCost(_scn(d16))
    layers = c8.model.layers
    # DSV4's attention projections in every layer, plus gate-up and down where a layer has a shared expert
    expected = sum(QUANTIZED_ATTENTION_INPUTS["dsv4"] + 2 * bool(layer.ffn.num_shared_experts) for layer in layers)
    assert c8.quantized_inputs == expected
    one = activation_quant_time_s(c8.hw, 256.0, c8.model.hidden_size, "fp8_block")
    assert c8.quantize_s(256.0) == pytest.approx(expected * one * c8.compute_scale)
    assert c16.quantize_s(256.0) == 0.0
    parts = decode_step_time_s(_scn(d8), 256, 2000)
    assert parts["quantize_s"] == pytest.approx(c8.quantize_s(256.0))
    assert parts["total_s"] == pytest.approx(sum(v for k, v in parts.items() if k.endswith("_s") and k != "total_s"))


def test_each_decode_query_pays_its_attention_heads_fixed_time_whatever_the_context():
    """Per request: each layer's KV heads on the GPU (the decode kernel's work items) and query heads pay the
    profile's fixed times, at any cached length."""
    d = _base()
    scn = _scn(d)
    cost = EngineCost(scn)
    hw, g = cost.hw, cost.geo
    heads = sum(layer.attention.num_heads / g.attn_tp for layer in cost.model.layers)
    kv = sum(decode_kv_heads(layer.attention, g.attn_tp) for layer in cost.model.layers)
    assert hw.attention_decode_kv_head_s > 0 and kv > 0
    assert cost.attn_query_s == pytest.approx((heads * hw.attention_decode_query_head_s
                                               + kv * hw.attention_decode_kv_head_s) / g.attn_dp * cost.compute_scale)
    short, long = decode_step_time_s(scn, 64, 100), decode_step_time_s(scn, 64, 4000)
    assert short["attention_query_s"] == long["attention_query_s"] == pytest.approx(64 * cost.attn_query_s)
    assert cost.attn_query_s > 0
    assert cost.decode_base(64) - cost.decode_base(32) > 32 * cost.attn_query_s  # part of every step's base


def test_each_prompt_token_pays_its_prefill_attention_heads_fixed_time():
    """EngineCost.prefill_s: per prompt token, each layer's query heads on the GPU pay the profile's prefill time
    per query row and head, on top of the (query, key) pairs' FLOPs."""
    d = _base()
    device_bound = dataclasses.replace(rollout_params_for(_scn(d)), prefill_kernel_host_s=0.0)  # no issue-time floor
    cost = EngineCost(_scn(d), device_bound)
    hw, g = cost.hw, cost.geo
    heads = sum(layer.attention.num_heads / g.attn_tp for layer in cost.model.layers)
    assert cost.prefill_query_s == pytest.approx(heads * hw.attention_prefill_query_head_s / g.attn_dp
                                                 * cost.compute_scale)
    assert cost.prefill_query_s > 0
    without = EngineCost(_scn(d), device_bound)
    without.prefill_query_s = 0.0
    prompts = [300, 700, 700]
    assert cost.prefill_s(prompts) - without.prefill_s(prompts) == pytest.approx(1700 * cost.prefill_query_s)


def test_a_decode_kernel_walks_gqa_kv_heads_per_gpu_and_one_latent_head_for_mla_and_dsv4():
    from perfmodel.inputs.model_spec import AttentionSpec

    gqa = AttentionSpec("gqa", hidden_size=4096, num_heads=32, num_kv_heads=8, head_dim=128, v_head_dim=128)
    assert decode_kv_heads(gqa, 1) == 8 and decode_kv_heads(gqa, 4) == 2
    assert decode_kv_heads(gqa, 16) == 1.0  # replicated below one KV head per GPU
    for kind in ("mla", "dsv4"):
        assert decode_kv_heads(dataclasses.replace(gqa, kind=kind, num_kv_heads=32), 1) == 1.0


def test_an_off_policy_window_prices_a_step_as_its_share_of_k_steps_in_flight():
    """`rl.off_policy_steps` k: the engines hold k steps' requests at once (NeMo-RL's trajectory collector), so a
    step's rollout is the window's time / k (the same requests run as one batch, divided by k), shorter than one
    step's own batch with its tail; one step's lengths go to training and the timeline ends with the step."""
    d = _disagg(_base(), 32)
    d["rl"]["async"] = True
    one = simulate_rollout(_scn(d))
    d["rl"]["off_policy_steps"] = 4
    four = simulate_rollout(_scn(d))
    d["rl"].update(off_policy_steps=1, prompts_per_step=4 * d["rl"]["prompts_per_step"])
    whole = simulate_rollout(_scn(d))  # the same four steps' requests as one batch
    assert four.rollout_time_s == pytest.approx(whole.rollout_time_s / 4)
    assert four.rollout_time_s < one.rollout_time_s
    assert four.tokens_generated == pytest.approx(whole.tokens_generated / 4, abs=1)
    assert len(four.response_lengths) == len(one.response_lengths)
    assert four.idle_tail_gpu_s == pytest.approx(whole.idle_tail_gpu_s / 4)
    assert four.straggler_fraction <= one.straggler_fraction
    assert all(s.end_s <= four.rollout_time_s + 1e-9 for s in four.timeline)


def test_an_off_policy_window_needs_async():
    d = _disagg(_base(), 32)
    d["rl"]["off_policy_steps"] = 2
    with pytest.raises(InputError) as e:
        parse(ValidationCase, d, "case.yaml")
    assert e.value.field == "rl" and "off_policy_steps 2 needs async: true" in str(e.value)
    assert "\n" not in str(e.value)
