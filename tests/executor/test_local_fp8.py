"""FP8 E4M3 128x128 block quantization: shapes, scales, round-trip error bounds."""

from __future__ import annotations

import pytest
import torch

from executor.backends.local.fp8 import BLOCK, FP8_MAX, dequantize_blockwise, fp8_round_trip, quantize_blockwise


@pytest.mark.parametrize("shape", [(128, 128), (64, 128), (200, 130), (256, 384), (3, 5)])
def test_shapes_and_scale_grid(shape: tuple[int, int]) -> None:
    w = torch.randn(shape) * 0.02
    q, s = quantize_blockwise(w)
    assert q.dtype == torch.float8_e4m3fn and q.shape == w.shape
    assert s.dtype == torch.float32 and s.shape == (-(-shape[0] // BLOCK), -(-shape[1] // BLOCK))


def test_round_trip_error_bound() -> None:
    torch.manual_seed(0)
    w = torch.randn(256, 384) * 0.05
    w[:128, :128] *= 100  # one block with a much larger range
    q, s = quantize_blockwise(w)
    back = dequantize_blockwise(q, s, torch.float32)
    scale = s.repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)[: w.shape[0], : w.shape[1]]
    # E4M3: 3 mantissa bits -> relative half-step 2^-4 for normal values; subnormal step scale * 2^-9
    bound = torch.maximum(w.abs() * 2**-4, scale * 2**-10) * 1.0001
    assert bool(((back - w).abs() <= bound).all())
    # the block amax maps to 448 exactly
    assert float(q[:128, :128].float().abs().max()) == FP8_MAX


def test_zero_block_and_bf16_round_trip() -> None:
    w = torch.zeros(130, 130, dtype=torch.bfloat16)
    w[0, 0] = 1.0
    out = fp8_round_trip(w)
    assert out.dtype == torch.bfloat16 and float(out[0, 0]) == 1.0 and float(out[1:, 1:].abs().sum()) == 0.0


def test_rejects_non_matrices() -> None:
    with pytest.raises(ValueError):
        quantize_blockwise(torch.ones(4))
