"""A Perfetto / Chrome trace of the real run: complete events {"name","ph":"X","ts","dur","pid","tid"} in microseconds.

pid is the torchrun rank (the SGLang engine's work is drawn on rank 0's "rollout" lane), tid names the lane.
The file is rewritten after every step, so a crashed run still leaves the trace up to its last full step.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


class TraceWriter:
    def __init__(self, path: Path, origin_s: float) -> None:
        self.path = path
        self.origin_s = origin_s
        self.events: list[dict[str, Any]] = []
        self._lanes: dict[tuple[int, str], int] = {}

    def _tid(self, pid: int, lane: str) -> int:
        key = (pid, lane)
        if key not in self._lanes:
            self._lanes[key] = len([k for k in self._lanes if k[0] == pid]) + 1
            self.events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": self._lanes[key],
                                "args": {"name": lane}})
            if len([k for k in self._lanes if k[0] == pid]) == 1:
                self.events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                                    "args": {"name": f"rank {pid}"}})
        return self._lanes[key]

    def span(self, name: str, start_s: float, dur_s: float, pid: int = 0, lane: str = "step", **args: Any) -> None:
        event: dict[str, Any] = {"name": name, "ph": "X", "ts": round((start_s - self.origin_s) * 1e6, 1),
                                 "dur": round(max(dur_s, 0.0) * 1e6, 1), "pid": pid, "tid": self._tid(pid, lane)}
        if args:
            event["args"] = args
        self.events.append(event)

    def flush(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"traceEvents": self.events, "displayTimeUnit": "ms"}), encoding="utf-8")
        os.replace(tmp, self.path)
