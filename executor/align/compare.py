"""Where the two engines disagree, and where it starts (`executor align`).

Each engine is held against the FP32 reference run on *its own* weights (the trainer's BF16, the engine's, FP8-
quantized for an FP8 rollout), so what is left is that engine's arithmetic and configuration; the precision's own
effect is the reference on the engine's weights against the reference on the trainer's. Per layer and component,
in the order they are computed (attention, the residual after it, the experts each token went to, FFN / MoE, the
hidden state after the layer), a relative difference ||a - b|| / ||b|| pooled over every token of every sequence.

An engine departs where its difference first exceeds both NOISE_FLOOR and JUMP times the largest before it. The
floor is what BF16 arithmetic against FP32 leaves, with a margin: engines that match the reference measured at most
0.83% (trainer) and 0.69% (SGLang) on any layer and component of the DSV4-mini and Llama examples, BF16 or FP8
rollout (tests/executor/test_align.py, docs/align.md). Routing departs where under ROUTING_MIN of the tokens chose
the reference's experts (a hash-routed layer must agree on every token).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from executor.align.reference import COMPONENTS, Forward
from executor.backends.local.grpo import approx_kl_low_var

NOISE_FLOOR = 0.02  # about 3x the largest measured difference of a matching engine
JUMP = 3.0
ROUTING_MIN = 0.95


@dataclass
class Row:
    layer: int
    component: str  # attention, attention_residual, routing, ffn, hidden
    trainer_vs_reference: float | None  # relative difference; routing: share of tokens that agree
    rollout_vs_reference: float | None  # None: the engine does not expose its layers
    rollout_vs_trainer: float | None
    precision_alone: float | None  # reference on the engine's weights vs on the trainer's


@dataclass
class Departure:
    engine: str  # trainer or rollout
    layer: int
    component: str
    value: float
    expected: float  # the bound it broke: max(NOISE_FLOOR, JUMP x the largest before); routing: ROUTING_MIN

    def sentence(self) -> str:
        if self.component == "routing":
            return (f"{self.engine} departs from the reference at layer {self.layer} routing: {self.value:.1%} of "
                    f"tokens chose the reference's experts (expected >= {self.expected:.0%})")
        return (f"{self.engine} departs from the reference at layer {self.layer} {self.component}: relative "
                f"difference {self.value:.3g}, expected under {self.expected:.3g}")


@dataclass
class Bucket:
    positions: str
    tokens: int
    mean_abs: float
    max_abs: float
    k3_kl: float


@dataclass
class AlignResult:
    rows: list[Row] = field(default_factory=list)
    departures: list[Departure] = field(default_factory=list)
    gap: list[Bucket] = field(default_factory=list)  # trainer vs rollout log-probs by position
    gap_vs_reference: dict[str, float] = field(default_factory=dict)  # mean |lp - reference lp| per engine
    rollout_layers: bool = True  # False: the engine's layers were not visible (its log-probs only)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _rel(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    num = sum(float((x.float() - y.float()).pow(2).sum()) for x, y in zip(a, b, strict=True))
    den = sum(float(y.float().pow(2).sum()) for y in b)
    return math.sqrt(num / den) if den > 0 else math.sqrt(num)


def _agree(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    same = sum(int((x.sort(-1).values == y.sort(-1).values).all(-1).sum()) for x, y in zip(a, b, strict=True))
    return same / max(1, sum(x.shape[0] for x in a))


def _parts(fws: list[Forward], layer: int, component: str) -> list[torch.Tensor] | None:
    if not fws or not fws[0].layers:
        return None
    vals = [getattr(f.layers[layer], component if component != "routing" else "experts") for f in fws]
    return None if any(v is None for v in vals) else vals


def _buckets(train: list[Forward], roll: list[Forward]) -> list[Bucket]:
    """Per position range (1, 2-3, 4-7, ...): mean and max |train - rollout| log-prob and the k3 KL."""
    by: dict[int, list[tuple[float, float]]] = {}
    for t, r in zip(train, roll, strict=True):
        for pos, (a, b) in enumerate(zip(t.log_probs.tolist(), r.log_probs.tolist(), strict=True), start=1):
            by.setdefault(pos.bit_length() - 1, []).append((a, b))
    out = []
    for k in sorted(by):
        pairs = by[k]
        a = torch.tensor([p[0] for p in pairs])
        b = torch.tensor([p[1] for p in pairs])
        diff = (a - b).abs()
        lo, hi = 2 ** k, 2 ** (k + 1) - 1
        out.append(Bucket(f"{lo}" if lo == hi else f"{lo}-{hi}", len(pairs), float(diff.mean()), float(diff.max()),
                          float(approx_kl_low_var(b, a).mean())))
    return out


def _departure(engine: str, rows: list[Row], key: str, hashed: set[int]) -> Departure | None:
    worst = 0.0
    for row in rows:
        v = getattr(row, key)
        if v is None:
            continue
        if row.component == "routing":
            need = 1.0 if row.layer in hashed else ROUTING_MIN
            if v < need:
                return Departure(engine, row.layer, "routing", v, need)
            continue
        bound = max(NOISE_FLOOR, JUMP * worst)
        if v > bound:
            return Departure(engine, row.layer, row.component, v, bound)
        worst = max(worst, v)
    return None


def compare(train: list[Forward], roll: list[Forward], ref_train: list[Forward], ref_roll: list[Forward],
            hash_layers: int = 0) -> AlignResult:
    """Every engine's forward of the same sequences, with the reference on each engine's weights."""
    result = AlignResult(rollout_layers=bool(roll and roll[0].layers))
    for layer in range(len(ref_train[0].layers)):
        for component in (COMPONENTS[0], COMPONENTS[1], "routing", *COMPONENTS[2:]):
            t, r = _parts(train, layer, component), _parts(roll, layer, component)
            rt, rr = _parts(ref_train, layer, component), _parts(ref_roll, layer, component)
            if rt is None:
                continue  # a dense layer has no routing
            f = _agree if component == "routing" else _rel
            result.rows.append(Row(layer, component, f(t, rt) if t else None, f(r, rr) if r else None,
                                   f(r, t) if r and t else None, f(rr, rt)))
    hashed = set(range(hash_layers))
    for engine, key in (("trainer", "trainer_vs_reference"), ("rollout", "rollout_vs_reference")):
        d = _departure(engine, result.rows, key, hashed)
        if d is not None:
            result.departures.append(d)
    result.gap = _buckets(train, roll)
    for name, fws, refs in (("trainer", train, ref_train), ("rollout", roll, ref_roll)):
        diffs = torch.cat([(f.log_probs - g.log_probs).abs() for f, g in zip(fws, refs, strict=True)])
        result.gap_vs_reference[name] = float(diffs.mean())
    if not result.rollout_layers:  # judged by its log-probs alone
        t_gap, r_gap = result.gap_vs_reference["trainer"], result.gap_vs_reference["rollout"]
        if r_gap > max(NOISE_FLOOR / 10, JUMP * t_gap):
            result.departures.append(Departure("rollout", -1, "log-probs", r_gap, max(NOISE_FLOOR / 10, JUMP * t_gap)))
    return result
