"""The capacity report of one sweep folder, as a self-contained HTML page (and PNGs); `perfmodel report` and
`perfmodel sweep` (perfmodel/commands/) write it.

The page works offline: plotly.js is inlined once (no CDN, no other file), every figure is a plotly div. Sections:
the sweep at a glance, 1. ranked layouts, 2. step-time breakdown, 3. capacity curve (step time and GPU-hours per
step against node count, best layout per family), 4. memory per GPU against capacity, 5. the simulated timeline
of the best plan, 6. predicted vs measured (when measurements exist).

    build_report(sweep_dir, out_html=None, png_dir=None, measurements=None, top=20) -> Path
"""

from __future__ import annotations

import html
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from perfmodel.errors import InputError
from perfmodel.files import write_text_atomic
from perfmodel.inputs.bounds import MAX_TOP_PLANS

DEFAULT_TOP = 20
REPORT_NAME = "report.html"
SECTIONS = (("ranked", "1. Ranked layouts"), ("breakdown", "2. Where the step time goes"),
            ("capacity", "3. Capacity curve"), ("memory", "4. Memory per GPU"),
            ("timeline", "5. Timeline of the best plan"), ("measured", "6. Predicted vs measured"))
PLOTLY_CONFIG = {"displaylogo": False, "responsive": True,
                 "toImageButtonOptions": {"format": "png", "scale": 2}}


# ------------------------------------------------------------------------------------------------ the report
def build_report(sweep_dir: str | Path, out_html: str | Path | None = None, png_dir: str | Path | None = None,
                 measurements: Any = None, top: int = DEFAULT_TOP) -> Path:
    """Write the capacity report of one sweep folder; returns the HTML path.

    measurements: None (read SWEEP_DIR/measured.json if present), a path to such a JSON file, or a list of
    {"phase", "predicted", "measured", "run", "step"} dicts.
    """
    from perfmodel.report.sweep_data import load_sweep

    if isinstance(top, bool) or not isinstance(top, int) or not 1 <= top <= MAX_TOP_PLANS:
        raise InputError("--top", "", f"must be a whole number from 1 to {MAX_TOP_PLANS}, got {top!r}")
    data = load_sweep(sweep_dir, measurements, keep=top)
    out = Path(out_html) if out_html else data.folder / REPORT_NAME
    if out.is_dir():
        raise InputError(str(out), "--out", "is a folder; give the HTML file to write")
    figures, page = _render(data, top)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(out, page)
    except OSError as err:
        raise InputError(str(out), "--out", f"cannot write: {err}") from None
    if png_dir is not None:
        from perfmodel.report.png import export_pngs

        export_pngs(figures, png_dir)
    return out


# --------------------------------------------------------------------------------------------- formatting
def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _f(x: float | None, fmt: str = "{:,.3f}") -> str:
    return "–" if x is None else fmt.format(x)


def _gb(x: float | None) -> str:
    return "–" if x is None else f"{x / 1e9:,.1f}"


def _mem_cell(used: float | None, cap: float | None) -> str:
    if used is None:
        return "<td class=num>–</td>"
    if not cap:
        return f"<td class=num>{_gb(used)}</td>"
    share = used / cap
    cls = "num over" if share > 1.0 else "num tight" if share > 0.92 else "num"
    return f"<td class='{cls}' title='{share:.0%} of {_gb(cap)} GB'>{_gb(used)} / {_gb(cap)}</td>"


def _figure_div(fig: Any, div_id: str) -> str:
    import plotly.io as pio

    return pio.to_html(fig, full_html=False, include_plotlyjs=False, div_id=div_id, config=PLOTLY_CONFIG)


def _spec_line(spec: dict[str, Any]) -> str:
    model = spec.get("model")
    if isinstance(model, dict):
        model = model.get("id") or model.get("family") or "custom model"
    parts = []
    if spec.get("hardware"):
        parts.append(f"hardware <b>{_e(spec['hardware'])}</b>")
    if model:
        parts.append(f"model <b>{_e(model)}</b>")
    if spec.get("nodes"):
        parts.append("node counts <b>" + _e(", ".join(map(str, spec["nodes"]))) + "</b>")
    job = spec.get("job") if isinstance(spec.get("job"), dict) else {}
    if job.get("kind"):
        parts.append(f"job <b>{_e(job['kind'])}</b>")
    return ", ".join(parts)


OBJECTIVE_TEXT = {"step_time": "shortest predicted RL step time",
                  "tokens_per_gpu": "most tokens per second per GPU",
                  "cost": "fewest GPU-hours per step under the target step time"}


# ------------------------------------------------------------------------------------------------- sections
def _overview(data: Any) -> str:
    d = data.digest
    s = data.summary
    by_status = d.statuses
    spec = s.get("spec") if isinstance(s.get("spec"), dict) else {}
    lines = []
    if spec:
        lines.append(f"<p>Sweep of {_spec_line(spec)}.</p>")
    elapsed = s.get("elapsed_s")
    el = f" in {elapsed:,.1f} s" if isinstance(elapsed, (int, float)) and not isinstance(elapsed, bool) else ""
    lines.append(
        f"<p>{d.candidates:,} candidate layouts: <b>{by_status['ok']:,} simulated</b>, {by_status['pruned']:,} pruned "
        f"before simulation (layout rules or memory), {by_status['failed']:,} failed in the simulator{el}. "
        f"Ranked by objective <b>{_e(data.objective)}</b> ({_e(OBJECTIVE_TEXT.get(data.objective, ''))}).</p>")
    trs = []
    for n, node in sorted(d.nodes.items()):
        c, best = node.statuses, node.best
        trs.append(f"<tr><td class=num>{n}</td><td class=num>{node.gpus}</td>"
                   f"<td class=num>{node.candidates}</td><td class=num>{c['ok']}</td><td class=num>{c['pruned']}</td>"
                   f"<td class=num>{c['failed']}</td>"
                   f"<td class=num>{_f(best['step_time_s']) if best else '–'}</td>"
                   f"<td>{_e(best['label']) if best else 'no layout fits'}</td></tr>")
    lines.append("<table class=small><thead><tr><th>nodes</th><th>GPUs</th><th>candidates</th><th>simulated</th>"
                 "<th>pruned</th><th>failed</th><th>best step (s)</th><th>best layout</th></tr></thead><tbody>"
                 + "".join(trs) + "</tbody></table>")
    # why candidates were pruned (numbers blanked so that "needs 92.1 GB" and "needs 95.3 GB" count together)
    reasons, example = d.reasons, d.reason_examples
    if reasons:
        items = "".join(f"<tr><td class=num>{n:,}</td><td>{_e(example[k])}"
                        + (" <span class=muted>(and similar)</span>" if n > 1 and "#" in k else "") + "</td></tr>"
                        for k, n in reasons.most_common(10))
        more = len(reasons) - 10
        lines.append("<details><summary>Why candidates were not simulated "
                     f"({sum(reasons.values()):,})</summary><table class=small><thead><tr><th>count</th>"
                     f"<th>reason (one example)</th></tr></thead><tbody>{items}</tbody></table>"
                     + (f"<p class=muted>{more} more distinct reasons in candidates.csv.</p>" if more > 0 else "")
                     + "</details>")
    if spec:
        lines.append("<details><summary>Sweep specification</summary><pre>"
                     + _e(json.dumps(spec, indent=2, sort_keys=False, default=str)) + "</pre></details>")
    for note in data.notes:
        lines.append(f"<p class=note>Note: {_e(note)}</p>")
    return "\n".join(lines)


def _ranked_table(data: Any, rows: list[dict[str, Any]]) -> str:
    from perfmodel.report.figures import BREAKDOWN_PARTS

    top = [t for t in data.summary.get("top", []) if isinstance(t, dict)]
    plans = {t.get("index"): t.get("plan_path") for t in top}
    odds = {t.get("index"): (t.get("p_best"), t.get("tie_group")) for t in top if t.get("p_best") is not None}
    head = ("<tr><th>rank</th><th>layout</th><th>nodes</th><th>GPUs</th><th>step (s)</th>"
            + ("<th>p best<br>(tie group)</th>" if odds else "") + "<th>tokens /s/GPU</th>"
            "<th>GPU-h /step</th>" + "".join(f"<th class=bd>{_e(n)}</th>" for _, n, _ in BREAKDOWN_PARTS)
            + "<th>train mem GB<br>/ capacity</th><th>rollout mem GB<br>/ capacity</th><th>plan</th></tr>")
    trs = []
    for r in rows:
        plan = plans.get(r["index"])
        trs.append(
            f"<tr><td class=num>{r['rank']}</td><td class=label>{_e(r['label'])}</td><td class=num>{r['nodes']}</td>"
            f"<td class=num>{r['gpus']}</td><td class='num strong'>{_f(r['step_time_s'])}</td>"
            + (_odds_cell(*odds.get(r["index"], (None, None))) if odds else "")
            + f"<td class=num>{_f(r['tokens_per_s_per_gpu'], '{:,.0f}')}</td>"
            f"<td class=num>{_f(r['gpu_hours_per_step'], '{:,.3g}')}</td>"
            + "".join(f"<td class='num bd'>{_f(r[c], '{:,.2f}')}</td>" for c, _, _ in BREAKDOWN_PARTS)
            + _mem_cell(r["mem_train_bytes"], r["mem_train_capacity_bytes"])
            + _mem_cell(r["mem_rollout_bytes"], r["mem_rollout_capacity_bytes"])
            + f"<td class=plan>{'<code>' + _e(plan) + '</code>' if plan else '–'}</td></tr>")
    return (f"<div class=scroll><table id=ranked-table><thead>{head}</thead><tbody>{''.join(trs)}</tbody>"
            "</table></div>")


def _settle_paragraph(settle: Any) -> str:
    """summary.json's settling measurement (perfmodel/sweep/settle.py) in a sentence and its commands."""
    if not isinstance(settle, dict) or not isinstance(settle.get("command"), str):
        return ""

    def num(key: str, fmt: str) -> str:  # summary.json is read as found: a figure that is not one shows as a dash
        v = settle.get(key)
        return fmt.format(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else "–"

    return (f"<p>To settle the choice: {_e(settle.get('measurement'))} ({num('gpus', '{:,.0f}')} GPUs, about "
            f"{num('expected_s', '{:,.0f}')} s of steps plus start-up): the leader's p best "
            f"{num('p_best_now', '{:.2f}')} becomes about {num('p_best_after', '{:.2f}')}.</p>"
            f"<pre>{_e(settle['command'])}\n{_e(settle.get('then', ''))}</pre>"
            + (_settle_paragraph(settle["cheaper"]).replace("To settle the choice:", "Or, cheaper:")
               if isinstance(settle.get("cheaper"), dict) else ""))


def _odds_cell(p_best: Any, group: Any) -> str:
    if not isinstance(p_best, (int, float)) or isinstance(p_best, bool):
        return "<td class=num>–</td>"
    return f"<td class=num>{p_best:.2f} ({_e(group)})</td>"


def _measured_table(meas: list[dict[str, Any]]) -> str:
    trs = "".join(
        f"<tr><td>{_e(m['run'])}</td><td class=num>{'' if m['step'] is None else m['step']}</td>"
        f"<td>{_e(m['phase'])}</td><td class=num>{_f(m['predicted'], '{:,.4g}')}</td>"
        f"<td class=num>{_f(m['measured'], '{:,.4g}')}</td>"
        f"<td class=num>{(m['predicted'] - m['measured']) / m['measured']:+.1%}</td></tr>" for m in meas)
    return ("<details><summary>Every measurement</summary><table class=small><thead><tr><th>run</th><th>step</th>"
            "<th>phase</th><th>predicted</th><th>measured</th><th>error</th></tr></thead>"
            f"<tbody>{trs}</tbody></table></details>")


def _render(data: Any, top: int) -> tuple[dict[str, Any], str]:
    """Build the figures and the HTML page. Returns ({png name: figure}, page)."""
    from plotly.offline import get_plotlyjs

    from perfmodel.report import figures as F
    from perfmodel.version import __version__

    top_rows = data.top(top)
    n_ok = data.digest.statuses["ok"]
    figs: dict[str, Any] = {}
    body: dict[str, str] = {}

    shown = (f"The best {len(top_rows)} of {n_ok} simulated layouts" if len(top_rows) < n_ok
             else f"All {n_ok} simulated layouts")
    if top_rows:
        body["ranked"] = (
            f"<p>{shown}, best first. Times are predicted seconds per RL step; the "
            "breakdown columns add up to the step time (rollout here is the part of rollout that training does not "
            "hide). Memory is the predicted peak per GPU against what the GPU offers; "
            "<span class=over>red</span> means it does not fit, <span class=tight>amber</span> less than 8% "
            "headroom. The plan column names the plan file the sweep wrote for the top layouts.</p>"
            + _ranked_table(data, top_rows) + _settle_paragraph(data.summary.get("settle")))
        figs["2_breakdown"] = F.breakdown_figure(top_rows)
        body["breakdown"] = (
            "<p>Each bar is one layout's predicted RL step, split into the parts that take wall time: rollout "
            "(generation that is not overlapped with training), log-probs, training compute, the pipeline bubble, "
            "expert all-to-all the schedule does not hide, other communication, the weight sync to the rollout "
            "engines, offload traffic and the rest. The black tick is the step time; a gap between bar and tick "
            "would mean the breakdown is incomplete.</p>" + _figure_div(figs["2_breakdown"], "fig-breakdown"))
        figs["3_capacity"] = F.capacity_figure(data.rows)
        fams = ", ".join(F.capacity_points(data.rows))
        body["capacity"] = (
            "<p>How the predicted step time and its cost change with the number of nodes. One line per layout "
            f"family (placement × sync/async: {_e(fams)}); each point is the best-ranked layout of that family at "
            "that node count (hover for the layout). The dotted line is perfect linear scaling from the best "
            "layout at the smallest node count: the gap to it is the scaling loss, which the GPU-hours panel shows "
            "as extra cost. A missing point means no layout of that family fits at that size.</p>"
            + _figure_div(figs["3_capacity"], "fig-capacity"))
        figs["4_memory"] = F.memory_figure(top_rows)
        body["memory"] = (
            "<p>Predicted peak memory per GPU for the same layouts, for the training GPUs (weights, gradients, "
            "optimizer state, activations, other) and for the rollout GPUs (inference weights and KV cache), with "
            "each GPU's usable capacity as a red tick. Colocated layouts use the same GPUs for both phases at "
            "different times. The memory model prunes layouts that do not fit before simulating them, so bars "
            "close to the tick are the ones to double-check on a real run.</p>"
            + _figure_div(figs["4_memory"], "fig-memory"))
    else:
        msg = ("<p class=note>No candidate was simulated (every layout was pruned or failed), so there is nothing "
               "to rank. The table at the top lists why candidates were pruned.</p>")
        for key in ("ranked", "breakdown", "capacity", "memory"):
            body[key] = msg

    body["timeline"] = _timeline_section(data, top_rows, figs)
    body["measured"] = _measured_section(data, figs)

    toc = "".join(f"<a href='#{k}'>{_e(t)}</a>" for k, t in SECTIONS)
    sections = "".join(f"<section id='{k}'><h2>{_e(t)}</h2>{body[k]}</section>" for k, t in SECTIONS)
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    title = f"Capacity report: {data.folder.resolve().name}"
    page = PAGE.format(
        title=_e(title), plotlyjs=get_plotlyjs(), toc=toc, overview=_overview(data), sections=sections,
        footer=_e(f"perfmodel {__version__}, {when}, from {data.folder.resolve()}"), n_figs=len(figs))
    return figs, page


def _timeline_section(data: Any, top_rows: list[dict[str, Any]], figs: dict[str, Any]) -> str:
    from perfmodel.report import figures as F

    if data.trace is not None and data.trace.events:
        fig, note = F.timeline_figure(data.trace)
        figs["5_timeline"] = fig
        best = top_rows[0]["label"] if top_rows else "the best plan"
        return (
            f"<p>The simulated RL step of the best plan (<b>{_e(best)}</b>) from "
            f"<code>{_e(Path(data.trace.path).name)}</code>: one row per track (the step's phases, each pipeline "
            "stage, each rollout engine). This is the simulator's schedule, not a profile of a real run; open the "
            "same file in Perfetto (ui.perfetto.dev) or chrome://tracing to zoom in. "
            f"{_e(note)}</p>" + _figure_div(fig, "fig-timeline"))
    return f"<p class=note>No timeline: {_e(data.trace_note or 'no trace')}</p>"


def _measured_section(data: Any, figs: dict[str, Any]) -> str:
    from perfmodel.report import figures as F

    if data.measurements:
        figs["6_measured"] = F.measured_figure(data.measurements)
        runs = sorted({m["run"] for m in data.measurements if m["run"]})
        summ = F.measured_summary(data.measurements)
        worst = max(summ, key=lambda x: abs(x["rel_error"]))
        return (
            f"<p>Measured phase times from {len(runs) or 'unnamed'} run(s) ({_e(', '.join(runs[:6]))}"
            f"{' …' if len(runs) > 6 else ''}) next to what perfmodel predicted for the same plan, from "
            f"{_e(data.measurements_source)}. Bars are means over the measured steps; whiskers span the measured "
            f"minimum to maximum. Relative error is (predicted − measured) / measured; above ±20% is red. The "
            f"largest error is {worst['rel_error']:+.1%} on {_e(worst['phase'])}.</p>"
            + _figure_div(figs["6_measured"], "fig-measured") + _measured_table(data.measurements))
    return ("<p class=note>No measurements: every number above is a prediction. Pass "
            "<code>--measured FILE.json</code> or put <code>measured.json</code> in the sweep folder "
            "(a list of {phase, predicted, measured, run, step}) to compare with real runs.</p>")


PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>
body {{ font-family: system-ui, -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif; margin: 0;
       color: #222; background: #fff; line-height: 1.45; }}
main {{ max-width: 1360px; margin: 0 auto; padding: 16px 24px 48px; }}
h1 {{ font-size: 24px; margin: 8px 0 4px; }}
h2 {{ font-size: 19px; margin: 0 0 6px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }}
section {{ margin: 28px 0; }}
nav {{ position: sticky; top: 0; background: #fafafa; border-bottom: 1px solid #e5e5e5; padding: 6px 24px;
       font-size: 13px; z-index: 10; }}
nav a {{ margin-right: 16px; color: #1f5fa8; text-decoration: none; }}
.banner {{ background: #eef4fb; border-left: 4px solid #4C78A8; padding: 8px 12px; margin: 10px 0; }}
.note {{ background: #fff8e6; border-left: 4px solid #EECA3B; padding: 6px 10px; }}
.muted {{ color: #777; }}
table {{ border-collapse: collapse; font-size: 13px; margin: 8px 0; }}
th, td {{ border-bottom: 1px solid #e3e3e3; padding: 3px 7px; text-align: left; vertical-align: top; }}
th {{ background: #f4f4f4; font-weight: 600; position: sticky; top: 0; }}
td.num {{ text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }}
td.strong {{ font-weight: 600; }}
td.label {{ font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 11.5px; min-width: 19em; }}
#ranked-table th, #ranked-table td {{ padding: 3px 4px; }}
#ranked-table th {{ font-size: 12px; }}
th.bd, td.bd {{ color: #555; font-size: 11.5px; }}
td.plan code {{ font-size: 11px; }}
.over {{ color: #b00020; font-weight: 600; }}
.tight {{ color: #a65f00; }}
table.small {{ font-size: 12px; }}
.scroll {{ overflow-x: auto; }}
pre {{ background: #f7f7f7; padding: 8px; font-size: 12px; overflow-x: auto; }}
details {{ margin: 8px 0; }}
summary {{ cursor: pointer; color: #1f5fa8; }}
footer {{ color: #888; font-size: 12px; margin-top: 32px; }}
</style>
<script type="text/javascript">{plotlyjs}</script>
</head>
<body>
<nav>{toc}</nav>
<main>
<h1>{title}</h1>
<p class="banner"><b>Predicted, not measured.</b> Sections 1 to 5 show what perfmodel's simulator predicts for
each candidate layout; no number there comes from running it. Section 6 compares predictions with measured runs
when measurements are given. Use the ranking to choose what to run, then measure.</p>
{overview}
{sections}
<footer>{footer}</footer>
</main>
<script type="text/javascript">
window.addEventListener("load", function () {{
  var divs = document.querySelectorAll(".plotly-graph-div");
  var drawn = 0;
  divs.forEach(function (d) {{ if (d._fullLayout && d.querySelector(".main-svg")) drawn += 1; }});
  document.body.setAttribute("data-figures-drawn", drawn + "/" + {n_figs});
  console.log("perfmodel-report: drew " + drawn + " of " + {n_figs} + " figures");
}});
</script>
</body>
</html>
"""
