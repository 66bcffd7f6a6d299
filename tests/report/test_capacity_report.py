"""The capacity report: page content, offline self-containment, the command, and one-line errors for bad input."""

from __future__ import annotations

import argparse
import csv
import json
import re
import shutil
from pathlib import Path

import pytest

from perfmodel.commands.report import register
from perfmodel.errors import InputError
from perfmodel.report import figures as F
from perfmodel.report.capacity import SECTIONS, build_report
from perfmodel.report.sweep_data import COLUMNS, load_sweep, read_trace

from .sweep_folder import write_sweep


def _copy(sweep_dir: Path, tmp_path: Path) -> Path:
    d = tmp_path / "sweep"
    shutil.copytree(sweep_dir, d)
    return d


def _rewrite_csv(d: Path, edit) -> Path:
    p = d / "candidates.csv"
    rows = list(csv.reader(p.read_text().splitlines()))
    rows = edit(rows)
    with p.open("w", newline="") as fh:
        csv.writer(fh).writerows(rows)
    return p


# ------------------------------------------------------------------------------------------------ the page
def test_page_is_self_contained(report_html: Path) -> None:
    text = report_html.read_text(encoding="utf-8")
    assert not re.search(r"<script[^>]+src=", text, re.I), "every script must be inline (works offline)"
    assert not re.search(r"<link[^>]+href=[\"']?https?:", text, re.I)
    assert not re.search(r"@import\s+url\(", text)
    # plotly.js is inlined once, in <head>; outside it the page names no URL at all (plotly.js itself mentions
    # its CDN and map tile servers in strings it never loads for these charts).
    start = text.index('<script type="text/javascript">')
    end = text.index("</script>", start)
    assert end - start > 3_000_000, "plotly.js (about 4.6 MB) must be inlined"
    rest = text[:start] + text[end:]
    assert not re.findall(r"https?://", rest)
    assert "Plotly.newPlot" in rest


def test_page_has_every_section(report_html: Path) -> None:
    text = report_html.read_text(encoding="utf-8")
    for key, title in SECTIONS:
        assert f"<section id='{key}'>" in text
        assert title in text
    for div in ("fig-breakdown", "fig-capacity", "fig-memory", "fig-timeline", "fig-measured"):
        assert f'id="{div}"' in text
    assert "Predicted, not measured." in text
    assert "No measurements" not in text  # the fixture folder has measured.json


def test_ranked_table_rows_and_plans(sweep_dir: Path, tmp_path: Path) -> None:
    out = build_report(sweep_dir, out_html=tmp_path / "r.html", top=5)
    text = out.read_text(encoding="utf-8")
    table = text.split("<table id=ranked-table>", 1)[1].split("</table>", 1)[0]
    assert table.count("<tr>") == 1 + 5  # header + 5 layouts
    assert "plans/plan-01.yaml" in table
    data = load_sweep(sweep_dir)
    best = data.ok_rows[0]
    assert best["rank"] == 1 and best["label"] in table
    assert "The best 5 of 18 simulated layouts" in text


def test_default_output_and_command(sweep_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    d = _copy(sweep_dir, tmp_path)
    p = argparse.ArgumentParser(prog="perfmodel")
    sub = p.add_subparsers(dest="command")
    register(sub)
    args = p.parse_args(["report", str(d), "--top", "3"])
    assert args.func(args) == 0
    assert (d / "report.html").is_file()
    assert "report written to" in capsys.readouterr().out


def test_cli_one_line_error_when_registered(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                            capsys: pytest.CaptureFixture) -> None:
    from perfmodel import cli

    rc = cli.main(["report", str(tmp_path / "nope")])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert err.count("\n") == 0 and "folder not found" in err


def test_measurements_argument_and_absence(sweep_dir: Path, tmp_path: Path) -> None:
    d = _copy(sweep_dir, tmp_path)
    (d / "measured.json").unlink()
    text = build_report(d).read_text(encoding="utf-8")
    assert "No measurements" in text and 'id="fig-measured"' not in text
    meas = [{"phase": "step_time_s", "predicted": 26.7, "measured": 30.0, "run": "r1", "step": 4}]
    text = build_report(d, measurements=meas).read_text(encoding="utf-8")
    assert 'id="fig-measured"' in text and "-11.0%" in text
    f = tmp_path / "m.json"
    f.write_text(json.dumps({"measurements": meas}))
    assert 'id="fig-measured"' in build_report(d, measurements=f).read_text(encoding="utf-8")


def test_no_trace_and_nothing_simulated(tmp_path: Path) -> None:
    d = write_sweep(tmp_path / "s", measured=False)
    (d / "best_trace.json").unlink()

    def prune_all(rows: list[list[str]]) -> list[list[str]]:
        h = rows[0]
        for r in rows[1:]:
            r[h.index("status")] = "pruned"
            r[h.index("rank")] = ""
            r[h.index("reason")] = "memory: training needs 99.0 GB per GPU"
        return rows

    _rewrite_csv(d, prune_all)
    text = build_report(d).read_text(encoding="utf-8")
    assert "No candidate was simulated" in text
    assert "No timeline" in text and "best_trace.json" in text
    assert "no layout fits" in text


def test_missing_ranks_are_filled_and_said(tmp_path: Path) -> None:
    d = write_sweep(tmp_path / "s", measured=False)

    def drop_ranks(rows: list[list[str]]) -> list[list[str]]:
        i = rows[0].index("rank")
        for r in rows[1:]:
            r[i] = ""
        return rows

    _rewrite_csv(d, drop_ranks)
    data = load_sweep(d)
    assert [r["rank"] for r in data.ok_rows] == list(range(1, len(data.ok_rows) + 1))
    steps = [r["step_time_s"] for r in data.ok_rows]
    assert steps == sorted(steps)
    assert any("had no rank" in n for n in data.notes)


def test_breakdown_mismatch_is_noted(tmp_path: Path) -> None:
    d = write_sweep(tmp_path / "s", measured=False)

    def inflate(rows: list[list[str]]) -> list[list[str]]:
        h = rows[0]
        for r in rows[1:]:
            if r[h.index("status")] == "ok":
                r[h.index("bd_other_s")] = "50"
                break
        return rows

    _rewrite_csv(d, inflate)
    assert any("do not sum to the step time" in n for n in load_sweep(d).notes)


# ---------------------------------------------------------------------------------------------- the figures
def test_capacity_curve_takes_best_of_each_family(sweep_dir: Path) -> None:
    data = load_sweep(sweep_dir)
    pts = F.capacity_points(data.rows)
    assert set(pts) <= {"colocated · sync", "disaggregated · sync", "disaggregated · async"}
    for fam, rows in pts.items():
        for p in rows:
            same = [r for r in data.ok_rows if F.family(r) == fam and r["nodes"] == p["nodes"]]
            assert p["rank"] == min(r["rank"] for r in same)
    fig = F.capacity_figure(data.rows)
    names = {t.name for t in fig.data}
    assert "ideal scaling from 2 nodes" in names


def test_breakdown_bars_sum_to_step_time(sweep_dir: Path) -> None:
    rows = load_sweep(sweep_dir).top(10)
    fig = F.breakdown_figure(rows)
    bars = [t for t in fig.data if t.type == "bar"]
    for i, r in enumerate(rows):
        assert sum(t.x[i] for t in bars) == pytest.approx(r["step_time_s"], rel=1e-3)


def test_timeline_rows_and_many_events(sweep_dir: Path) -> None:
    trace = read_trace(sweep_dir / "best_trace.json")
    rows, events = F.timeline_rows(trace)
    assert rows[0] == "rl step"
    assert rows.index("train stage 0 · compute") < rows.index("train stage 1 · compute")
    cats = {e["category"] for e in events}
    assert {"forward", "backward", "comm", "rollout", "decode", "prefill"} <= cats
    fig, note = F.timeline_figure(trace, max_bars=10)
    assert all(t.type == "scatter" for t in fig.data) and "line segments" in note
    fig, note = F.timeline_figure(trace)
    assert all(t.type == "bar" for t in fig.data) and "bars" in note


def test_measured_summary() -> None:
    s = F.measured_summary([{"phase": "a", "predicted": 10.0, "measured": 8.0},
                            {"phase": "a", "predicted": 10.0, "measured": 12.0},
                            {"phase": "b", "predicted": 1.0, "measured": 2.0}])
    assert s[0]["measured"] == 10.0 and s[0]["rel_error"] == 0.0 and s[0]["n"] == 2
    assert s[1]["rel_error"] == -0.5


# --------------------------------------------------------------------------------------------- bad input
def _err(d: Path, **kw) -> InputError:
    with pytest.raises(InputError) as ei:
        build_report(d, out_html=d.parent / "out.html", **kw)
    assert "\n" not in str(ei.value)
    return ei.value


def test_missing_folder_and_file(tmp_path: Path) -> None:
    e = _err(tmp_path / "missing")
    assert "folder not found" in e.message
    f = tmp_path / "file.txt"
    f.write_text("x")
    assert "is a file" in _err(f).message
    (tmp_path / "empty").mkdir()
    e = _err(tmp_path / "empty")
    assert e.source.endswith("candidates.csv") and "file not found" in e.message


@pytest.mark.parametrize("case, field, words", [
    ("unknown_column", "gpu_kind", "unknown column"),
    ("missing_column", "bd_bubble_s", "required column is missing"),
    ("not_a_number", "line 2: step_time_s", "expected a number"),
    ("bad_status", "line 2: status", "must be one of"),
    ("short_row", "line 3", "fields"),
    ("duplicate_index", "line 3: index", "appears twice"),
    ("empty", "", "empty file"),
    ("bad_bool", "line 2: async", "expected 0 or 1"),
    ("ok_without_time", "line 2: step_time_s", "needs a step time"),
])
def test_bad_csv(sweep_dir: Path, tmp_path: Path, case: str, field: str, words: str) -> None:
    d = _copy(sweep_dir, tmp_path)
    p = d / "candidates.csv"
    rows = list(csv.reader(p.read_text().splitlines()))
    h = rows[0]
    first_ok = next(i for i, r in enumerate(rows) if i and r[h.index("status")] == "ok")
    rows[1], rows[first_ok] = rows[first_ok], rows[1]  # line 2 is a simulated candidate
    if case == "unknown_column":
        rows = [r + (["gpu_kind"] if i == 0 else ["h100"]) for i, r in enumerate(rows)]
    elif case == "missing_column":
        k = h.index("bd_bubble_s")
        rows = [r[:k] + r[k + 1:] for r in rows]
    elif case == "not_a_number":
        rows[1][h.index("step_time_s")] = "fast"
    elif case == "bad_status":
        rows[1][h.index("status")] = "done"
    elif case == "short_row":
        rows[2] = rows[2][:5]
    elif case == "duplicate_index":
        rows[2][h.index("index")] = rows[1][h.index("index")]
    elif case == "empty":
        rows = []
    elif case == "bad_bool":
        rows[1][h.index("async")] = "maybe"
    elif case == "ok_without_time":
        rows[1][h.index("step_time_s")] = ""
    with p.open("w", newline="") as fh:
        csv.writer(fh).writerows(rows)
    e = _err(d)
    assert e.source == str(p)
    assert e.field == field
    assert words in e.message


def test_csv_from_before_the_dispatcher_column_still_loads(sweep_dir: Path, tmp_path: Path) -> None:
    d = _copy(sweep_dir, tmp_path)
    p = d / "candidates.csv"
    rows = list(csv.reader(p.read_text().splitlines()))
    k = rows[0].index("moe_dispatcher")
    with p.open("w", newline="") as fh:
        csv.writer(fh).writerows([r[:k] + r[k + 1:] for r in rows])
    data = load_sweep(d)
    assert data.rows and all(r["moe_dispatcher"] == "alltoall" for r in data.rows)


def test_column_contract_is_complete() -> None:
    assert len(COLUMNS) == len(set(COLUMNS))
    for c in ("bd_rollout_s", "bd_other_s", "mem_train_other_bytes", "rank", "objective_value"):
        assert c in COLUMNS


@pytest.mark.parametrize("name, content, field, words", [
    ("summary.json", "{not json", "", "malformed JSON"),
    ("summary.json", "[1, 2]", "", "must be an object"),
    ("summary.json", '{"objective": "speed"}', "objective", "must be one of"),
    ("best_trace.json", '{"traceEvents": [{"ph": "X", "ts": "soon", "dur": 1}]}', "traceEvents[0].ts", "numeric ts"),
    ("best_trace.json", '{"events": []}', "traceEvents", "list of events"),
    ("measured.json", '[{"phase": "rollout_time_s", "predicted": 1.0}]', "[0].measured", "number > 0"),
    ("measured.json", '{"phase": "x"}', "", "expected a list"),
])
def test_bad_json(sweep_dir: Path, tmp_path: Path, name: str, content: str, field: str, words: str) -> None:
    d = _copy(sweep_dir, tmp_path)
    (d / name).write_text(content)
    e = _err(d)
    assert e.source == str(d / name)
    assert e.field == field
    assert words in e.message


def test_bad_top_and_out(sweep_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="must be a whole number from 1 to 1000"):
        build_report(sweep_dir, out_html=tmp_path / "r.html", top=0)
    (tmp_path / "dir.html").mkdir()
    with pytest.raises(InputError, match="is a folder"):
        build_report(sweep_dir, out_html=tmp_path / "dir.html")
    with pytest.raises(InputError, match="measurements file not found"):
        build_report(sweep_dir, out_html=tmp_path / "r.html", measurements=tmp_path / "none.json")


def test_pretraining_sweep_and_quoted_fields(tmp_path: Path) -> None:
    """No RL columns filled (placement, rollout memory empty), and a reason with a comma and a line break."""
    d = write_sweep(tmp_path / "s", measured=False)

    def pretrain(rows: list[list[str]]) -> list[list[str]]:
        h = rows[0]
        for r in rows[1:]:
            for c in ("placement", "mem_rollout_bytes", "mem_rollout_capacity_bytes", "rollout_gpus", "async"):
                r[h.index(c)] = ""
            if r[h.index("status")] == "pruned":
                r[h.index("reason")] = "memory: 91 GB, over\\n80 GB".replace("\\n", "\n")
        return rows

    p = _rewrite_csv(d, pretrain)
    assert '"memory: 91 GB, over\n80 GB"' in p.read_text()
    data = load_sweep(d)
    assert {F.family(r) for r in data.ok_rows} == {"training only"}
    fig = F.memory_figure(data.top(5))
    assert not any(t.name and t.name.startswith("rollout") for t in fig.data)
    text = build_report(d).read_text(encoding="utf-8")
    assert "memory: 91 GB, over" in text


def test_malformed_csv_quote(sweep_dir: Path, tmp_path: Path) -> None:
    d = _copy(sweep_dir, tmp_path)
    p = d / "candidates.csv"
    lines = p.read_text().splitlines()
    lines[2] = lines[2] + ',"unterminated'
    p.write_text("\n".join(lines) + "\n")
    e = _err(d)
    assert e.source == str(p) and e.field.startswith("line")


def test_the_settling_measurement_is_said_under_the_ranking_and_odd_figures_show_as_dashes(sweep_dir: Path,
                                                                                            tmp_path: Path) -> None:
    folder = tmp_path / "sweep"
    shutil.copytree(sweep_dir, folder)
    summary = json.loads((folder / "summary.json").read_text())
    settle = {"measurement": "plan 2 (x) launched for 3 steps", "command": "executor launch --plan p.yaml --steps 3",
              "then": "executor export RUN --out settle.yaml", "gpus": 32, "expected_s": 201.4, "p_best_now": 0.22,
              "p_best_after": 0.331}
    (folder / "summary.json").write_text(json.dumps(summary | {"settle": settle}))
    text = build_report(folder, out_html=tmp_path / "r.html").read_text(encoding="utf-8")
    assert ("To settle the choice: plan 2 (x) launched for 3 steps (32 GPUs, about 201 s of steps plus start-up): "
            "the leader's p best 0.22 becomes about 0.33.") in text
    assert "executor launch --plan p.yaml --steps 3" in text
    odd = settle | {"gpus": "many", "p_best_after": None}
    (folder / "summary.json").write_text(json.dumps(summary | {"settle": odd}))
    text = build_report(folder, out_html=tmp_path / "r2.html").read_text(encoding="utf-8")
    assert "(– GPUs," in text and "becomes about –." in text
    cheaper = {"measurement": "plan 1 (y) at small scale", "command": "executor launch --plan settle-y.yaml --steps 3",
               "gpus": 8, "expected_s": 90.0, "p_best_now": 0.22, "p_best_after": 0.3}
    (folder / "summary.json").write_text(json.dumps(summary | {"settle": settle | {"cheaper": cheaper}}))
    text = build_report(folder, out_html=tmp_path / "r3.html").read_text(encoding="utf-8")
    assert ("Or, cheaper: plan 1 (y) at small scale (8 GPUs, about 90 s of steps plus start-up): the leader's p best "
            "0.22 becomes about 0.30.") in text and "executor launch --plan settle-y.yaml --steps 3" in text
