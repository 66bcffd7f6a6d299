"""The driver's Python garbage collector: how long it paused (to tell a GC stall from a wait on the engine) and the
freeze after the warm-up step."""

from __future__ import annotations

import gc
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from executor.backends.local.rollout import RolloutEngine


class GcPauses:
    """Seconds this process spent in Python's garbage collector (gc.callbacks), to tell a GC pause from a wait on
    the engine when a rollout stalls."""

    def __init__(self) -> None:
        self.total_s = 0.0
        self._t0 = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, _info: dict[str, Any]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            self.total_s += time.perf_counter() - self._t0


# One per process, counting from the worker's first import: every step reads its differences.
GC_PAUSES = GcPauses()


def freeze_gc(engine: RolloutEngine | None) -> None:
    """After a warm-up step, the heap built so far (torch, megatron-core, SGLang: millions of objects) is moved out
    of the collected generations, here and in SGLang's scheduler, as SGLang's freeze_gc advises: walked by every
    full collection it stalled a step by 0.5 s on the driver (every ~10th step, host_s.gc_step) and the engine's
    generate by as much (measured on examples/local-grpo.yaml)."""
    gc.collect()
    gc.freeze()
    if engine is not None:
        engine.freeze_gc()
