"""The single-device kernels: GEMMs (bf16; fp8 through torch._scaled_mm where the GPU has it), causal attention
prefill and decode (scaled_dot_product_attention), and one MoE layer's expert GEMMs: on a GPU whose torch has a
grouped GEMM (torch._grouped_mm, Hopper and later) that one kernel per projection, as megatron's grouped experts
run; elsewhere the loop over experts that megatron's SequentialMLP runs. Each case allocates its tensors only when
measured, so a big grid never holds them all."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from executor.bench_kernels.config import Grid
from perfmodel.kernels.table import OPS

Call = Callable[[], object]


@dataclass(frozen=True, slots=True)
class Case:
    op: str
    shape: dict[str, int]
    dtype: str
    setup: Callable[[], Call]  # allocates the inputs, returns the call to time
    backend: str = "torch"  # the table's backend column: what ran it
    input_bytes: int = 0  # what one call reads: its inputs and weights


ROTATE_BYTES = 512 * 1024 * 1024  # several times a GPU's last-level cache (H200 60 MB L2, MI300X 256 MB Infinity Cache)
MAX_COPIES = 32


def rotating(case: Case, device: str) -> Call:
    """The call to time. On a GPU, successive calls read different copies of the inputs (up to ROTATE_BYTES in all):
    a kernel whose weights fit in the cache would otherwise be timed reading them from it, when a step's layers each
    read their own from HBM."""
    copies = 1 if device != "cuda" else max(1, min(MAX_COPIES, ROTATE_BYTES // max(case.input_bytes, 1)))
    if copies == 1:
        return case.setup()
    calls = [case.setup() for _ in range(copies)]
    turn = itertools.cycle(calls)
    return lambda: next(turn)()


def shape_of(op: str, values: tuple[int, ...]) -> dict[str, int]:
    """Grid tuples are in docs/kernels.md's key order."""
    return dict(zip(OPS[op][0], values, strict=True))


def _randn(*size: int, device: str, dtype: Any = None) -> Any:
    import torch

    return torch.randn(*size, device=device, dtype=dtype or torch.bfloat16)


def fp8_format(device: str) -> tuple[Any, str]:
    """The FP8 element type this device's GEMM takes (MI300's is the fnuz variant), or None and why not."""
    import torch

    if device != "cuda":
        return None, "a CPU has no FP8 GEMM (torch._scaled_mm on CPU is an emulation)"
    if not hasattr(torch, "_scaled_mm"):
        return None, f"torch {torch.__version__} has no torch._scaled_mm"
    if torch.version.cuda and torch.cuda.get_device_capability() < (8, 9):
        return None, f"{torch.cuda.get_device_name()} predates FP8 (compute capability < 8.9)"
    errors: list[str] = []
    for name in ("float8_e4m3fn", "float8_e4m3fnuz"):
        if not hasattr(torch, name):
            continue
        try:
            _fp8_setup(16, 16, 16, device, getattr(torch, name))()
            return getattr(torch, name), ""
        except (RuntimeError, TypeError) as err:
            errors.append(f"{name}: {str(err).splitlines()[0][:100] if str(err) else type(err).__name__}")
    return None, f"torch._scaled_mm failed ({'; '.join(errors) or 'no FP8 type in this torch'})"


def _fp8_setup(m: int, n: int, k: int, device: str, fp8: Any) -> Call:
    import torch

    a = _randn(m, k, device=device, dtype=torch.float32).to(fp8)
    b = _randn(n, k, device=device, dtype=torch.float32).to(fp8).t()  # a [n, k] weight: column-major, as BLASLt wants
    one = torch.ones((), device=device, dtype=torch.float32)  # per-tensor scales
    return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)


def _bf16_setup(m: int, n: int, k: int, device: str) -> Call:
    """As nn.Linear calls it: the weight is [n, k] (on a CPU the [k, n] layout runs another, faster, path)."""
    import torch.nn.functional as F

    a, w = _randn(m, k, device=device), _randn(n, k, device=device)
    return lambda: F.linear(a, w)


def gemm_cases(grid: Grid, device: str, fp8: Any = None) -> Iterator[Case]:
    """Every (m, n, k) of the grid in bf16, then, given the FP8 type, in fp8 where m, n, k are multiples of 16
    (torch._scaled_mm's rule; the caller says which m were left out)."""
    shapes = [(m, n, k) for (n, k) in grid.gemm_nk for m in grid.gemm_m]
    for m, n, k in shapes:
        yield Case("gemm", shape_of("gemm", (m, n, k)), "bf16", lambda m=m, n=n, k=k: _bf16_setup(m, n, k, device),
                   input_bytes=2 * (m + n) * k)
    if fp8 is not None:
        for m, n, k in shapes:
            if m % 16 == 0 and n % 16 == 0 and k % 16 == 0:
                yield Case("gemm", shape_of("gemm", (m, n, k)), "fp8",
                           lambda m=m, n=n, k=k: _fp8_setup(m, n, k, device, fp8), input_bytes=(m + n) * k)


def sdpa_has_gqa() -> bool:
    """enable_gqa (torch >= 2.5) runs grouped-query attention without copying K/V per query head."""
    import torch
    import torch.nn.functional as F

    q, kv = torch.zeros(1, 2, 1, 8), torch.zeros(1, 1, 1, 8)
    try:
        F.scaled_dot_product_attention(q, kv, kv, enable_gqa=True)
    except (TypeError, RuntimeError):
        return False
    return True


def _grouped_kv(k: Any, v: Any, heads: int, gqa: bool) -> tuple[Any, Any, dict[str, bool]]:
    """K and V as scaled_dot_product_attention takes them: grouped (enable_gqa, torch >= 2.5) or, on older torch,
    repeated per query head (once, here, so a timed call does not pay the copy)."""
    if gqa:
        return k, v, {"enable_gqa": True}
    k, v = (t.repeat_interleave(heads // t.shape[1], dim=1) for t in (k, v))
    return k, v, {}


def _attention_setup(batch: int, q_len: int, kv_len: int, heads: int, kv_heads: int, head_dim: int, device: str,
                     gqa: bool) -> Call:
    import torch.nn.functional as F

    q = _randn(batch, heads, q_len, head_dim, device=device)
    k, v, grouped = _grouped_kv(*(_randn(batch, kv_heads, kv_len, head_dim, device=device) for _ in range(2)),
                                heads, gqa)
    causal = q_len == kv_len  # prefill; decode's one query sees every cached token (torch's causal mask is top-left)
    return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, **grouped)


def _backward_setup(batch: int, seq: int, heads: int, kv_heads: int, head_dim: int, device: str, gqa: bool) -> Call:
    """The causal prefill's backward alone: one forward kept, each call the gradients of Q, K and V from it (as a
    training step runs the core's backward after its forward; on older torch the repeated K/V's gradients sum back)."""
    import torch
    import torch.nn.functional as F

    q = _randn(batch, heads, seq, head_dim, device=device).requires_grad_()
    k, v = (_randn(batch, kv_heads, seq, head_dim, device=device).requires_grad_() for _ in range(2))
    k_in, v_in, grouped = _grouped_kv(k, v, heads, gqa)
    out = F.scaled_dot_product_attention(q, k_in, v_in, is_causal=True, **grouped)
    grad = torch.randn_like(out)
    return lambda: torch.autograd.grad(out, (q, k, v), grad, retain_graph=True)


def attention_cases(grid: Grid, device: str, ops: tuple[str, ...]) -> Iterator[Case]:
    gqa = sdpa_has_gqa()
    if "attention_prefill" in ops:
        for b, s, h, kv, d in grid.prefill:
            yield Case("attention_prefill", shape_of("attention_prefill", (b, s, h, kv, d)), "bf16",
                       lambda b=b, s=s, h=h, kv=kv, d=d: _attention_setup(b, s, s, h, kv, d, device, gqa),
                       input_bytes=2 * b * d * s * (h + 2 * kv))
    if "attention_backward" in ops:  # the prefill grid's shapes: Q, K, V, O, dO read, dQ, dK, dV written
        for b, s, h, kv, d in grid.prefill:
            yield Case("attention_backward", shape_of("attention_backward", (b, s, h, kv, d)), "bf16",
                       lambda b=b, s=s, h=h, kv=kv, d=d: _backward_setup(b, s, h, kv, d, device, gqa),
                       input_bytes=2 * b * d * s * (3 * h + 4 * kv))
    if "attention_decode" in ops:
        for b, n, h, kv, d in grid.decode:
            yield Case("attention_decode", shape_of("attention_decode", (b, n, h, kv, d)), "bf16",
                       lambda b=b, n=n, h=h, kv=kv, d=d: _attention_setup(b, 1, n, h, kv, d, device, gqa),
                       input_bytes=2 * b * d * (h + 2 * kv * n))


def routed_bounds(rows: int, experts: int, seed: int = 0) -> list[int]:
    """Row offsets of each expert's slice when each of `rows` routed rows lands on one of `experts` uniformly at
    random (learned routing at its most even, as cost/compute.py rows_hit_experts prices it: a few rows leave some
    experts without any, and those cost nothing)."""
    rng = random.Random(seed)
    counts = [0] * experts
    for _ in range(rows):
        counts[rng.randrange(experts)] += 1
    return [0, *itertools.accumulate(counts)]


def _moe_weights(tokens: int, hidden: int, inter: int, experts: int, topk: int, device: str) -> tuple[Any, ...]:
    """The routed rows already sorted by expert, each expert's gate-up and down weights, its rows' bounds."""
    rows = tokens * topk
    x = _randn(rows, hidden, device=device)
    w_gate_up = _randn(experts, hidden, 2 * inter, device=device)
    w_down = _randn(experts, inter, hidden, device=device)
    return x, w_gate_up, w_down, routed_bounds(rows, experts)


def _moe_setup(tokens: int, hidden: int, inter: int, experts: int, topk: int, device: str) -> Call:
    """Per expert: gate-up GEMM, SiLU-gated activation, down GEMM (megatron's SequentialMLP)."""
    import torch
    import torch.nn.functional as F

    x, w_gate_up, w_down, bounds = _moe_weights(tokens, hidden, inter, experts, topk, device)
    out = torch.empty(x.shape[0], hidden, device=device, dtype=torch.bfloat16)
    slices = list(zip(bounds[:-1], bounds[1:], strict=True))

    def call() -> object:
        for e, (lo, hi) in enumerate(slices):
            if hi > lo:
                h = x[lo:hi] @ w_gate_up[e]
                torch.matmul(F.silu(h[:, :inter]) * h[:, inter:], w_down[e], out=out[lo:hi])
        return out

    return call


def _grouped_setup(tokens: int, hidden: int, inter: int, experts: int, topk: int, device: str) -> Call:
    """One grouped GEMM for every expert's gate-up, the SiLU-gated activation, one for the downs."""
    import torch
    import torch.nn.functional as F

    x, w_gate_up, w_down, bounds = _moe_weights(tokens, hidden, inter, experts, topk, device)
    offs = torch.tensor(bounds[1:], device=device, dtype=torch.int32)  # each expert's end row

    def call() -> object:
        h = torch._grouped_mm(x, w_gate_up, offs=offs)
        return torch._grouped_mm(F.silu(h[:, :inter]) * h[:, inter:], w_down, offs=offs)

    return call


def grouped_kernel(device: str) -> tuple[bool, str]:
    """Whether this device runs torch._grouped_mm (bf16, Hopper or later), or why not."""
    import torch

    if device != "cuda":
        return False, "the CPU runs the loop over experts, as megatron's SequentialMLP does there"
    if not hasattr(torch, "_grouped_mm"):
        return False, f"torch {torch.__version__} has no torch._grouped_mm"
    try:
        _grouped_setup(1, 64, 32, 8, 2, device)()  # 2 rows over 8 experts: empty groups too
    except (RuntimeError, TypeError) as err:
        return False, f"torch._grouped_mm failed ({str(err).splitlines()[0][:100] if str(err) else type(err).__name__})"
    return True, ""


def grouped_cases(grid: Grid, device: str, grouped: bool = False) -> Iterator[Case]:
    """One MoE layer's experts per grid shape: the grouped kernel when `grouped`, else the loop over experts."""
    setup, backend = (_grouped_setup, "torch._grouped_mm") if grouped else (_moe_setup, "torch")
    for t, h, i, e, k in grid.moe:
        yield Case("grouped_gemm", {**shape_of("grouped_gemm", (t, h, i, e, k)), "random_routing": 1}, "bf16",
                   lambda t=t, h=h, i=i, e=e, k=k: setup(t, h, i, e, k, device), backend,
                   input_bytes=2 * (t * k * h + 3 * e * h * i))
