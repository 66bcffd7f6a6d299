"""Bytes per element of the dtypes the cost model prices, and block-scaled FP8's scale overhead: the one place
that defines them (training, serving, weight update and memory all read these)."""

from __future__ import annotations

BYTES_PER_ELEMENT: dict[str, float] = {"fp32": 4.0, "bf16": 2.0, "fp8": 1.0, "fp4": 0.5}
LOW_PRECISION = ("fp8", "fp4")

BF16 = 2
FP8 = 1
FP32 = 4
INT64 = 8  # token ids (Megatron theoretical_memory_usage.py: "8 * seq_length * micro_batch_size" input to embedding)
INT32 = 4  # top-k indices of the DSV4 indexer
MASK = 1  # a dropout mask element (Korthikanti et al. 2022, Sec. 4.1: "the dropout mask ... 1 byte per element")

# Block-wise FP8: one FP32 scale per 128 x 128 weight block (DeepSeek-V3/V4 quantization_config weight_block_size
# [128, 128]; https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json) and one per 128 KV elements
# (FlashMLA's FP8 KV layout: 512 FP8 + 4 FP32 scales + 64 BF16 RoPE = 656 B per token,
# https://github.com/deepseek-ai/FlashMLA).
FP8_BLOCK = 128
FP8_BLOCK_WEIGHT_BYTES = 1 + FP32 / (FP8_BLOCK * FP8_BLOCK)


def dtype_bytes(dtype: str) -> float:
    return BYTES_PER_ELEMENT[dtype]
