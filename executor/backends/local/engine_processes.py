"""How SGLang's engine gets its processes (scheduler, detokenizer), and the environment they see.

SGLang spawns them: each new process imports torch and SGLang again (about 7 s of CPU each), both at once, after
the trainer is built. On the 2-core CPU host the engine took 28 s to start (local-grpo, measured). On a CPU
machine the rank that hosts the engine therefore starts a forkserver first (`prestart`): one process that imports
SGLang's scheduler modules once, while the trainer imports megatron-core and builds its model, and the engine's
processes are forked from it (engine start 28 -> 10.5 s, same plan and host). On a GPU nothing changes: spawn, as
SGLang sets it for CUDA.

What a spawned process had and a forked one must not lose:
- the environment of the engine's process when the engine starts (the align command sets its dump folder just
  before): the scheduler's entry carries it across (`SchedulerEntry`); the detokenizer runs with the forkserver's,
  which `prestart` starts in the engine's environment (`engine_environment`);
- SGLang's scheduler sends SIGQUIT to its parent when it fails, and the engine's process then ends the run: the
  forkserver is that parent now, so it passes SIGQUIT on to the engine's process (`_relay_sigquit`).
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from executor.backends.local.cpu_shims import apply_sglang_shims, needs_cpu_shims, run_scheduler_process_on_cpu

# torchrun's variables must not reach SGLang's own subprocesses (they set up their own process group)
_TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK", "ROLE_WORLD_SIZE",
                 "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT",
                 "TORCHELASTIC_MAX_RESTARTS", "GROUP_WORLD_SIZE", "TORCH_NCCL_ASYNC_ERROR_HANDLING", "OMP_NUM_THREADS")
EXTERNAL_MODELS = "executor.backends.local.sglang_models"  # model classes SGLang does not ship (dsv4mini)
_OUR_ARCHITECTURES = ("Dsv4MiniForCausalLM",)
# Set in the forkserver's environment only: the pid of the engine's process, where SIGQUIT goes on.
_RELAY_TO = "EXECUTOR_ENGINE_PROCESS_PID"
_IMPORT_SGLANG = "EXECUTOR_ENGINE_PRELOAD_SGLANG"  # "1": the forkserver imports SGLang before it forks anything
_PRELOAD = ("sglang.srt.managers.scheduler", "sglang.srt.managers.detokenizer_manager",
            "sglang.srt.model_executor.model_runner", "sglang.srt.models.registry")


@contextmanager
def engine_environment(architecture: str) -> Iterator[None]:
    """The environment the engine's processes see: without torchrun's variables, with our model package when the
    checkpoint names one of our classes (SGLang's model registry reads it when it is first imported)."""
    changes: dict[str, str | None] = {k: None for k in _TORCHRUN_ENV}
    if architecture in _OUR_ARCHITECTURES:
        changes["SGLANG_EXTERNAL_MODEL_PACKAGE"] = EXTERNAL_MODELS
    saved = {k: os.environ.get(k) for k in changes}
    try:
        for key, value in changes.items():
            _set_env(key, value)
        yield
    finally:
        for key, value in saved.items():
            _set_env(key, value)


def _set_env(key: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(key, None)
    else:
        os.environ[key] = value


_started_for: str | None = None  # the architecture this process's forkserver was started for


def prestart(architecture: str, import_sglang: bool = True) -> None:
    """CPU only: start the forkserver the engine's processes will come from, SGLang imported in it, now, so that
    the imports overlap the trainer's setup (call it before the trainer imports megatron-core). Again after an
    engine's shutdown (which ends the forkserver with the engine's other processes), it starts a new one; a
    process keeps to the architecture it started with (another one's engine spawns, as SGLang does).
    `import_sglang=False`: the forkserver without SGLang (15 s of imports here), for a process that forks no
    engine from it (tests/executor/test_engine_processes.py's relay check)."""
    global _started_for
    if not needs_cpu_shims() or _started_for not in (None, architecture):
        return
    multiprocessing.set_forkserver_preload([__name__])
    with engine_environment(architecture):
        os.environ[_RELAY_TO] = str(os.getpid())
        os.environ[_IMPORT_SGLANG] = "1" if import_sglang else "0"
        try:
            multiprocessing.forkserver.ensure_running()
        finally:
            os.environ.pop(_RELAY_TO, None)
            os.environ.pop(_IMPORT_SGLANG, None)
    _started_for = architecture


def _relay_sigquit(signum: int, _frame: Any) -> None:
    os.kill(int(os.environ[_RELAY_TO]), signum)


if os.environ.get(_RELAY_TO) and os.getppid() == int(os.environ[_RELAY_TO]):  # imported as the forkserver's preload
    import importlib

    if os.environ.get(_IMPORT_SGLANG) == "1":
        apply_sglang_shims()  # before SGLang's layers are imported: every forked process starts shimmed
        for _module in _PRELOAD:
            importlib.import_module(_module)
    signal.signal(signal.SIGQUIT, _relay_sigquit)


class SchedulerEntry:
    """SGLang's scheduler entry on CPU (shim 7 applied first), with the environment the engine's process had when it
    started the scheduler: captured when the process object is pickled for the new process, set there before SGLang
    runs. A spawned process gets that environment anyway; a forked one would get the forkserver's."""

    def __init__(self, environ: dict[str, str] | None = None) -> None:
        self.environ = environ

    def __reduce__(self) -> tuple[type, tuple[dict[str, str]]]:
        return SchedulerEntry, (dict(os.environ),)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.environ is not None:
            os.environ.clear()
            os.environ.update(self.environ)
        signal.signal(signal.SIGQUIT, signal.SIG_DFL)  # the relay is the forkserver's, not the scheduler's
        return run_scheduler_process_on_cpu(*args, **kwargs)


def start_method(architecture: str) -> str:
    """How an engine for this architecture gets its processes in this process: "forkserver" or "spawn"."""
    return "forkserver" if needs_cpu_shims() and _started_for == architecture else "spawn"


@contextmanager
def _forked_from_prestarted(architecture: str) -> Iterator[None]:
    """While SGLang launches its processes: fork them from the prestarted forkserver instead of spawning. SGLang
    sets the start method to spawn in `_set_envs_and_config` just before; this wraps that call."""
    from sglang.srt.entrypoints import engine

    if start_method(architecture) == "spawn":  # none prestarted, or for another model: SGLang's own
        yield
        return
    prestart(architecture)  # alive: nothing to do; ended by an earlier engine's shutdown: a new one
    original = engine._set_envs_and_config

    def set_envs_then_forkserver(server_args: Any) -> None:
        original(server_args)
        multiprocessing.set_start_method("forkserver", force=True)

    engine._set_envs_and_config = set_envs_then_forkserver
    try:
        yield
    finally:
        engine._set_envs_and_config = original


def sglang_engine_class(architecture: str) -> type:
    """`sglang.Engine`, or on a CPU machine a subclass whose scheduler applies shim 7 and whose processes are forked
    from the prestarted forkserver when there is one for this architecture."""
    from sglang.srt.entrypoints.engine import Engine

    if not needs_cpu_shims():
        return Engine

    class CpuEngine(Engine):  # type: ignore[misc, valid-type]
        run_scheduler_process_func = SchedulerEntry()

        @classmethod
        def _launch_subprocesses(cls, *args: Any, **kwargs: Any) -> Any:
            with _forked_from_prestarted(architecture):
                return super()._launch_subprocesses(*args, **kwargs)

    return CpuEngine
