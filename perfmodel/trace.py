"""Chrome / Perfetto trace JSON (the Trace Event Format) for simulated and measured steps.

One process per track group (a pipeline stage, a rollout engine), one thread per kind (compute, comm), times
in microseconds. The executor writes its real runs in the same format so both open side by side in Perfetto: this
module is the neutral format both import (it depends on nothing of the simulator).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from perfmodel.files import write_text_atomic


@dataclass(slots=True)
class Span:
    group: str  # e.g. "stage 0", "engine 3", "rollout"
    track: str  # e.g. "compute", "comm"
    name: str
    start_s: float
    dur_s: float
    args: dict = field(default_factory=dict)


def chrome_trace(spans: Iterable[Span], offset_s: float = 0.0) -> dict:
    groups: dict[str, int] = {}
    tracks: dict[tuple[str, str], int] = {}
    events: list[dict] = []
    for sp in spans:
        pid = groups.setdefault(sp.group, len(groups) + 1)
        tid = tracks.setdefault((sp.group, sp.track), len(tracks) + 1)
        events.append({"name": sp.name, "ph": "X", "pid": pid, "tid": tid, "ts": (sp.start_s + offset_s) * 1e6,
                       "dur": sp.dur_s * 1e6, "args": sp.args})
    meta = [{"name": "process_name", "ph": "M", "pid": pid, "args": {"name": g}} for g, pid in groups.items()]
    meta += [{"name": "process_sort_index", "ph": "M", "pid": pid, "args": {"sort_index": pid}}
             for pid in groups.values()]
    meta += [{"name": "thread_name", "ph": "M", "pid": groups[g], "tid": tid, "args": {"name": t}}
             for (g, t), tid in tracks.items()]
    return {"traceEvents": meta + events, "displayTimeUnit": "ms"}


def write_trace(spans: Iterable[Span], path: str | Path) -> None:
    write_text_atomic(path, json.dumps(chrome_trace(spans)))
