"""Elementwise work as an eager framework runs it (the stack's `elementwise_fusion: eager`).

The work lists (`layers.py`, `attention.py`) describe the fused kernels Megatron/TransformerEngine run: one RMSNorm
kernel reads and writes the activation once, one SwiGLU kernel reads gate and up and writes the product, one RoPE
kernel rotates q and k in place. Run eagerly (torchtitan without torch.compile, megatron-core's local spec), each is
a chain of ATen ops, every op a kernel that reads its inputs from HBM and writes its output back. The multipliers
below count those bytes per element of the fused kernel's traffic, forward and backward, and the launches.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from perfmodel.cost.train.work import Kernel


@dataclass(frozen=True, slots=True)
class Decomposition:
    fwd_bytes: float  # eager HBM bytes / the fused kernel's, forward
    bwd_bytes: float  # ... backward (autograd through each op of the chain)
    launches: int  # kernels per fused kernel


# RMSNorm, eager: x.float() (read 2 B, write 4), pow(2) (4 + 4), mean (4), add eps and rsqrt (per row), x * rstd
# (4 + 4), type_as (4 + 2), * weight (2 + 2) = 36 B per element against the fused kernel's 2 + 2: x9. Backward, the
# autograd of that chain: * weight (dy, x_hat read, dx_hat and dweight partials written: 10 B), type_as (6), * rstd
# with its row reduction (16), pow and mean (16), float (6), the two branches' sum (12) = 66 B against the fused
# backward's 8: x8. Seven kernels forward. torchtitan's RMSNorm before nn.RMSNorm, torchtitan/models/norms.py
# (https://github.com/pytorch/torchtitan), and torch's composite rms_norm (aten/src/ATen/native/layer_norm.cpp,
# https://github.com/pytorch/pytorch) run the same chain.
NORM = Decomposition(9.0, 8.0, 7)
# RoPE, eager (torchtitan apply_rotary_emb, torchtitan/models/llama3/model/model.py): x.float() (2 + 4),
# view_as_complex x freqs_cis (4 + 4), view_as_real (a view), type_as (4 + 2) = 20 B per element against the fused
# kernel's 2 + 2: x5, forward and backward (the same chain reversed); three kernels. megatron-core's unfused
# _apply_rotary_pos_emb_bshd (t * cos + rotate_half(t) * sin: 18 B) is within 10% of it.
ROPE = Decomposition(5.0, 5.0, 3)
# SwiGLU, eager (F.silu(gate) * up): silu reads and writes the gate (2 units of the intermediate width), the
# product reads two and writes one (3): 5 against the fused kernel's 3 (read gate and up, write out): x5/3.
# Backward: the product's (read dy, silu(gate), up; write both gradients: 5) and silu's (read its gradient and the
# gate, write dgate: 3) = 8 against the fused backward's 6: x4/3. Two kernels.
GLU = Decomposition(5.0 / 3.0, 4.0 / 3.0, 2)


def decomposition(name: str) -> Decomposition | None:
    """The eager chain of a fused kernel of the work lists, by its name; None: eager runs it as one kernel too
    (a residual add, a cast, the cross-entropy already priced unfused, attention's own kernel)."""
    if name.endswith(("_norm", "norms")):
        return NORM
    if name == "rope":
        return ROPE
    if name.endswith("_glu"):
        return GLU
    return None


def as_eager(k: Kernel) -> Kernel:
    d = decomposition(k.name) if k.kind == "mem" else None
    if d is None:
        return k
    return dataclasses.replace(k, hbm_bytes=k.hbm_bytes * d.fwd_bytes, bwd_hbm_bytes=k.bwd_hbm_bytes * d.bwd_bytes,
                               kernels=k.kernels * d.launches)
