"""A Perfetto / Chrome trace of the real run, in the same format as perfmodel's simulated traces
(`perfmodel.trace`), so a measured and a simulated step open side by side in Perfetto.

One process per torchrun rank ("rank N"; the SGLang engine's work is drawn on rank 0's "rollout" lane), one thread
per lane. The file is rewritten after every step, so a crashed run still leaves the trace up to its last full step.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from perfmodel.trace import Span, chrome_trace


class TraceWriter:
    def __init__(self, path: Path, origin_s: float) -> None:
        self.path = path
        self.origin_s = origin_s
        self.spans: list[Span] = []

    def span(self, name: str, start_s: float, dur_s: float, pid: int = 0, lane: str = "step", **args: Any) -> None:
        self.spans.append(Span(f"rank {pid}", lane, name, start_s - self.origin_s, max(dur_s, 0.0), dict(args)))

    def flush(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(chrome_trace(self.spans)), encoding="utf-8")
        os.replace(tmp, self.path)
