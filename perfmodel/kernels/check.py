"""`perfmodel kernels check`: every measured row priced by the model, summarized per lane, GPU and regime as the
ratio predicted / measured (below 1: the model is too fast)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from perfmodel.inputs.hardware import HardwareProfile, known_hardware_ids, load_hardware
from perfmodel.kernels.price import lanes_for, misread, regime
from perfmodel.kernels.table import KernelRow, format_shape

REGIMES = ("small", "large", "bulk")
ALL = "all"  # the pooled GPU (or regime) of a summary row
# Issue 22's targets for a lane's median predicted / measured, pooled over GPUs and GPU by GPU: 0.87-1.15 in bulk
# (DeepEP's dispatch and combine 0.7-1.4), 0.67-1.5 for small kernels; none set for the large regime.
TARGET_BANDS: dict[str, tuple[float, float]] = {"bulk": (0.87, 1.15), "small": (0.67, 1.5)}
EP_BULK_BAND = (0.7, 1.4)


def target_band(lane: str, regime_name: str) -> tuple[float, float] | None:
    """The band issue 22 sets for a lane's median in a regime; None where it sets none."""
    if regime_name == "bulk" and lane.startswith(("ep_dispatch", "ep_combine")):
        return EP_BULK_BAND
    return TARGET_BANDS.get(regime_name)


def target_misses(stats: Iterable[LaneStats]) -> list[LaneStats]:
    """The summary rows whose median falls outside their target band."""
    out = []
    for s in stats:
        band = target_band(s.lane, s.regime)
        if band is not None and not band[0] <= s.median <= band[1]:
            out.append(s)
    return out


@dataclass(frozen=True, slots=True)
class Priced:
    row: KernelRow
    lane: str
    regime: str
    predicted_s: float

    @property
    def ratio(self) -> float:
        return self.predicted_s / self.row.latency_s


@dataclass(frozen=True, slots=True)
class LaneStats:
    lane: str
    hardware: str
    regime: str
    n: int
    median: float
    mean_abs_log: float
    p10: float
    p90: float

    def to_row(self) -> dict[str, object]:
        return {"lane": self.lane, "hardware": self.hardware, "regime": self.regime, "n": self.n,
                "median": round(self.median, 4), "mean_abs_log": round(self.mean_abs_log, 4),
                "p10": round(self.p10, 4), "p90": round(self.p90, 4)}


@dataclass
class CheckResult:
    priced: list[Priced] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)  # why -> rows

    def stats(self, pooled: bool = True) -> list[LaneStats]:
        """Per (lane, GPU, regime), and with `pooled` per (lane, all GPUs, regime) and (lane, GPU, all regimes)."""
        groups: dict[tuple[str, str, str], list[float]] = defaultdict(list)
        for p in self.priced:
            x = math.log(p.ratio)
            keys = [(p.lane, p.row.hardware, p.regime)]
            if pooled:
                keys += [(p.lane, ALL, p.regime), (p.lane, p.row.hardware, ALL), (p.lane, ALL, ALL)]
            for k in keys:
                groups[k].append(x)
        out = []
        for (lane, hw, reg), logs in sorted(groups.items()):
            a = np.asarray(logs)
            out.append(LaneStats(lane, hw, reg, len(a), float(np.exp(np.median(a))), float(np.mean(np.abs(a))),
                                 float(np.exp(np.percentile(a, 10))), float(np.exp(np.percentile(a, 90)))))
        return out

    def to_json(self, worst: int = 3) -> dict[str, object]:
        lanes = sorted({p.lane for p in self.priced})
        stats = self.stats()
        return {"stats": [s.to_row() for s in stats], "problems": self.problems, "skipped": self.skipped,
                "outside_targets": [s.to_row() for s in target_misses(stats)],
                "worst": {lane: [{"hardware": p.row.hardware, "op": p.row.op, "dtype": p.row.dtype,
                                  "shape": format_shape(p.row.shape), "measured_us": p.row.latency_s * 1e6,
                                  "predicted_us": p.predicted_s * 1e6, "where": p.row.where or p.row.source}
                                 for p in self.worst(lane, worst)] for lane in lanes}}

    def worst(self, lane: str, count: int = 3) -> list[Priced]:
        rows = [p for p in self.priced if p.lane == lane]
        return sorted(rows, key=lambda p: -abs(math.log(p.ratio)))[:count]


def check_rows(rows: Iterable[KernelRow], lanes: set[str] | None = None,
               profiles: dict[str, HardwareProfile] | None = None) -> CheckResult:
    """Price every row on its hardware's profile (loaded once per id)."""
    res = CheckResult()
    profiles = dict(profiles or {})
    known = set(known_hardware_ids())
    for row in rows:
        if row.hardware not in profiles:
            if row.hardware not in known:
                _skip(res, f"no hardware profile {row.hardware!r}")
                continue
            profiles[row.hardware] = load_hardware(row.hardware)
        hw = profiles[row.hardware]
        matched = [lane for lane in lanes_for(row) if not lanes or lane.name in lanes]
        if not matched:
            _skip(res, f"no lane for {row.op} {row.dtype}{' ' + row.variant if row.variant else ''}")
            continue
        if misread(row, hw):  # physics: no kernel runs above the peak; the reading is wrong
            _skip(res, f"{row.op}: faster than the GPU's peak as read (its token count is another group's)")
            continue
        reg = regime(row)
        for lane in matched:
            t = lane.price(row, hw)
            if not (t > 0 and math.isfinite(t)):  # a model that prices a kernel at 0 s is a bug: say so
                res.problems.append(f"{row.where or row.source}: {lane.name} priced {format_shape(row.shape)} at "
                                    f"{t!r} s")
                continue
            res.priced.append(Priced(row, lane.name, reg, t))
    return res


def _skip(res: CheckResult, why: str) -> None:
    res.skipped[why] = res.skipped.get(why, 0) + 1
