"""Read one sweep output folder (candidates.csv, summary.json, best_trace.json, measured.json) for the report.

Every problem with the files is an `InputError(path, field, fix)`: a missing folder or file, a malformed CSV or
JSON, an unknown or missing column, a value that is not a number. No pandas: the CSV is read one row at a time with
the standard `csv` module (a sweep's CSV can hold 10^5 rows and more), which keeps the dependency list short.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfmodel.errors import InputError
from perfmodel.inputs.bounds import MAX_TOP_PLANS
from perfmodel.inputs.loading import parse_text
from perfmodel.names import BREAKDOWN_COLUMNS
from perfmodel.report.sweep_digest import SweepDigest, digest_rows

# The candidates.csv contract written by `perfmodel sweep`. Every column is required; an extra column is an error
# (it means the writer and the report disagree and a figure might silently miss data). Update this list when the
# sweep's writer changes.
INT_COLUMNS = ("index", "nodes", "gpus", "actor_gpus", "rollout_gpus", "tp", "pp", "cp", "ep", "etp", "vpp",
               "engine_gpus", "engine_tp", "engine_ep", "engine_dp", "rank")
BOOL_COLUMNS = ("async", "dp_attention")
STR_COLUMNS = ("label", "placement", "schedule", "recompute", "moe_dispatcher", "status", "reason")
MEMORY_PART_COLUMNS = ("mem_train_weights_bytes", "mem_train_grads_bytes", "mem_train_optimizer_bytes",
                       "mem_train_activations_bytes", "mem_train_other_bytes")
FLOAT_COLUMNS = ("offload", "objective_value", "step_time_s", "step_time_p90_s", "rollout_time_s", "log_probs_time_s",
                 "train_time_s", "weight_update_time_s", "offload_time_s", *BREAKDOWN_COLUMNS, "tokens_per_s_per_gpu",
                 "gpu_hours_per_step", "mem_train_bytes", "mem_train_capacity_bytes", "mem_rollout_bytes",
                 "mem_rollout_capacity_bytes", *MEMORY_PART_COLUMNS)
COLUMNS = (*INT_COLUMNS, *BOOL_COLUMNS, *STR_COLUMNS, *FLOAT_COLUMNS)
# Columns added after the first release: a CSV written before them still loads, with this value.
OPTIONAL_COLUMNS = {"moe_dispatcher": "alltoall", "step_time_p90_s": ""}
NOT_EMPTY = ("index", "nodes", "gpus", "label", "status")  # every row has these
# invalid: simulated to an impossible result, refused; not_evaluated: the sweep was interrupted first
STATUSES = ("ok", "pruned", "invalid", "failed", "not_evaluated")
PLACEMENTS = ("colocated", "disaggregated", "")  # "" for a pretraining sweep (no RL)
OBJECTIVES = ("step_time", "p90_step_time", "tokens_per_gpu", "cost")

CANDIDATES = "candidates.csv"
SUMMARY = "summary.json"
TRACE = "best_trace.json"
MEASURED = "measured.json"


@dataclass(slots=True)
class TraceData:
    """A Chrome trace flattened for the Gantt chart: complete ("X") events plus process / thread names."""

    path: str
    events: list[dict[str, Any]]  # {"pid", "tid", "name", "start_s", "dur_s"}
    process_names: dict[Any, str] = field(default_factory=dict)
    thread_names: dict[tuple[Any, Any], str] = field(default_factory=dict)
    process_order: dict[Any, float] = field(default_factory=dict)


@dataclass(slots=True)
class SweepData:
    folder: Path
    digest: SweepDigest  # counts over every row, and the rows the report shows (sweep_digest.py)
    summary: dict[str, Any]
    trace: TraceData | None
    trace_note: str  # why there is no trace, or ""
    measurements: list[dict[str, Any]]
    measurements_source: str
    objective: str
    notes: list[str] = field(default_factory=list)  # data problems worth telling the reader (not fatal)

    @property
    def rows(self) -> list[dict[str, Any]]:
        """The rows kept whole (numbers are int / float / None, bools bool / None): the best ranked ones, the
        best of each node count and layout family, the first of each node count. Every row: `iter_candidates`."""
        return self.digest.kept_rows

    @property
    def ok_rows(self) -> list[dict[str, Any]]:
        """The best simulated rows kept (up to `load_sweep`'s `keep`), best first."""
        return self.digest.top

    def top(self, n: int) -> list[dict[str, Any]]:
        return self.digest.top[:n]


# --------------------------------------------------------------------------------------------------------- CSV
def _parse_float(text: str, src: str, fld: str) -> float | None:
    if text == "" or text.lower() in ("nan", "none", "null"):
        return None
    try:
        x = float(text)
    except ValueError:
        raise InputError(src, fld, f"expected a number, got {text[:40]!r}") from None
    if not math.isfinite(x):
        raise InputError(src, fld, f"expected a finite number, got {text[:40]!r}")
    return x


def _parse_int(text: str, src: str, fld: str) -> int | None:
    x = _parse_float(text, src, fld)
    if x is None:
        return None
    if x != int(x):
        raise InputError(src, fld, f"expected a whole number, got {text[:40]!r}")
    return int(x)


def _parse_bool(text: str, src: str, fld: str) -> bool | None:
    t = text.lower()
    if t == "":
        return None
    if t in ("1", "true", "yes"):
        return True
    if t in ("0", "false", "no"):
        return False
    raise InputError(src, fld, f"expected 0 or 1, got {text[:40]!r}")


def iter_candidates(path: Path) -> Iterator[dict[str, Any]]:
    """The rows of a candidates.csv, parsed and checked one at a time (a sweep's CSV may hold 10^5 rows or more:
    it is never read whole)."""
    src = str(path)
    if not path.is_file():
        raise InputError(src, "", "file not found; is this the output folder of `perfmodel sweep`?")
    try:
        f = path.open(encoding="utf-8-sig", newline="")
    except OSError as err:
        raise InputError(src, "", f"cannot read: {err}") from None
    with f:
        reader = csv.reader(f)
        try:
            header = _header(next(reader, []), src)
            indices: set[int] = set()
            start = reader.line_num + 1  # the file line a record starts on (a quoted field may span lines)
            for cells in reader:
                line_no, start = start, reader.line_num + 1
                if not cells or all(not c.strip() for c in cells):
                    continue  # blank line
                row = _parse_row(header, cells, src, line_no)
                if row["index"] in indices:
                    raise InputError(src, f"line {line_no}: index", f"index {row['index']} appears twice")
                indices.add(row["index"])
                yield row
        except csv.Error as err:
            raise InputError(src, f"line {reader.line_num}", f"malformed CSV: {err}") from None
        except (OSError, UnicodeDecodeError) as err:
            raise InputError(src, "", f"cannot read: {err}") from None


def read_candidates(path: Path) -> list[dict[str, Any]]:
    """Every row of a candidates.csv (a small one: `iter_candidates` reads any size)."""
    return list(iter_candidates(path))


def _header(cells: list[str], src: str) -> list[str]:
    if not cells or not any(c.strip() for c in cells):
        raise InputError(src, "", "empty file; expected a header row with the sweep's columns")
    header = [c.strip() for c in cells]
    seen: set[str] = set()
    for col in header:
        if col in seen:
            raise InputError(src, col, "column appears twice in the header")
        seen.add(col)
        if col not in COLUMNS:
            raise InputError(src, col, "unknown column; the report reads the columns of `perfmodel sweep` "
                             "(perfmodel/report/sweep_data.py COLUMNS); remove it or update the report")
    missing = [c for c in COLUMNS if c not in seen and c not in OPTIONAL_COLUMNS]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise InputError(src, missing[0], f"required column is missing{more}; rerun `perfmodel sweep`")
    return header


def _parse_row(header: list[str], cells: list[str], src: str, line_no: int) -> dict[str, Any]:
    if len(cells) != len(header):
        raise InputError(src, f"line {line_no}", f"has {len(cells)} fields, the header has {len(header)}")
    raw = {h: c.strip() for h, c in zip(header, cells)}
    row: dict[str, Any] = {}
    for col in COLUMNS:
        fld = f"line {line_no}: {col}"
        v = raw.get(col, OPTIONAL_COLUMNS.get(col, ""))
        if col in NOT_EMPTY and v == "":
            raise InputError(src, fld, "must not be empty")
        if col in INT_COLUMNS:
            row[col] = _parse_int(v, src, fld)
        elif col in BOOL_COLUMNS:
            row[col] = _parse_bool(v, src, fld)
        elif col in FLOAT_COLUMNS:
            row[col] = _parse_float(v, src, fld)
        else:
            row[col] = v
    if row["status"] not in STATUSES:
        raise InputError(src, f"line {line_no}: status", f"must be one of {', '.join(STATUSES)}, "
                         f"got {row['status'][:40]!r}")
    if row["placement"] not in PLACEMENTS:
        raise InputError(src, f"line {line_no}: placement", "must be colocated, disaggregated or empty, "
                         f"got {row['placement'][:40]!r}")
    if row["nodes"] < 1 or row["gpus"] < 1:
        raise InputError(src, f"line {line_no}: nodes", "nodes and gpus must be >= 1")
    if row["status"] == "ok" and row["step_time_s"] is None:
        raise InputError(src, f"line {line_no}: step_time_s", "an ok (simulated) candidate needs a step time")
    return row


# -------------------------------------------------------------------------------------------------------- JSON
def _read_json(path: Path) -> Any:
    src = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(src, "", f"cannot read: {err}") from None
    return parse_text(text, src, json_text=True)


def read_summary(path: Path) -> dict[str, Any]:
    data = _read_json(path)
    src = str(path)
    if not isinstance(data, dict):
        raise InputError(src, "", f"top level must be an object, got {type(data).__name__}")
    obj = data.get("objective", "step_time")
    if obj not in OBJECTIVES:
        raise InputError(src, "objective", f"must be one of {', '.join(OBJECTIVES)}, got {str(obj)[:40]!r}")
    for key in ("spec",):
        if key in data and not isinstance(data[key], dict):
            raise InputError(src, key, "must be an object")
    top = data.get("top", [])
    if not isinstance(top, list) or not all(isinstance(t, dict) for t in top):
        raise InputError(src, "top", "must be a list of objects")
    for i, t in enumerate(top):
        if "index" in t and not isinstance(t["index"], int):
            raise InputError(src, f"top[{i}].index", "must be a whole number (the candidate's index)")
    if "best_trace" in data and data["best_trace"] is not None and not isinstance(data["best_trace"], str):
        raise InputError(src, "best_trace", "must be a file name")
    return data


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return None
    return float(x)


def read_trace(path: Path) -> TraceData:
    data = _read_json(path)
    src = str(path)
    if isinstance(data, dict):
        events = data.get("traceEvents")
        if not isinstance(events, list):
            raise InputError(src, "traceEvents", "a Chrome trace needs a list of events")
        base = "traceEvents"
    elif isinstance(data, list):
        events, base = data, ""
    else:
        raise InputError(src, "", "expected a Chrome trace: {\"traceEvents\": [...]}")
    out = TraceData(src, [])
    for i, e in enumerate(events):
        fld = f"{base}[{i}]"
        if not isinstance(e, dict):
            raise InputError(src, fld, "each event must be an object")
        ph = e.get("ph")
        pid, tid = e.get("pid", 0), e.get("tid", 0)
        if ph == "M":
            args = e.get("args") if isinstance(e.get("args"), dict) else {}
            if e.get("name") == "process_name" and "name" in args:
                out.process_names[pid] = str(args["name"])
            elif e.get("name") == "thread_name" and "name" in args:
                out.thread_names[(pid, tid)] = str(args["name"])
            elif e.get("name") == "process_sort_index" and _num(args.get("sort_index")) is not None:
                out.process_order[pid] = float(args["sort_index"])
        elif ph == "X":
            ts, dur = _num(e.get("ts")), _num(e.get("dur"))
            if ts is None:
                raise InputError(src, f"{fld}.ts", "a complete (X) event needs a numeric ts in microseconds")
            if dur is None or dur < 0:
                raise InputError(src, f"{fld}.dur", "a complete (X) event needs a duration >= 0 in microseconds")
            out.events.append({"pid": pid, "tid": tid, "name": str(e.get("name", "")), "start_s": ts / 1e6,
                               "dur_s": dur / 1e6})
    return out


def read_measurements(data: Any, src: str) -> list[dict[str, Any]]:
    """Validate measurements: a list of {phase, predicted, measured, run?, step?} (or {"measurements": [...]})."""
    if isinstance(data, dict) and "measurements" in data:
        data, prefix = data["measurements"], "measurements"
    else:
        prefix = ""
    if not isinstance(data, list):
        raise InputError(src, prefix, "expected a list of {phase, predicted, measured, run, step} objects")
    out = []
    for i, m in enumerate(data):
        fld = f"{prefix}[{i}]"
        if not isinstance(m, dict):
            raise InputError(src, fld, "each measurement must be an object")
        phase = m.get("phase")
        if not isinstance(phase, str) or not phase:
            raise InputError(src, f"{fld}.phase", "must name the phase, e.g. \"rollout_time_s\"")
        pred, meas = _num(m.get("predicted")), _num(m.get("measured"))
        if pred is None:
            raise InputError(src, f"{fld}.predicted", "must be a number")
        if meas is None or meas <= 0:
            raise InputError(src, f"{fld}.measured", "must be a number > 0")
        out.append({"phase": phase, "predicted": pred, "measured": meas,
                    "run": "" if m.get("run") is None else str(m["run"]),
                    "step": m.get("step") if isinstance(m.get("step"), int) else None})
    return out


# ------------------------------------------------------------------------------------------------ the folder
def completeness_notes(summary: dict[str, Any], digest: SweepDigest, csv_path: Path) -> list[str]:
    """Whether the folder holds a whole sweep: an interrupted one is said; a CSV with fewer rows than the summary
    counts (cut short outside the tools, which write it atomically) is refused, never shown as the whole sweep."""
    counted, rows = summary.get("candidates"), digest.candidates
    if isinstance(counted, int) and not isinstance(counted, bool) and counted != rows:
        raise InputError(str(csv_path), "", f"holds {rows:,} candidates, the summary counts {counted:,}: the "
                         "file is incomplete (cut short or edited); run the sweep again")
    if summary.get("interrupted"):
        missing = digest.statuses["not_evaluated"]
        return [f"The sweep was interrupted: {missing:,} of {rows:,} candidates were not evaluated; the ranking "
                "covers the evaluated ones."]
    return []


def load_sweep(folder: str | Path, measurements: Any = None, keep: int = MAX_TOP_PLANS) -> SweepData:
    """Load a sweep folder, its CSV read in one pass (any size) keeping the best `keep` rows whole.
    `measurements`: None (use folder/measured.json if present), a list of dicts, or a path."""
    d = Path(folder)
    if not d.exists():
        raise InputError(str(d), "", "folder not found; give the output folder of `perfmodel sweep`")
    if not d.is_dir():
        raise InputError(str(d), "", "is a file; give the output folder of `perfmodel sweep`")
    notes: list[str] = []
    if (d / SUMMARY).is_file():
        summary = read_summary(d / SUMMARY)
    else:
        summary = {}
        notes.append(f"No {SUMMARY} in the folder (the sweep did not finish writing, or it was removed): the "
                     "sweep's settings are not shown and the objective is assumed to be step_time.")
    objective = summary.get("objective", "step_time")
    digest = digest_rows(iter_candidates(d / CANDIDATES), objective, keep)
    notes += completeness_notes(summary, digest, d / CANDIDATES)
    if digest.unranked:
        notes.append(f"{digest.unranked} simulated candidate(s) had no rank in {CANDIDATES}; the report ranked them "
                     f"by the objective ({objective}).")
    if digest.breakdown_off:
        shown = ", ".join(map(str, digest.breakdown_off)) + (" ..." if digest.breakdown_off_count > 8 else "")
        notes.append(f"The breakdown columns do not sum to the step time (more than 1% apart) for "
                     f"{digest.breakdown_off_count} candidate(s): index {shown}. The stacked bars show the columns "
                     "as written.")

    trace, trace_note = None, ""
    trace_name = summary.get("best_trace", TRACE) if summary else TRACE
    if trace_name:
        tp = d / trace_name
        if tp.is_file():
            trace = read_trace(tp)
            if not trace.events:
                trace_note = f"{tp.name} holds no complete (X) events."
        else:
            trace_note = f"No trace file {trace_name} in the sweep folder."
    else:
        trace_note = "The sweep wrote no trace of the best plan."

    meas_src = ""
    if measurements is None:
        mp = d / MEASURED
        if mp.is_file():
            meas = read_measurements(_read_json(mp), str(mp))
            meas_src = str(mp)
        else:
            meas = []
    elif isinstance(measurements, (str, Path)):
        mp = Path(measurements)
        if not mp.is_file():
            raise InputError(str(mp), "", "measurements file not found")
        meas = read_measurements(_read_json(mp), str(mp))
        meas_src = str(mp)
    else:
        data = measurements if isinstance(measurements, (list, dict)) else list(measurements)
        meas = read_measurements(data, "<measurements>")
        meas_src = "the measurements passed to build_report"
    return SweepData(d, digest, summary, trace, trace_note, meas, meas_src, objective, notes)
