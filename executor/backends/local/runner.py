"""Launch a checked local plan: run folder, store row, torchrun with the plan's process count, progress, status.

Run folder: <run_dir>/ holds job.json, the plan copy, logs/torchrun.log (all ranks, with rank prefixes),
trace.json (Perfetto), hf_init/ (the initial HF checkpoint) and hf_update/ (disk weight updates).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from executor.backends.base import RunOutcome
from executor.backends.local.host_probe import probe_host
from executor.backends.local.options import LocalOptions
from executor.backends.local.plan_check import CheckedPlan
from executor.measurement_sink import MeasurementSink
from executor.records import RunRecord, environment, plan_hash
from executor.watchdog import (
    EXIT_STALLED,
    WATCHDOG_NCCL_ENV,
    Watchdog,
    die_with_parent,
    end_process_tree,
    watchdog_timeout_s,
)
from perfmodel.errors import InputError


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _lines_of(proc: subprocess.Popen[str]) -> queue.Queue[str | None]:
    """The process's output lines, read on a thread (None at its end), so the watchdog can wait with a timeout."""
    out: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            out.put(line)
        out.put(None)

    threading.Thread(target=read, daemon=True).start()
    return out


def _stalled(run_id: str, dog: Watchdog, proc: subprocess.Popen[str], sink: MeasurementSink,
             log_path: Path) -> RunOutcome:
    """No progress for the watchdog's timeout: end every process of the run, record where it stood."""
    report = dog.report()
    clean = end_process_tree(proc.pid)
    proc.wait(timeout=30)
    report["orphans"] = 0 if clean else "some processes of the run survived SIGKILL"
    sink.update_run_info(run_id, stall=report)
    sink.finish_run(run_id, "stalled")
    done = sink.step_count(run_id)
    sink.close()
    print(f"error: run {run_id} stalled: no progress for {report['silent_s']} s (watchdog {dog.timeout_s:.0f} s) in "
          f"{report['phase']}; {done} steps recorded; every process of the run ended; last line: "
          f"{report['last_progress']!r}; see {log_path}", file=sys.stderr)
    return RunOutcome(run_id, "stalled", done, EXIT_STALLED)


def launch(checked: CheckedPlan, run_id: str, run_dir: Path, store_path: Path, steps: int,
           profile_step: int | None = None) -> RunOutcome:
    """A new run: its folder, its store row, then the run; `profile_step` runs under torch.profiler
    (kernel_profile.py) and is recorded as `profiled_steps`, which `executor export` leaves out."""
    plan = checked.plan
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "logs").mkdir(exist_ok=True)
    shutil.copyfile(checked.path, run_dir / "plan.yaml")
    env_record = environment()
    if plan.hardware.startswith("cpu"):  # a CPU profile is one machine's numbers: the run records its own host's
        env_record["host_probe"] = probe_host()
    sink = MeasurementSink.open(store_path)  # the run row; rank 0 of the worker adds the steps to the same store
    record = RunRecord(
        run_id=run_id, plan_id=plan.id, plan_hash=plan_hash(checked.path), plan_path=str(checked.path.resolve()),
        backend="local", hardware=plan.hardware, layout=plan.train.layout.model_copy(update={"dp": checked.dp}).short(),
        run_dir=str(run_dir.resolve()), started_at=time.time(), environment=env_record,
        predicted=plan.predicted.model_dump(exclude_none=True),
        info={"steps_requested": steps, **({"profiled_steps": [profile_step]} if profile_step else {})},
    )
    with run_lock(run_dir, store_path):
        sink.start_run(record)
        print(f"run {run_id}: {plan.id} on {plan.hardware}, {record.layout}, {steps} steps -> {run_dir}", flush=True)
        extra = {"profile_step": profile_step} if profile_step else {}
        return _run(checked, run_id, run_dir, store_path, steps, sink, extra, "torchrun.log", "trace.json")


def resume(checked: CheckedPlan, run: dict[str, Any], store_path: Path, steps: int) -> RunOutcome:
    """Continue a run from its newest complete checkpoint, in the same run folder and store row: the steps it
    recorded after that checkpoint are kept as superseded (they run again), the rest stay."""
    from executor.backends.local.checkpoint import latest_checkpoint

    run_id, run_dir = run["run_id"], Path(run["run_dir"])
    if run_dir.is_symlink():  # a resumed run writes only into the folder it was given, never through a link
        raise InputError(str(run_dir), "run_dir", f"run {run_id}'s folder is a symbolic link (it would write "
                         "elsewhere): put the folder itself back")
    with run_lock(run_dir, store_path):
        point = latest_checkpoint(run_dir)
        if point is None:
            raise InputError(str(run_dir), "checkpoints", f"run {run_id} has no complete checkpoint (it stopped "
                             "before its first one, or executor.options.checkpoint_every is 0); launch the plan again")
        if point.step >= steps:
            raise InputError("--steps", "", f"run {run_id} has a checkpoint of step {point.step}, at or past the "
                             f"{steps} steps asked for; ask for more with --steps")
        resumes = run["info"].get("resumes", [])
        attempt = len(resumes) + 1
        sink = MeasurementSink.open(store_path)
        moved = sink.reopen_run(run_id, point.step, attempt)
        sink.update_run_info(run_id, steps_requested=steps, resumes=[*resumes, {
            "attempt": attempt, "from_step": point.step, "checkpoint": str(point.path), "at": time.time(),
            "superseded_steps": moved, "status_before": run["status"]}])
        print(f"run {run_id}: resumed from the checkpoint of step {point.step} ({point.path}); steps "
              f"{point.step + 1}-{steps} to run" + (f"; {moved} steps recorded after the checkpoint are kept as "
                                                   "superseded" if moved else ""), flush=True)
        return _run(checked, run_id, run_dir, store_path, steps, sink,
                    {"resume": {"checkpoint": str(point.path), "step": point.step}},
                    f"torchrun-resume{attempt}.log", f"trace-resume{attempt}.json")


@contextlib.contextmanager
def run_lock(run_dir: Path, store_path: Path) -> Iterator[None]:
    """One executor per run folder at a time: a second launch or resume of a live run is refused."""
    import fcntl

    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / ".lock", "a+", encoding="utf-8") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            raise InputError(str(run_dir), "run", f"another executor (pid {f.read().strip() or '?'}) runs this run "
                             f"now; wait for it or stop it first (store {store_path})") from None
        f.truncate(0)
        f.write(str(os.getpid()))
        f.flush()
        yield


def _run(checked: CheckedPlan, run_id: str, run_dir: Path, store_path: Path, steps: int, sink: MeasurementSink,
         job_extra: dict[str, Any], log_name: str, trace_name: str) -> RunOutcome:
    """torchrun under the watchdog until the worker ends; the run's status from the steps it committed."""
    plan = checked.plan
    (run_dir / "logs").mkdir(exist_ok=True)
    options = LocalOptions.model_validate(plan.executor.options)
    dog = Watchdog(watchdog_timeout_s(plan.predicted.step_time_s, options.watchdog_multiple,
                                      options.watchdog_floor_s))
    job = {"plan_path": str(checked.path.resolve()), "run_id": run_id, "run_dir": str(run_dir.resolve()),
           "store_path": str(store_path.resolve()), "steps": steps,
           "collective_timeout_s": dog.timeout_s,  # a dead peer fails the collective, no later than the watchdog
           "trace_file": trace_name, **job_extra}
    job_path = run_dir / "job.json"
    job_path.write_text(json.dumps(job, indent=2) + "\n", encoding="utf-8")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", str(checked.processes),
           "--master-addr", "127.0.0.1", "--master-port", str(_free_port()), "--tee", "3",
           "-m", "executor.backends.local.worker", "--job", str(job_path.resolve())]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[3]), env.get("PYTHONPATH")]))
    env.setdefault("PYTHONUNBUFFERED", "1")
    # on GPUs, as the seed's launch: a timed-out collective raises (async error handling) and dumps the flight
    # recorder's last collectives; on CPU the gloo group's timeout does the same (rank_setup.py)
    env |= {k: v for k, v in WATCHDOG_NCCL_ENV.items() if k not in env}
    t_launch = time.time()
    print(f"[{0.0:6.1f} s] starting {checked.processes} trainer process(es) under torchrun (imports take about "
          "10 s), then the SGLang engine", flush=True)
    log_path = run_dir / "logs" / log_name
    with open(log_path, "w", encoding="utf-8") as log:
        # its own process group: the watchdog ends torchrun, its ranks and SGLang's processes together
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True, bufsize=1,
                                start_new_session=True, preexec_fn=die_with_parent)
        lines = _lines_of(proc)
        try:
            while True:
                try:
                    line = lines.get(timeout=1.0)
                except queue.Empty:
                    if dog.expired():
                        return _stalled(run_id, dog, proc, sink, log_path)
                    continue
                if line is None:
                    break
                dog.progress(line)
                log.write(line)
                log.flush()
                if "[executor]" in line:  # the worker's progress, with the time since launch
                    print(f"[{time.time() - t_launch:6.1f} s] {line.split('[executor]', 1)[1].strip()}", flush=True)
            rc = proc.wait()
        except KeyboardInterrupt:  # stop torchrun, its ranks and the engine: nothing is left behind
            end_process_tree(proc.pid)
            proc.wait(timeout=60)
            sink.finish_run(run_id, "interrupted")
            sink.close()
            raise
    done = sink.step_count(run_id)  # steps the worker committed, not the ones this process wrote
    status = "finished" if rc == 0 and done == steps else "failed"
    sink.finish_run(run_id, status)
    sink.close()
    if status == "failed":
        print(f"error: run {run_id} failed after {done} of {steps} steps (exit {rc}); see {log_path}", file=sys.stderr)
        return RunOutcome(run_id, status, done, 1)
    print(f"run {run_id} finished: {done} steps; store {store_path}; trace {run_dir / trace_name}", flush=True)
    return RunOutcome(run_id, status, done, 0)
