"""Checkpoints and resume, without a launch: what counts as a complete checkpoint (a write cut short never does), how
many are kept, the store moving re-run steps aside instead of overwriting them, the run lock, and every refusal of
`executor launch --resume` as one line (the real resumes are in test_faults.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from executor.api import resume
from executor.backends.local import checkpoint as ckpt
from executor.backends.local.runner import run_lock
from executor.cli import main as executor_main
from executor.records import plan_hash
from executor.store import Store
from perfmodel.errors import InputError
from tests.conftest import REPO
from tests.executor.test_local_store import _run, _step


def _fake_checkpoint(run_dir: Path, step: int, world: int = 1, sealed: bool = True) -> Path:
    folder = ckpt.step_dir(run_dir, step)
    folder.mkdir(parents=True)
    for r in range(world):
        ckpt.rank_file(folder, r).write_bytes(b"x")
    if sealed:
        ckpt.seal(folder, {"step": step, "world_size": world, "sampler_state": [3, [1, 2], None]}, keep=2)
    return folder


def test_a_checkpoint_is_complete_only_with_its_meta_and_every_rank(tmp_path: Path) -> None:
    _fake_checkpoint(tmp_path, 5, world=2)
    _fake_checkpoint(tmp_path, 10, world=2, sealed=False)  # killed before rank 0 sealed it
    folder = ckpt.step_dir(tmp_path, 15)
    folder.mkdir()
    ckpt.rank_file(folder, 0).write_bytes(b"x")  # a meta naming two ranks, one file: not complete
    (folder / ckpt.META).write_text(json.dumps({"step": 15, "world_size": 2}))
    (folder / "rank-01.pt.tmp").write_bytes(b"half")
    latest = ckpt.latest_checkpoint(tmp_path)
    assert latest is not None and latest.step == 5


def test_sealing_keeps_the_newest_and_drops_older_incomplete_ones(tmp_path: Path) -> None:
    for step in (2, 4):
        _fake_checkpoint(tmp_path, step)
    _fake_checkpoint(tmp_path, 5, sealed=False)  # a write cut short, older than what comes next
    _fake_checkpoint(tmp_path, 6)
    assert [c.step for c in ckpt.complete_checkpoints(tmp_path)] == [4, 6]
    assert sorted(p.name for p in ckpt.checkpoints_dir(tmp_path).iterdir()) == ["step-000004", "step-000006"]


def test_a_rank_file_is_written_under_a_temporary_name_then_renamed(tmp_path: Path) -> None:
    import torch

    ckpt.save_rank(tmp_path / "c", 3, {"w": torch.ones(2)})
    assert [p.name for p in (tmp_path / "c").iterdir()] == ["rank-03.pt"]
    assert torch.equal(ckpt.load_rank(tmp_path / "c", 3)["w"], torch.ones(2))


def test_reopening_moves_the_steps_after_the_checkpoint_aside(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.sqlite")
    store.create_run(_run())
    for n in range(1, 8):
        store.write_step("r1", _step(n))
    store.finish_run("r1", "failed")
    assert store.reopen_run("r1", after_step=5, attempt=1) == 2
    assert [s["step"] for s in store.steps("r1")] == [1, 2, 3, 4, 5]
    assert [(s["step"], s["attempt"]) for s in store.superseded_steps("r1")] == [(6, 1), (7, 1)]
    run = store.run("r1")
    assert run is not None and run["status"] == "running" and run["finished_at"] is None


def test_a_live_run_cannot_be_resumed_twice(tmp_path: Path) -> None:
    with run_lock(tmp_path, tmp_path / "s.sqlite"):
        with pytest.raises(InputError, match=f"pid {os.getpid()}"), run_lock(tmp_path, tmp_path / "s.sqlite"):
            pass
    with run_lock(tmp_path, tmp_path / "s.sqlite"):  # released: free again
        pass


def _stored_run(tmp_path: Path, plan: Path, backend: str = "local") -> Path:
    store_path = tmp_path / "s.sqlite"
    store = Store(store_path)
    rec = _run()
    rec.plan_path, rec.plan_hash, rec.backend, rec.run_dir = str(plan), plan_hash(plan), backend, str(tmp_path / "run")
    rec.info = {"steps_requested": 10}
    store.create_run(rec)
    store.write_step("r1", _step(1))
    store.close()
    return store_path


def test_resume_refuses_in_one_line_what_it_cannot_continue(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text((REPO / "examples" / "local-grpo.yaml").read_text())
    store = _stored_run(tmp_path, plan)
    with pytest.raises(InputError, match="no complete checkpoint"):
        resume("r1", store=store)
    _fake_checkpoint(tmp_path / "run", 10)
    with pytest.raises(InputError, match="ask for more with --steps"):
        resume("r1", store=store)
    plan.write_text(plan.read_text() + "\n# edited\n")
    assert executor_main(["launch", "--resume", "r1", "--store", str(store)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "changed since" in err and str(plan) in err
    assert executor_main(["launch", "--resume", "nope", "--store", str(store)]) == 2
    assert "'nope' matches 0 runs" in capsys.readouterr().err
    assert executor_main(["launch", "--resume", "r1", "--dry-run", "--store", str(store)]) == 2
    assert "takes only --steps and --store" in capsys.readouterr().err


def test_a_miles_run_resumes_with_miles_own_checkpoints(tmp_path: Path) -> None:
    plan = tmp_path / "seed.yaml"
    data = yaml.safe_load((REPO / "examples" / "seed-mi355x-dsv4.yaml").read_text())
    plan.write_text(yaml.safe_dump(data, sort_keys=False))
    store = _stored_run(tmp_path, plan, backend="miles")
    with pytest.raises(InputError, match="executor.options.load"):
        resume("r1", store=store)
