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
from dataclasses import dataclass, field
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


@dataclass
class _LogFollower:
    """The job's log as it streams: each chunk to the log file and `out`, each completed step to the store, the
    watchdog told of every line; `stop_reason` says when the job must be stopped."""

    launch: MilesLaunch
    parser: MilesLogParser
    store: StepSink | None
    out: TextIO | None
    watchdog: Watchdog | None
    log_file: TextIO | None
    deadline: float | None
    steps: list[dict[str, Any]] = field(default_factory=list)
    seen: list[int] = field(default_factory=lambda: [0])  # characters handled so far (a polling fallback resumes)
    partial: str = ""  # the log's last line while it is incomplete (chunks do not end at line ends)

    def record(self, m: dict[str, Any]) -> None:
        self.steps.append(m)
        if self.watchdog is not None:
            self.watchdog.steps_done = len(self.steps)
        if self.store is not None:
            self.store.add_step(run_id=self.launch.run_id, plan_id=self.launch.plan_id, backend="miles",
                                measurement=m)

    def handle(self, chunk: str) -> None:
        self.seen[0] += len(chunk)
        if self.watchdog is not None:  # any output is progress; the report quotes the last whole line
            *whole, self.partial = (self.partial + chunk).split("\n")
            for line in whole:
                self.watchdog.progress(line)
            self.watchdog.last_progress = time.monotonic()
        if self.log_file:
            self.log_file.write(chunk)
            self.log_file.flush()
        if self.out is not None:
            self.out.write(chunk)
        for m in self.parser.feed(chunk):
            self.record(m)

    def stop_reason(self) -> str | None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            return "TIMEOUT"
        if self.watchdog is not None and self.watchdog.expired():
            return "STALLED"
        return None


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
    parser = MilesLogParser(launch.num_steps_per_rollout, launch.rollout_only)
    follower = _LogFollower(launch, parser, store, out, watchdog,
                            open(log_path, "a", encoding="utf-8") if log_path else None,
                            time.monotonic() + timeout_s if timeout_s else None)
    status = "PENDING"
    message = ""
    stall: dict[str, Any] | None = None
    try:
        reason = _follow(client, job_id, follower.handle, follower.stop_reason, follower.seen)
        if reason is None:
            status = _wait_terminal(client, job_id, follower.stop_reason, poll_s)
            reason = None if status in TERMINAL else (follower.stop_reason() or "TIMEOUT")
        if reason is not None:
            if reason == "STALLED" and watchdog is not None:
                stall = watchdog.report()
            client.stop_job(job_id)  # Ray ends the entry point's process group (SIGTERM, then SIGKILL)
            status = reason
            if stall is not None:
                stall["job_status_after_stop"] = _wait_terminal(client, job_id, _after(30.0), poll_s)
        for m in follower.parser.finish():  # steps still pending when the log ended
            follower.record(m)
        try:
            info = client.get_job_info(job_id)
            message = str(getattr(info, "message", "") or "")
        except Exception:
            message = ""
    except KeyboardInterrupt:
        client.stop_job(job_id)
        raise
    finally:
        if follower.log_file:
            follower.log_file.close()
    return MilesRunResult(run_id=launch.run_id, status=status, launch=launch, job_id=job_id, steps=follower.steps,
                          eval=dict(follower.parser.eval), message=message,
                          log_path=str(log_path) if log_path else None, stall=stall)


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
