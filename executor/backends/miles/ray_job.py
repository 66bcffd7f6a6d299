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
from executor.watchdog import Watchdog

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
    watchdog: Watchdog | None = None,
    client: Any = None,
    poll_s: float = 1.0,
) -> MilesRunResult:
    """Submit `launch` (MODEL_ARGS already resolved), stream its log, store each completed step. The job is stopped
    when `timeout_s` passes (status TIMEOUT) or when `watchdog` sees no log line for its timeout (STALLED)."""
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
    partial = [""]  # the log's last line while it is incomplete (chunks do not end at line ends)

    def record(m: dict[str, Any]) -> None:
        steps.append(m)
        if watchdog is not None:
            watchdog.steps_done = len(steps)
        if store is not None:
            store.add_step(run_id=launch.run_id, plan_id=launch.plan_id, backend="miles", measurement=m)

    def handle(chunk: str) -> None:
        seen[0] += len(chunk)
        if watchdog is not None:  # any output is progress; the report quotes the last whole line
            *whole, partial[0] = (partial[0] + chunk).split("\n")
            for line in whole:
                watchdog.progress(line)
            watchdog.last_progress = time.monotonic()
        if log_file:
            log_file.write(chunk)
            log_file.flush()
        if out is not None:
            out.write(chunk)
        for m in parser.feed(chunk):
            record(m)

    def stop_reason() -> str | None:
        if deadline is not None and time.monotonic() > deadline:
            return "TIMEOUT"
        if watchdog is not None and watchdog.expired():
            return "STALLED"
        return None

    status = "PENDING"
    message = ""
    stall: dict[str, Any] | None = None
    try:
        reason = _follow(client, job_id, handle, stop_reason, seen)
        if reason is None:
            status = _wait_terminal(client, job_id, stop_reason, poll_s)
            reason = None if status in TERMINAL else (stop_reason() or "TIMEOUT")
        if reason is not None:
            if reason == "STALLED" and watchdog is not None:
                stall = watchdog.report()
            client.stop_job(job_id)  # Ray ends the entry point's process group (SIGTERM, then SIGKILL)
            status = reason
            if stall is not None:
                stall["job_status_after_stop"] = _wait_terminal(client, job_id, _after(30.0), poll_s)
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
                          eval=dict(parser.eval), message=message, log_path=str(log_path) if log_path else None,
                          stall=stall)


def _after(seconds: float) -> Callable[[], str | None]:
    """A stop condition that holds once `seconds` have passed."""
    end = time.monotonic() + seconds
    return lambda: "TIMEOUT" if time.monotonic() > end else None


def _follow(client: Any, job_id: str, handle: Callable[[str], None], stop_reason: Callable[[], str | None],
            seen: list[int]) -> str | None:
    """Stream the job log into `handle` until the job ends (None) or `stop_reason()` names why to stop (checked at
    least once a second, also while the log is silent)."""

    async def tail() -> str | None:
        chunks: asyncio.Queue[str | None] = asyncio.Queue()

        async def pump() -> None:
            async for chunk in client.tail_job_logs(job_id):
                await chunks.put(chunk)
            await chunks.put(None)

        task = asyncio.create_task(pump())
        try:
            while True:
                try:
                    chunk = await asyncio.wait_for(chunks.get(), timeout=1.0)
                except TimeoutError:
                    if task.done() and task.exception() is not None:
                        raise task.exception() from None  # the stream broke: poll instead
                    chunk = ""
                if chunk is None:
                    return None
                if chunk:
                    handle(chunk)
                reason = stop_reason()
                if reason is not None:
                    return reason
        finally:
            task.cancel()

    try:
        return asyncio.run(tail())
    except Exception:
        return _poll_logs(client, job_id, handle, stop_reason, seen)


def _poll_logs(client: Any, job_id: str, handle: Callable[[str], None], stop_reason: Callable[[], str | None],
               seen: list[int], poll_s: float = 2.0) -> str | None:
    """Fallback when the log stream breaks: poll the whole log, handling what is new since `seen[0]`."""
    while True:
        done = _status_name(client.get_job_status(job_id)) in TERMINAL
        text = client.get_job_logs(job_id)
        if len(text) > seen[0]:
            handle(text[seen[0]:])  # advances seen[0]
        if done:
            return None
        reason = stop_reason()
        if reason is not None:
            return reason
        time.sleep(poll_s)


def _wait_terminal(client: Any, job_id: str, stop_reason: Callable[[], str | None], poll_s: float) -> str:
    while True:
        status = _status_name(client.get_job_status(job_id))
        if status in TERMINAL or stop_reason() is not None:
            return status
        time.sleep(poll_s)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use `executor launch --plan` (executor.backends.miles.run.run_miles)")
