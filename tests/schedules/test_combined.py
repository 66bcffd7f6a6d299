"""Megatron's EP all-to-all overlap (combined 1F1B): interleaved 1F1B with one extra warm-up forward whose 1F1B
steps pair a forward with another micro-batch's backward, each's EP all-to-all under the other's compute; at pp 1
no pipelining, F then pairs then B. megatron-core's rules are one-line errors."""

from __future__ import annotations

from collections import Counter

import pytest

from perfmodel.errors import InputError
from perfmodel.inputs.case import ValidationCase
from perfmodel.inputs.loading import parse
from perfmodel.inputs.scenario import build_scenario
from perfmodel.names import EP_COMM
from perfmodel.schedules import make_schedule
from perfmodel.schedules.combined import Combined1F1B
from perfmodel.schedules.interleaved import Interleaved
from perfmodel.sim.pipeline import OpTimes, run_pipeline


@pytest.mark.parametrize(("pp", "m", "v"), [(1, 6, 1), (2, 8, 2), (4, 16, 2), (4, 8, 4)])
def test_every_forward_and_backward_runs_once_and_the_pairs_fill_1f1b(pp, m, v):
    s = make_schedule("combined-1f1b", pp, m, v)
    plain = make_schedule("interleaved", pp, m, v) if pp > 1 else None
    for rank in range(pp):
        ops = s.rank_ops(rank)
        fwd = Counter((o.mb, o.chunk) for o in ops if o.kind in ("F", "FB"))
        bwd = Counter((o.b_mb, o.b_chunk) if o.kind == "FB" else (o.mb, o.chunk)
                      for o in ops if o.kind in ("FB", "BW"))
        assert fwd == bwd == Counter({(mb, c): 1 for mb in range(m) for c in range(v)})
        warmup = sum(1 for o in ops if o.kind == "F")
        # interleaved 1F1B's leading forwards, and one more
        base = next(i for i, o in enumerate(plain.rank_ops(rank)) if o.kind != "F") - 1 if plain else 0
        assert warmup == min(m * v, base + 1)
        assert sum(1 for o in ops if o.kind == "FB") == m * v - warmup
    if pp == 1:
        assert [o.kind for o in s.rank_ops(0)] == ["F"] + ["FB"] * (m - 1) + ["BW"]


def test_as_many_micro_batches_in_flight_as_interleaved():
    """One warm-up forward more, but each pair's forward fills layer by layer as its backward frees the other
    micro-batch's layers (megatron-core's layer-level F&B phases): the peak is interleaved 1F1B's."""
    for rank in range(4):
        a = Combined1F1B.inflight_per_stage(rank, 4, 16, [rank, rank + 4], None)
        b = Interleaved.inflight_per_stage(rank, 4, 16, [rank, rank + 4], None)
        assert sum(a.values()) == sum(b.values())
        assert sum(a.values()) == Combined1F1B.warmup(rank, 4, 2, 4)
    assert Combined1F1B.inflight_per_stage(0, 1, 8, [0], None) == {0: 1.0}


def test_the_pairs_hide_each_others_all_to_all():
    f_comm, b_comm = {EP_COMM: 0.5}, {EP_COMM: 1.0}
    t = OpTimes(1.0 + 0.5, 2.0 + 1.0, f_comm_s=f_comm, b_comm_s=b_comm, moe_share=0.5)
    runs = {name: run_pipeline(make_schedule(name, 2, 8, 2), lambda vs, mb: t, lambda vs: 0.0)
            for name in ("interleaved", "combined-1f1b")}
    exposed = {k: sum(rk.busy_s.get(f"comm:{EP_COMM}", 0.0) for rk in r.ranks) for k, r in runs.items()}
    assert exposed["combined-1f1b"] < 0.5 * exposed["interleaved"]
    assert runs["combined-1f1b"].makespan_s < runs["interleaved"].makespan_s


def test_the_hidden_all_to_all_takes_its_share_of_the_sms_from_the_compute_it_hides_under():
    """A pair's hidden all-to-all slows the other half's compute by the share of SMs its kernels hold while they
    run (cost/dispatch.py overlap_share); at pp 1 every pair hides both halves fully (F 1.5 s with 0.5 s of
    all-to-all, B 3 s with 1 s), so each of the 7 pairs pays (0.5 + 1.0) x the share."""
    t = OpTimes(1.0 + 0.5, 2.0 + 1.0, f_comm_s={EP_COMM: 0.5}, b_comm_s={EP_COMM: 1.0}, moe_share=0.5)
    s = make_schedule("combined-1f1b", 1, 8, 1)
    free, shared = (run_pipeline(s, lambda vs, mb: t, lambda vs: 0.0, overlap_share=share) for share in (0.0, 0.2))
    pairs = sum(1 for o in s.rank_ops(0) if o.kind == "FB")
    assert pairs == 7
    assert shared.makespan_s - free.makespan_s == pytest.approx(pairs * 1.5 * 0.2)
    assert shared.ranks[0].busy_s[f"comm:{EP_COMM}"] - free.ranks[0].busy_s.get(f"comm:{EP_COMM}", 0.0) == \
        pytest.approx(pairs * 1.5 * 0.2)


@pytest.mark.parametrize(("moe_share", "exposed"), [(0.5, 0.0), (0.25, 0.75 - 0.75), (0.1, 0.75 - 0.3)])
def test_each_all_to_all_hides_only_under_its_own_window(moe_share, exposed):
    """megatron-core's three windows a layer: the backward's combine gradient beside the forward's attention, the
    two dispatches beside the two halves' experts, the forward's combine beside the backward's attention. F: 1 s of
    compute and 0.5 s of all-to-all (half dispatch), B: 2 s and 1 s (half the combine gradient)."""
    from perfmodel.sim.pipeline import fb_pair_ep_s

    f = OpTimes(1.5, 0.0, f_comm_s={EP_COMM: 0.5}, moe_share=moe_share)
    b = OpTimes(0.0, 3.0, b_comm_s={EP_COMM: 1.0}, moe_share=moe_share)
    # windows: max(0.5, 1 - m) + max(0.25 + 0.5, 3 m) + max(0.25, 2 - 2 m), m the experts' share
    windows = max(0.5, 1 - moe_share) + max(0.75, 3 * moe_share) + max(0.25, 2 - 2 * moe_share)
    assert fb_pair_ep_s(f, b, 1.0, 2.0, 0.0) == pytest.approx(windows - 3.0)
    assert fb_pair_ep_s(f, b, 1.0, 2.0, 0.0) == pytest.approx(exposed)
    hidden = 1.5 - exposed
    assert fb_pair_ep_s(f, b, 1.0, 2.0, 0.2) == pytest.approx(exposed + 0.2 * hidden)


def test_the_share_is_the_dispatch_kernels_sms_over_the_gpus():
    from perfmodel.cost.dispatch import overlap_share
    from perfmodel.inputs.hardware import load_hardware

    b200, cpu = load_hardware("b200"), load_hardware("cpu-local")
    assert overlap_share(b200, "hybridep", 32) == pytest.approx(32 / 148)
    assert overlap_share(b200, "deepep", 32) == pytest.approx(b200.ep_units / 148)
    assert overlap_share(cpu, "hybridep", 32) == 0.0  # no SM count: not priced


def _run(**train):
    base = dict(precision="bf16", seq_len=4096, global_batch=256, micro_batch=1, schedule="combined-1f1b",
                layout=dict(tp=1, pp=4, vpp=2, ep=8))
    d = dict(id="t", source="test", kind="pretrain", hardware="b200", gpus=64, model={"id": "qwen3-30b-a3b"},
             train=base | train, measured=dict(step_time_s=1.0))
    return build_scenario(parse(ValidationCase, d, "t.yaml"), source="t.yaml")


@pytest.mark.parametrize(("train", "field", "says"), [
    (dict(layout=dict(tp=1, pp=4, vpp=1, ep=8)), "train.schedule", "needs vpp > 1"),
    (dict(layout=dict(tp=1, pp=4, vpp=2, ep=1)), "train.schedule", "needs ep > 1"),
    (dict(recompute="full"), "train.recompute", "full recompute"),
    (dict(recompute="selective", recompute_modules=["moe"]), "train.recompute_modules", "remove moe"),
])
def test_megatron_cores_rules_are_one_line_errors(train, field, says):
    assert _run().schedule == "combined-1f1b"
    with pytest.raises(InputError, match=says) as err:
        _run(**train)
    assert err.value.field == field and "\n" not in str(err.value)
