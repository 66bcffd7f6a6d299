"""Kernel tables in the project's own format (docs/kernels.md): one measured kernel per CSV row.

`read_table` never stops at a bad row: it returns the rows it could read and one problem line per row it could
not (file, line, column, why), so a user checks what is good and fixes the rest. `write_table` appends rows as
they are measured, so an interrupted microbenchmark keeps what it finished.
"""

from __future__ import annotations

import csv
import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

COLUMNS = ("op", "shape", "dtype", "backend", "world_size", "latency_us", "repetitions", "spread", "hardware",
           "source", "variant")
REQUIRED = ("op", "shape", "dtype", "backend", "world_size", "latency_us", "hardware", "source")

# op -> (required shape keys, optional shape keys with their defaults)
OPS: dict[str, tuple[tuple[str, ...], dict[str, int]]] = {
    "gemm": (("m", "n", "k"), {}),
    "grouped_gemm": (("tokens", "hidden", "inter", "experts", "topk"), {"ep": 1, "tp": 1, "random_routing": 0}),
    "attention_prefill": (("batch", "seq", "heads", "kv_heads", "head_dim"), {"cached": 0, "window": 0}),
    "attention_decode": (("batch", "kv_len", "heads", "kv_heads", "head_dim"), {"window": 0}),
    "attention_backward": (("batch", "seq", "heads", "kv_heads", "head_dim"), {"window": 0}),
    "all_reduce": (("bytes",), {"nodes": 1}),
    "all_gather": (("bytes",), {"nodes": 1}),
    "reduce_scatter": (("bytes",), {"nodes": 1}),
    "all_to_all": (("bytes",), {"nodes": 1}),
    "ep_dispatch": (("tokens", "hidden", "topk", "experts"), {"nodes": 1, "units": 0}),
    "ep_combine": (("tokens", "hidden", "topk", "experts"), {"nodes": 1, "units": 0}),
}
# the file each op's rows go to in a folder of tables (executor bench-kernels, executor launch --profile)
FILE_OF: dict[str, str] = {"gemm": "gemm.csv", "grouped_gemm": "grouped_gemm.csv",
                           **dict.fromkeys(("attention_prefill", "attention_decode", "attention_backward"),
                                           "attention.csv"),
                           **{op: "collectives.csv" for op in ("all_reduce", "all_gather", "reduce_scatter",
                                                               "all_to_all", "ep_dispatch", "ep_combine")}}
DTYPES = ("fp32", "bf16", "fp16", "fp8", "fp8_block", "mxfp8", "fp4")
VARIANTS = ("", "engine", "engine-kernel", "graph", "ll")


@dataclass(frozen=True, slots=True)
class KernelRow:
    """One measured kernel. `variant` says which implementation family it is where one op has several that the
    model prices apart (an engine's GEMM vs a training GEMM, a CUDA-graph custom all-reduce vs NCCL, DeepEP
    normal vs low-latency); '' for the plain one."""

    op: str
    shape: Mapping[str, int]
    dtype: str
    backend: str
    world_size: int
    latency_s: float
    hardware: str
    source: str
    repetitions: int | None = None
    spread: float | None = None
    variant: str = ""
    where: str = field(default="", compare=False)  # file:line, for the worst-rows listing

    def get(self, key: str) -> int:
        value = self.shape.get(key)
        return int(value) if value is not None else OPS[self.op][1][key]  # absent: the op's default


def median_and_spread(per_call_s: list[float]) -> tuple[float, float]:
    """A row's latency and `spread` from its calls' times: the median, and (P90 - P10) / median (0 for one call)."""
    median_s = statistics.median(per_call_s)
    if len(per_call_s) < 2 or median_s <= 0:
        return median_s, 0.0
    deciles = statistics.quantiles(per_call_s, n=10, method="inclusive")
    return median_s, (deciles[8] - deciles[0]) / median_s


def parse_shape(text: str, op: str) -> dict[str, int]:
    """'m=4096 n=7168 k=2048' -> {'m': 4096, ...}; raises ValueError naming the bad or missing key."""
    required, optional = OPS[op]
    out: dict[str, int] = {}
    for part in text.split():
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise ValueError(f"{part!r} is not key=value")
        if key not in required and key not in optional:
            raise ValueError(f"unknown key {key!r} for {op} (keys: {' '.join(required + tuple(optional))})")
        try:
            number = float(value)
        except ValueError:
            number = -1.0  # not a number: the same message as a negative one
        if not math.isfinite(number) or number < 0 or number != int(number):
            raise ValueError(f"{key}={value} is not a non-negative integer")
        out[key] = int(number)
    missing = [k for k in required if k not in out]
    if missing:
        raise ValueError(f"missing {' '.join(missing)} (an {op} needs {' '.join(required)})")
    if any(out[k] <= 0 for k in required):
        raise ValueError(f"{' '.join(f'{k}={out[k]}' for k in required if out[k] <= 0)}: must be positive")
    return out


def _row(rec: Mapping[str, str], where: str) -> KernelRow:
    missing = [c for c in REQUIRED if not (rec.get(c) or "").strip()]
    if missing:
        raise _Bad(missing[0], "missing")
    op = rec["op"].strip()
    if op not in OPS:
        raise _Bad("op", f"unknown op {op!r} (one of {', '.join(OPS)})")
    dtype = rec["dtype"].strip()
    if dtype not in DTYPES:
        raise _Bad("dtype", f"unknown dtype {dtype!r} (one of {', '.join(DTYPES)})")
    try:
        shape = parse_shape(rec["shape"], op)
    except ValueError as err:
        raise _Bad("shape", str(err)) from None
    latency_us = _number(rec, "latency_us")
    if latency_us <= 0:
        raise _Bad("latency_us", f"{latency_us:g}: must be positive")
    world = _number(rec, "world_size")
    if world < 1 or world != int(world):
        raise _Bad("world_size", f"{world:g}: must be a positive integer")
    variant = (rec.get("variant") or "").strip()
    if variant not in VARIANTS:
        raise _Bad("variant", f"unknown variant {variant!r} (blank, or one of {', '.join(VARIANTS[1:])})")
    reps = _number(rec, "repetitions") if (rec.get("repetitions") or "").strip() else None
    spread = _number(rec, "spread") if (rec.get("spread") or "").strip() else None
    return KernelRow(op, shape, dtype, rec["backend"].strip(), int(world), latency_us * 1e-6,
                     rec["hardware"].strip(), rec["source"].strip(), None if reps is None else int(reps), spread,
                     variant, where)


class _Bad(ValueError):
    def __init__(self, column: str, why: str) -> None:
        super().__init__(why)
        self.column = column


def _number(rec: Mapping[str, str], column: str) -> float:
    try:
        value = float(rec[column])
    except (TypeError, ValueError):
        raise _Bad(column, f"{rec.get(column)!r} is not a number") from None
    if not math.isfinite(value):
        raise _Bad(column, f"{value} is not finite")
    return value


def read_table(path: Path) -> tuple[list[KernelRow], list[str]]:
    """The rows of one CSV table and one problem line per row (or header) that could not be read."""
    rows: list[KernelRow] = []
    problems: list[str] = []
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        return [], [f"{path}: cannot read: {err}"]
    lines = [(i, line) for i, line in enumerate(text.splitlines(), 1)
             if line.strip() and not line.lstrip().startswith("#")]
    if not lines:
        return [], [f"{path}: no header row"]
    reader = csv.DictReader([line for _, line in lines])
    header = reader.fieldnames or []
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        return [], [f"{path}: header: missing column(s) {', '.join(missing)} (docs/kernels.md lists them)"]
    for (lineno, _), rec in zip(lines[1:], reader, strict=False):
        where = f"{path}:{lineno}"
        try:
            rows.append(_row(rec, where))
        except _Bad as err:
            problems.append(f"{where}: {err.column}: {err}")
    return rows, problems


def format_shape(shape: Mapping[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in shape.items())


def write_table(path: Path, rows: Iterable[KernelRow], comment: str = "") -> None:
    """Append `rows` to `path` (header first when the file is new), flushed row by row."""
    new = not path.exists() or path.stat().st_size == 0
    with path.open("a", encoding="utf-8", newline="") as f:
        if new and comment:
            f.write("".join(f"# {line}\n" for line in comment.splitlines()))
        w = csv.writer(f)
        if new:
            w.writerow(COLUMNS)
        for r in rows:
            w.writerow([r.op, format_shape(r.shape), r.dtype, r.backend, r.world_size, f"{r.latency_s * 1e6:.4g}",
                        "" if r.repetitions is None else r.repetitions, "" if r.spread is None else f"{r.spread:.4g}",
                        r.hardware, r.source, r.variant])
            f.flush()
