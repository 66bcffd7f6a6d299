"""The values a Miles launch is made of, shared by the builder, the dry run and the Ray submission: `MilesLaunch`
(entry point, train arguments, runtime env, Ray commands), `ModelArgsRef` (where the Megatron MODEL_ARGS come from)
and `MilesRunResult` (how a submitted or dry run ended). No plan logic here: see executor.backends.miles.build."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from perfmodel.errors import InputError

MODEL_ARGS_PLACEHOLDER = "${MODEL_ARGS[@]}"  # the bash array the dry run's shell setup defines


@dataclass(frozen=True, slots=True)
class ModelArgsRef:
    """Where the Megatron MODEL_ARGS of the model come from (they are long: resolved on the submitting node)."""

    model_type: str
    miles_root: str
    python: str = "python3"
    fmt: Literal["auto", "py", "sh", "explicit"] = "auto"
    explicit: tuple[str, ...] | None = None

    @property
    def py_script(self) -> str:
        return f"{self.miles_root}/scripts/models/{self.model_type}.py"

    @property
    def sh_script(self) -> str:
        return f"{self.miles_root}/scripts/models/{self.model_type}.sh"

    @property
    def py_command(self) -> list[str]:
        return [self.python, f"{self.miles_root}/miles/utils/external_utils/model_args_utils.py", self.model_type]

    def shell_setup(self) -> str:
        """Shell lines that define the bash array MODEL_ARGS."""
        if self.explicit is not None:
            return "MODEL_ARGS=(" + " ".join(shlex.quote(a) for a in self.explicit) + ")"
        py = f"read -ra MODEL_ARGS <<< \"$({shlex.join(self.py_command)})\""
        sh = f"source {shlex.quote(self.sh_script)}"
        if self.fmt == "py":
            return py
        if self.fmt == "sh":
            return sh
        return (f"if [ -f {shlex.quote(self.py_script)} ]; then {py}; "
                f"else {sh}; fi   # scripts/models/{self.model_type}.py (Miles HEAD) or .sh (PR #1300)")

    def resolve(self, run: Callable[..., subprocess.CompletedProcess] = subprocess.run,
                exists: Callable[[str], bool] = os.path.exists, source: str = "") -> list[str]:
        """The MODEL_ARGS tokens, computed on this (the submitting) machine."""
        if self.explicit is not None:
            return list(self.explicit)
        fmt = self.fmt
        if fmt == "auto":
            fmt = "py" if exists(self.py_script) else "sh" if exists(self.sh_script) else ""
        if not fmt:
            raise InputError(source, "executor.options.miles_root",
                             f"no {self.py_script} or {self.sh_script} on this machine; run from a node with the Miles "
                             "checkout or give executor.options.model_args")
        if fmt == "py":
            proc = run(self.py_command, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise InputError(source, "executor.options.model_type",
                                 f"{shlex.join(self.py_command)} failed: {(proc.stderr or '').strip()[-300:]}")
            return proc.stdout.split()
        cmd = ["bash", "-c", 'source "$1" >/dev/null && printf "%s\\0" "${MODEL_ARGS[@]}"', "_", self.sh_script]
        proc = run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise InputError(source, "executor.options.model_type",
                             f"sourcing {self.sh_script} failed: {(proc.stderr or '').strip()[-300:]}")
        return [t for t in proc.stdout.split("\0") if t]


@dataclass(frozen=True, slots=True)
class MilesLaunch:
    """Everything needed to run one plan on a Ray cluster with Miles."""

    plan_id: str
    run_id: str
    entry_script: str  # <miles_root>/train.py or train_async.py
    python: str
    train_args: tuple[str, ...]  # everything after MODEL_ARGS
    runtime_env_vars: dict[str, str]  # the runtime env's env_vars (before pass-through)
    passthrough_env: tuple[str, ...]  # copied from the submitting shell when set
    model_args: ModelArgsRef
    ray_head: tuple[str, ...]
    ray_worker: tuple[str, ...]
    num_nodes: int
    gpus_per_node: int
    ray_address: str
    num_steps_per_rollout: int
    notes: tuple[str, ...] = ()
    rollout_only: bool = False  # --debug-rollout-only: a step is its rollout (no training-side perf line)

    @property
    def entry_point(self) -> str:
        return Path(self.entry_script).name

    @property
    def runtime_env(self) -> dict[str, Any]:
        return {"env_vars": dict(self.runtime_env_vars)}

    def entrypoint_argv(self, model_args: Sequence[str] | None = None) -> list[str]:
        margs = [MODEL_ARGS_PLACEHOLDER] if model_args is None else list(model_args)
        return [self.python, self.entry_script, *margs, *self.train_args]

    @property
    def submit_argv(self) -> tuple[str, ...]:
        """`ray job submit` as Miles' execute_train runs it (MODEL_ARGS left as the bash array reference)."""
        return ("ray", "job", "submit", "--address", self.ray_address, "--submission-id", self.run_id,
                "--runtime-env-json", json.dumps(self.runtime_env, sort_keys=True), "--",
                *self.entrypoint_argv())

    def resolved_env(self, environ: Mapping[str, str]) -> dict[str, str]:
        """The runtime env vars with the pass-through names taken from `environ` (MASTER_ADDR defaults to 127.0.0.1)."""
        env = dict(self.runtime_env_vars)
        for name in self.passthrough_env:
            if name not in env and environ.get(name):
                env[name] = environ[name]
        env.setdefault("MASTER_ADDR", "127.0.0.1")
        return env

    def values(self, flag: str) -> list[str]:
        """The values following each occurrence of `flag` in the train arguments (for tests and reports)."""
        out: list[str] = []
        args = self.train_args
        for i, a in enumerate(args):
            if a == flag:
                j = i + 1
                while j < len(args) and not args[j].startswith("--"):
                    out.append(args[j])
                    j += 1
        return out

    def has(self, flag: str) -> bool:
        return flag in self.train_args


@dataclass(slots=True)
class MilesRunResult:
    run_id: str
    status: str  # DRY_RUN | SUCCEEDED | FAILED | STOPPED | TIMEOUT | STALLED
    launch: MilesLaunch
    job_id: str | None = None
    steps: list[dict[str, Any]] = field(default_factory=list)
    eval: dict[int, dict[str, float]] = field(default_factory=dict)
    message: str = ""
    log_path: str | None = None
    stall: dict[str, Any] | None = None  # STALLED: the watchdog's report (where the run stood, its last line)

    @property
    def ok(self) -> bool:
        return self.status in ("DRY_RUN", "SUCCEEDED")
