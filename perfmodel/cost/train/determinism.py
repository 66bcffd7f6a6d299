"""What megatron-core's --deterministic-mode costs a training layer.

Bit-exact training (megatron/training/determinism.py: torch.use_deterministic_algorithms(True), NCCL_ALGO=Ring,
NVTE_ALLOW_NONDETERMINISTIC_ALGO=0) swaps atomics for ordered kernels. Megatron-LM measured what that costs, by
model kind, in docs/developer/determinism/op-catalog.md, "Performance Notes" (NVIDIA/Megatron-LM, commit d98e8a6,
2026-08-22): "roughly 15% of step time ... approximately four percent on a large dense model to approximately 17%
on a hybrid MoE model", its hotspots the deterministic MoE scatter and unpermute, the sorted router top-k, the
attention backward and the grouped-GEMM weight gradient. Taken here as a multiplier on each layer's compute by its
kind (assumption: the whole-step figures fall on the layers' kernels; communication keeps its time).
"""

from __future__ import annotations

DENSE_LAYER_SCALE = 1.04  # "approximately four percent on a large dense model"
MOE_LAYER_SCALE = 1.17  # "approximately 17% on a hybrid MoE model"


def deterministic_scale(moe_layer: bool) -> float:
    """A layer's compute multiplier under --deterministic-mode."""
    return MOE_LAYER_SCALE if moe_layer else DENSE_LAYER_SCALE
