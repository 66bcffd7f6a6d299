"""aiconfigurator-core's measured kernel tables (Apache-2.0; `pip install 'perfmodel[kernels]'`) as KernelRows.

The package keeps one parquet table per op family, framework and version under
`aiconfigurator_core/systems/data/<system>/<family>/<framework>/<version>/`. The newest version of each
framework is read; systems the project has a hardware profile for are kept (SYSTEMS). Units as the tables write
them: compute and NCCL latencies in milliseconds, DeepEP and MoE all-to-all times in microseconds, NCCL and custom
all-reduce message sizes in elements (bytes = elements x the dtype's size: an 8-GPU H200 all-reduce of 2^28 half
elements then runs at 460 GB/s bus bandwidth, the NVLS figure; as bytes it would be 230).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from perfmodel.kernels.table import KernelRow

SYSTEMS = {"a100_sxm": "a100-80gb", "h100_sxm": "h100-sxm", "h200_sxm": "h200", "b200_sxm": "b200",
           "gb200": "gb200", "gb300": "gb300"}
DTYPES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "fp8": "fp8", "fp8_block": "fp8_block",
          "nvfp4": "fp4", "mxfp8": "mxfp8", "int8": "fp8"}
ELEMENT_BYTES = {"half": 2, "bfloat16": 2, "float16": 2, "int8": 1, "fp8": 1}
SOURCE = "aiconfigurator-core 0.12.0 (Apache-2.0)"


def default_tables_dir() -> Path | None:
    """The installed aiconfigurator-core's data folder, or None when it is not installed."""
    try:
        import aiconfigurator_core  # type: ignore[import-not-found]
    except ImportError:
        return None
    root = Path(aiconfigurator_core.__file__).parent / "systems" / "data"
    return root if root.is_dir() else None


def is_aiconfigurator_root(path: Path) -> bool:
    return path.is_dir() and any((path / s).is_dir() for s in SYSTEMS)


def _version_key(v: str) -> tuple:
    return tuple(int(x) if x.isdigit() else -1 for x in re.split(r"[.\-+a-z]+", v) if x)


def newest_tables(root: Path, system: str, family: str) -> Iterator[Path]:
    """Parquet files of the newest version of each framework for one system and op family."""
    base = root / system / family
    if not base.is_dir():
        return
    for framework in sorted(p for p in base.iterdir() if p.is_dir()):
        versions = sorted((v for v in framework.iterdir() if v.is_dir() and any(v.glob("*.parquet"))),
                          key=lambda v: _version_key(v.name))
        if versions:
            yield from sorted(versions[-1].glob("*.parquet"))


def read_aiconfigurator(root: Path, hardware: set[str] | None = None,
                        rows_per_table: int | None = None) -> tuple[list[KernelRow], list[str]]:
    """Every row the check can price, and one line per table it could not read. `rows_per_table` keeps an evenly
    spaced sample of at most that many rows of each parquet table (its order is the collector's sweep over shapes,
    so every stride keeps each regime in proportion); None keeps every row."""
    import pandas as pd

    rows: list[KernelRow] = []
    problems: list[str] = []
    for system, hw in SYSTEMS.items():
        if hardware and hw not in hardware:
            continue
        for family in ("gemm", "attention", "moe", "comm"):
            for path in newest_tables(root, system, family):
                convert = _CONVERTERS.get(path.stem)
                if convert is None:
                    continue
                try:
                    frame = pd.read_parquet(path)
                    if rows_per_table and len(frame) > rows_per_table:
                        frame = frame.iloc[:: -(-len(frame) // rows_per_table)]
                    rows.extend(convert(frame, hw, f"{SOURCE}: {path.relative_to(root)}"))
                except Exception as err:  # a damaged or changed table: say which, keep the others
                    problems.append(f"{path}: cannot read: {type(err).__name__}: {err}")
    return rows, problems


def _records(frame: Any) -> Iterator[dict[str, Any]]:
    """The frame's rows as dicts of Python values: its columns read once each (`tolist`), 4-5x faster than
    `to_dict("records")` over the 3.8 M rows of every table."""
    cols = list(frame.columns)
    for values in zip(*(frame[c].tolist() for c in cols)):
        yield dict(zip(cols, values))


def _gemm(frame: Any, hw: str, src: str) -> Iterator[KernelRow]:
    for r in _records(frame):
        dt = DTYPES.get(r["gemm_dtype"])
        if dt:
            yield KernelRow("gemm", {"m": r["m"], "n": r["n"], "k": r["k"]}, dt, r["kernel_source"], 1,
                            r["latency"] * 1e-3, hw, src, variant="engine")


def _attention(op: str) -> Callable[[Any, str, str], Iterator[KernelRow]]:
    def convert(frame: Any, hw: str, src: str) -> Iterator[KernelRow]:
        for r in _records(frame):
            if r.get("beam_width", 1) != 1:
                continue
            dt = DTYPES.get(r["attn_dtype"] if op == "attention_prefill" else r["kv_cache_dtype"])
            if not dt:
                continue
            shape = {"batch": r["batch_size"], "heads": r["num_heads"], "kv_heads": r["num_key_value_heads"],
                     "head_dim": r["head_dim"], "window": r.get("window_size", 0) or 0}
            if op == "attention_prefill":
                shape |= {"seq": r["isl"], "cached": r.get("step", 0) or 0}
            else:
                shape |= {"kv_len": r["step"] + r["isl"] - 1 if r["isl"] > 1 else r["step"]}
            yield KernelRow(op, shape, dt, r["kernel_source"], 1, r["latency"] * 1e-3, hw, src, variant="engine")
    return convert


def _moe(frame: Any, hw: str, src: str) -> Iterator[KernelRow]:
    for r in _records(frame):
        dt = DTYPES.get(r["moe_dtype"])
        if not dt or r.get("distribution") != "balanced":
            continue
        # num_tokens is what each EP rank routes (the collector feeds every rank the same batch): the group's
        # tokens are num_tokens x ep, as the project's shape counts them (a 2-expert B200 rank of EP128 takes
        # 4 ms for num_tokens 16384 x top-8: 131k rows at 2.9 PFLOP/s, not 1k rows)
        shape = {"tokens": r["num_tokens"] * r["moe_ep_size"], "hidden": r["hidden_size"], "inter": r["inter_size"],
                 "experts": r["num_experts"], "topk": r["topk"], "ep": r["moe_ep_size"], "tp": r["moe_tp_size"]}
        yield KernelRow("grouped_gemm", shape, dt, r["kernel_source"], r["moe_ep_size"] * r["moe_tp_size"],
                        r["latency"] * 1e-3, hw, src, variant="engine")


NCCL_OPS = {"all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
            "alltoall": "all_to_all"}


def _nccl(frame: Any, hw: str, src: str) -> Iterator[KernelRow]:
    for r in _records(frame):
        op, elem = NCCL_OPS.get(r["op_name"]), ELEMENT_BYTES.get(r["nccl_dtype"])
        if op and elem:
            yield KernelRow(op, {"bytes": r["message_size"] * elem}, DTYPES[r["nccl_dtype"]], "nccl",
                            r["num_gpus"], r["latency"] * 1e-3, hw, src)


def _custom_allreduce(frame: Any, hw: str, src: str) -> Iterator[KernelRow]:
    for r in _records(frame):
        kind = f"{r.get('kernel_source', '')} {r.get('backend', '')} {r.get('implementation', '')}".lower()
        if "eager" in kind:  # outside a graph: the launch and the host dominate; the engine runs graphs
            continue
        elem = ELEMENT_BYTES.get(r["allreduce_dtype"], 2)
        yield KernelRow("all_reduce", {"bytes": r["message_size"] * elem}, DTYPES.get(r["allreduce_dtype"], "bf16"),
                        r["kernel_source"], r["num_gpus"], r["latency"] * 1e-3, hw, src, variant="graph")


def _ep_shape(r: dict[str, Any], tokens: str, topk: str) -> dict[str, int]:
    return {"tokens": r[tokens], "hidden": r["hidden_size"], "topk": r[topk], "experts": r["num_experts"],
            "nodes": r["node_num"]}


def _deepep_normal(frame: Any, hw: str, src: str) -> Iterator[KernelRow]:
    for r in _records(frame):
        world = 8 * r["node_num"]  # the tables' EP spans whole 8-GPU nodes
        for op, side in (("ep_dispatch", "dispatch"), ("ep_combine", "combine")):
            us = r[f"{side}_transmit_us"] + r[f"{side}_notify_us"]
            if us > 0:
                yield KernelRow(op, _ep_shape(r, "num_token", "num_topk") | {"units": r[f"{side}_sms"]}, "bf16",
                                "deepep", world, us * 1e-6, hw, src)


def _deepep_ll(frame: Any, hw: str, src: str) -> Iterator[KernelRow]:
    for r in _records(frame):
        world = 8 * r["node_num"]
        for op, side, dt in (("ep_dispatch", "dispatch", "fp8"), ("ep_combine", "combine", "bf16")):
            us = r[f"{side}_avg_t_us"]
            if us > 0:
                yield KernelRow(op, _ep_shape(r, "num_token", "num_topk"), dt, "deepep", world, us * 1e-6, hw, src,
                                variant="ll")


def _moe_a2a(frame: Any, hw: str, src: str) -> Iterator[KernelRow]:
    for r in _records(frame):
        variant = {"deepep_ht": "", "trtllm_deepep_ht": "", "deepep_ll": "ll", "trtllm_deepep_ll": "ll"}.get(
            r["comm_backend"])
        op = {"dispatch": "ep_dispatch", "combine": "ep_combine"}.get(r["phase"])
        if variant is None or op is None or r["latency"] <= 0:
            continue
        dt = "fp8" if op == "ep_dispatch" and "fp8" in str(r.get("comm_dtype", "")) else "bf16"
        shape = _ep_shape(r, "num_tokens", "topk") | {"units": r.get("sms", 0) or 0}
        yield KernelRow(op, shape, dt, r["comm_backend"], r["ep_size"], r["latency"] * 1e-6, hw, src,
                        variant=variant)


_CONVERTERS: dict[str, Callable[[Any, str, str], Iterator[KernelRow]]] = {
    "gemm_perf": _gemm,
    "context_attention_perf": _attention("attention_prefill"),
    "generation_attention_perf": _attention("attention_decode"),
    "moe_perf": _moe,
    "nccl_perf": _nccl,
    "custom_allreduce_perf": _custom_allreduce,
    "wideep_deepep_normal_perf": _deepep_normal,
    "wideep_deepep_ll_perf": _deepep_ll,
    "moe_a2a_perf": _moe_a2a,
}
