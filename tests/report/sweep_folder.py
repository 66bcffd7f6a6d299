"""Writes a small but realistic `perfmodel sweep` output folder: 30 candidates over 2, 4 and 8 nodes of H100s,
some pruned, one failed, a summary, the best plan's Chrome trace and measurements of three phases."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from perfmodel.report.sweep_data import COLUMNS
from perfmodel.trace import Span, chrome_trace

GPN = 8  # GPUs per node
HBM = 80e9


def _candidates() -> list[dict]:
    rows: list[dict] = []
    layouts = [  # tp, pp, ep, recompute, offload
        (2, 2, 4, "selective", 0.0), (4, 2, 8, "full", 0.0), (1, 4, 8, "selective", 0.0),
        (2, 4, 4, "full", 1.0), (8, 1, 8, "none", 0.0),
    ]
    for nodes in (2, 4, 8):
        gpus = nodes * GPN
        for placement, async_ in (("colocated", 0), ("disaggregated", 0), ("disaggregated", 1)):
            for li, (tp, pp, ep, rc, off) in enumerate(layouts[:4] if placement == "colocated" else layouts[1:4]):
                if len(rows) >= 30:
                    break
                actor = gpus if placement == "colocated" else gpus // 2
                rollout = gpus if placement == "colocated" else gpus - actor
                i = len(rows)
                r = {c: "" for c in COLUMNS}
                r.update(index=i, nodes=nodes, gpus=gpus, placement=placement, actor_gpus=actor,
                         rollout_gpus=rollout, tp=tp, pp=pp, cp=1, ep=ep, etp=1, vpp=1, schedule="1f1b",
                         recompute=rc, offload=off, engine_gpus=8, engine_tp=8, engine_ep=8 if li % 2 else 1,
                         engine_dp=1, dp_attention=li % 2)
                r["async"] = async_
                place = "coloc" if placement == "colocated" else f"disagg{actor}+{rollout}"
                if async_:
                    place += "-async"
                r["label"] = (f"{nodes}n TP{tp}/PP{pp}/EP{ep} rc-{rc}" + (" offload" if off else "")
                              + f" {place} eng8-tp8-ep{r['engine_ep']}" + ("-dpa" if li % 2 else ""))
                # A deterministic toy cost model: enough structure for the curves to look like a sweep's.
                mem_w = 140e9 / (tp * pp) * 0.9 + 2e9
                mem_g = mem_w * 0.5 if rc != "full" else mem_w * 0.45
                mem_o = 0.0 if off else mem_w * 1.6 / max(1, actor // (tp * pp))
                mem_a = {"none": 38e9, "selective": 14e9, "full": 6e9}[rc] / tp
                mem_other = 3e9
                mem_train = mem_w + mem_g + mem_o + mem_a + mem_other
                if i % 7 == 3 or mem_train > HBM:
                    need = mem_train if mem_train > HBM else 1.6 * mem_train
                    r.update(status="pruned", reason=f"memory: training needs {need / 1e9:.1f} GB per GPU, "
                             f"{HBM / 1e9:.1f} GB available")
                elif i % 11 == 5:
                    r.update(status="pruned", reason=f"layout: tp*pp = {tp * pp * 3} does not divide {gpus} GPUs")
                elif i == 29:
                    r.update(status="failed", reason="simulator: pipeline deadlock with 3 micro-batches")
                else:
                    scale = 16 / gpus
                    rollout_s = 42.0 * (16 / rollout) ** 0.85
                    train_c = 30.0 * scale * (1.15 if rc == "full" else 1.0)
                    bubble = train_c * (pp - 1) / (pp - 1 + 8)
                    a2a = 0.6 * ep / 4 * scale ** 0.3
                    other_comm = 1.2 * scale ** 0.5
                    logp = 6.0 * scale
                    wsync = 2.5 if placement == "colocated" else 4.0
                    offl = 3.0 if off else 0.0
                    train_path = logp + train_c + bubble + a2a + other_comm + offl
                    exposed = max(0.0, rollout_s - train_path) if async_ else rollout_s
                    other = 0.4
                    step = exposed + train_path + wsync + other
                    r.update(status="ok", step_time_s=round(step, 4), rollout_time_s=round(rollout_s, 4),
                             log_probs_time_s=logp, train_time_s=train_c + bubble + a2a + other_comm,
                             weight_update_time_s=wsync, offload_time_s=offl, bd_rollout_s=round(exposed, 4),
                             bd_log_probs_s=logp, bd_train_compute_s=train_c, bd_bubble_s=bubble,
                             bd_exposed_a2a_s=a2a, bd_other_comm_s=other_comm, bd_weight_sync_s=wsync,
                             bd_offload_s=offl, bd_other_s=other, objective_value=round(step, 4),
                             tokens_per_s_per_gpu=round(512 * 4096 / step / gpus, 1),
                             gpu_hours_per_step=round(step * gpus / 3600, 5),
                             mem_train_bytes=mem_train, mem_train_capacity_bytes=HBM,
                             mem_rollout_bytes=(0.55 if placement == "colocated" else 0.85) * HBM,
                             mem_rollout_capacity_bytes=(0.6 if placement == "colocated" else 0.9) * HBM,
                             mem_train_weights_bytes=mem_w, mem_train_grads_bytes=mem_g,
                             mem_train_optimizer_bytes=mem_o, mem_train_activations_bytes=mem_a,
                             mem_train_other_bytes=mem_other)
                rows.append(r)
    ok = sorted((r for r in rows if r["status"] == "ok"), key=lambda r: r["step_time_s"])
    for k, r in enumerate(ok, start=1):
        r["rank"] = k
    return rows


def _trace() -> dict:
    """The best plan's step: phases, 4 pipeline stages (1F1B, 8 micro-batches), 2 rollout engines."""
    spans = []
    rollout_s, logp, pp, m, f, b = 12.0, 1.5, 4, 8, 0.25, 0.5
    for e in range(2):
        t = 0.0
        for k in range(6):
            d = 0.3 + 0.15 * ((k + e) % 3)
            spans.append(Span(f"engine {e}", "requests", "prefill", t, 0.2))
            spans.append(Span(f"engine {e}", "requests", f"decode {k}", t + 0.2, d * 6))
            t += 0.2 + d * 6
    t1 = rollout_s + logp
    free = [t1] * pp
    for mb in range(m):  # a simple fill-drain schedule, good enough for a picture
        for s in range(pp):
            start = max(free[s], (free[s - 1] if s else t1))
            spans.append(Span(f"train stage {s}", "compute", f"F{mb}", start, f))
            free[s] = start + f
    for mb in range(m):
        for s in reversed(range(pp)):
            start = max(free[s], free[s + 1] if s + 1 < pp else 0.0)
            spans.append(Span(f"train stage {s}", "compute", f"B{mb}", start, b))
            spans.append(Span(f"train stage {s}", "comm", "ep_a2a+tp", start + b - 0.05, 0.05))
            free[s] = start + b
    end = max(free)
    spans += [Span("rl step", "phases", "rollout", 0.0, rollout_s),
              Span("rl step", "phases", "log_probs", rollout_s, logp),
              Span("rl step", "phases", "actor_train", t1, end - t1),
              Span("rl step", "phases", "update_weights", end, 2.5)]
    return chrome_trace(spans)


def write_sweep(folder: Path, measured: bool = True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rows = _candidates()
    with (folder / "candidates.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(COLUMNS))
        w.writeheader()
        w.writerows(rows)
    ok = sorted((r for r in rows if r["status"] == "ok"), key=lambda r: r["rank"])
    summary = {
        "spec": {"hardware": "h100-sxm", "model": {"id": "qwen3-30b-a3b"}, "nodes": [2, 4, 8],
                 "job": {"kind": "rl", "train": {"seq_len": 4096, "global_batch": 512}}, "objective": "step_time"},
        "objective": "step_time", "evaluated": len(ok), "pruned": sum(r["status"] == "pruned" for r in rows),
        "elapsed_s": 12.5,
        "top": [{"rank": r["rank"], "index": r["index"], "label": r["label"],
                 "plan_path": f"plans/plan-{r['rank']:02d}.yaml", "step_time_s": r["step_time_s"]} for r in ok[:5]],
        "best_trace": "best_trace.json"}
    (folder / "summary.json").write_text(json.dumps(summary, indent=2))
    (folder / "best_trace.json").write_text(json.dumps(_trace()))
    if measured:
        meas = []
        for step in range(3):
            for phase, pred, meas_v in (("rollout_time_s", 12.0, 13.1 + 0.4 * step), ("train_time_s", 7.4, 6.9),
                                        ("step_time_s", 24.5, 25.0 + 0.3 * step)):
                meas.append({"phase": phase, "predicted": pred, "measured": meas_v, "run": "run-0001",
                             "step": step})
        (folder / "measured.json").write_text(json.dumps(meas, indent=1))
    return folder
