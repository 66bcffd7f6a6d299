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
        return {"stats": [s.to_row() for s in self.stats()], "problems": self.problems, "skipped": self.skipped,
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
