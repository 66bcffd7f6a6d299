"""DualPipeV as its one module declares it: the V placement (rank r holds stages r and 2p-1-r, so rank 0 holds
the embedding and the head), one parameter copy (DualPipe proper: two), pp + 1/2 rank-layers of activations in
flight, its framework's micro-batch rule, the eight steps of its `step()`, and its bubble against the published
formula."""

from __future__ import annotations

import pytest

from perfmodel.names import EP_COMM
from perfmodel.schedules import SCHEDULES, Op, make_schedule
from perfmodel.schedules.dualpipe import DualPipe
from perfmodel.schedules.dualpipev import DualPipeV
from perfmodel.sim.pipeline import OpTimes, run_pipeline


@pytest.mark.parametrize("pp", [2, 4, 8])
def test_v_placement_puts_first_and_last_stage_on_rank_0(pp: int) -> None:
    stages = 2 * pp
    held = [DualPipeV.stages_on_rank(r, pp, stages) for r in range(pp)]
    assert held[0] == [0, stages - 1]
    assert sorted(s for h in held for s in h) == list(range(stages))  # every stage once
    assert all(h == [r, stages - 1 - r] for r, h in enumerate(held))
    s = make_schedule("dualpipev", pp, 2 * pp)
    assert [s.virtual_stage(r, c) for r in range(pp) for c in (0, 1)] == [x for h in held for x in h]


def test_parameter_copies_and_activations_in_flight() -> None:
    assert DualPipeV.parameter_copies == 1 and DualPipe.parameter_copies == 2  # README: "Parameter 1x / 2x"
    # PP + 1 chunk-micro-batches of half a rank's layers: pp + 1/2 of the rank's layers (README: "PP+1")
    assert DualPipeV.inflight_per_stage(0, 8, 32, [0, 15], None) == {0: 8.5}
    assert DualPipeV.inflight_per_stage(0, 8, 3, [0, 15], None) == {0: 3.0}  # never more than there are


def test_registered_and_refusing_what_its_step_asserts() -> None:
    assert SCHEDULES["dualpipev"] is DualPipeV
    assert DualPipeV.rule(4, 7) is not None and DualPipeV.rule(4, 8) is None
    assert DualPipeV.runnable_microbatches(4, 3) == 8
    assert DualPipeV.layout_error(4, 2, None) is not None  # one V per rank: vpp must be 1
    assert DualPipeV.min_pp == 2


def _bubble_s(pp: int, m: int, f: float, b: float, w: float) -> float:
    s = make_schedule("dualpipev", pp, m)
    r = run_pipeline(s, lambda vs, mb: OpTimes(f, b, w), lambda vs: 0.0)
    return r.makespan_s - m * 2 * (f + b + w)


@pytest.mark.parametrize("pp", [2, 4, 8])
def test_bubble_is_never_negative_and_under_twice_1f1b(pp: int) -> None:
    for f, b, w in [(1, 1, 0.5), (1, 2, 1), (1, 1.5, 0.5), (1, 1, 0.25)]:
        bubble = _bubble_s(pp, 4 * pp, f, b, w)
        assert bubble >= -1e-9
        assert bubble <= 2 * (2 * pp - 1) * (f + b + w)  # 1F1B over the 2p chunk-stages, chunk ops


@pytest.mark.parametrize("pp", [2, 4, 8])
def test_bubble_matches_the_published_formula(pp: int) -> None:
    """deepseek-ai/DualPipe README table: bubble (PP/2 - 1)(F&B + B - 3W), PP the chunk-stage count, B a full
    backward, F&B an overlapped pair. DualPipeV on p ranks runs 2p chunk-stages: (p - 1)(F&B + B - 3W); with no
    EP all-to-all to hide, F&B = F + B. The formula is drawn for a forward as long as a backward-for-inputs (the
    README's figure: one cell each); the simulated order meets it exactly there, and within (p - 1)|F - B_in| off
    it."""
    for f, b_in, w in [(1, 1, 0.5), (1, 1, 1), (1, 1, 0.25), (2, 2, 1), (1, 2, 1), (1, 1.5, 0.5), (1, 0.5, 0.25)]:
        full_b = b_in + w
        published = (pp - 1) * ((f + full_b) + full_b - 3 * w)
        bubble = _worst_rank_bubble_s(pp, 4 * pp, OpTimes(f, b_in, w))
        if f == b_in:
            assert bubble == pytest.approx(published, rel=1e-12)
        else:
            assert abs(bubble - published) <= (pp - 1) * abs(f - b_in) + 1e-9


def _worst_rank_bubble_s(pp: int, m: int, t: OpTimes) -> float:
    r = run_pipeline(make_schedule("dualpipev", pp, m), lambda vs, mb: t, lambda vs: 0.0)
    return max(r.bubble_s(k) for k in range(pp))


@pytest.mark.parametrize("pp, m", [(2, 4), (4, 8), (4, 11), (8, 20)])
def test_each_rank_runs_dualpipev_steps_once_per_micro_batch_and_chunk(pp: int, m: int) -> None:
    s = make_schedule("dualpipev", pp, m)
    for rank in range(pp):
        ops = s.rank_ops(rank)
        forwards = [(o.mb, o.chunk) for o in ops if o.kind in ("F", "FB")]
        backwards = [(o.mb, o.chunk) for o in ops if o.kind in ("B", "BW")]
        backwards += [(o.b_mb, o.b_chunk) for o in ops if o.kind == "FB"]
        weights = [(o.mb, o.chunk) for o in ops if o.kind == "W"]
        every = sorted((mb, c) for mb in range(m) for c in (0, 1))
        assert sorted(forwards) == every and sorted(backwards) == every
        split = sorted((o.mb, o.chunk) for o in ops if o.kind == "B")
        assert sorted(weights) == split  # a zero-bubble backward's W runs once, at a weight step
        pairs = sum(o.kind == "FB" for o in ops)
        # steps 4 and 5: two pairs per main step (one fewer on the last rank), one per step 5
        assert pairs == 2 * (m - 2 * pp + rank + 1) - (rank == pp - 1) + (pp - rank - 1)
        assert ops[: 2 * (pp - rank - 1)] == [Op("F", i, 0) for i in range(2 * (pp - rank - 1))]  # step 1


def test_pairs_hide_each_others_all_to_all_and_lone_ops_do_not() -> None:
    ep = {EP_COMM: 0.6}
    # 1 s of compute and 0.6 s of all-to-all each way, half the compute in the experts (each all-to-all fits its
    # window: sim/pipeline.py fb_pair_ep_s)
    t = OpTimes(1.6, 1.6, 0.5, 0.0, dict(ep), dict(ep), moe_share=0.5)
    r = run_pipeline(make_schedule("dualpipev", 4, 16), lambda vs, mb: t, lambda vs: 0.0)
    for k, rank in enumerate(r.ranks):
        ops = make_schedule("dualpipev", 4, 16).rank_ops(k)
        lone = sum(o.kind in ("F", "B", "BW") for o in ops)
        assert rank.busy_s[f"comm:{EP_COMM}"] == pytest.approx(0.6 * lone)  # pairs hid all of theirs
        assert rank.total_busy_s == pytest.approx(sum(rank.busy_s.values()))
