"""Terminal tables of a simulated step (rich)."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table


def _gb(x: float) -> str:
    return f"{x / 1e9:,.1f} GB"


def print_result(result, console: Console | None = None) -> None:
    from perfmodel.report.console import console as default_console

    console = console or default_console()
    d = result.to_json()
    if d["kind"] == "serve":
        _print_serve(d, console)
        return
    console.print(f"[bold]{d['kind']}[/] " + escape(
        f"step of {d['model']} on {d['gpus']} x {d['hardware']}: {d['layout']}, {d['schedule']}, pipeline split "
        f"{','.join(map(str, d['pipeline_split']))}, {d['microbatches']} micro-batches per DP rank, stack "
        f"{d['stack']}"), soft_wrap=True, markup=True)
    for note in d.get("stack_notes", []):
        console.print(f"note: {note}", soft_wrap=True)
    _print_metrics(d["metrics"], console)
    for title, key in (("where the time goes (s, mean over pipeline ranks)", "breakdown_s"),
                       ("RL step phases (s)", "phases_s")):
        if key in d:
            console.print(_shares_table(title, "seconds", d[key], sum(d[key].values())))
    if d.get("subphases"):  # an RL step, sub-phase by sub-phase in the order they run
        t = Table(title="RL step sub-phases, in order (s)")
        for col in ("sub-phase", "seconds", "phase timer", "scales with"):
            t.add_column(col, justify="right" if col == "seconds" else "left")
        for sp in d["subphases"]:
            t.add_row(sp["name"], f"{sp['seconds']:,.3f}", sp["phase"], sp["scales_with"])
            if sp["name"] == "weight_update":  # its own path, part by part
                for part, sec in d["weight_update"]["parts"].items():
                    t.add_row(f"  {part.removesuffix('_s')}", f"{sec:,.3f}", "", "")
        console.print(t)
    if "bubble_s_per_stage" in d:
        console.print("bubble per stage (s): " + ", ".join(f"{b:.3f}" for b in d["bubble_s_per_stage"]))
    if d.get("memory"):
        mem = d["memory"]
        shown = ("weights_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes", "comm_buffers_bytes",
                 "margin_bytes")
        parts = ", ".join(f"{k.removesuffix('_bytes')} {_gb(mem[k])}" for k in shown if mem.get(k))
        fits = "fits" if mem.get("fits") else "DOES NOT FIT"
        on_host = [f"{k.removesuffix('_host_bytes')} {_gb(mem[k])}" for k in ("optimizer_host_bytes",
                                                                              "activations_host_bytes") if mem.get(k)]
        host = f"; host: {', '.join(on_host)} of {_gb(mem['host_capacity_bytes'])} per GPU" if on_host else ""
        console.print(f"memory per GPU (worst pipeline rank {mem.get('pipeline_rank', 0)}): {_gb(mem['total_bytes'])} "
                      f"of {_gb(mem['capacity_bytes'])} ({fits}): {parts}{host}", soft_wrap=True)


def _print_serve(d: dict, console: Console) -> None:
    """A serving benchmark: its figures, then where one decode step at its concurrency goes."""
    console.print("[bold]serve[/] " + escape(
        f"benchmark of {d['model']} on {d['gpus']} x {d['hardware']}: {d['engines']} engine(s) x {d['engine_gpus']} "
        f"GPUs ({d['engine_layout']}), {d['requests']} requests at concurrency {d['concurrency']}, stack "
        f"{d['stack']}"), soft_wrap=True, markup=True)
    for note in d.get("stack_notes", []):
        console.print(f"note: {note}", soft_wrap=True)
    _print_metrics(d["metrics"], console)
    step = d["decode_step"]
    parts = {k: v for k, v in step["parts_ms"].items() if k != "total"}
    t = _shares_table(f"one decode step: {step['batch']} requests at {step['context_tokens']:,.0f} tokens of context "
                      "(ms, per GPU)", "ms", parts, step["parts_ms"]["total"])
    t.add_row("total", f"{step['parts_ms']['total']:,.3f}", "")
    console.print(t)


def _shares_table(title: str, unit: str, parts: dict[str, float], total: float) -> Table:
    """Parts of a whole, largest first, each with its share of `total`."""
    t = Table(title=title)
    t.add_column("part")
    t.add_column(unit, justify="right")
    t.add_column("share", justify="right")
    for k, v in sorted(parts.items(), key=lambda kv: -kv[1]):
        t.add_row(k, f"{v:,.3f}", f"{100 * v / (total or 1.0):.1f}%")
    return t


def _print_metrics(metrics: dict[str, float], console: Console) -> None:
    """The prediction's figures, one row each."""
    m = Table(title="prediction", show_header=True)
    m.add_column("metric")
    m.add_column("value", justify="right")
    for k, v in metrics.items():
        m.add_row(k, f"{v:,.4g}")
    console.print(m)

