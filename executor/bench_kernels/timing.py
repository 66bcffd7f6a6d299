"""Timing one kernel: warm-up calls, then timed samples until the shape's budget is spent.

A sample times `calls_per_sample` back-to-back calls and one device synchronisation, so a microsecond kernel on
a GPU is not measured as the host's launch-and-wait round trip."""

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


@dataclass(frozen=True, slots=True)
class Timing:
    median_s: float  # one call
    spread: float  # (P90 - P10) / median over the samples
    repetitions: int  # timed calls behind the median


def summarize(per_call_s: list[float], calls_per_sample: int) -> Timing:
    median_s, spread = median_and_spread(per_call_s)
    return Timing(median_s, spread, len(per_call_s) * calls_per_sample)


def calls_per_sample(one_call_s: float) -> int:
    return max(1, min(100, math.ceil(SAMPLE_TARGET_S / max(one_call_s, 1e-9))))


def time_calls(fn: Callable[[], object], sync: Callable[[], None], budget_s: float) -> Timing:
    """Median time of one call of `fn`; `sync` waits for the device (a no-op on CPU)."""
    for _ in range(WARMUP_CALLS):
        fn()
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    inner = calls_per_sample(time.perf_counter() - t0)
    samples: list[float] = []
    deadline = time.perf_counter() + budget_s
    while len(samples) < MAX_SAMPLES and (len(samples) < MIN_SAMPLES or time.perf_counter() < deadline):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        sync()
        samples.append((time.perf_counter() - t0) / inner)
    return summarize(samples, inner)
