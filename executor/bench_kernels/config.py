"""What `executor bench-kernels` measures (ops, the file each goes to, the shape grids) and the checks on its flags,
all made before anything is measured."""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import dataclass
from pathlib import Path

from perfmodel.errors import InputError

# perfmodel.inputs (pydantic, the profiles) is imported inside the checks: `executor --help` reads this module

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
COMPUTE = ("gemm", "attention_prefill", "attention_backward", "attention_decode", "grouped_gemm")
MEASURED = COMPUTE + COLLECTIVES  # the order a run goes through them
# --ops also takes a family name for all of its ops
FAMILIES: dict[str, tuple[str, ...]] = {"attention": ("attention_prefill", "attention_backward", "attention_decode"),
                                        "collectives": COLLECTIVES}

Prefill = tuple[int, int, int, int, int]  # batch seq heads kv_heads head_dim (docs/kernels.md key order)
Decode = tuple[int, int, int, int, int]  # batch kv_len heads kv_heads head_dim
Moe = tuple[int, int, int, int, int]  # tokens hidden inter experts topk


@dataclass(frozen=True, slots=True)
class Grid:
    """The shapes one run measures and the time it may spend on each."""

    gemm_m: tuple[int, ...]
    gemm_nk: tuple[tuple[int, int], ...]
    prefill: tuple[Prefill, ...]
    decode: tuple[Decode, ...]
    moe: tuple[Moe, ...]
    message_bytes: tuple[int, ...]
    budget_per_shape_s: float


KIB, MIB = 1024, 1024 * 1024
_LLAMA_NK = ((4096, 4096), (6144, 4096), (28672, 4096), (4096, 14336))  # o, qkv, gate-up, down of an 8B model
_DSV3_NK = ((7168, 2048), (2048, 7168))  # a DeepSeek-V3-sized hidden against a per-GPU projection
GRIDS: dict[str, Grid] = {
    "cuda-full": Grid(gemm_m=(1, 16, 128, 1024, 2048, 4096, 8192), gemm_nk=_LLAMA_NK + _DSV3_NK,
                      prefill=tuple((1, s, 32, 8, 128) for s in (512, 1024, 2048, 4096, 8192))
                      + ((8, 1024, 32, 8, 128), (1, 4096, 64, 8, 128)),
                      decode=tuple((b, n, 32, 8, 128) for b in (1, 8, 64) for n in (1024, 4096, 16384)),
                      moe=tuple((t, 2048, 768, 128, 8) for t in (16, 128, 1024, 4096))  # a 30B-A3B's layer
                      + tuple((t, 7168, 2048, 32, 8) for t in (16, 128, 1024, 4096))  # DeepSeek-V3's, EP 8 share
                      + tuple((t, 4096, 2048, 32, 6) for t in (64, 512, 2048, 8192)),  # DeepSeek-V4-Flash's, EP 8
                      message_bytes=tuple(KIB * 4**i for i in range(9)), budget_per_shape_s=0.25),  # 1 KiB..64 MiB
    "cuda-quick": Grid(gemm_m=(1, 128, 2048), gemm_nk=((4096, 4096), (7168, 2048)),
                       prefill=((1, 1024, 32, 8, 128), (1, 4096, 32, 8, 128)),
                       decode=((1, 4096, 32, 8, 128), (64, 4096, 32, 8, 128)),
                       moe=((128, 2048, 768, 128, 8), (2048, 2048, 768, 128, 8)),
                       message_bytes=(KIB, 64 * KIB, MIB, 4 * MIB), budget_per_shape_s=0.1),
    # CPU sizes: one core runs a 1024^3 bf16 GEMM in milliseconds, so every shape stays well under a second
    "cpu-full": Grid(gemm_m=(1, 16, 128, 512, 1024), gemm_nk=((512, 512), (1024, 1024), (2048, 512)),
                     prefill=tuple((1, s, 8, 2, 64) for s in (128, 256, 512)) + ((4, 128, 8, 2, 64),),
                     decode=tuple((b, n, 8, 2, 64) for b in (1, 8) for n in (512, 2048)),
                     moe=tuple((t, 256, 128, 8, 2) for t in (16, 128, 512)),
                     message_bytes=tuple(KIB * 4**i for i in range(8)), budget_per_shape_s=0.4),  # 1 KiB..16 MiB
    "cpu-quick": Grid(gemm_m=(1, 16, 128, 512), gemm_nk=((512, 512), (1024, 1024)),
                      prefill=((1, 128, 8, 2, 64), (1, 512, 8, 2, 64)),
                      decode=((1, 512, 8, 2, 64), (8, 2048, 8, 2, 64)),
                      moe=((16, 256, 128, 8, 2), (256, 256, 128, 8, 2)),
                      message_bytes=(KIB, 64 * KIB, MIB, 4 * MIB), budget_per_shape_s=0.15),
    # the tests' grid (hidden --grid tiny): seconds in all, a 512^3 GEMM next to a 1x128x128 one
    "tiny": Grid(gemm_m=(1, 512), gemm_nk=((128, 128), (512, 512)),
                 prefill=((1, 64, 4, 2, 32), (1, 128, 4, 2, 32)), decode=((1, 128, 4, 2, 32),),
                 moe=((8, 128, 64, 4, 2), (64, 128, 64, 4, 2)),
                 message_bytes=(KIB, 64 * KIB), budget_per_shape_s=0.03),
}


@dataclass(frozen=True, slots=True)
class BenchConfig:
    hardware: str
    out_dir: Path
    ops: tuple[str, ...]
    device: str  # "cpu" or "cuda"
    world_size: int
    grid: Grid


def parse_ops(text: str | None) -> tuple[str, ...]:
    """'gemm,attention' -> the ops to measure, in run order; all of them when `text` is empty."""
    if not text or not text.strip():
        return MEASURED
    from perfmodel.inputs.loading import did_you_mean

    wanted: set[str] = set()
    valid = list(MEASURED) + list(FAMILIES)
    for name in (part.strip() for part in text.split(",")):
        if name in FAMILIES:
            wanted.update(FAMILIES[name])
        elif name in MEASURED:
            wanted.add(name)
        elif name:
            raise InputError("--ops", "", f"unknown op {name!r}{did_you_mean(name, valid)}; valid: {', '.join(valid)}")
    return tuple(op for op in MEASURED if op in wanted)


def check_hardware(hw_id: str) -> str:
    from perfmodel.inputs.hardware import known_hardware_ids
    from perfmodel.inputs.loading import did_you_mean

    ids = known_hardware_ids()
    if hw_id not in ids:
        raise InputError("--hardware", "", f"unknown hardware id {hw_id!r}{did_you_mean(hw_id, ids)}; "
                         f"valid: {', '.join(ids)}")
    return hw_id


def check_out_dir(out: Path) -> Path:
    """Create `out` if needed and prove a file can be written there (os.access says yes to root on a read-only
    mount)."""
    if out.exists() and not out.is_dir():
        raise InputError("--out", "", f"{out} is a file; give a folder for the tables")
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as err:
        raise InputError("--out", "", f"cannot write to {out}: {err.strerror or err}") from None
    return out


def check_device(device: str | None, world_size: int, wants_collectives: bool) -> str:
    """The device to run on (default: cuda when torch sees one); refuses what this machine cannot do."""
    try:
        import torch
    except ImportError:
        raise InputError("bench-kernels", "", "needs torch (pip install torch)") from None
    cuda = torch.cuda.is_available()
    device = device or ("cuda" if cuda else "cpu")
    if device == "cuda" and not cuda:
        raise InputError("--device", "", "cuda: torch sees no CUDA device here; use --device cpu")
    if device == "cuda" and wants_collectives and world_size > torch.cuda.device_count():
        raise InputError("--world-size", "", f"{world_size} processes need {world_size} GPUs; this machine has "
                         f"{torch.cuda.device_count()} (leave the collectives out: --ops gemm,attention,grouped_gemm)")
    return device


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    """Every flag checked, cheapest first, before anything is measured."""
    hardware = check_hardware(args.hardware)
    ops = parse_ops(args.ops)
    wants_collectives = any(op in COLLECTIVES for op in ops)
    if wants_collectives and args.world_size < 2:
        raise InputError("--world-size", "", f"{args.world_size}: collectives need at least 2 processes")
    device = check_device(args.device, args.world_size, wants_collectives)
    size = args.grid or ("quick" if args.quick else "full")
    grid = GRIDS["tiny" if size == "tiny" else f"{device}-{size}"]
    return BenchConfig(hardware, check_out_dir(args.out), ops, device, args.world_size, grid)
