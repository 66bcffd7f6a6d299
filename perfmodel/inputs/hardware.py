"""Hardware profile: one GPU kind, its node, fabric, NICs, host, and calibratable efficiencies.

A profile file (`hwprofiles/<id>.yaml`) writes every number as `{value: ..., source: "..."}` so that each
constant names where it comes from; `load_hardware` checks that and flattens it into `HardwareProfile`, a plain
frozen dataclass in SI units (bytes, bytes/s, seconds, FLOP/s) that the cost functions read.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel

from perfmodel.errors import InputError
from perfmodel.inputs.hardware_file import EfficiencyFile, HardwareFile, HardwareOptions, Num, Text
from perfmodel.inputs.loading import did_you_mean, parse, read_mapping

# Flash attention runs below a GEMM of the same FLOPs: its math rate relative to the BF16 GEMM curve's max, where a
# profile states none (`efficiency.attention_rel_efficiency`). Forward: FlashAttention-3 reaches "up to 740 TFLOPs/s
# (75% utilization)" in BF16 on H100 (Shah et al. 2024, arXiv 2407.08608, abstract) where the best H100 BF16
# GEMM reaches 80.3% (docs/reference/hardware.md 2a, MAMF 794.5/989): 0.75/0.80 = 0.93, rounded down to 0.9. Backward:
# assumption 0.7 of the GEMM rate (flash backward recomputes the scores and runs five matmuls with more
# synchronisation; FlashAttention-2, Dao 2023, arXiv 2307.08691 section 4, reports backward below forward
# throughput). Both are calibration targets, not measurements of this hardware.
ATTENTION_FWD_REL_EFFICIENCY = 0.9
ATTENTION_BWD_REL_EFFICIENCY = 0.7

DTYPES = ("bf16", "fp8", "fp4")


@dataclass(frozen=True, slots=True)
class GemmCurve:
    max_efficiency: float
    half_flops: float

    def efficiency(self, flops: float) -> float:
        """Saturating efficiency: small GEMMs pay a fixed cost, large ones reach `max_efficiency`."""
        return self.max_efficiency * flops / (flops + self.half_flops)


@dataclass(frozen=True, slots=True)
class HardwareProfile:
    id: str
    name: str
    vendor: str
    peak_flops: dict[str, float]  # dtype -> dense FLOP/s
    hbm_bytes: float
    runtime_reserved_bytes: float  # held by the runtime and communicators when an engine starts (0: not stated)
    hbm_bandwidth_bytes_per_s: float
    gpus_per_node: int
    compute_units: int  # SMs / CUs; 0: unknown (no share of them priced)
    scale_up_topology: str
    scale_up_domain_gpus: int
    scale_up_links_per_gpu: int
    scale_up_link_bytes_per_s: float
    scale_up_gpu_bytes_per_s: float
    scale_up_latency_s: float
    nic_bytes_per_s: float
    scale_out_latency_s: float
    host_memory_bytes: float
    host_link_bytes_per_s: float
    host_op_time_factor: float  # the host CPU's per-op issue time over the x86 servers the per-op times stand for
    gemm: dict[str, GemmCurve]
    hbm_efficiency: float
    collective_bus_efficiency_scale_up: float
    collective_bus_efficiency_scale_out: float
    collective_peer_ramp: float
    all_to_all_efficiency_scale_up: float
    all_to_all_efficiency_scale_out: float
    collective_latency_scale_up_s: float
    collective_latency_scale_out_s: float
    all_to_all_latency_scale_up_s: float
    all_to_all_latency_scale_out_s: float
    optimizer_hbm_efficiency: float
    host_link_efficiency: float
    collective_step_latency_scale_up_s: float
    collective_step_latency_scale_out_s: float
    graph_all_reduce_latency_s: float
    small_protocol_bw_fraction: float
    small_protocol_bulk_extra_latency_s: float
    graph_small_protocol_bw_fraction: float
    graph_small_protocol_bulk_extra_latency_s: float
    grouped_gemm_rel_efficiency: float
    grouped_gemm_engine_rel_efficiency: float
    grouped_gemm_fixed_s: float
    grouped_gemm_per_expert_s: float
    grouped_gemm_tile_rows: int  # the engine's fused MoE kernel
    grouped_gemm_train_tile_rows: int  # the training grouped GEMM
    grouped_gemm_train_per_expert_s: float  # per hit expert of a training grouped GEMM launched one GEMM per expert
    grouped_gemm_overlap_norm: float  # p of the p-norm of compute and memory time; 0: their max
    ep_dispatch_floor_s: float
    ep_combine_floor_s: float
    ep_dispatch_unit_bytes_per_s: float
    ep_combine_unit_bytes_per_s: float
    ep_units: int
    attention_decode_floor_s: float
    attention_prefill_floor_s: float
    attention_decode_kv_head_s: float
    attention_decode_query_head_s: float
    attention_prefill_query_head_s: float
    attention_softmax_exp_per_s: float  # 0: the softmax's exponentials hide under the attention MMAs
    attention_fwd_rel_efficiency: float  # the flash-attention forward's math rate vs the BF16 GEMM max
    attention_bwd_rel_efficiency: float  # ... and its backward's
    attention_sparse_fwd_rel_efficiency: float  # DeepSeek-V4's sparse-MLA core's forward (absent: the dense value)
    attention_sparse_bwd_rel_efficiency: float  # ... and its backward's
    engine_quant_fixed_s: float
    engine_gemm_fp8_rel_efficiency: float
    engine_gemm_fp8_block_rel_efficiency: float
    engine_gemm_fp4_rel_efficiency: float
    train_gemm_mxfp8_rel_efficiency: float  # an MXFP8 training GEMM's rate vs per-tensor FP8's
    sources: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    def peak(self, dtype: str) -> float:
        """Dense peak FLOP/s for a GEMM dtype; a dtype the GPU lacks runs at the next wider one."""
        for d in (dtype, "fp8", "bf16") if dtype == "fp4" else (dtype, "bf16"):
            if d in self.peak_flops:
                return self.peak_flops[d]
        return self.peak_flops["bf16"]

    def gemm_curve(self, dtype: str) -> GemmCurve:
        if dtype in self.gemm:
            return self.gemm[dtype]
        return self.gemm["fp8"] if dtype == "fp4" and "fp8" in self.gemm else self.gemm["bf16"]

    # Names a calibration may overwrite. Values stay in the same units as the attributes.
    CALIBRATABLE: ClassVar[tuple[str, ...]] = (
        "hbm_efficiency",
        "collective_bus_efficiency_scale_up",
        "collective_bus_efficiency_scale_out",
        "collective_peer_ramp",
        "all_to_all_efficiency_scale_up",
        "all_to_all_efficiency_scale_out",
        "collective_latency_scale_up_s",
        "collective_latency_scale_out_s",
        "all_to_all_latency_scale_up_s",
        "all_to_all_latency_scale_out_s",
        "optimizer_hbm_efficiency",
        "host_link_efficiency",
        "collective_step_latency_scale_up_s",
        "collective_step_latency_scale_out_s",
        "graph_all_reduce_latency_s",
        "small_protocol_bw_fraction",
        "small_protocol_bulk_extra_latency_s",
        "graph_small_protocol_bw_fraction",
        "graph_small_protocol_bulk_extra_latency_s",
        "grouped_gemm_rel_efficiency",
        "grouped_gemm_engine_rel_efficiency",
        "grouped_gemm_fixed_s",
        "grouped_gemm_per_expert_s",
        "ep_dispatch_floor_s",
        "ep_combine_floor_s",
        "ep_dispatch_unit_bytes_per_s",
        "ep_combine_unit_bytes_per_s",
        "attention_decode_floor_s",
        "attention_prefill_floor_s",
        "attention_decode_kv_head_s",
        "attention_decode_query_head_s",
        "attention_prefill_query_head_s",
        "attention_bwd_rel_efficiency",
        "engine_quant_fixed_s",
        "engine_gemm_fp8_rel_efficiency",
        "engine_gemm_fp8_block_rel_efficiency",
        "engine_gemm_fp4_rel_efficiency",
        "train_gemm_mxfp8_rel_efficiency",
    )

    def calibration_params(self) -> dict[str, float]:
        params = {name: float(getattr(self, name)) for name in self.CALIBRATABLE}
        for dtype, curve in self.gemm.items():
            params[f"gemm_max_efficiency_{dtype}"] = curve.max_efficiency
            params[f"gemm_half_flops_{dtype}"] = curve.half_flops
        return params

    def with_options(self, options: HardwareOptions | None) -> HardwareProfile:
        """A copy with a run's measured facts (peaks, GEMM curves' half-efficiency sizes) in place of the profile's."""
        if options is None:
            return self
        given = options.model_dump(exclude_none=True, exclude={"source"})
        peaks, sources = dict(self.peak_flops), dict(self.sources)
        for dtype in DTYPES:
            value = given.pop(f"peak_tflops_{dtype}", None)
            if value is not None:
                peaks[dtype], sources[f"peak_tflops.{dtype}"] = value * 1e12, options.source
        out = dataclasses.replace(self, peak_flops=peaks, sources=sources)
        return out.with_params(given, source=options.source) if given else out

    def with_params(self, params: dict[str, float], source: str = "calibration") -> HardwareProfile:
        """A copy with named efficiency parameters overwritten (a calibration overlay)."""
        changes: dict[str, Any] = {}
        gemm = dict(self.gemm)
        sources = dict(self.sources)
        for name, value in params.items():
            if name.startswith("gemm_max_efficiency_") or name.startswith("gemm_half_flops_"):
                dtype = name.rsplit("_", 1)[1]
                if dtype not in gemm:
                    raise InputError(source, name, f"{self.id} has no {dtype} GEMM curve")
                cur = gemm[dtype]
                if name.startswith("gemm_max"):
                    gemm[dtype] = GemmCurve(float(value), cur.half_flops)
                else:
                    gemm[dtype] = GemmCurve(cur.max_efficiency, float(value))
            elif name in self.CALIBRATABLE:
                changes[name] = float(value)
            else:
                valid = ", ".join(sorted(self.calibration_params()))
                raise InputError(source, name, f"not a calibratable parameter; valid: {valid}")
            sources[name] = source
        return dataclasses.replace(self, gemm=gemm, sources=sources, **changes)


def hwprofile_dirs() -> list[Path]:
    """The repo's `hwprofiles/` (editable install) or the copy packaged inside the wheel."""
    here = Path(__file__).resolve().parent.parent
    return [p for p in (here.parent / "hwprofiles", here / "_data" / "hwprofiles") if p.is_dir()]


def known_hardware_ids() -> list[str]:
    ids: set[str] = set()
    for d in hwprofile_dirs():
        ids.update(p.stem for p in d.glob("*.yaml"))
    return sorted(ids)


def _collect_sources(node: Any, prefix: str, out: dict[str, str]) -> None:
    if isinstance(node, (Num, Text)):
        out[prefix] = node.source
    elif isinstance(node, BaseModel):
        for name in type(node).model_fields:
            _collect_sources(getattr(node, name), f"{prefix}.{name}" if prefix else name, out)
    elif isinstance(node, dict):
        for k, v in node.items():
            _collect_sources(v, f"{prefix}.{k}", out)


def _attention_fields(e: EfficiencyFile) -> dict[str, float]:
    """The attention kernels' terms of a profile's efficiency section (optional ones at their defaults)."""
    rel = e.attention_rel_efficiency
    fwd = rel.forward.value if rel else ATTENTION_FWD_REL_EFFICIENCY
    bwd = rel.backward.value if rel else ATTENTION_BWD_REL_EFFICIENCY
    sparse_fwd, sparse_bwd = (rel.sparse_mla_forward, rel.sparse_mla_backward) if rel else (None, None)
    return {
        "attention_decode_floor_s": e.attention_floor_s.decode.value,
        "attention_prefill_floor_s": e.attention_floor_s.prefill.value,
        "attention_decode_kv_head_s": e.attention_floor_s.decode_kv_head.value,
        "attention_decode_query_head_s": e.attention_floor_s.decode_query_head.value,
        "attention_prefill_query_head_s": e.attention_floor_s.prefill_query_head.value,
        "attention_softmax_exp_per_s": e.attention_softmax_exp_per_s.value if e.attention_softmax_exp_per_s else 0.0,
        "attention_fwd_rel_efficiency": fwd,
        "attention_bwd_rel_efficiency": bwd,
        "attention_sparse_fwd_rel_efficiency": sparse_fwd.value if sparse_fwd else fwd,
        "attention_sparse_bwd_rel_efficiency": sparse_bwd.value if sparse_bwd else bwd,
    }


def hardware_from_file_model(f: HardwareFile) -> HardwareProfile:
    e = f.efficiency
    peaks = {"bf16": f.peak_tflops.bf16.value * 1e12}
    for dtype in ("fp8", "fp4"):
        v = getattr(f.peak_tflops, dtype)
        if v is not None:
            peaks[dtype] = v.value * 1e12
    sources: dict[str, str] = {}
    _collect_sources(f, "", sources)
    return HardwareProfile(
        id=f.id,
        name=f.name,
        vendor=f.vendor,
        peak_flops=peaks,
        hbm_bytes=f.hbm_bytes.value,
        runtime_reserved_bytes=f.runtime_reserved_bytes.value if f.runtime_reserved_bytes else 0.0,
        hbm_bandwidth_bytes_per_s=f.hbm_bandwidth_bytes_per_s.value,
        gpus_per_node=int(f.gpus_per_node.value),
        compute_units=int(f.compute_units.value) if f.compute_units else 0,
        scale_up_topology=f.scale_up.topology.value,
        scale_up_domain_gpus=int(f.scale_up.domain_gpus.value),
        scale_up_links_per_gpu=int(f.scale_up.links_per_gpu.value),
        scale_up_link_bytes_per_s=f.scale_up.link_bandwidth_bytes_per_s.value,
        scale_up_gpu_bytes_per_s=f.scale_up.gpu_bandwidth_bytes_per_s.value,
        scale_up_latency_s=f.scale_up.latency_s.value,
        nic_bytes_per_s=f.scale_out.nic_bandwidth_bytes_per_s.value,
        scale_out_latency_s=f.scale_out.latency_s.value,
        host_memory_bytes=f.host.memory_bytes.value,
        host_link_bytes_per_s=f.host.link_bandwidth_bytes_per_s.value,
        host_op_time_factor=f.host.op_time_factor.value if f.host.op_time_factor else 1.0,
        gemm={k: GemmCurve(v.max.value, v.half_flops.value) for k, v in e.gemm.items()},
        hbm_efficiency=e.hbm.value,
        collective_bus_efficiency_scale_up=e.collective_bus.scale_up.value,
        collective_bus_efficiency_scale_out=e.collective_bus.scale_out.value,
        collective_peer_ramp=e.collective_peer_ramp.value if e.collective_peer_ramp else 0.0,
        all_to_all_efficiency_scale_up=e.all_to_all_bus.scale_up.value,
        all_to_all_efficiency_scale_out=e.all_to_all_bus.scale_out.value,
        collective_latency_scale_up_s=e.collective_latency_s.scale_up.value,
        collective_latency_scale_out_s=e.collective_latency_s.scale_out.value,
        all_to_all_latency_scale_up_s=(e.all_to_all_latency_s or e.collective_latency_s).scale_up.value,
        all_to_all_latency_scale_out_s=(e.all_to_all_latency_s or e.collective_latency_s).scale_out.value,
        optimizer_hbm_efficiency=e.optimizer_hbm.value,
        host_link_efficiency=e.host_link.value,
        collective_step_latency_scale_up_s=e.collective_step_latency_s.scale_up.value,
        collective_step_latency_scale_out_s=e.collective_step_latency_s.scale_out.value,
        graph_all_reduce_latency_s=e.graph_all_reduce_latency_s.value,
        small_protocol_bw_fraction=e.small_protocol.small_bw_fraction.value,
        small_protocol_bulk_extra_latency_s=e.small_protocol.bulk_extra_latency_s.value,
        graph_small_protocol_bw_fraction=e.graph_small_protocol.small_bw_fraction.value,
        graph_small_protocol_bulk_extra_latency_s=e.graph_small_protocol.bulk_extra_latency_s.value,
        grouped_gemm_rel_efficiency=e.grouped_gemm.rel_efficiency.value,
        grouped_gemm_engine_rel_efficiency=(e.grouped_gemm.engine_rel_efficiency
                                            or e.grouped_gemm.rel_efficiency).value,
        grouped_gemm_fixed_s=e.grouped_gemm.fixed_s.value,
        grouped_gemm_per_expert_s=e.grouped_gemm.per_expert_s.value,
        grouped_gemm_tile_rows=int(e.grouped_gemm.tile_rows.value),
        grouped_gemm_train_tile_rows=int((e.grouped_gemm.train_tile_rows or e.grouped_gemm.tile_rows).value),
        grouped_gemm_train_per_expert_s=(e.grouped_gemm.train_per_expert_s.value
                                         if e.grouped_gemm.train_per_expert_s else 0.0),
        grouped_gemm_overlap_norm=e.grouped_gemm.overlap_norm.value if e.grouped_gemm.overlap_norm else 0.0,
        ep_dispatch_floor_s=e.ep_kernel.dispatch_floor_s.value,
        ep_combine_floor_s=e.ep_kernel.combine_floor_s.value,
        ep_dispatch_unit_bytes_per_s=e.ep_kernel.dispatch_unit_bytes_per_s.value,
        ep_combine_unit_bytes_per_s=e.ep_kernel.combine_unit_bytes_per_s.value,
        ep_units=int(e.ep_kernel.units.value),
        **_attention_fields(e),
        engine_quant_fixed_s=e.engine_gemm.quant_fixed_s.value,
        engine_gemm_fp8_rel_efficiency=e.engine_gemm.rel_efficiency.fp8.value,
        engine_gemm_fp8_block_rel_efficiency=e.engine_gemm.rel_efficiency.fp8_block.value,
        engine_gemm_fp4_rel_efficiency=e.engine_gemm.rel_efficiency.fp4.value,
        train_gemm_mxfp8_rel_efficiency=e.train_gemm.mxfp8.value if e.train_gemm else 1.0,
        sources=sources,
    )


def load_hardware_file(path: str | Path) -> HardwareProfile:
    f = parse(HardwareFile, read_mapping(path), str(path))
    return hardware_from_file_model(f)


@lru_cache(maxsize=64)
def _load_by_id(hw_id: str) -> HardwareProfile:
    for d in hwprofile_dirs():
        p = d / f"{hw_id}.yaml"
        if p.exists():
            hw = load_hardware_file(p)
            if hw.id != hw_id:
                raise InputError(str(p), "id", f"must equal the file name stem {hw_id!r}")
            return hw
    raise KeyError(hw_id)


def load_hardware(ref: str, source: str = "", field: str = "hardware") -> HardwareProfile:
    """A hardware profile by id (`mi355x`) or by path to a YAML file."""
    if ref.endswith((".yaml", ".yml")) or "/" in ref:
        return load_hardware_file(ref)
    try:
        return _load_by_id(ref)
    except KeyError:
        ids = known_hardware_ids()
        raise InputError(source, field, f"unknown hardware id {ref!r}{did_you_mean(ref, ids)}; valid: "
                         f"{', '.join(ids)}") from None
