"""`perfmodel validate --pairs`: does the model order measured runs the way they measured?

A sweep is for ordering plans, so the check that matters is pairwise: for every two cases of the same model and
framework (the stack's name without its release) that measured the same metric, with values more than 5% apart,
whether the predictions put them in the same order. A tie in the prediction is a wrong order (the sweep could not
choose). Counted overall, per kind, for the pairs on the same hardware, and for those on the same hardware and
stack release: the choice a sweep makes, between layouts of one job on one cluster with one software stack (pairs
that differ only by release ask the model which release is faster, which it knows only from the stack profiles).
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
from dataclasses import dataclass
from itertools import combinations
from typing import Any

from perfmodel.inputs.run import ModelRef

MIN_MEASURED_GAP = 0.05  # measured values closer than this (relative to the smaller) are not a pair: noise


@dataclass(frozen=True, slots=True)
class PairMember:
    """One case's measured and predicted value of one metric, with what decides which pairs it is in."""

    case_id: str
    kind: str
    model: str
    stack: str  # framework@release as the case names it
    hardware: str
    metric: str
    measured: float
    predicted: float

    @property
    def framework(self) -> str:
        return framework_of(self.stack)


def model_key(model: ModelRef) -> str:
    """A catalogue id, or an inline config's label with a digest of the config (two GPT-2 sizes are two models)."""
    if model.id:
        return model.id
    digest = hashlib.sha256(json.dumps(model.hf_config, sort_keys=True, default=str).encode()).hexdigest()[:8]
    return f"{model.label()}#{digest}"


def framework_of(stack: str | None) -> str:
    """The stack's framework without its release (what pairs cases; a case without a stack: "default")."""
    return (stack or "default").split("@", 1)[0]


def _share(right: int, n: int) -> float | None:
    return right / n if n else None


def ratio_error_sigma(errors: list[float]) -> float | None:
    """The scatter of predicted ln-ratios about measured ones: 1.4826 x the median absolute error (the standard
    deviation of a normal scatter, not pulled by the few pairs the model gets wildly wrong)."""
    if len(errors) < 8:
        return None
    return round(1.4826 * statistics.median(abs(e) for e in errors), 4)


def ordered_pairs(members: list[PairMember]) -> dict[str, Any]:
    """Every pair of members of one (model, framework, metric) whose measured values differ by more than 5%:
    `n`, `right`, `share` overall, `same_hardware` and `by_kind` the same counts on those subsets, `wrong` each
    wrong pair (the higher measured value first)."""
    groups: dict[tuple[str, str, str], list[PairMember]] = {}
    for m in members:
        groups.setdefault((m.model, m.framework, m.metric), []).append(m)
    counts: dict[str, list[int]] = {"all": [0, 0], "same_hardware": [0, 0], "same_hardware_and_stack": [0, 0]}
    ratio_errors: dict[str, list[float]] = {}  # same hardware and stack, by kind: predicted - measured ln(hi/lo)
    by_kind: dict[str, list[int]] = {}
    wrong: list[dict[str, Any]] = []  # the higher measured first
    for (model, framework, metric), group in sorted(groups.items()):
        for a, b in combinations(sorted(group, key=lambda m: m.case_id), 2):
            if min(a.measured, b.measured) <= 0 or max(a.measured, b.measured) / min(a.measured, b.measured) \
                    <= 1 + MIN_MEASURED_GAP:
                continue
            hi, lo = (a, b) if a.measured > b.measured else (b, a)
            right = hi.predicted > lo.predicted
            kind = a.kind if a.kind == b.kind else f"{a.kind}/{b.kind}"
            tallies = [counts["all"], by_kind.setdefault(kind, [0, 0])]
            if a.hardware == b.hardware:
                tallies.append(counts["same_hardware"])
                if a.stack == b.stack:
                    tallies.append(counts["same_hardware_and_stack"])
                    if hi.predicted > 0 and lo.predicted > 0:
                        ratio_errors.setdefault(kind, []).append(
                            math.log(hi.predicted / lo.predicted) - math.log(hi.measured / lo.measured))
            for t in tallies:
                t[0] += 1
                t[1] += right
            if not right:
                wrong.append({"model": model, "framework": framework, "metric": metric, "kind": kind,
                              "same_hardware": a.hardware == b.hardware, "same_stack": a.stack == b.stack,
                              "tie": hi.predicted == lo.predicted,
                              "higher": {"id": hi.case_id, "measured": hi.measured, "predicted": hi.predicted},
                              "lower": {"id": lo.case_id, "measured": lo.measured, "predicted": lo.predicted}})

    def tally(t: list[int]) -> dict[str, Any]:
        return {"n": t[0], "right": t[1], "share": _share(t[1], t[0])}

    return {**tally(counts["all"]), "same_hardware": tally(counts["same_hardware"]),
            "same_hardware_and_stack": tally(counts["same_hardware_and_stack"])
            | {"ratio_error_sigma_log": ratio_error_sigma([e for es in ratio_errors.values() for e in es]),
               "ratio_error_sigma_log_by_kind": {k: ratio_error_sigma(es) for k, es in sorted(ratio_errors.items())}},
            "by_kind": {k: tally(t) for k, t in sorted(by_kind.items())}, "wrong": wrong,
            "rule": f"same model, framework and metric; measured more than {MIN_MEASURED_GAP:.0%} apart; "
                    "a predicted tie counts as wrong"}
