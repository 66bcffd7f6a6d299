"""What the capacity report needs of a sweep's rows, gathered in one pass over candidates.csv, so the report's
memory does not grow with the sweep: the counts (by status, by node count, by reason), the best `keep` ranked rows
whole, and the best row of each node count and of each layout family at each node count. Of every other simulated
row only its ranking key stays (a few numbers), to rank rows the CSV leaves unranked."""

from __future__ import annotations

import bisect
import heapq
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from perfmodel.names import BREAKDOWN_COLUMNS


@dataclass(slots=True)
class NodeCount:
    gpus: int
    candidates: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    first: dict[str, Any] | None = None  # the first row of this node count (any status)
    best: dict[str, Any] | None = None  # the best ranked one


@dataclass(slots=True)
class SweepDigest:
    candidates: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    nodes: dict[int, NodeCount] = field(default_factory=dict)
    reasons: Counter[str] = field(default_factory=Counter)  # numbers blanked: "needs # GB" counts together
    reason_examples: dict[str, str] = field(default_factory=dict)
    best_by_family: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    top: list[dict[str, Any]] = field(default_factory=list)  # the best `keep` simulated rows, best first
    unranked: int = 0  # simulated rows the CSV gives no rank
    breakdown_off: list[int] = field(default_factory=list)  # indices whose breakdown misses their step (first 8)
    breakdown_off_count: int = 0

    @property
    def kept_rows(self) -> list[dict[str, Any]]:
        """Every row kept whole, once each, by index."""
        rows = {id(r): r for r in self.top}
        rows |= {id(r): r for r in self.best_by_family.values()}
        for n in self.nodes.values():
            rows |= {id(r): r for r in (n.first, n.best) if r is not None}
        return sorted(rows.values(), key=lambda r: r["index"])


def family(r: dict[str, Any]) -> str:
    """Layout family for the capacity curve: placement x sync/async (RL), or 'training only'."""
    if not r.get("placement"):
        return "training only"
    return f"{r['placement']} · {'async' if r.get('async') else 'sync'}"


def rank_key(row: dict[str, Any], objective: str) -> tuple[int, float, float]:
    """The order of simulated rows: the sweep's rank, then rows without one by the objective, then index."""
    if row["rank"] is not None:
        return (0, float(row["rank"]), float(row["index"]))
    value = {"tokens_per_gpu": None if row["tokens_per_s_per_gpu"] is None else -row["tokens_per_s_per_gpu"],
             "cost": row["gpu_hours_per_step"], "p90_step_time": row["step_time_p90_s"]}.get(objective)
    return (1, row["step_time_s"] if value is None else value, float(row["index"]))


def digest_rows(rows: Iterable[dict[str, Any]], objective: str, keep: int) -> SweepDigest:
    """One pass over the rows: counts, the `keep` best rows, the best per node count and family, and ranks for
    the kept rows the CSV left unranked (their place among every simulated row)."""
    d = SweepDigest()
    keys: list[tuple[int, float, float]] = []
    best: list[tuple[tuple[float, ...], int, dict[str, Any]]] = []  # max-heap on the key (negated)
    for row in rows:
        d.candidates += 1
        d.statuses[row["status"]] += 1
        node = d.nodes.setdefault(row["nodes"], NodeCount(row["gpus"]))
        node.candidates += 1
        node.statuses[row["status"]] += 1
        node.first = node.first or row
        if row["status"] in ("pruned", "failed"):
            why = row["reason"] or "(no reason given)"
            k = f"{row['status']}: " + re.sub(r"\d+(?:\.\d+)?", "#", why)
            d.reasons[k] += 1
            d.reason_examples.setdefault(k, why)
        if row["status"] != "ok":
            continue
        _check_breakdown(row, d)
        key = rank_key(row, objective)
        keys.append(key)
        d.unranked += row["rank"] is None
        if node.best is None or key < rank_key(node.best, objective):
            node.best = row
        fam = (family(row), row["nodes"])
        if fam not in d.best_by_family or key < rank_key(d.best_by_family[fam], objective):
            d.best_by_family[fam] = row
        entry = (tuple(-x for x in key), row["index"], row)
        if len(best) < keep:
            heapq.heappush(best, entry)
        elif entry[:2] > best[0][:2]:
            heapq.heapreplace(best, entry)
    d.top = [e[2] for e in sorted(best, key=lambda e: tuple(-x for x in e[0]))]
    if d.unranked:
        keys.sort()
        for row in d.kept_rows:
            if row["status"] == "ok":
                row["rank"] = bisect.bisect_left(keys, rank_key(row, objective)) + 1
    return d


def _check_breakdown(row: dict[str, Any], d: SweepDigest) -> None:
    parts = [row[c] for c in BREAKDOWN_COLUMNS if row[c] is not None]
    if parts and abs(sum(parts) - row["step_time_s"]) > max(1e-3, 0.01 * row["step_time_s"]):
        d.breakdown_off_count += 1
        if len(d.breakdown_off) < 8:
            d.breakdown_off.append(row["index"])
