"""Physical invariants every simulated result must obey, checked where the result is made (its dataclass's
`__post_init__`), so no caller can rank, print or store an impossible number.

A violation is a bug in the cost model, the schedule or the simulator, never a plan: it raises `PhysicsError`
naming the invariant and the layout. The sweep counts such candidates as `invalid` and writes the reason.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

# Relative slack for float rounding in sums (phases that add up to a step, FLOP/s against a peak).
_REL = 1e-6
_ABS_S = 1e-9


class PhysicsError(RuntimeError):
    """A result breaks a physical invariant (a bug to refuse loudly)."""

    def __init__(self, invariant: str, where: str, detail: str) -> None:
        self.invariant, self.where, self.detail = invariant, where, detail
        super().__init__(f"impossible result ({invariant}): {detail}" + (f" [{where}]" if where else ""))


def _finite(where: str, values: Mapping[str, float]) -> None:
    for name, v in values.items():
        if not math.isfinite(v):
            raise PhysicsError("finite", where, f"{name} = {v}")


def _non_negative(invariant: str, where: str, values: Mapping[str, float], scale_s: float) -> None:
    tol = _ABS_S + _REL * scale_s
    for name, v in values.items():
        if v < -tol:
            raise PhysicsError(invariant, where, f"{name} = {v:.6g} s")


def _flat(prefix: str, values: Mapping[str, float] | Iterable[float]) -> dict[str, float]:
    if isinstance(values, Mapping):
        return {f"{prefix}[{k}]": float(v) for k, v in values.items()}
    return {f"{prefix}[{i}]": float(v) for i, v in enumerate(values)}


def check_train_step(
    where: str,
    step_time_s: float,
    breakdown_s: Mapping[str, float],
    bubble_s_per_stage: Iterable[float],
    exposed_comm_s: Mapping[str, float],
    model_flops: float,
    hardware_flops: float,
    gpus: int,
    peak_flops_per_gpu: float,
) -> None:
    """A training step (or a forward-only pass): finite, positive, every part and every stage's bubble >= 0 (the
    step is at least each stage's own compute and exposed communication), parts sum to the step, and neither
    model nor hardware FLOP/s per GPU exceeds the profile's peak for the precision (MFU <= 1)."""
    bubbles = list(bubble_s_per_stage)
    _finite(where, {"step_time_s": step_time_s, "model_flops": model_flops, "hardware_flops": hardware_flops}
            | _flat("breakdown_s", breakdown_s) | _flat("bubble_s_per_stage", bubbles)
            | _flat("exposed_comm_s", exposed_comm_s))
    if step_time_s <= 0:
        raise PhysicsError("step > 0", where, f"step_time_s = {step_time_s}")
    _non_negative("bubble >= 0 on every stage", where, _flat("bubble_s_per_stage", bubbles), step_time_s)
    _non_negative("parts >= 0", where, _flat("breakdown_s", breakdown_s) | _flat("exposed_comm_s", exposed_comm_s),
                  step_time_s)
    total = sum(breakdown_s.values())
    if abs(total - step_time_s) > _ABS_S + _REL * step_time_s:
        raise PhysicsError(
            "parts sum to the step", where, f"breakdown sums to {total:.6g} s, step is {step_time_s:.6g} s")
    if model_flops < 0 or hardware_flops < model_flops * (1 - _REL):
        raise PhysicsError(
            "FLOPs", where, f"model {model_flops:.4g}, hardware {hardware_flops:.4g} (hardware >= model >= 0)")
    for name, flops in (("MFU", model_flops), ("hardware FLOP utilization", hardware_flops)):
        util = flops / step_time_s / gpus / peak_flops_per_gpu
        if util > 1 + _REL:
            raise PhysicsError(f"{name} <= 1", where, f"{name} {util:.3g}: {flops / step_time_s / gpus / 1e12:.4g} "
                               f"TFLOP/s per GPU against a peak of {peak_flops_per_gpu / 1e12:.4g}")


def check_rl_step(
    where: str,
    step_time_s: float,
    phases_s: Mapping[str, float],
    breakdown_s: Mapping[str, float],
    idle_gpu_s: Mapping[str, float],
) -> None:
    """An RL step: finite, positive, phases and idle GPU-seconds >= 0, and the critical-path parts sum to the step
    (a part that does not fit the step would be hidden by the `other` remainder)."""
    _finite(where, {"step_time_s": step_time_s} | _flat("phases_s", phases_s) | _flat("breakdown_s", breakdown_s)
            | _flat("idle_gpu_s", idle_gpu_s))
    if step_time_s <= 0:
        raise PhysicsError("step > 0", where, f"step_time_s = {step_time_s}")
    _non_negative("phases >= 0", where, _flat("phases_s", phases_s) | _flat("breakdown_s", breakdown_s),
                  step_time_s)
    _non_negative("idle GPU time >= 0", where, _flat("idle_gpu_s", idle_gpu_s), step_time_s)
    total = sum(breakdown_s.values())
    if abs(total - step_time_s) > _ABS_S + _REL * step_time_s:
        raise PhysicsError("RL phases sum to the step", where,
                           f"critical-path parts sum to {total:.6g} s, step is {step_time_s:.6g} s")


def check_parts_non_negative(invariant: str, where: str, parts: Mapping[str, float]) -> None:
    """Byte or time components (memory parts, rollout times): finite and >= 0."""
    _finite(where, dict(parts))
    for name, v in parts.items():
        if v < 0:
            raise PhysicsError(invariant, where, f"{name} = {v:.6g}")
