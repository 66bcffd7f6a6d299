"""`perfmodel calibrate --kernels`: a hardware profile's kernel parameters fitted to measured kernel tables (the
user's own `executor bench-kernels` output, or any table in the project's format), with the same bounded least
squares, prior and refusals as a fit to measured runs (perfmodel/calibration.py). The tables inform the
parameters; the model stays the cost functions (docs/kernels.md)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from perfmodel.calibration import (
    PRIOR_SIGMA_LOG,
    RUN_SIGMA_LOG,
    Calibration,
    Param,
    hardware_param,
    refit_until_informed,
    residual_scatter,
)
from perfmodel.errors import InputError
from perfmodel.inputs.hardware import HardwareProfile
from perfmodel.kernels.price import Lane, lanes_for, misread
from perfmodel.kernels.table import KernelRow

# The parameters each op's price reads (those a fit may move). GEMM curves are added per dtype present.
OP_PARAMS: dict[str, tuple[str, ...]] = {
    "all_reduce": ("collective_latency_scale_up_s", "collective_step_latency_scale_up_s",
                   "collective_bus_efficiency_scale_up", "collective_peer_ramp", "small_protocol_bw_fraction",
                   "small_protocol_bulk_extra_latency_s"),
    "all_gather": ("collective_latency_scale_up_s", "collective_step_latency_scale_up_s",
                   "collective_bus_efficiency_scale_up", "collective_peer_ramp"),
    "reduce_scatter": ("collective_latency_scale_up_s", "collective_step_latency_scale_up_s",
                       "collective_bus_efficiency_scale_up", "collective_peer_ramp"),
    "all_to_all": ("all_to_all_latency_scale_up_s", "all_to_all_efficiency_scale_up"),
    "grouped_gemm": ("grouped_gemm_rel_efficiency", "grouped_gemm_fixed_s", "grouped_gemm_per_expert_s",
                     "hbm_efficiency"),
    "ep_dispatch": ("ep_dispatch_floor_s", "ep_dispatch_unit_bytes_per_s"),
    "ep_combine": ("ep_combine_floor_s", "ep_combine_unit_bytes_per_s"),
    "attention_decode": ("hbm_efficiency", "attention_decode_kv_head_s", "attention_decode_query_head_s"),
    "attention_prefill": ("attention_prefill_query_head_s",),
    "attention_backward": ("attention_bwd_rel_efficiency",),
}


def default_kernel_params(hw: HardwareProfile, rows: list[KernelRow]) -> list[str]:
    """The parameters the rows' prices read, in a stable order; those at 0 (nothing to scale) left out."""
    values = hw.calibration_params()
    names: list[str] = []
    for r in rows:
        extra = ()
        if r.op == "gemm":
            dt = {"fp16": "bf16", "fp8_block": "fp8", "mxfp8": "fp8"}.get(r.dtype, r.dtype)
            dt = dt if f"gemm_max_efficiency_{dt}" in values else "bf16"
            extra = (f"gemm_max_efficiency_{dt}", f"gemm_half_flops_{dt}")
            if r.variant == "engine" and r.dtype not in ("bf16", "fp16"):  # an engine linear's recipe terms
                recipe = {"mxfp8": "fp8_block"}.get(r.dtype, r.dtype)
                extra += (f"engine_gemm_{recipe}_rel_efficiency", "engine_quant_fixed_s")
        for n in (*OP_PARAMS.get(r.op, ()), *extra):
            if n not in names and values.get(n, 0.0) > 0:
                names.append(n)
    return names


@dataclass
class _KernelProblem:
    """log(predicted / measured) of each table row, priced in its first lane on the profile with the trial
    parameters: the `problem` refit_until_informed expects."""

    hw: HardwareProfile
    rows: list[tuple[KernelRow, Lane]]
    params: list[Param]
    evaluations: int = 0
    _seen: dict = field(default_factory=dict)

    def figures(self) -> list[tuple[KernelRow, Lane]]:
        return self.rows

    def log_residuals(self, u: np.ndarray) -> np.ndarray:
        key = (tuple(p.key for p in self.params), tuple(np.round(u, 12)))
        if key not in self._seen:
            self.evaluations += 1
            hw = self.hw.with_params({p.name: float(math.exp(v)) for p, v in zip(self.params, u)}, "kernel fit")
            self._seen[key] = np.array([math.log(max(lane.price(r, hw), 1e-12) / r.latency_s)
                                        for r, lane in self.rows])
        return self._seen[key]


def fit_kernel_calibration(rows: list[KernelRow], hw: HardwareProfile, names: list[str] | None = None,
                           sources: list[str] | None = None, command: str = "") -> Calibration:
    """Fit `names` (default: what the rows' prices read) of `hw` to the rows measured on it."""
    t0 = time.perf_counter()
    mine = [(r, lanes[0]) for r in rows if r.hardware == hw.id and (lanes := lanes_for(r))
            and not misread(r, hw)]  # a row above the peak is misread (kernels check skips it too)
    if not mine:
        raise InputError(", ".join(sources or []) or "--kernels", "hardware",
                         f"no table row of {hw.id} that the model prices (rows are matched by their hardware column)")
    names = list(names) if names else default_kernel_params(hw, [r for r, _ in mine])
    known = hw.calibration_params()
    for n in names:
        if n not in known:
            raise InputError("--hardware-params", n, f"not a calibratable parameter; valid: {', '.join(sorted(known))}")
    params = [hardware_param(hw, n) for n in names]
    problem = _KernelProblem(hw, mine, params)
    rms_before = float(np.sqrt(np.mean(problem.log_residuals(np.array([math.log(p.start) for p in params])) ** 2)))
    active, u, cov, refused = refit_until_informed(problem, params, len(mine))
    resid = problem.log_residuals(u if active else np.zeros(0))
    fitted = {p.name: float(math.exp(v)) for p, v in zip(active, u)}
    return Calibration(
        stack=None, hardware=hw.id, hardware_params=fitted, names=[p.key for p in active],
        covariance_log=cov.tolist() if active else [], residual_sigma_log=residual_scatter(resid), refused=refused,
        fit={"residual_rms_log_before": rms_before, "residual_rms_log_after": float(np.sqrt(np.mean(resid ** 2))),
             "n_figures": len(mine), "evaluations": problem.evaluations,
             "at_bound": [p.key for p, v in zip(active, u) if min(v - p.lo_log, p.hi_log - v) < 1e-3],
             "seconds": round(time.perf_counter() - t0, 2), "prior_sigma_log": PRIOR_SIGMA_LOG,
             "run_sigma_log": RUN_SIGMA_LOG, "kind": "kernel tables"},
        provenance={"fitted_on": [{"id": Path(s).name, "file": s, "source": "kernel table"} for s in sources or []],
                    "fitted_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "command": command})
