"""executor: run a perfmodel plan for real (backend local: SGLang + megatron-core GRPO or PPO; backend miles: a
Ray job) and record its timings. The Python API: `executor.launch(plan)`, `executor.resume(run)` (executor.api)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["launch", "resume"]

if TYPE_CHECKING:
    from executor.api import launch, resume


def __getattr__(name: str) -> Any:
    if name in __all__:
        from executor import api

        return getattr(api, name)
    raise AttributeError(f"module 'executor' has no attribute {name!r}")
