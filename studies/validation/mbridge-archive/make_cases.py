"""Turn Megatron-Bridge's published performance tables into validation cases (a development set).

The tables are docs/performance-summary.md and docs/performance-summary-archive.md of
https://github.com/NVIDIA-NeMo/Megatron-Bridge (read at commit 067f987df03b, 2026-08); every NeMo container
release from 25.09 to 26.08 has its own section. This script reads local copies of those two pages and writes one
case file per table row whose GPU has a profile and whose model is in the catalogue:

    python studies/validation/mbridge-archive/make_cases.py SUMMARY.md ARCHIVE.md \
--out studies/validation/mbridge-archive/cases

Rows are skipped (and counted) for GPUs without a profile (DGX-B300), models outside the catalogue (Nemotron), NVFP4
(no FP4 training path in the cost model yet). Recompute and activation offloading are read from each release's
performance recipe (RECOMPUTE_BY_RELEASE, ACTIVATION_OFFLOAD), the MoE dispatcher and the EP all-to-all overlap from
moe-comm-by-release.csv (`moe_comm`), the CUDA graphs from cuda-graphs-by-release.csv (`cuda_graph_scope`). The
shared cases (the shared validation set) are 11 of these rows from the 25.11 container (their copies keep what
their files state: no recompute); this set holds all releases so that a change to the cost model is judged on
many runs, not tuned to a few. Nothing here is fitted to."""

from __future__ import annotations

import argparse
import copy
import csv
import functools
import json
import re
from pathlib import Path

import yaml

SOURCE_URL = "https://github.com/NVIDIA-NeMo/Megatron-Bridge/blob/067f987df03b8355b03192d88d70f1709fedf51a/docs/"
SYSTEMS = {"DGX-H100": "h100-sxm", "DGX-B200": "b200", "DGX-GB200": "gb200", "DGX-GB300": "gb300"}
MODELS = {
    "LLAMA3_8B": "llama3-8b",
    "LLAMA3_70B": "llama3-70b",
    "LLAMA3.1_405B": "llama3.1-405b",
    "DeepSeekV3": "deepseek-v3",
    "DeepSeekV4 Flash": "deepseek-v4-flash",
    "GPT OSS 120B": "gpt-oss-120b",
    "Qwen3_30B_a3B": "qwen3-30b-a3b",
    "Qwen3_235B_a22B": "qwen3-235b-a22b",
}
PRECISIONS = {"FP8": "fp8", "FP8-CS": "fp8", "MXFP8": "fp8", "FP8-MX": "fp8", "BF16": "bf16"}
CATALOGUE = Path(__file__).resolve().parents[3] / "perfmodel" / "catalogue"


def first(cell: str) -> str:
    """'1 (0)' -> '1': the parenthesised value is a variant the row also reports; the case takes the main one.
    Footnote marks ('661[^gpt-oss-note]') are dropped."""
    return re.sub(r"\[\^[^\]]*\]", "", cell).split("(")[0].strip()


def as_int(cell: str, default: int = 1) -> int:
    value = first(cell)
    return default if value in ("n/a", "") else int(value.replace(",", ""))


def rows(markdown: str, page: str):
    """Yield (container, system, model, row-dict) for every table row, for both table layouts."""
    container = system = model = None
    header: list[str] | None = None
    pretraining = False
    for line in markdown.splitlines():
        if m := re.match(r"^## (\S+) NeMo Container", line):
            container, system, model, header = m.group(1), None, None, None
        elif m := re.match(r"^### (.+)", line):  # only pre-training tables: SFT / LoRA rows are another task
            pretraining, system, model, header = m.group(1).strip() == "Pre-Training Performance", None, None, None
        elif m := re.match(r"^#### System: (.+)", line):
            system, model, header = m.group(1).strip(), None, None
        elif m := re.match(r"^#### Model: (.+)", line):
            model, system, header = m.group(1).strip(), None, None
        elif line.startswith("|") and container and pretraining:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if header is None:
                header = cells
            elif not set(line) <= set("|-: "):
                yield container, page, system, model, dict(zip(header, cells))
        else:
            header = None if not line.startswith("|") else header


def hf_config_without_mtp(model_id: str) -> dict:
    cfg = json.loads((CATALOGUE / f"{model_id}.json").read_text())
    cfg = copy.deepcopy(cfg)
    cfg["num_nextn_predict_layers"] = 0
    cfg["_source"] = cfg.get("_source", "") + "; num_nextn_predict_layers set to 0 (the row says w/o MTP)"
    return cfg


# Layers whose activations the performance recipe offloads to the host (megatron-core --cpu-offloading), per (model,
# hardware, precision, FSDP): the table does not list it. Megatron-Bridge scripts/performance/configs/llama/
# llama3_workload_base_configs.py, the same at tags v0.2.0 (NeMo 25.11) through v0.5.0 (26.06):
# LLAMA3_70B_PRETRAIN_CONFIG_GB200_FP8_CS_V1 cpu_offloading_num_layers=40, ..._GB300_FP8_CS_V1 20, ..._GB200_BF16_V1
# 20, ..._GB300_BF16_V1 30 (each with use_megatron_fsdp=True).
# Llama3.1-405B GB200 FP8 FSDP (the 25.09 row, TP2 PP1): 95 layers, v0.1.0rc4
# scripts/performance/configs/llama31/llama31_405b_llm_pretrain.yaml perf_matrix.gb200 cpu_offloading_num_layers.
ACTIVATION_OFFLOAD = {("llama3-70b", "gb200", "fp8", True): 40, ("llama3-70b", "gb300", "fp8", True): 20,
                      ("llama3-70b", "gb200", "bf16", True): 20, ("llama3-70b", "gb300", "bf16", True): 30,
                      ("llama3.1-405b", "gb200", "fp8", True): 95}
OFFLOAD_SOURCE = {"llama3-70b": "Megatron-Bridge scripts/performance/configs/llama/llama3_workload_base_configs.py "
                  "(tags v0.2.0 to v0.5.0), cpu_offloading_num_layers of the {hw} {precision} config",
                  "llama3.1-405b": "Megatron-Bridge v0.1.0rc4 scripts/performance/configs/llama31/"
                  "llama31_405b_llm_pretrain.yaml, cpu_offloading_num_layers of perf_matrix.{hw_id}"}
MOE_COMM_CSV = Path(__file__).resolve().parent / "moe-comm-by-release.csv"
CUDA_GRAPHS_CSV = Path(__file__).resolve().parent / "cuda-graphs-by-release.csv"
CUDA_GRAPHS_NOTE = ("CUDA graphs {scope} as the {container} release's performance recipe sets them "
                    "(cuda-graphs-by-release.csv)")
MOE_COMM_NOTE = ("MoE dispatch {dispatcher}{overlap} as the {container} release's performance recipe sets it "
                 "(moe-comm-by-release.csv)")
RECOMPUTE_NOTE = ("recompute selective {modules} as the {container} release's performance recipe sets it "
                  "(make_cases.py RECOMPUTE_BY_RELEASE)")
NO_RECOMPUTE_NOTE = "no recompute: the {container} release's performance recipe sets none (make_cases.py)"

# Recompute of each published row as the performance recipe of its release sets it (the table does not list it):
# selective recompute of these megatron-core modules; every other row runs without recompute. Read per release tag
# of Megatron-Bridge (25.09 = v0.1.0rc4, 25.11 = v0.2.0, 26.02 = v0.3.0, 26.02.01 = v0.3.1, 26.04 = v0.4.0,
# 26.04.01 = v0.4.2, 26.06 = v0.5.0, 26.06.01 = v0.5.1, 26.08 = v0.6.0: docs/releases/software-versions.md and the
# tags' own performance tables): scripts/performance/configs/<family>/*workload_base_configs.py (recompute_modules
# per config, applied with granularity selective by scripts/performance/utils/overrides.py; DeepSeek's
# deepseek_llm_pretrain.py forces selective), v0.1.0rc4's deepseek_v3_llm_pretrain.yaml and run_script.py, v0.6.0's
# src/megatron/bridge/perf_recipes/<family>/<gpu>/*.py. Left out on purpose: 25.11 GPT-OSS (its configs list
# layernorm + moe_act, but v0.2.0's override set the modules without the granularity, fixed after the table by
# commit 6afd5c74b: nothing was recomputed); GB300 DeepSeek-V3 and GB200 GPT-OSS MXFP8 from 26.06 (empty module
# lists); H100 Llama3-8B 25.11 (the row's FSDP layout is the config without recompute; the later config with full
# recompute of 5 layers has no FSDP).
RECOMPUTE_BY_RELEASE = (  # (model, hardware, precision, NeMo containers, modules)
    ("deepseek-v3", "b200", "fp8_cs", "25.09", "mla_up_proj"),
    ("deepseek-v3", "b200", "fp8_mx", "25.11 26.02 26.02.01 26.04", "mla_up_proj"),
    ("deepseek-v3", "b200", "fp8_mx", "26.04.01", "mla_up_proj mlp"),
    ("deepseek-v3", "gb200", "bf16", "25.11", "mla_up_proj"),
    ("deepseek-v3", "gb200", "fp8_cs", "25.09", "mla_up_proj"),
    ("deepseek-v3", "gb200", "fp8_mx", "25.11 26.02 26.02.01 26.06 26.06.01 26.08", "mla_up_proj"),
    ("deepseek-v3", "gb200", "fp8_mx", "26.04 26.04.01", "mlp"),
    ("deepseek-v3", "gb300", "bf16", "25.11", "mlp moe_act"),
    ("deepseek-v3", "gb300", "fp8_mx", "25.11", "mlp moe_act"),
    ("deepseek-v3", "gb300", "fp8_mx", "26.02 26.02.01 26.04 26.04.01", "mla_up_proj"),
    ("deepseek-v3", "h100-sxm", "fp8_cs", "25.09", "mla_up_proj mlp"),
    ("deepseek-v4-flash", "gb200", "fp8_mx", "26.08", "mla_up_proj"),
    ("deepseek-v4-flash", "gb300", "fp8_mx", "26.08", "mla_up_proj"),
    ("gpt-oss-120b", "b200", "bf16", "26.02 26.02.01 26.04 26.04.01", "layernorm moe_act"),
    ("gpt-oss-120b", "gb200", "bf16", "26.02 26.02.01 26.04 26.04.01", "layernorm moe_act"),
    ("gpt-oss-120b", "h100-sxm", "bf16", "26.02 26.02.01 26.04 26.04.01", "layernorm moe_act"),
)
RECIPE_PRECISION = {"FP8": "fp8_cs", "FP8-CS": "fp8_cs", "MXFP8": "fp8_mx", "FP8-MX": "fp8_mx", "BF16": "bf16"}


def recompute_modules(model_id: str, hw: str, precision_cell: str, container: str) -> list[str] | None:
    """The row's selective-recompute modules (RECOMPUTE_BY_RELEASE), None: no recompute."""
    key = (model_id, hw, RECIPE_PRECISION[precision_cell])
    for model, gpu, precision, containers, modules in RECOMPUTE_BY_RELEASE:
        if (model, gpu, precision) == key and container in containers.split():
            return modules.split()
    return None


@functools.cache
def _moe_comm_rows() -> tuple[dict[str, str], ...]:
    lines = [line for line in MOE_COMM_CSV.read_text().splitlines() if line and not line.startswith("#")]
    return tuple(csv.DictReader(lines))


def moe_comm(model_id: str, hw: str, precision_cell: str, container: str) -> tuple[str, bool] | None:
    """(train.moe_dispatcher, EP all-to-all overlap) of the row's recipe (moe-comm-by-release.csv: flex with the
    hybridep backend -> hybridep, with deepep -> deepep); None: Megatron's alltoall without the overlap."""
    key = (model_id, hw, RECIPE_PRECISION[precision_cell])
    for row in _moe_comm_rows():
        if (row["model"], row["hardware"], row["precision"]) == key and container in row["containers"].split():
            return row["dispatcher"].split("/")[-1], row["ep_a2a_overlap"] == "True"
    return None


@functools.cache
def _cuda_graph_rows() -> tuple[dict[str, str], ...]:
    lines = [line for line in CUDA_GRAPHS_CSV.read_text().splitlines() if line and not line.startswith("#")]
    return tuple(csv.DictReader(lines))


def cuda_graph_scope(key: tuple[str, ...]) -> str:
    """stack_options.cuda_graph_scope of a row (cuda-graphs-by-release.csv, keyed by model, hardware, precision,
    release, GPUs, layout, micro-batch): TransformerEngine's scope parts, full_iteration, or none. megatron-core's
    local graphs of the whole layer (25.09's scope full) hold its attention and dense MLP blocks; an MoE block routed
    without a capacity syncs with the host for its token counts, which no graph holds: it stays eager."""
    for row in _cuda_graph_rows():
        if tuple(row[c] for c in ("model", "hardware", "precision", "release", "gpus", "layout", "mbs")) == key:
            impl, scope = row["cuda_graph_impl"], row["cuda_graph_scope"]
            if impl == "none":
                return "none"
            if "full_iteration" in (impl, scope):
                return "full_iteration"
            return "attn+mlp" if scope in ("", "full") else scope
    return "none"


def case_for(container: str, page: str, system: str | None, model: str | None, row: dict) -> tuple[dict | None, str]:
    system = system or row.get("System", "")
    name = model or row.get("Model", "")
    base = name.split("(")[0].strip()
    variant = name[len(base):].strip()
    if system not in SYSTEMS:
        return None, f"system {system}"
    if base not in MODELS:
        return None, f"model {base}"
    precision_cell = first(row.get("Precision", "FP8"))
    if precision_cell not in PRECISIONS:
        return None, f"precision {precision_cell}"
    hw, model_id, precision = SYSTEMS[system], MODELS[base], PRECISIONS[precision_cell]
    gpus = as_int(row["#-GPUs"])
    tp, pp, cp = as_int(row["TP"]), as_int(row["PP"]), as_int(row["CP"])
    vpp, ep = as_int(row.get("VP", "n/a")), as_int(row.get("EP", "n/a"))
    fsdp = as_int(row.get("FSDP", "0"), default=0) > 0
    tokens = float(first(row["Tokens / sec / GPU"]).replace(",", ""))
    tflops = float(first(row["Model TFLOP / sec / GPU"]).replace(",", ""))
    slug = re.sub(r"[^a-z0-9.]+", "-", (f"mb{container}-{hw}-{model_id}-{precision_cell}-{gpus}g-"
                                        f"tp{tp}pp{pp}cp{cp}vp{vpp}ep{ep}-mbs{row['MBS']}").lower()).strip("-")
    model_ref: dict = {"id": model_id}
    if "w/o MTP" in variant:
        model_ref = {"hf_config": hf_config_without_mtp(model_id)}
    case = {
        "id": slug,
        "source": f"NVIDIA Megatron-Bridge performance summary, NeMo {container} container, {system}, {name} "
                  f"({SOURCE_URL}{page})",
        "kind": "pretrain",
        "hardware": hw,
        "stack": f"megatron-bridge@{container}",
        "gpus": gpus,
        "model": model_ref,
        "train": {
            "precision": precision,
            "seq_len": as_int(row["Sequence Length"]),
            "global_batch": as_int(row["GBS"]),
            "micro_batch": as_int(row["MBS"]),
            "layout": {"tp": tp, "pp": pp, "cp": cp, "ep": ep, "vpp": vpp},
            "recompute": "none",
            "sequence_parallel": tp > 1,
            "distributed_optimizer": True,
            "fsdp": fsdp,
        },
        "measured": {"tokens_per_s_per_gpu": tokens, "tflops_per_gpu": tflops},
        "notes": f"{precision_cell} as published; MoE rows force-balanced, dropless"
                 + (f"; variant {variant}" if variant else ""),
    }
    modules = recompute_modules(model_id, hw, precision_cell, container)
    if modules:
        case["train"].update(recompute="selective", recompute_modules=modules)
    case["notes"] += "; " + (RECOMPUTE_NOTE if modules else NO_RECOMPUTE_NOTE).format(
        modules=" + ".join(modules or ()), container=container)
    offload = ACTIVATION_OFFLOAD.get((model_id, hw, precision, fsdp))
    if offload:
        case["train"]["activation_offload_layers"] = offload
        case["notes"] += (f"; activations of {offload} layers offloaded to the host: "
                          + OFFLOAD_SOURCE[model_id].format(hw=hw.upper(), precision=precision_cell, hw_id=hw))
    key = ("deepseek-v3 w/o mtp" if "w/o MTP" in variant else model_id, hw,
           {"bf16": "bf16", "fp8_cs": "tensorwise", "fp8_mx": "mxfp8"}[RECIPE_PRECISION[precision_cell]], container,
           str(gpus), f"tp{tp}pp{pp}ep{ep}", str(row["MBS"]))
    graphs = cuda_graph_scope(key)
    if graphs != "none":
        case["stack_options"] = {"cuda_graph_scope": graphs}
        case["notes"] += "; " + CUDA_GRAPHS_NOTE.format(scope=graphs, container=container)
        if graphs == "full_iteration" and ep > 1:
            # the full-iteration MXFP8 MoE recipes (26.06+) fuse the grouped MLP into one launch:
            # cutedsl_fused_grouped_mlp=True beside cuda_graph_impl="full_iteration" in the workload configs
            case["stack_options"]["grouped_gemm_launch"] = "single"
    comm = moe_comm(model_id, hw, precision_cell, container) if ep > 1 else None
    if comm:
        dispatcher, overlap = comm
        if dispatcher != "alltoall":
            case["train"]["moe_dispatcher"] = dispatcher
        if overlap:  # megatron-core overlap_moe_expert_parallel_comm: the combined 1F1B schedule
            case["train"]["schedule"] = "combined-1f1b"
        case["notes"] += "; " + MOE_COMM_NOTE.format(dispatcher=dispatcher, container=container,
                                                     overlap=" with the EP all-to-all overlap" if overlap else "")
    return case, ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pages", nargs="+", help="local copies of performance-summary.md / performance-summary-archive.md")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    written, skipped = 0, {}
    seen: set[str] = set()
    for path in args.pages:
        page = Path(path).name
        for container, page_name, system, model, row in rows(Path(path).read_text(), page):
            case, why = case_for(container, page_name, system, model, row)
            if case is None:
                skipped[why] = skipped.get(why, 0) + 1
                continue
            if case["id"] in seen:
                case["id"] += f"-{written}"
            seen.add(case["id"])
            (out / f"{case['id']}.yaml").write_text(yaml.safe_dump(case, sort_keys=False, width=120))
            written += 1
    print(f"wrote {written} cases to {out}; skipped: " + ", ".join(f"{k} x{v}" for k, v in sorted(skipped.items())))


if __name__ == "__main__":
    main()
