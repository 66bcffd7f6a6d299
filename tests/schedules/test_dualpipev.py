"""DualPipeV as its one module declares it: the V placement (rank r holds stages r and 2p-1-r, so rank 0 holds
the embedding and the head), one parameter copy (DualPipe proper: two), pp + 1/2 rank-layers of activations in
flight, its framework's micro-batch rule, and its bubble against the published formula."""

from __future__ import annotations

import pytest

from perfmodel.schedules import SCHEDULES, make_schedule
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


@pytest.mark.xfail(strict=True, reason="known model gap, left for the schedule-pricing work: the simulated V order "
                   "is greedy (ready ops by priority), not DualPipeV's eight-step order, and F&B pairs overlap only "
                   "the EP all-to-all, not compute; its bubble is 0.29-1.76x the published one on this grid. "
                   "Fixing it moves the DeepSeek-V3 predictions, a model change this refactor must not make.")
def test_bubble_matches_the_published_formula() -> None:
    """deepseek-ai/DualPipe README table: bubble (PP/2 - 1)(F&B + B - 3W) with PP chunks; DualPipeV on p ranks
    runs 2p chunk-stages, so (p - 1)(F&B + B - 3W), and with no compute overlap F&B = F + B."""
    for pp in (2, 4, 8):
        for f, b, w in [(1, 1, 0.5), (1, 2, 1), (1, 1.5, 0.5), (1, 1, 0.25)]:
            assert _bubble_s(pp, 4 * pp, f, b, w) == pytest.approx((pp - 1) * (f + 2 * b - 3 * w), rel=0.05)
