"""Launch a checked local plan: run folder, store row, torchrun with the plan's process count, progress, status.

Run folder: <run_dir>/ holds job.json, the plan copy, logs/torchrun.log (all ranks, with rank prefixes),
trace.json (Perfetto), hf_init/ (the initial HF checkpoint) and hf_update/ (disk weight updates).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from executor.backends.base import RunOutcome
from executor.backends.local.host_probe import probe_host
from executor.measurement_sink import MeasurementSink
from executor.plan_check import CheckedPlan
from executor.records import RunRecord, environment, plan_hash


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch(checked: CheckedPlan, run_id: str, run_dir: Path, store_path: Path, steps: int) -> RunOutcome:
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
        predicted=plan.predicted.model_dump(exclude_none=True), info={"steps_requested": steps},
    )
    sink.start_run(record)
    job = {"plan_path": str(checked.path.resolve()), "run_id": run_id, "run_dir": str(run_dir.resolve()),
           "store_path": str(store_path.resolve()), "steps": steps}
    job_path = run_dir / "job.json"
    job_path.write_text(json.dumps(job, indent=2) + "\n", encoding="utf-8")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", str(checked.processes),
           "--master-addr", "127.0.0.1", "--master-port", str(_free_port()), "--tee", "3",
           "-m", "executor.backends.local.worker", "--job", str(job_path.resolve())]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[3]), env.get("PYTHONPATH")]))
    env.setdefault("PYTHONUNBUFFERED", "1")
    print(f"run {run_id}: {plan.id} on {plan.hardware}, {record.layout}, {steps} steps -> {run_dir}", flush=True)
    t_launch = time.time()
    print(f"[{0.0:6.1f} s] starting {checked.processes} trainer process(es) under torchrun (imports take about "
          "10 s), then the SGLang engine", flush=True)
    log_path = run_dir / "logs" / "torchrun.log"
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True, bufsize=1)
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                log.write(line)
                log.flush()
                if "[executor]" in line:  # the worker's progress, with the time since launch
                    print(f"[{time.time() - t_launch:6.1f} s] {line.split('[executor]', 1)[1].strip()}", flush=True)
            rc = proc.wait()
        except KeyboardInterrupt:  # Ctrl-C reached torchrun too (same process group); let it stop its ranks
            proc.terminate()
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
    print(f"run {run_id} finished: {done} steps; store {store_path}; trace {run_dir / 'trace.json'}", flush=True)
    return RunOutcome(run_id, status, done, 0)
