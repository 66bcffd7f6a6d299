"""Plotly figures of the capacity report. Each function takes loaded sweep data and returns a `go.Figure`.

All figures use fixed colours per category (the same phase has the same colour in every chart) and give every
bar a hover text with the layout's full label, since axis labels are shortened.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from perfmodel.names import BREAKDOWN, breakdown_column
from perfmodel.report.sweep_data import TraceData
from perfmodel.report.sweep_digest import family

GB = 1e9

# Legend name and colour of each RL step part (perfmodel.results.BREAKDOWN, in the order the parts happen).
_BREAKDOWN_STYLE = {
    "rollout": ("rollout", "#4C78A8"),
    "log_probs": ("log-probs", "#72B7B2"),
    "train_compute": ("train compute", "#54A24B"),
    "bubble": ("pipeline bubble", "#EECA3B"),
    "exposed_a2a": ("exposed all-to-all", "#F58518"),
    "other_comm": ("other comm", "#FF9DA6"),
    "weight_sync": ("weight sync", "#B279A2"),
    "offload": ("offload", "#9D755D"),
    "other": ("other", "#BAB0AC"),
}
# (column, legend name, colour)
BREAKDOWN_PARTS = tuple((breakdown_column(p), *_BREAKDOWN_STYLE[p]) for p in BREAKDOWN)
MEMORY_PARTS = (
    ("mem_train_weights_bytes", "weights", "#4C78A8"),
    ("mem_train_grads_bytes", "gradients", "#72B7B2"),
    ("mem_train_optimizer_bytes", "optimizer", "#54A24B"),
    ("mem_train_activations_bytes", "activations", "#F58518"),
    ("mem_train_other_bytes", "other", "#BAB0AC"),
)
FAMILY_COLORS = {"colocated · sync": "#4C78A8", "colocated · async": "#72B7B2",
                 "disaggregated · sync": "#F58518", "disaggregated · async": "#E45756", "training only": "#54A24B"}
CAPACITY_COLOR = "#D62728"
FONT = dict(family="system-ui, -apple-system, Segoe UI, Roboto, Helvetica, Arial, sans-serif", size=12)


def _base_layout(fig: go.Figure, height: int, **kw: Any) -> go.Figure:
    fig.update_layout(template="plotly_white", height=height, font=FONT, margin=dict(l=10, r=10, t=50, b=40),
                      legend=dict(orientation="v", yanchor="top", y=1.0, xanchor="left", x=1.01, tracegroupgap=4), **kw)
    return fig


def short_label(r: dict[str, Any], width: int = 60) -> str:
    text = f"#{r['rank']} {r['label']}"
    return text if len(text) <= width else text[: width - 1] + "…"


def _v(x: float | None, scale: float = 1.0) -> float | None:
    return None if x is None else x / scale


# ------------------------------------------------------------------------------------------------ 2. breakdown
def breakdown_figure(rows: list[dict[str, Any]]) -> go.Figure:
    """Horizontal stacked bars: where the predicted RL step time goes, per layout (best on top)."""
    ys = [short_label(r) for r in rows]
    full = [f"#{r['rank']} {r['label']}" for r in rows]
    fig = go.Figure()
    for col, name, color in BREAKDOWN_PARTS:
        vals = [r[col] or 0.0 for r in rows]
        if not any(vals):
            continue  # a part no layout has (e.g. offload) would only add a legend entry
        fig.add_trace(go.Bar(
            y=ys, x=vals, name=name, orientation="h", marker_color=color, customdata=full,
            hovertemplate="%{customdata}<br>" + name + ": %{x:.3f} s<extra></extra>"))
    fig.add_trace(go.Scatter(
        y=ys, x=[r["step_time_s"] for r in rows], mode="markers", name="step time",
        marker=dict(symbol="line-ns-open", size=18, color="#222", line=dict(width=2, color="#222")), customdata=full,
        hovertemplate="%{customdata}<br>step time: %{x:.3f} s<extra></extra>"))
    _base_layout(fig, max(260, 110 + 26 * len(rows)), barmode="stack",
                 title=dict(text="Predicted RL step time by part (s)", x=0, font=dict(size=15)))
    fig.update_yaxes(autorange="reversed", automargin=True, type="category")
    fig.update_xaxes(title_text="seconds per RL step (predicted)", rangemode="tozero")
    return fig


# ------------------------------------------------------------------------------------------------ 3. capacity
def capacity_points(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """For each family, the best simulated layout (lowest rank) at each node count, by node count."""
    best: dict[tuple[str, int], dict[str, Any]] = {}
    for r in rows:
        if r["status"] != "ok":
            continue
        key = (family(r), r["nodes"])
        if key not in best or (r["rank"], r["index"]) < (best[key]["rank"], best[key]["index"]):
            best[key] = r
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for (fam, _n), r in sorted(best.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        out[fam].append(r)
    order = list(FAMILY_COLORS)
    return dict(sorted(out.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order)))


def capacity_figure(rows: list[dict[str, Any]]) -> go.Figure:
    fams = capacity_points(rows)
    nodes = sorted({r["nodes"] for r in rows})
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.08,
                        subplot_titles=("Step time of the best layout (s)", "Cost: GPU-hours per step"))
    for fam, pts in fams.items():
        color = FAMILY_COLORS.get(fam, "#666")
        xs = [p["nodes"] for p in pts]
        labels = [f"#{p['rank']} {p['label']}" for p in pts]
        for col, key, unit in ((1, "step_time_s", "s"), (2, "gpu_hours_per_step", "GPU-h")):
            fig.add_trace(go.Scatter(
                x=xs, y=[p[key] for p in pts], mode="lines+markers", name=fam, legendgroup=fam,
                showlegend=col == 1, line=dict(color=color, width=2), marker=dict(size=9), customdata=labels,
                hovertemplate=f"{fam}<br>%{{x}} nodes: %{{y:.4g}} {unit}<br>%{{customdata}}<extra></extra>"),
                row=1, col=col)
    # Ideal linear scaling from the overall best layout at the smallest node count that has one.
    ok = [r for r in rows if r["status"] == "ok"]
    if ok and len(nodes) > 1:
        n0 = min(r["nodes"] for r in ok)
        base = min((r for r in ok if r["nodes"] == n0), key=lambda r: (r["rank"], r["index"]))
        xs = [n for n in nodes if n >= n0]
        fig.add_trace(go.Scatter(
            x=xs, y=[base["step_time_s"] * n0 / n for n in xs], mode="lines", name=f"ideal scaling from {n0} nodes",
            legendgroup="ideal", line=dict(color="#888", dash="dot"),
            hovertemplate="ideal: %{y:.4g} s at %{x} nodes<extra></extra>"), row=1, col=1)
        if base["gpu_hours_per_step"] is not None:
            fig.add_trace(go.Scatter(
                x=xs, y=[base["gpu_hours_per_step"]] * len(xs), mode="lines", name="ideal scaling",
                legendgroup="ideal", showlegend=False, line=dict(color="#888", dash="dot"),
                hovertemplate="ideal: %{y:.4g} GPU-h at %{x} nodes<extra></extra>"), row=1, col=2)
    _base_layout(fig, 430)
    fig.update_layout(margin=dict(t=60))
    fig.update_xaxes(title_text="nodes", tickmode="array", tickvals=nodes)
    fig.update_yaxes(title_text="seconds per RL step", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="GPU-hours per step", rangemode="tozero", row=1, col=2)
    return fig


# -------------------------------------------------------------------------------------------------- 4. memory
def memory_figure(rows: list[dict[str, Any]]) -> go.Figure:
    """Per-GPU memory of the training GPUs (by part) and of the rollout GPUs, each against its capacity."""
    ys = [short_label(r, 48) for r in rows]
    full = [f"#{r['rank']} {r['label']}" for r in rows]
    rollout = any(r["mem_rollout_bytes"] is not None for r in rows)  # a pretraining sweep has no rollout GPUs
    titles = ("Training GPUs: memory per GPU (GB)", "Rollout GPUs: memory per GPU (GB)")
    fig = make_subplots(rows=1, cols=2 if rollout else 1, shared_yaxes=True, horizontal_spacing=0.03,
                        subplot_titles=titles if rollout else titles[:1])
    for col, name, color in MEMORY_PARTS:
        vals = [_v(r[col], GB) for r in rows]
        if not any(vals):
            continue
        fig.add_trace(go.Bar(y=ys, x=vals, name=f"train {name}", orientation="h", marker_color=color,
                             customdata=full, legendgroup="train",
                             hovertemplate="%{customdata}<br>" + name + ": %{x:.1f} GB<extra></extra>"), row=1, col=1)
    # Layouts whose parts are missing still show their total.
    totals_only = [None if any(r[c] for c, _, _ in MEMORY_PARTS) else _v(r["mem_train_bytes"], GB) for r in rows]
    if any(t is not None for t in totals_only):
        fig.add_trace(go.Bar(y=ys, x=totals_only, name="train total (no parts)", orientation="h",
                             marker_color="#999", customdata=full,
                             hovertemplate="%{customdata}<br>total: %{x:.1f} GB<extra></extra>"), row=1, col=1)
    panels = [(1, "mem_train_capacity_bytes")]
    if rollout:
        fig.add_trace(go.Bar(y=ys, x=[_v(r["mem_rollout_bytes"], GB) for r in rows],
                             name="rollout (weights + KV cache)", orientation="h", marker_color="#B279A2",
                             customdata=full, hovertemplate="%{customdata}<br>rollout: %{x:.1f} GB<extra></extra>"),
                      row=1, col=2)
        panels.append((2, "mem_rollout_capacity_bytes"))
    for c, cap_col in panels:
        fig.add_trace(go.Scatter(
            y=ys, x=[_v(r[cap_col], GB) for r in rows], mode="markers", name="capacity", legendgroup="capacity",
            showlegend=c == 1, customdata=full,
            marker=dict(symbol="line-ns-open", size=22, color=CAPACITY_COLOR, line=dict(width=3, color=CAPACITY_COLOR)),
            hovertemplate="%{customdata}<br>capacity: %{x:.1f} GB<extra></extra>"), row=1, col=c)
        caps = {r[cap_col] for r in rows if r[cap_col] is not None}
        if len(caps) == 1:  # one capacity for all layouts: draw it as a line too
            fig.add_vline(x=caps.pop() / GB, line=dict(color=CAPACITY_COLOR, width=1, dash="dash"), row=1, col=c)
    _base_layout(fig, max(280, 130 + 26 * len(rows)), barmode="stack")
    fig.update_layout(margin=dict(t=60))
    fig.update_yaxes(autorange="reversed", automargin=True, type="category", row=1, col=1)
    fig.update_xaxes(title_text="GB per GPU (predicted)", rangemode="tozero")
    return fig


# ------------------------------------------------------------------------------------------------ 5. timeline
_OP = re.compile(r"^(BW|F|B|W)\d")
OP_NAMES = {"F": "forward", "B": "backward", "BW": "backward + weight-grad", "W": "weight-grad"}
# Fixed colours for the categories every RL trace has (the phases match the breakdown chart's colours).
KNOWN_COLORS = {"rollout": "#4C78A8", "log_probs": "#72B7B2", "ref_log_probs": "#72B7B2", "actor_train": "#54A24B",
                "update_weights": "#B279A2", "offload": "#9D755D", "forward": "#FFBE7D", "backward": "#F28E2B",
                "backward + weight-grad": "#B6992D", "weight-grad": "#EDC948", "comm": "#FF9DA6"}
TIMELINE_COLORS = ["#BAB0AC", "#E45756", "#76B7B2", "#9C755F", "#AF7AA1", "#FF9DA7", "#1F77B4", "#8C564B",
                   "#17BECF", "#7F7F7F", "#BCBD22", "#D62728"]
MAX_CATEGORIES = 12


def _category(group: str, track: str, name: str) -> str:
    if track == "comm" or name.startswith("comm"):
        return "comm"
    m = _OP.match(name)
    if m:
        return OP_NAMES[m.group(1)]
    return re.sub(r"[\s_#-]*\d+$", "", name).strip() or name or "(unnamed)"


def timeline_rows(trace: TraceData) -> tuple[list[str], list[dict[str, Any]]]:
    """Row labels (top to bottom) and events with 'row' and 'category' set."""
    tracks: dict[tuple[Any, Any], None] = {}
    for e in trace.events:
        tracks.setdefault((e["pid"], e["tid"]), None)
    per_process = Counter(pid for pid, _ in tracks)

    def pname(pid: Any) -> str:
        return trace.process_names.get(pid, f"process {pid}")

    def natural(s: str) -> list[Any]:
        return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]

    def order(key: tuple[Any, Any]) -> tuple[Any, ...]:
        pid, tid = key
        name = pname(pid)
        top = 0 if name == "rl step" else 1  # the phase overview first
        return (top, trace.process_order.get(pid, 0.0), natural(name), natural(str(tid)))

    labels: dict[tuple[Any, Any], str] = {}
    for key in sorted(tracks, key=order):
        pid, tid = key
        tname = trace.thread_names.get(key, "")
        labels[key] = pname(pid) + (f" · {tname}" if per_process[pid] > 1 and tname else
                                    f" · {tid}" if per_process[pid] > 1 else "")
    events = []
    for e in trace.events:
        key = (e["pid"], e["tid"])
        events.append({**e, "row": labels[key],
                       "category": _category(pname(e["pid"]), trace.thread_names.get(key, ""), e["name"])})
    return list(labels.values()), events


def timeline_figure(trace: TraceData, max_bars: int = 4000) -> tuple[go.Figure, str]:
    """Gantt chart of a simulated step. Returns the figure and a note (events drawn, and how)."""
    rows, events = timeline_rows(trace)
    counts = Counter(e["category"] for e in events)
    keep = {c for c, _ in counts.most_common(MAX_CATEGORIES - 1)} if len(counts) > MAX_CATEGORIES else set(counts)
    for e in events:
        if e["category"] not in keep:
            e["category"] = "other"
    cats = sorted({e["category"] for e in events}, key=lambda c: (-counts.get(c, 0), c))
    free = [c for c in TIMELINE_COLORS if c not in KNOWN_COLORS.values()] or TIMELINE_COLORS
    colors: dict[str, str] = {}
    for c in cats:
        colors[c] = KNOWN_COLORS.get(c) or free[len([k for k in colors if k not in KNOWN_COLORS]) % len(free)]
    fig = go.Figure()
    as_bars = len(events) <= max_bars
    for c in cats:
        evs = [e for e in events if e["category"] == c]
        if as_bars:
            fig.add_trace(go.Bar(
                y=[e["row"] for e in evs], x=[e["dur_s"] for e in evs], base=[e["start_s"] for e in evs],
                orientation="h", name=c, marker=dict(color=colors[c], line=dict(width=0.5, color="white")),
                customdata=[[e["name"], e["start_s"], e["start_s"] + e["dur_s"]] for e in evs],
                hovertemplate="%{y}<br>%{customdata[0]}: %{customdata[1]:.4f} to %{customdata[2]:.4f} s"
                              " (%{x:.4f} s)<extra></extra>"))
        else:  # many events: one SVG path per category (lines with gaps) stays fast where thousands of bars do not
            xs: list[float | None] = []
            ys: list[str | None] = []
            for e in evs:
                xs += [e["start_s"], e["start_s"] + e["dur_s"], None]
                ys += [e["row"], e["row"], None]
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name=c, line=dict(color=colors[c], width=14),
                                     hovertemplate="%{y}<br>" + c + " at %{x:.4f} s<extra></extra>"))
    _base_layout(fig, max(260, 120 + 30 * len(rows)), barmode="overlay", bargap=0.25,
                 title=dict(text="Simulated timeline of the best plan's RL step", x=0, font=dict(size=15)))
    fig.update_yaxes(autorange="reversed", automargin=True, type="category", categoryorder="array",
                     categoryarray=rows)
    fig.update_xaxes(title_text="time in the step (s, simulated)", rangemode="tozero")
    end = max((e["start_s"] + e["dur_s"] for e in events), default=0.0)
    how = "bars" if as_bars else "line segments (too many events for bars)"
    note = f"{len(events):,} events on {len(rows)} tracks, drawn as {how}; the step ends at {end:.3f} s."
    return fig, note


# ------------------------------------------------------------------------------------------------ 6. measured
def measured_summary(meas: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per phase: mean predicted, mean measured, relative error of the means, and the count."""
    by: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for m in meas:
        by[m["phase"]].append(m)
    out = []
    for phase, ms in by.items():
        p = sum(m["predicted"] for m in ms) / len(ms)
        q = sum(m["measured"] for m in ms) / len(ms)
        out.append({"phase": phase, "predicted": p, "measured": q, "rel_error": (p - q) / q, "n": len(ms),
                    "measured_min": min(m["measured"] for m in ms), "measured_max": max(m["measured"] for m in ms)})
    return out


def measured_figure(meas: list[dict[str, Any]]) -> go.Figure:
    s = measured_summary(meas)
    phases = [x["phase"] for x in s]
    fig = make_subplots(rows=1, cols=2, column_widths=[0.62, 0.38], horizontal_spacing=0.1,
                        subplot_titles=("Predicted vs measured (mean over steps, s)",
                                        "Relative error (predicted − measured) / measured"))
    fig.add_trace(go.Bar(x=phases, y=[x["predicted"] for x in s], name="predicted", marker_color="#4C78A8",
                         hovertemplate="%{x}<br>predicted %{y:.4g}<extra></extra>"), row=1, col=1)
    fig.add_trace(go.Bar(
        x=phases, y=[x["measured"] for x in s], name="measured", marker_color="#F58518",
        error_y=dict(type="data", symmetric=False, array=[x["measured_max"] - x["measured"] for x in s],
                     arrayminus=[x["measured"] - x["measured_min"] for x in s], color="#555"),
        customdata=[x["n"] for x in s],
        hovertemplate="%{x}<br>measured %{y:.4g} (mean of %{customdata}; whiskers: min-max)<extra></extra>"),
        row=1, col=1)
    errs = [100 * x["rel_error"] for x in s]
    fig.add_trace(go.Bar(x=phases, y=errs, name="relative error", showlegend=False,
                         marker_color=["#E45756" if abs(e) > 20 else "#54A24B" for e in errs],
                         text=[f"{e:+.1f}%" for e in errs], textposition="outside",
                         hovertemplate="%{x}<br>%{y:+.1f}%<extra></extra>"), row=1, col=2)
    fig.add_hline(y=0, line=dict(color="#444", width=1), row=1, col=2)
    _base_layout(fig, 420, barmode="group")
    fig.update_layout(margin=dict(t=60))
    fig.update_yaxes(title_text="seconds", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="%", ticksuffix="%", row=1, col=2)
    lim = max([abs(e) for e in errs] + [10.0]) * 1.3
    fig.update_yaxes(range=[-lim, lim], row=1, col=2)
    return fig
