"""`executor align`'s output: the table (per layer and component, each engine against the reference and against
each other, and what the precision alone does), the departures in one sentence each, the log-prob gap by position,
and the same as a plotly figure (align.html) and JSON (align.json)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from executor.align.compare import AlignResult


def _fmt(v: float | None, routing: bool) -> str:
    if v is None:
        return "-"
    return f"{v:.1%}" if routing else f"{v:.2e}"


def print_report(result: AlignResult, meta: dict[str, Any]) -> None:
    from perfmodel.report.console import console, new_table

    out = console()
    table = new_table(f"align {meta['plan_id']}: rollout {meta['precision']} vs trainer bf16, each against the FP32 "
                      f"reference on its own weights ({meta['sequences']} sequences, {meta['tokens']} tokens; relative "
                      "difference, routing: share of tokens with the reference's experts)",
                      ["layer", "component", "trainer vs ref", "rollout vs ref", "rollout vs trainer",
                       "precision alone"], left=("component",))
    for r in result.rows:
        routing = r.component == "routing"
        table.add_row(str(r.layer), r.component, *(_fmt(v, routing) for v in (
            r.trainer_vs_reference, r.rollout_vs_reference, r.rollout_vs_trainer, r.precision_alone)))
    out.print(table)
    if not result.rollout_layers:
        out.print("the rollout engine does not expose its layers (SGLang's own model class): it is judged by its "
                  "log-probs against the reference")
    for d in result.departures or []:
        out.print(d.sentence())
    if not result.departures:
        out.print("no departure: both engines stay within the precision's own noise of the reference")
    gap = new_table("train/rollout log-prob gap by position (the sampled tokens' log p, trainer - rollout)",
                    ["positions", "tokens", "mean |diff|", "max |diff|", "k3 KL"], left=("positions",))
    for b in result.gap:
        gap.add_row(b.positions, str(b.tokens), f"{b.mean_abs:.2e}", f"{b.max_abs:.2e}", f"{b.k3_kl:.2e}")
    out.print(gap)
    ref = result.gap_vs_reference
    out.print(f"mean |log p - reference log p|: trainer {ref['trainer']:.2e}, rollout {ref['rollout']:.2e}")


def figure(result: AlignResult, meta: dict[str, Any]) -> Any:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    rows = [r for r in result.rows if r.component != "routing"]
    x = [f"L{r.layer} {r.component}" for r in rows]
    fig = make_subplots(rows=3, cols=1, vertical_spacing=0.12, subplot_titles=(
        "relative difference per layer and component (log scale)", "routing: share of tokens with the reference's "
        "experts", "train/rollout log-prob gap by position"))
    for key, name in (("trainer_vs_reference", "trainer vs reference"), ("rollout_vs_reference",
                      "rollout vs reference"), ("rollout_vs_trainer", "rollout vs trainer"),
                      ("precision_alone", "precision alone")):
        ys = [getattr(r, key) for r in rows]
        if any(y is not None for y in ys):
            fig.add_trace(go.Scatter(x=x, y=ys, mode="lines+markers", name=name), row=1, col=1)
    for d in result.departures:
        if d.component not in ("routing", "log-probs"):
            fig.add_trace(go.Scatter(x=[f"L{d.layer} {d.component}"], y=[d.value], mode="markers",
                                     marker={"size": 16, "symbol": "x", "color": "red"},
                                     name=f"{d.engine} departs"), row=1, col=1)
    routing = [r for r in result.rows if r.component == "routing"]
    for key, name in (("trainer_vs_reference", "trainer"), ("rollout_vs_reference", "rollout")):
        ys = [getattr(r, key) for r in routing]
        if routing and any(y is not None for y in ys):
            fig.add_trace(go.Bar(x=[f"L{r.layer}" for r in routing], y=ys, name=f"{name} routing"), row=2, col=1)
    fig.add_trace(go.Bar(x=[b.positions for b in result.gap], y=[b.mean_abs for b in result.gap],
                         name="mean |diff|"), row=3, col=1)
    fig.update_yaxes(type="log", row=1, col=1)
    fig.update_layout(height=1000, width=1100, title=f"executor align: {meta['plan_id']}, rollout {meta['precision']}")
    return fig


def write_outputs(result: AlignResult, meta: dict[str, Any], out_dir: Path) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    from perfmodel.files import atomic_path, write_text_atomic

    js = out_dir / "align.json"
    write_text_atomic(js, json.dumps({"meta": meta, **result.to_json()}, indent=2) + "\n")
    html = out_dir / "align.html"
    with atomic_path(html) as tmp:
        figure(result, meta).write_html(tmp, include_plotlyjs=True)
    return js, html
