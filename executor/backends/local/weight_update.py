"""The datatype-aware weight update, Megatron BF16 -> rollout engine, after every optimizer step.

Megatron's BF16 shards are gathered onto rank 0 under Hugging Face names (trainer.hf_tensors_on_rank0); then
- rollout precision fp8: every linear weight of attention/MLP/experts is quantized to FP8 E4M3 with 128x128
  block scales (fp8.quantize_blockwise, as Miles' quantizer_fp8). An engine with FP8 kernels would receive the
  FP8 tensor plus its `weight_scale_inv`. SGLang on a CPU cannot run FP8 GEMMs, so the engine receives the
  dequantized FP8 values in BF16: its numerics are FP8's, its matmuls are BF16. Embeddings, lm_head, norms and
  the router stay BF16 (as in FP8 checkpoints).
- rollout precision bf16: the BF16 tensors as they are.
Transfer: `ipc` -> `update_weights_from_tensor` (the colocated path), `disk` -> a safetensors folder and
`update_weights_from_disk`; both inside `begin_weight_update()` / `end_weight_update()`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import torch

from executor.backends.local.fp8 import BLOCK, dequantize_blockwise, quantize_blockwise
from executor.backends.local.rollout import RolloutEngine
from executor.backends.local.tiny_model import TinyArch, is_quantizable, write_hf_checkpoint

ENGINE_FORMAT_CPU_FP8 = "fp8-e4m3-128x128 quantized, sent dequantized as bf16 (SGLang on CPU has no FP8 GEMM)"


@dataclass
class WeightUpdateResult:
    quantize_s: float
    transfer_s: float
    tensors: int
    quantized_tensors: int
    payload_bytes: int  # what an FP8 engine would receive (fp8 + fp32 scales, bf16 for the rest)
    sent_bytes: int  # what this engine received
    engine_format: str


def prepare_for_engine(
    tensors: dict[str, torch.Tensor], precision: str, block: int = BLOCK
) -> tuple[list[tuple[str, torch.Tensor]], int, int]:
    """(named tensors to send, FP8-format payload bytes, number of quantized tensors); FP8 in `block` x `block`
    scale blocks."""
    out: list[tuple[str, torch.Tensor]] = []
    payload = 0
    quantized = 0
    for name, w in tensors.items():
        if precision == "fp8" and is_quantizable(name):
            q, scale_inv = quantize_blockwise(w, block)
            payload += q.numel() * q.element_size() + scale_inv.numel() * scale_inv.element_size()
            out.append((name, dequantize_blockwise(q, scale_inv, torch.bfloat16, block)))
            quantized += 1
        else:
            payload += w.numel() * 2
            out.append((name, w.to(torch.bfloat16)))
    return out, payload, quantized


def push_weights(engine: RolloutEngine, tensors: dict[str, torch.Tensor], precision: str, mode: str,
                 arch: TinyArch, scratch_dir: Path) -> WeightUpdateResult:
    t0 = time.perf_counter()
    named, payload, quantized = prepare_for_engine(tensors, precision)
    t1 = time.perf_counter()
    if mode == "disk":
        write_hf_checkpoint(scratch_dir, arch, dict(named))
        engine.update_weights_from_disk(scratch_dir)
    else:
        engine.update_weights_from_tensor(named)
    t2 = time.perf_counter()
    sent = sum(t.numel() * t.element_size() for _, t in named)
    fmt = ENGINE_FORMAT_CPU_FP8 if precision == "fp8" else "bf16"
    return WeightUpdateResult(t1 - t0, t2 - t1, len(named), quantized, payload, sent, fmt)
