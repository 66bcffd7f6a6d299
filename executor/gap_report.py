"""`executor show`'s train/rollout log-prob gap: the run's per-step curve next to the same model's runs with the
other rollout precision in the store (the FP8/BF16 comparison), in one line and, with `--figure`, as a plotly
figure. Runs are the same model when their plans' model sections are equal (plans that are gone or changed since
their run are left out)."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from executor.records import launched_plan


def _model_of(run: dict[str, Any]) -> Any:
    plan = launched_plan(run)
    return None if plan is None else plan.model.model_dump()


def _curve(steps: list[dict[str, Any]]) -> list[tuple[int, float]]:
    return [(s["step"], s["train_rollout_logprob_abs_diff"]) for s in steps]


def comparison(store: Any, run: dict[str, Any], steps: list[dict[str, Any]], plan: Any) -> list[dict[str, Any]]:
    """This run and the same model's runs with the other rollout precision: id, precision, per-step gap, mean.
    `plan`: the run's plan as launched (`launched_plan(run)`, which the caller has), or None."""
    mine = run["info"].get("rollout_precision")
    model = None if plan is None else plan.model.model_dump()
    rows = [{"run_id": run["run_id"], "precision": mine, "curve": _curve(steps)}]
    if model is not None:
        for other in store.runs():
            prec = other["info"].get("rollout_precision")
            if other["run_id"] == run["run_id"] or not prec or prec == mine or _model_of(other) != model:
                continue
            rows.append({"run_id": other["run_id"], "precision": prec, "curve": _curve(store.steps(other["run_id"]))})
    for r in rows:
        r["mean"] = statistics.fmean(v for _, v in r["curve"]) if r["curve"] else None
    return [r for r in rows if r["mean"] is not None]


def summary_line(rows: list[dict[str, Any]]) -> str:
    me = rows[0]
    line = f"log-prob gap (mean |train - rollout| over steps): this run ({me['precision']}) {me['mean']:.2e}"
    others = rows[1:]
    if not others:
        return line + "; no run of the same model with the other rollout precision in this store"
    for o in others:
        fp8, bf16 = (me, o) if me["precision"] == "fp8" else (o, me)
        ratio = f"; the FP8 rollout's gap is {fp8['mean'] / bf16['mean']:.1f}x the BF16 one" if bf16["mean"] else ""
        line += f"; {o['run_id']} ({o['precision']}, same model) {o['mean']:.2e}{ratio}"
    return line


def write_figure(rows: list[dict[str, Any]], path: Path) -> None:
    import plotly.graph_objects as go

    fig = go.Figure()
    for r in rows:
        fig.add_trace(go.Scatter(x=[s for s, _ in r["curve"]], y=[v for _, v in r["curve"]], mode="lines+markers",
                                 name=f"{r['run_id']} ({r['precision']} rollout)"))
    fig.update_layout(title="train/rollout log-prob gap per step (mean |train - rollout| log-prob)",
                      xaxis_title="step", yaxis_title="gap", yaxis_type="log", height=500, width=900)
    from perfmodel.files import atomic_path

    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        fig.write_html(tmp, include_plotlyjs=True)
