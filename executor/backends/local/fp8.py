"""FP8 E4M3 weights with 128x128 block scales, as in DeepSeek / Miles FP8 checkpoints.

`quantize_blockwise` mirrors Miles' `per_block_cast_to_fp8`: pad to whole blocks, per block
scale = amax / 448 (amax floored at 1e-4), store `x / scale` as float8_e4m3fn and the scale as the
`weight_scale_inv` tensor ([ceil(M/128), ceil(N/128)], float32). `dequantize_blockwise` multiplies back.
The round-trip error of one element is at most half an E4M3 step of its block: |x - x'| <= scale * 2^-4 * 2^e
where 2^e is the power of two below |x / scale| (relative error <= 2^-4 for normal values).
"""

from __future__ import annotations

import torch

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0
BLOCK = 128


def _padded(x: torch.Tensor, block: int) -> torch.Tensor:
    rows, cols = x.shape
    pad_rows, pad_cols = (-rows) % block, (-cols) % block
    if pad_rows or pad_cols:
        x = torch.nn.functional.pad(x, (0, pad_cols, 0, pad_rows))
    return x


def quantize_blockwise(weight: torch.Tensor, block: int = BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """[M, N] weight -> (float8_e4m3fn [M, N], float32 scale_inv [ceil(M/block), ceil(N/block)])."""
    if weight.dim() != 2:
        raise ValueError(f"block quantization needs a 2-D weight, got shape {tuple(weight.shape)}")
    rows, cols = weight.shape
    x = _padded(weight.float(), block)
    br, bc = x.shape[0] // block, x.shape[1] // block
    blocks = x.view(br, block, bc, block)
    amax = blocks.abs().amax(dim=(1, 3), keepdim=True).clamp(min=1e-4)
    scaled = (blocks * (FP8_MAX / amax)).to(FP8_DTYPE)
    q = scaled.view(br * block, bc * block)[:rows, :cols].contiguous()
    return q, (amax / FP8_MAX).view(br, bc).contiguous()


def dequantize_blockwise(q: torch.Tensor, scale_inv: torch.Tensor, dtype: torch.dtype = torch.bfloat16,
                         block: int = BLOCK) -> torch.Tensor:
    rows, cols = q.shape
    x = _padded(q.float(), block)
    br, bc = x.shape[0] // block, x.shape[1] // block
    x = x.view(br, block, bc, block) * scale_inv.view(br, 1, bc, 1).float()
    return x.view(br * block, bc * block)[:rows, :cols].to(dtype).contiguous()


def fp8_round_trip(weight: torch.Tensor) -> torch.Tensor:
    """What an FP8 engine computes with: quantize then dequantize, in the weight's dtype."""
    q, s = quantize_blockwise(weight)
    return dequantize_blockwise(q, s, weight.dtype)
