"""Micro-batch counts that do not divide evenly: each schedule either runs them as its framework orders them
(every op executed, bubbles >= 0) or refuses them with the framework's rule; a static order that deadlocks is
an error, never a short step."""

from __future__ import annotations

import pytest

from perfmodel.schedules import ScheduleError, make_schedule, runnable_microbatches, schedule_rule
from perfmodel.schedules.interleaved import Interleaved
from perfmodel.sim.pipeline import OpTimes, PipelineStall, run_pipeline

F, B, W = 1.0, 1.5, 0.5


def _times(split: bool, chunks: int) -> OpTimes:
    if split:
        return OpTimes(F / chunks, B / chunks, W / chunks)
    return OpTimes(F / chunks, (B + W) / chunks)


def _run(s):
    t = _times(s.split_backward, s.chunks)
    return run_pipeline(s, lambda vs, mb: t, lambda vs: 0.01, record_trace=True)


def _assert_sane(s, r) -> None:
    assert r.events == sum(len(s.rank_ops(k)) for k in range(s.pp))  # every op of the order ran
    ideal = s.m * (F + B + W)  # one rank's own work
    assert r.makespan_s >= ideal - 1e-9
    for rank in range(s.pp):
        assert r.bubble_s(rank) >= -1e-9
        assert r.ranks[rank].total_busy_s == pytest.approx(ideal)


@pytest.mark.parametrize("pp", [4, 8])
@pytest.mark.parametrize("offset", ["pp-1", "pp+1", "1.5pp"])
def test_interleaved_refuses_what_megatron_refuses(pp: int, offset: str) -> None:
    m = {"pp-1": pp - 1, "pp+1": pp + 1, "1.5pp": pp + pp // 2}[offset]
    with pytest.raises(ScheduleError, match="megatron-core"):
        make_schedule("interleaved", pp, m, 2)
    # Megatron runs them with a group size in [pp, m] whose last group is empty or >= pp: m itself (one group)
    if m >= pp:
        s = make_schedule("interleaved", pp, m, 2, group=m)
        _assert_sane(s, _run(s))


@pytest.mark.parametrize("pp,m,v,group", [(4, 8, 2, None), (4, 10, 3, 5), (4, 9, 2, 5), (8, 24, 3, None),
                                           (4, 7, 2, 7), (2, 5, 4, 3)])
def test_interleaved_uneven_groups_run_every_op(pp: int, m: int, v: int, group: int | None) -> None:
    assert schedule_rule("interleaved", pp, m, group) is None
    s = make_schedule("interleaved", pp, m, v, group=group)
    _assert_sane(s, _run(s))


def test_interleaved_order_is_megatron_schedule_table() -> None:
    """The forward order of megatron-core 0.16.1's get_schedule_table (its docstring example: PP2, VP2,
    group 3, 5 micro-batches) and, where megatron-core is installed, the function itself."""
    s = Interleaved(2, 5, 2, group=3)
    expected = [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1), (3, 0), (4, 0), (3, 1), (4, 1)]
    assert s._order(False) == expected
    try:
        from megatron.core.pipeline_parallel.schedules import get_schedule_table
    except Exception:
        return
    for pp, m, v, g in [(2, 5, 2, 3), (4, 16, 3, 4), (4, 10, 2, 5), (8, 24, 4, 8), (4, 9, 3, 5)]:
        assert Interleaved(pp, m, v, group=g)._order(False) == [tuple(x) for x in get_schedule_table(m, v, g)]


def test_interleaved_warmup_uses_the_group_size() -> None:
    s = Interleaved(4, 10, 3, group=5)
    ops = s.rank_ops(0)
    first_backward = next(i for i, op in enumerate(ops) if op.kind != "F")
    assert first_backward == (4 - 0 - 1) * 2 + (3 - 1) * 5 + 1  # warm-up forwards, then one 1F1B forward


def test_a_deadlocking_order_is_an_error_not_a_short_step() -> None:
    s = Interleaved(4, 5, 3)  # bypasses make_schedule's rule: the last group of 1 stalls the order
    with pytest.raises(PipelineStall, match="wait forever"):
        _run(s)


@pytest.mark.parametrize("name", ["1f1b", "zb-h1"])
@pytest.mark.parametrize("m", [3, 5, 6, 1])  # pp - 1, pp + 1, 1.5 pp, a single micro-batch (pp = 4)
def test_one_chunk_schedules_run_any_count(name: str, m: int) -> None:
    assert schedule_rule(name, 4, m) is None
    s = make_schedule(name, 4, m)
    _assert_sane(s, _run(s))


@pytest.mark.parametrize("m", [9, 11, 16])
def test_dualpipev_runs_odd_counts_from_2pp(m: int) -> None:
    s = make_schedule("dualpipev", 4, m)
    _assert_sane(s, _run(s))


@pytest.mark.parametrize("name,pp,m,why", [
    ("dualpipev", 4, 7, "at least 2 x pp"),
    ("dualpipe", 4, 9, "even number"),
    ("dualpipe", 4, 6, "at least 2 x pp"),
    ("dualpipe", 3, 12, "even pp"),
])
def test_dualpipe_refuses_what_its_step_asserts(name: str, pp: int, m: int, why: str) -> None:
    with pytest.raises(ScheduleError, match=why):
        make_schedule(name, pp, m)


@pytest.mark.parametrize("name,pp,m,group,expected", [
    ("interleaved", 4, 5, None, 8), ("interleaved", 4, 3, None, 4), ("interleaved", 4, 8, None, 8),
    ("interleaved", 4, 11, 6, 12), ("dualpipev", 4, 3, None, 8), ("dualpipev", 4, 9, None, 9),
    ("dualpipe", 4, 9, None, 10), ("1f1b", 4, 3, None, 3), ("zb-h1", 8, 5, None, 5),
])
def test_runnable_counts_are_runnable(name: str, pp: int, m: int, group: int | None, expected: int) -> None:
    n = runnable_microbatches(name, pp, m, group)
    assert n == expected
    assert schedule_rule(name, pp, n, group) is None
