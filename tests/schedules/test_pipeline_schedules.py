"""Pipeline schedules on the simpy engine: bubbles equal the published formulas for uniform stages and free
communication; zero-bubble and DualPipeV schedules beat 1F1B; dependencies and p2p delays are respected."""

from __future__ import annotations

import pytest

from perfmodel.schedules import SCHEDULES, ForwardOnly, make_schedule
from perfmodel.sim.pipeline import OpTimes, run_pipeline

F, B = 1.0, 2.0


def _run(name: str, pp: int, m: int, v: int = 1, p2p: float = 0.0, trace: bool = False):
    s = make_schedule(name, pp, m, v)
    if s.split_backward:
        t = OpTimes(F / s.chunks, B / 2 / s.chunks, B / 2 / s.chunks)
    else:
        t = OpTimes(F / s.chunks, B / s.chunks)
    return s, run_pipeline(s, lambda vs, mb: t, lambda vs: p2p, record_trace=trace)


@pytest.mark.parametrize("pp,m", [(2, 4), (4, 8), (4, 16), (8, 32), (8, 64), (16, 120)])
def test_1f1b_bubble_matches_formula(pp, m):
    _, r = _run("1f1b", pp, m)
    ideal = m * (F + B)
    bubble_fraction = (r.makespan_s - ideal) / r.makespan_s
    expected = (pp - 1) / (m + pp - 1)
    assert bubble_fraction == pytest.approx(expected, rel=0.01)
    for rank in range(pp):
        assert r.bubble_s(rank) == pytest.approx((pp - 1) * (F + B), rel=0.01)


@pytest.mark.parametrize("pp,m,v", [(2, 4, 2), (4, 8, 2), (4, 16, 4), (8, 64, 4), (8, 32, 5)])
def test_interleaved_bubble_matches_formula(pp, m, v):
    _, r = _run("interleaved", pp, m, v)
    ideal = m * (F + B)
    # bubble time (p-1)(tf+tb)/v (Narayanan et al. 2021, section 2.2.2)
    assert r.makespan_s - ideal == pytest.approx((pp - 1) * (F + B) / v, rel=0.01)
    fraction = (r.makespan_s - ideal) / r.makespan_s
    assert fraction == pytest.approx(((pp - 1) / v) / (m + (pp - 1) / v), rel=0.01)


def test_zero_bubble_h1_cuts_the_1f1b_bubble():
    _, one = _run("1f1b", 8, 32)
    _, zb = _run("zb-h1", 8, 32)
    ideal = 32 * (F + B)
    bubble_1f1b, bubble_zb = one.makespan_s - ideal, zb.makespan_s - ideal
    assert bubble_zb < 0.5 * bubble_1f1b  # published: about 1/3 of 1F1B's when F = B = W
    assert bubble_zb >= (8 - 1) * (F + B - 2 * (B / 2)) - 1e-9


def test_dualpipev_runs_all_ops_and_beats_1f1b():
    s, r = _run("dualpipev", 8, 32, trace=True)
    assert r.events == sum(len(s.rank_ops(k)) for k in range(8))  # every op of the order ran
    for rank in r.ranks:  # F, B and W of both chunks (half a stage each) of every micro-batch
        assert rank.total_busy_s == pytest.approx(32 * (F + B))
    _, one = _run("1f1b", 8, 32)
    assert r.makespan_s < one.makespan_s
    # the V: rank 0 holds the first and the last virtual stage
    assert s.virtual_stage(0, 0) == 0 and s.virtual_stage(0, 1) == 15


def test_p2p_delay_adds_to_the_critical_path():
    _, free = _run("1f1b", 4, 8)
    _, slow = _run("1f1b", 4, 8, p2p=0.5)
    # warmup and cooldown each cross the 3 stage boundaries once; steady-state round trips can add more
    assert free.makespan_s + 2 * 3 * 0.5 <= slow.makespan_s <= free.makespan_s + 2 * 3 * 0.5 + 8 * 2 * 0.5


def test_forward_only_pass():
    s = ForwardOnly(make_schedule("1f1b", 4, 8))
    r = run_pipeline(s, lambda vs, mb: OpTimes(F, 0.0), lambda vs: 0.0)
    assert r.makespan_s == pytest.approx((8 + 3) * F)


def test_dependencies_in_trace():
    _, r = _run("interleaved", 4, 8, 2, p2p=0.1, trace=True)
    ends = {}
    for e in r.trace:
        if e.track == "compute" and e.name.startswith("F"):
            ends[(e.args["stage"], e.args["mb"])] = (e.start_s, e.start_s + e.dur_s)
    for (vs, mb), (start, _) in ends.items():
        if vs > 0:
            assert start >= ends[(vs - 1, mb)][1] + 0.1 - 1e-9


def test_registry_names():
    assert set(SCHEDULES) == {"1f1b", "interleaved", "combined-1f1b", "zb-h1", "dualpipe", "dualpipev"}
    with pytest.raises(ValueError, match="valid"):
        make_schedule("gpipe", 2, 2)


def test_forward_only_flow_equals_the_simpy_processes():
    import random

    rng = random.Random(3)
    times = {(vs, mb): OpTimes(rng.uniform(0.5, 2.0), 0.0, f_comm_s={"tp": 0.1}) for vs in range(5) for mb in range(9)}
    s = ForwardOnly(make_schedule("1f1b", 5, 9))
    fast = run_pipeline(s, lambda vs, mb: times[(vs, mb)], lambda vs: 0.3)
    slow = run_pipeline(s, lambda vs, mb: times[(vs, mb)], lambda vs: 0.3, record_trace=True)  # simpy path
    assert fast.makespan_s == pytest.approx(slow.makespan_s, rel=1e-12)
    for a, b in zip(fast.ranks, slow.ranks):
        assert a.end_s == pytest.approx(b.end_s, rel=1e-12)
        assert a.busy_s == pytest.approx(b.busy_s, rel=1e-12)
