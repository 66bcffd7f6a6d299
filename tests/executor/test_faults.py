"""Faults injected into real local runs (SGLang + megatron-core under torchrun on this machine): a hung engine, a
killed training rank, a killed executor (whose resume then writes the store alongside another run). Each time the
executor notices, ends every process of the run (checked by process tree) and the store holds every completed step
and nothing half-written; `executor launch --resume` then continues the run from its newest checkpoint to the
steps asked for, in the same store row, the policy where the checkpoint left it (the restore checks the weights'
digest; the sampled tokens' log-prob stays above the untrained policy's)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.executor.test_local_launch import REPO, check_two_process_layout, needs_stack

pytestmark = [pytest.mark.slow]


def _plan(tmp_path: Path, name: str, small: bool = False, **options: object) -> Path:
    """An example plan with executor options changed; `small`: a quarter of its batch (8 prompts x 8 samples),
    for the tests about the store and the launch, not about learning."""
    data = yaml.safe_load((REPO / "examples" / name).read_text())
    data["executor"]["options"].update(options)
    if small:
        data["rl"]["prompts_per_step"], data["train"]["global_batch"], data["train"]["micro_batch"] = 8, 64, 32
        data.pop("predicted", None)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _start(plan: Path, steps: int, store: Path, run_dir: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen([sys.executable, "-m", "executor", "launch", "--plan", str(plan), "--steps", str(steps),
                             "--store", str(store), "--run-dir", str(run_dir)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env, bufsize=1)


def _read_until(proc: subprocess.Popen[str], text: str, timeout_s: float = 240) -> list[str]:
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if text in line:
            return lines
    raise AssertionError(f"{text!r} never came: {''.join(lines[-20:])}")


def _children() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if stat[0] != "Z":
                out.setdefault(int(stat[1]), []).append(int(entry))
    return out


def _tree(pid: int) -> list[int]:
    kids, todo, seen = _children(), [pid], []
    while todo:
        p = todo.pop()
        seen.append(p)
        todo += kids.get(p, [])
    return seen[1:]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _alive(pids: list[int]) -> list[int]:
    kids = _children()
    live = {p for ps in kids.values() for p in ps}
    return [p for p in pids if p in live]


def _wait_gone(pids: list[int], timeout_s: float = 60) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and _alive(pids):
        time.sleep(0.5)
    return _alive(pids)


def _resume_and_check(store: Path, run: dict, steps: int) -> dict:
    """Resume the run to `steps`: it finishes with steps 1..steps in the store, the re-run ones kept as superseded,
    and the policy continues (not the untrained one again)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-m", "executor", "launch", "--resume", run["run_id"], "--steps", str(steps),
                          "--store", str(store)], capture_output=True, text=True, env=env, timeout=400)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    from executor.store import Store

    (after,) = (r for r in _runs(store) if r["run_id"] == run["run_id"])
    assert after["status"] == "finished"
    assert [s["step"] for s in after["stored"]] == list(range(1, steps + 1))
    (resumed,) = after["info"]["resumes"]
    point = resumed["from_step"]
    assert 1 <= point <= len(run["stored"]) and f"resumed from the checkpoint of step {point}" in out.stdout
    assert after["stored"][:point] == run["stored"][:point]  # the steps before the checkpoint: untouched
    db = Store(store)
    superseded = db.superseded_steps(run["run_id"])
    db.close()
    assert [s["step"] for s in superseded] == [s["step"] for s in run["stored"][point:]]  # kept, not lost
    lp = [s["rollout_log_prob_mean"] for s in after["stored"]]
    assert sum(lp[point:]) / len(lp[point:]) > sum(lp[:2]) / 2, lp
    print(f"\n{run['run_id']}: status {run['status']} with {len(run['stored'])} steps stored; resumed from the "
          f"checkpoint of step {point}: {len(superseded)} kept as superseded, {steps} steps stored, status "
          f"{after['status']}; rollout log-prob mean {[round(x, 3) for x in lp]}")
    return after


def _runs(store: Path) -> list[dict]:
    from executor.store import Store

    s = Store(store)
    try:
        return [dict(r, stored=s.steps(r["run_id"])) for r in s.runs()]
    finally:
        s.close()


@needs_stack
@pytest.mark.timeout(600)
def test_a_hung_engine_is_noticed_by_the_watchdog_and_everything_ended(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "local-grpo.yaml", watchdog_floor_s=10, watchdog_multiple=2, checkpoint_every=2)
    proc = _start(plan, 40, tmp_path / "s.sqlite", tmp_path / "run")
    _read_until(proc, "step 3/40")
    tree = _tree(proc.pid)
    engine = [p for p in tree if _comm(p).startswith("sglang") or "sglang" in _cmdline(p).split(" ")[0]]
    assert engine, [(p, _comm(p)) for p in tree]
    t_stop = time.monotonic()
    for p in engine:
        os.kill(p, signal.SIGSTOP)  # a hang: alive, silent
    out, _ = proc.communicate(timeout=300)
    noticed_s = time.monotonic() - t_stop
    assert proc.returncode == 3, out[-3000:]
    assert noticed_s < 10 + 40, noticed_s  # the watchdog's 10 s, plus the teardown's grace
    assert "stalled" in out and "every process of the run ended" in out
    assert _wait_gone(tree, 30) == []  # orphans: 0 (a stopped process still dies of SIGKILL)
    (run,) = _runs(tmp_path / "s.sqlite")
    assert run["status"] == "stalled" and run["info"]["stall"]["orphans"] == 0
    assert run["info"]["stall"]["steps_done"] == len(run["stored"]) >= 3
    assert [s["step"] for s in run["stored"]] == list(range(1, len(run["stored"]) + 1))
    _resume_and_check(tmp_path / "s.sqlite", run, len(run["stored"]) + 3)


@needs_stack
@pytest.mark.timeout(600)
def test_a_killed_training_rank_fails_the_run_and_leaves_nothing(tmp_path: Path) -> None:
    proc = _start(_plan(tmp_path, "local-grpo-pp2.yaml", checkpoint_every=2), 40, tmp_path / "s.sqlite",
                  tmp_path / "run")
    _read_until(proc, "step 3/40")
    tree = _tree(proc.pid)
    ranks = [p for p in tree if "executor.backends.local.worker" in _cmdline(p)
             and "torch.distributed.run" not in _cmdline(p)]
    assert len(ranks) == 2, [(p, _cmdline(p)[:80]) for p in tree]
    victim = next(p for p in ranks if b"RANK=1\0" in Path(f"/proc/{p}/environ").read_bytes())  # not the driver
    t_kill = time.monotonic()
    os.kill(victim, signal.SIGKILL)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode != 0 and time.monotonic() - t_kill < 120, out[-3000:]
    assert _wait_gone(tree, 60) == []
    (run,) = _runs(tmp_path / "s.sqlite")
    assert run["status"] == "failed" and len(run["stored"]) >= 3
    assert all(s["phases_s"]["step"] > 0 for s in run["stored"])  # whole steps only
    after = _resume_and_check(tmp_path / "s.sqlite", run, len(run["stored"]) + 2)
    check_two_process_layout(after, after["stored"], "TP1/PP2/DP1")  # the PP2 plan's launch test


@needs_stack
@pytest.mark.timeout(900)
def test_a_killed_executor_leaves_whole_steps_and_its_resume_shares_the_store_with_another_run(tmp_path: Path) -> None:
    """The executor killed (SIGKILL) at a random moment of a step: every process of its run ends with it and the
    store keeps whole steps only. Its resume then writes that store while a second run, started at the same moment,
    writes it too: both finish with every step. The store, the run folders and the second plan sit under paths
    carrying shell metacharacters: the launch passes them as arguments (torchrun's argv, the job file), never
    through a shell, so the canary is never touched."""
    canary = tmp_path / "canary"
    folder = tmp_path / f"a;$(touch {canary}) `touch {canary}` |& b'\""
    folder.mkdir(parents=True)  # the canary's path adds folders
    store = folder / "s.sqlite"
    proc = _start(_plan(tmp_path, "local-grpo.yaml", checkpoint_every=2), 40, store, folder / "run dir")
    _read_until(proc, "step 2/40")
    t2 = time.monotonic()
    _read_until(proc, "step 3/40")
    step_s = time.monotonic() - t2
    seed = int(os.environ.get("FAULT_SEED", time.time_ns() % 10**6))
    delay = random.Random(seed).uniform(0.0, 1.5 * step_s)  # anywhere in the next step or so: mid-compute, mid-write
    time.sleep(delay)
    tree = _tree(proc.pid)
    os.kill(proc.pid, signal.SIGKILL)
    print(f"killed {delay:.2f} s after step 3 (a step takes {step_s:.2f} s; FAULT_SEED={seed} repeats it)")
    proc.wait(timeout=30)
    assert _wait_gone(tree, 90) == [], [(p, _comm(p)) for p in _alive(tree)]
    (run,) = _runs(store)
    stored = run["stored"]
    assert len(stored) >= 3 and [s["step"] for s in stored] == list(range(1, len(stored) + 1))
    assert all(s["phases_s"]["step"] > 0 and s["micro_batches"] for s in stored)  # nothing half-written
    assert run["status"] == "running"  # nobody was left to say otherwise; resume takes it over

    odd = folder / "plan;x.yaml"
    (tmp_path / "small").mkdir()
    odd.write_text(_plan(tmp_path / "small", "local-grpo.yaml", small=True).read_text())
    other = _start(odd, 4, store, folder / "run;2 dir")
    _resume_and_check(store, run, len(stored) + 3)
    out = other.communicate(timeout=600)[0]
    assert other.returncode == 0, out[-2000:]
    (second,) = (r for r in _runs(store) if r["run_id"] != run["run_id"])
    assert second["status"] == "finished" and [s["step"] for s in second["stored"]] == [1, 2, 3, 4]
    assert second["plan_path"] == str(odd.resolve())
    assert not canary.exists()
