"""Submit a Miles launch with the Ray Job SDK, follow its log, and turn `perf/*` lines into step measurements.

Ray is imported lazily (the `ray` extra); nothing else in the executor needs it. Imports flow one way:
run.py -> ray_job.py -> launch.py / logs.py.
"""

from __future__ import annotations

import asyncio
import shlex
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from executor.backends.miles.launch import MilesLaunch, MilesRunResult
from executor.backends.miles.logs import MilesLogParser
from executor.measurement_sink import StepSink

TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")


def _status_name(status: Any) -> str:
    return str(getattr(status, "value", status)).upper()


def make_client(address: str) -> Any:
    try:
        from ray.job_submission import JobSubmissionClient
    except ImportError as err:  # pragma: no cover - exercised only without the extra
        raise RuntimeError("submitting to Ray needs the ray extra: pip install 'perfmodel[ray]'") from err
    return JobSubmissionClient(address)


def _entrypoint(launch: MilesLaunch, model_args: Sequence[str]) -> str:
    return shlex.join(launch.entrypoint_argv(model_args))


def submit_and_follow(
    launch: MilesLaunch,
    model_args: Sequence[str],
    *,
    environ: Mapping[str, str],
    store: StepSink | None = None,
    out: TextIO | None = None,
    log_path: str | Path | None = None,
    timeout_s: float | None = None,
    client: Any = None,
    poll_s: float = 1.0,
) -> MilesRunResult:
    """Submit `launch` (MODEL_ARGS already resolved), stream its log, store each completed step."""
    client = client or make_client(launch.ray_address)
    env = launch.resolved_env(environ)
    job_id = client.submit_job(
        entrypoint=_entrypoint(launch, model_args),
        submission_id=launch.run_id,
        runtime_env={"env_vars": env},
        metadata={"plan_id": launch.plan_id, "run_id": launch.run_id, "backend": "miles"},
    )
    parser = MilesLogParser(launch.num_steps_per_rollout)
    steps: list[dict[str, Any]] = []
    log_file = open(log_path, "a", encoding="utf-8") if log_path else None
    deadline = time.monotonic() + timeout_s if timeout_s else None

    seen = [0]  # characters of the job log handled so far (a polling fallback resumes there)

    def record(m: dict[str, Any]) -> None:
        steps.append(m)
        if store is not None:
            store.add_step(run_id=launch.run_id, plan_id=launch.plan_id, backend="miles", measurement=m)

    def handle(chunk: str) -> None:
        seen[0] += len(chunk)
        if log_file:
            log_file.write(chunk)
            log_file.flush()
        if out is not None:
            out.write(chunk)
        for m in parser.feed(chunk):
            record(m)

    status = "PENDING"
    message = ""
    try:
        timed_out = _follow(client, job_id, handle, deadline, seen)
        if timed_out:
            client.stop_job(job_id)
            status = "TIMEOUT"
        else:
            status = _wait_terminal(client, job_id, deadline, poll_s)
            if status not in TERMINAL:
                client.stop_job(job_id)
                status = "TIMEOUT"
        for m in parser.finish():  # steps still pending when the log ended
            record(m)
        try:
            info = client.get_job_info(job_id)
            message = str(getattr(info, "message", "") or "")
        except Exception:
            message = ""
    except KeyboardInterrupt:
        client.stop_job(job_id)
        raise
    finally:
        if log_file:
            log_file.close()
    return MilesRunResult(run_id=launch.run_id, status=status, launch=launch, job_id=job_id, steps=steps,
                          eval=dict(parser.eval), message=message, log_path=str(log_path) if log_path else None)


def _follow(client: Any, job_id: str, handle: Callable[[str], None], deadline: float | None, seen: list[int]) -> bool:
    """Stream the job log into `handle` until the job ends. Returns True when the deadline passed first."""

    async def tail() -> None:
        async for chunk in client.tail_job_logs(job_id):
            handle(chunk)

    if deadline is None:
        try:
            asyncio.run(tail())
            return False
        except Exception:
            return _poll_logs(client, job_id, handle, None, seen)
    remaining = max(0.0, deadline - time.monotonic())

    async def bounded() -> bool:
        try:
            await asyncio.wait_for(tail(), timeout=remaining)
            return False
        except TimeoutError:
            return True

    try:
        return asyncio.run(bounded())
    except Exception:
        return _poll_logs(client, job_id, handle, deadline, seen)


def _poll_logs(client: Any, job_id: str, handle: Callable[[str], None], deadline: float | None, seen: list[int],
               poll_s: float = 2.0) -> bool:
    """Fallback when the log stream breaks: poll the whole log, handling what is new since `seen[0]`."""
    while True:
        done = _status_name(client.get_job_status(job_id)) in TERMINAL
        text = client.get_job_logs(job_id)
        if len(text) > seen[0]:
            handle(text[seen[0]:])  # advances seen[0]
        if done:
            return False
        if deadline is not None and time.monotonic() > deadline:
            return True
        time.sleep(poll_s)


def _wait_terminal(client: Any, job_id: str, deadline: float | None, poll_s: float) -> str:
    while True:
        status = _status_name(client.get_job_status(job_id))
        if status in TERMINAL:
            return status
        if deadline is not None and time.monotonic() > deadline:
            return status
        time.sleep(poll_s)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use `executor launch --plan` (executor.backends.miles.run.run_miles)")
