"""Turn Megatron-Bridge's published performance tables into validation cases (a development set).

The tables are docs/performance-summary.md and docs/performance-summary-archive.md of
https://github.com/NVIDIA-NeMo/Megatron-Bridge (read at commit 067f987df03b, 2026-08); every NeMo container
release from 25.09 to 26.08 has its own section. This script reads local copies of those two pages and writes one
case file per table row whose GPU has a profile and whose model is in the catalogue:

    python studies/validation/mbridge-archive/make_cases.py SUMMARY.md ARCHIVE.md \
--out studies/validation/mbridge-archive/cases

Rows are skipped (and counted) for GPUs without a profile (DGX-B300), models outside the catalogue (Nemotron),
NVFP4 (no FP4 training path in the cost model yet). The shared cases (the shared validation set) are 11 of
these rows from the 25.11 container; this set holds all releases so that a change to the cost model is judged on
many runs, not tuned to a few. Nothing here is fitted to.
"""

from __future__ import annotations

import argparse
import copy
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
ACTIVATION_OFFLOAD = {("llama3-70b", "gb200", "fp8", True): 40, ("llama3-70b", "gb300", "fp8", True): 20,
                      ("llama3-70b", "gb200", "bf16", True): 20, ("llama3-70b", "gb300", "bf16", True): 30}
OFFLOAD_SOURCE = ("Megatron-Bridge scripts/performance/configs/llama/llama3_workload_base_configs.py (tags v0.2.0 to "
                  "v0.5.0), cpu_offloading_num_layers of the {hw} {precision} config")


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
        "notes": f"{precision_cell} as published; recompute not listed (none assumed); MoE rows force-balanced, "
                 "dropless" + (f"; variant {variant}" if variant else ""),
    }
    offload = ACTIVATION_OFFLOAD.get((model_id, hw, precision, fsdp))
    if offload:
        case["train"]["activation_offload_layers"] = offload
        case["notes"] += (f"; activations of {offload} layers offloaded to the host: "
                          + OFFLOAD_SOURCE.format(hw=hw.upper(), precision=precision_cell))
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
