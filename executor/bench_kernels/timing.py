"""Timing one kernel: warm-up calls, then timed samples until the shape's budget is spent.

A sample times `calls_per_sample` back-to-back calls and one device synchronisation, so a microsecond kernel on
a GPU is not measured as the host's launch-and-wait round trip. On a GPU those calls are captured once in a CUDA
graph and the sample replays it: eager, Python's launch cost (5-20 us a call) would set the time of every kernel
shorter than that, which is the host's speed, not the kernel's (engines replay graphs; a training step's host
runs ahead of its GPU). A call that cannot be captured is timed eagerly, with one line saying so."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from perfmodel.kernels.table import median_and_spread

WARMUP_CALLS = 3
MIN_SAMPLES = 5
MAX_SAMPLES = 200
SAMPLE_TARGET_S = 1e-3  # a sample lasts at least this long when the kernel is shorter
MAX_CALLS_PER_SAMPLE = 100


@dataclass(frozen=True, slots=True)
class Timing:
    median_s: float  # one call
    spread: float  # (P90 - P10) / median over the samples
    repetitions: int  # timed calls behind the median


def summarize(per_call_s: list[float], calls_per_sample: int) -> Timing:
    median_s, spread = median_and_spread(per_call_s)
    return Timing(median_s, spread, len(per_call_s) * calls_per_sample)


def calls_per_sample(one_call_s: float) -> int:
    return max(1, min(MAX_CALLS_PER_SAMPLE, math.ceil(SAMPLE_TARGET_S / max(one_call_s, 1e-9))))


def graphed(fn: Callable[[], object], calls: int) -> Callable[[], object]:
    """`calls` back-to-back calls of `fn` as one CUDA graph's replay (warmed up on a side stream, as torch asks)."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(WARMUP_CALLS):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    return graph.replay


def _graph_sample(fn: Callable[[], object], inner: int, sync: Callable[[], None]) -> tuple[Callable[[], object], int]:
    """A sample as a CUDA graph's replay, and its calls: more of them than `inner` when eager timing was host-bound
    (the replay of `inner` calls then lasts well under the sample target)."""
    sample = graphed(fn, inner)
    sync()
    t0 = time.perf_counter()
    sample()  # the first replay uploads the graph
    sync()
    once_s = (time.perf_counter() - t0) / inner
    if inner < MAX_CALLS_PER_SAMPLE and once_s * inner < SAMPLE_TARGET_S / 2:
        inner = calls_per_sample(once_s)
        sample = graphed(fn, inner)
    return sample, inner


def time_calls(fn: Callable[[], object], sync: Callable[[], None], budget_s: float, graph: bool = False) -> Timing:
    """Median time of one call of `fn`; `sync` waits for the device (a no-op on CPU); `graph`: replay the sample's
    calls as one CUDA graph."""
    for _ in range(WARMUP_CALLS):
        fn()
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    inner = calls_per_sample(time.perf_counter() - t0)

    def sample() -> None:
        for _ in range(inner):
            fn()

    if graph:
        try:
            sample, inner = _graph_sample(fn, inner, sync)  # type: ignore[assignment]
        except RuntimeError as err:
            print(f"  (timed eagerly: a CUDA graph could not capture it: {str(err).splitlines()[0][:120]})", flush=True)
    samples: list[float] = []
    deadline = time.perf_counter() + budget_s
    while len(samples) < MAX_SAMPLES and (len(samples) < MIN_SAMPLES or time.perf_counter() < deadline):
        t0 = time.perf_counter()
        sample()
        sync()
        samples.append((time.perf_counter() - t0) / inner)
    return summarize(samples, inner)
