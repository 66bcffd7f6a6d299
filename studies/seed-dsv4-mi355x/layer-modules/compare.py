"""The model's DeepSeek-V4-Flash layer on MI355X, module by module, against AMD's Primus kernel traces of the same
layers (modules.csv): where the training phase's time goes, and where the model misses it.

    python studies/seed-dsv4-mi355x/layer-modules/compare.py [--format md]

The model prices each layer of the shipped 64-GPU Primus case (studies/validation/amd-published) for one
micro-batch of 4096 tokens, EP8, TP1 (the traces' capture): each GEMM and kernel of the layer's Work timed alone
by the functions a step uses (cost/train/stage.py time_work), then summed into the trace's modules. The EP
all-to-all is listed apart: the traces time dispatch and combine as Primus-Turbo's intranode DeepEP kernels on one
node, where the model's figure is the 8-GPU all-to-all. attn.misc + attn.norm (mHC and the norms) are not an
independent check: the model's `HC_ELEMENTWISE_PASSES_*` were read off these same traces.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
CASE = REPO / "studies/validation/amd-published/cases/amd-primus-mi355x-dsv4flash-64gpu-pp8-ep8-bf16.yaml"
TOKENS = 4096

# the trace's module for each of the model's Work items (cost/train/layers.py names)
MODULE_OF = {
    **dict.fromkeys(("wq_a", "wq_b", "wkv", "compressor_kv_gate", "wo_a", "wo_b"), "attn.proj"),
    **dict.fromkeys(("indexer_wq_b", "indexer_weights", "indexer_compressor", "indexer_compressor_pool",
                     "indexer_scores_topk"), "attn.indexer"),
    **dict.fromkeys(("core_attention", "rope", "q_kv_norms", "compressor_pool"), "attn.core"),
    "hc_norms_elementwise": "attn.misc + attn.norm",
    **dict.fromkeys(("experts_fc1", "experts_fc2", "experts_glu"), "moe.grouped_gemm"),
    **dict.fromkeys(("shared_fc1", "shared_fc2", "shared_glu"), "moe.shared_expert"),
    **dict.fromkeys(("router", "router_softmax_topk"), "moe.router"),
    "permute_unpermute": "moe.dispatch + moe.combine",
}
TRACE_MERGE = {"attn.misc": "attn.misc + attn.norm", "attn.norm": "attn.misc + attn.norm",
               "moe.dispatch": "moe.dispatch + moe.combine", "moe.combine": "moe.dispatch + moe.combine"}
ORDER = ("attn.proj", "attn.indexer", "attn.core", "attn.misc + attn.norm", "moe.grouped_gemm", "moe.shared_expert",
         "moe.router", "moe.dispatch + moe.combine")
PHASES = ("forward", "backward")


def traced() -> dict[tuple[int, str, str], float]:
    """(compress ratio, phase, module) -> ms, the trace's modules merged as the model's names group them."""
    out: dict[tuple[int, str, str], float] = defaultdict(float)
    with open(HERE / "modules.csv") as f:
        for row in csv.DictReader(line for line in f if not line.startswith("#")):
            module = TRACE_MERGE.get(row["module"], row["module"])
            out[(int(row["compress_ratio"]), row["phase"], module)] += float(row["time_us"]) / 1e3
    return out


def modelled() -> tuple[dict[tuple[int, str, str], float], dict[tuple[int, str], float]]:
    """(compress ratio, phase, module) -> ms of the model's layer, and (compress ratio, phase) -> the EP
    all-to-all's ms, for the case's first layer of each compress ratio."""
    from perfmodel.cost.train.layers import layer_work
    from perfmodel.cost.train.stage import _places, shard_of
    from perfmodel.cost.train.timing import time_work
    from perfmodel.cost.train.work import Work
    from perfmodel.inputs.case import load_case
    from perfmodel.inputs.scenario import build_scenario

    scn = build_scenario(load_case(CASE), source=str(CASE))
    hw, places, shard = scn.hardware, _places(scn), shard_of(scn, TOKENS, TOKENS)
    scale_f = scn.stack.train_compute_scale
    scale_b = scale_f * scn.stack.backward_compute_scale
    out: dict[tuple[int, str, str], float] = defaultdict(float)
    a2a: dict[tuple[int, str], float] = defaultdict(float)
    seen: set[int] = set()
    for layer in scn.model.layers:
        cr = int(getattr(layer.attention, "compress_ratio", 0) or 0)
        if cr in seen or layer.ffn.kind != "moe":
            continue
        seen.add(cr)
        work = layer_work(scn.model, layer, shard)
        alone = [(g.name, Work(gemms=(g,))) for g in work.gemms] + [(k.name, Work(kernels=(k,))) for k in work.kernels]
        for name, one in alone:
            t = time_work(hw, one, places)
            module = MODULE_OF.get(name, f"(unmapped) {name}")
            out[(cr, "forward", module)] += t.fwd * scale_f * 1e3
            out[(cr, "backward", module)] += (t.bwd_in + t.bwd_w) * scale_b * 1e3
        for comm in work.comms:
            t = time_work(hw, Work(comms=(comm,)), places)
            a2a[(cr, "forward" if comm.phase == "fwd" else "backward")] += \
                (sum(t.fwd_comm.values()) + sum(t.bwd_comm.values())) * 1e3
    return out, a2a


def rows(model: dict[tuple[int, str, str], float]) -> list[tuple[int, str, str, float, float]]:
    """(compress ratio, phase, module, trace ms, model ms) for every module either side has."""
    trace = traced()
    modules = list(ORDER) + sorted({k[2] for k in model} - set(ORDER))
    return [(cr, phase, module, trace.get((cr, phase, module), 0.0), model.get((cr, phase, module), 0.0))
            for cr in sorted({k[0] for k in trace}) for phase in PHASES for module in modules
            if trace.get((cr, phase, module)) or model.get((cr, phase, module))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--format", choices=("text", "md"), default="text")
    args = ap.parse_args(argv)
    model, a2a = modelled()
    table = rows(model)
    md = args.format == "md"
    if md:
        print("| compress ratio | phase | module | trace (ms) | model (ms) | model / trace |")
        print("|---|---|---|---|---|---|")
    totals: dict[tuple[int, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for cr, phase, module, t_ms, m_ms in table:
        totals[(cr, phase)][0] += t_ms
        totals[(cr, phase)][1] += m_ms
        ratio = f"{m_ms / t_ms:.2f}" if t_ms else "-"
        print(f"| {cr} | {phase} | {module} | {t_ms:.2f} | {m_ms:.2f} | {ratio} |" if md else
              f"cr {cr:3d} {phase:8} {module:28} trace {t_ms:7.2f} ms  model {m_ms:7.2f} ms  {ratio:>5}")
    for (cr, phase), (t_ms, m_ms) in sorted(totals.items()):
        line = (f"layer total, cr {cr} {phase}: trace {t_ms:.2f} ms, model {m_ms:.2f} ms ({m_ms / t_ms:.2f}); "
                f"the model's EP all-to-all beside it {a2a[(cr, phase)]:.2f} ms")
        print(f"| {cr} | {phase} | **layer total** | {t_ms:.2f} | {m_ms:.2f} | {m_ms / t_ms:.2f} |" if md else line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
