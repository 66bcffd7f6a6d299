"""What a CUDA/HIP graph scope leaves the host to issue: the share of a layer's ops outside the captured parts.

Megatron-core captures graphs per layer with TransformerEngine (`--cuda-graph-impl transformer_engine` and its
scope: attn, mlp, moe, moe_router, moe_preprocess; `TransformerLayer._get_submodules_under_cudagraphs`: `attn` is the
input norm and self-attention, `moe_router` the pre-MLP norm and the router, `moe` or `mlp` the whole MLP block) or
the whole forward-backward iteration (`full_iteration`; MoE runs then need static shapes: a per-rank capacity, paged
stash). A replayed graph launches its kernels at once: its ops drop out of the host's floor under the layer
(cost/train/stage.py::_on_stack). Forward ops of each part as megatron-core 0.16.1 issues them
(benchmarks/measure_host_ops_by_module.py -> benchmarks/results/host-ops-by-module.json, a grouped-GEMM MoE layer);
the backward is taken to split in the same shares (an assumption: TE captures each part's backward with its
forward).
"""

from __future__ import annotations

from perfmodel.inputs.cuda_graph_scope import scope_parts

FWD_OPS: dict[str, dict[str, float]] = {
    "dense": {"attn": 79.0, "mlp": 22.0},
    "moe": {"attn": 79.0, "moe_router": 22.0, "moe_preprocess": 14.0, "moe_rest": 24.0},
}
"""benchmarks/results/host-ops-by-module.json `fwd_ops_by_scope_part` (101 and 139 ops per layer, as host-ops.json)."""


def host_share(scope: str, moe_layer: bool) -> float:
    """The share of a layer's host ops left to issue one by one under `scope`: 1 eager, 0 a whole-iteration graph."""
    if scope == "none":
        return 1.0
    if scope == "full_iteration":
        return 0.0
    parts = scope_parts(scope)
    ops = FWD_OPS["moe" if moe_layer else "dense"]
    captured = ops["attn"] if "attn" in parts else 0.0
    if moe_layer:
        if "moe" in parts:
            captured += ops["moe_router"] + ops["moe_preprocess"] + ops["moe_rest"]
        else:
            captured += sum(ops[p] for p in ("moe_router", "moe_preprocess") if p in parts)
    elif "mlp" in parts:
        captured += ops["mlp"]
    return 1.0 - captured / sum(ops.values())
