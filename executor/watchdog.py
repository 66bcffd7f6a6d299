"""The executor's watchdog: a run that makes no progress (no log line, no finished phase) for longer than its plan
says a step should take, times a margin, is stalled; it is torn down (every process of its group, or its Ray job)
and recorded as `status: stalled` with where it was. The seed's team ran 100+ steps with the NCCL/RCCL watchdog and
flight recorder on for the same reason: a hung collective otherwise waits forever.

Timeout = max(floor_s, multiple x the plan's predicted step time): the prediction sets the scale (a 30 s step and a
30 min step need different patience), the floor covers start-up and a prediction that is off.
"""

from __future__ import annotations

import os
import re
import signal
import time
from dataclasses import dataclass, field

DEFAULT_MULTIPLE = 20.0
DEFAULT_FLOOR_S = 180.0
EXIT_STALLED = 3  # `executor launch` exits with this when the watchdog stopped the run

# what a GPU run sets so a hung collective fails and leaves a trace (the seed's launch, Miles PR1300's NCCL env)
WATCHDOG_NCCL_ENV = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "3", "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
                     "TORCH_NCCL_TRACE_BUFFER_SIZE": "200000"}

_STEP = re.compile(r"step (\d+)/(\d+)")


def watchdog_timeout_s(predicted_step_s: float | None, multiple: float = DEFAULT_MULTIPLE,
                       floor_s: float = DEFAULT_FLOOR_S) -> float:
    return max(floor_s, multiple * predicted_step_s) if predicted_step_s else floor_s


@dataclass
class Watchdog:
    """Progress is any line the run prints; `expired()` once none came for `timeout_s`."""

    timeout_s: float
    last_progress: float = field(default_factory=time.monotonic)
    last_line: str = ""
    steps_done: int = 0

    def progress(self, line: str) -> None:
        self.last_progress = time.monotonic()
        if line.strip():
            self.last_line = line.strip()[-300:]
        m = _STEP.search(line) if "[executor] step " in line else None
        if m:
            self.steps_done = max(self.steps_done, int(m.group(1)))

    def silent_s(self) -> float:
        return time.monotonic() - self.last_progress

    def expired(self) -> bool:
        return self.silent_s() > self.timeout_s

    def report(self) -> dict[str, object]:
        """What the store records of a stall: where the run was and what it last said."""
        where = f"step {self.steps_done + 1}" if self.steps_done else "start-up (trainer and engine)"
        return {"phase": where, "steps_done": self.steps_done, "silent_s": round(self.silent_s(), 1),
                "timeout_s": self.timeout_s, "last_progress": self.last_line}


def end_process_tree(pid: int, grace_s: float = 10.0) -> bool:
    """End `pid` and every process below it: SIGTERM to `pid` first (torchrun then stops its ranks), SIGKILL after
    `grace_s` to whatever of the tree is left, stopped (SIGSTOP) processes included. The tree is read before the
    signals: torchrun starts each rank in a session of its own, and a killed parent's children move to init, so
    neither a process group nor the tree read later would find them all. True when none is left."""
    tree = {pid, *descendants(pid)}
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and _running(tree):
        tree |= {d for p in _running(tree) for d in descendants(p)}
        time.sleep(0.2)
    for _ in range(3):
        alive = _running(tree)
        if not alive:
            return True
        tree |= {d for p in alive for d in descendants(p)}
        for p in _running(tree):
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(1.0)
    return not _running(tree)


def _table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, state) of every process (zombies included)."""
    out: dict[int, tuple[int, str]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            out[int(entry)] = (int(fields[1]), fields[0])
    return out


def descendants(pid: int) -> list[int]:
    table = _table()
    children: dict[int, list[int]] = {}
    for p, (ppid, _state) in table.items():
        children.setdefault(ppid, []).append(p)
    out, todo = [], list(children.get(pid, []))
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def _running(pids: set[int]) -> set[int]:
    """Those of `pids` that still run (a zombie, dead but not yet reaped, does not)."""
    table = _table()
    return {p for p in pids if p in table and table[p][1] != "Z"}


def die_with_parent() -> None:
    """For a child's preexec_fn: the kernel sends it SIGTERM when the executor dies, even by SIGKILL, so a killed
    executor leaves no run behind (torchrun ends its ranks on SIGTERM, SGLang's processes follow their parent)."""
    from perfmodel.signals import die_with_parent as on_parent_death

    on_parent_death(signal.SIGTERM)
