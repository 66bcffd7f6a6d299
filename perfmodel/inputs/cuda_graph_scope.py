"""The CUDA graph scope a training stack states (`Stack.cuda_graph_scope`): megatron-core's --cuda-graph-scope
vocabulary and its validation, kept apart from the knob declarations that use it."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator

CUDA_GRAPH_SCOPE_PARTS = ("attn", "mlp", "moe", "moe_router", "moe_preprocess")
"""TransformerEngine's per-layer capture parts as megatron-core's --cuda-graph-scope names them
(cost/train/cuda_graphs.py prices what each leaves to the host); `none` and `full_iteration` name no part or every
op."""


def scope_parts(scope: str) -> frozenset[str]:
    """The parts a CUDA graph scope names ('attn+moe_router+moe_preprocess'); ValueError naming the valid ones."""
    if scope in ("none", "full_iteration"):
        return frozenset()
    parts = frozenset(p.strip() for p in scope.split("+"))
    unknown = sorted(parts - set(CUDA_GRAPH_SCOPE_PARTS))
    if unknown or not parts:
        raise ValueError(f"unknown CUDA graph scope part {', '.join(unknown) or repr(scope)}: give none, "
                         f"full_iteration, or parts joined with '+' of {', '.join(CUDA_GRAPH_SCOPE_PARTS)}")
    return parts


def _cuda_graph_scope(value: str) -> str:
    scope_parts(value)  # raises naming the valid parts
    return value


CudaGraphScope = Annotated[str, AfterValidator(_cuda_graph_scope)]
