"""The executor's store under damage (issue 25): a store SQLite cannot read, or a path that is a folder, is refused
in one line naming it; a step record or a run's info that does not parse is set aside and said, the rest shown; a
process killed at any moment while writing steps leaves every committed step whole."""

from __future__ import annotations

import json
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from executor.cli import main
from executor.store import Store
from tests.executor.test_local_store import _run, _step


def _store_with_steps(path: Path, steps: int = 3) -> Store:
    store = Store(path)
    store.create_run(_run("r1"))
    for n in range(1, steps + 1):
        store.write_step("r1", _step(n))
    return store


@pytest.mark.parametrize("damage", ["folder", "garbage", "half"])
def test_a_store_that_cannot_be_read_is_refused_in_one_line(damage: str, tmp_path: Path, capsys) -> None:
    path = tmp_path / "store.sqlite"
    if damage == "folder":
        path.mkdir()
    elif damage == "garbage":
        path.write_bytes(b"garbage " * 1000)
    else:
        _store_with_steps(path, 40).close()
        with sqlite3.connect(path) as db:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    for command in (["runs"], ["show", "r1"]):
        rc = main([*command, "--store", str(path)])
        err = capsys.readouterr().err
        assert rc == 2 or damage == "half" and rc == 0, err
        assert "Traceback" not in err and (rc == 0 or str(path) in err and len(err.strip().splitlines()) == 1)


def test_damaged_records_are_set_aside_and_said_the_rest_shown(tmp_path: Path, capsys) -> None:
    path = tmp_path / "store.sqlite"
    _store_with_steps(path).close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE steps SET record = '{}' WHERE step = 2")
        db.execute("UPDATE steps SET record = 'not json' WHERE step = 3")
        db.execute("UPDATE runs SET info = '[1' WHERE run_id = 'r1'")
    assert main(["show", "r1", "--store", str(path)]) == 0
    captured = capsys.readouterr()
    assert "2 damaged step record(s) skipped" in captured.err and "info damaged" in captured.err
    assert "1 steps" in captured.out


WRITER = textwrap.dedent("""
    import sys, time
    from executor.store import Store
    from tests.executor.test_local_store import _run, _step
    store = Store(sys.argv[1])
    store.create_run(_run("r1"))
    n = 0
    while True:
        n += 1
        store.write_step("r1", _step(n))
        print(n, flush=True)
""")


def test_a_writer_killed_at_any_moment_leaves_every_committed_step_whole(tmp_path: Path) -> None:
    rng = random.Random(25)
    for attempt in range(3):
        path = tmp_path / f"s{attempt}.sqlite"
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True,
                                cwd=Path(__file__).resolve().parents[2])
        time.sleep(rng.uniform(1.5, 3.0))
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate()
        acknowledged = int(out.split()[-1]) if out.split() else 0
        store = Store(path)
        steps = store.steps("r1")
        assert not store.damaged
        assert [s["step"] for s in steps] == list(range(1, len(steps) + 1))
        assert len(steps) >= acknowledged  # every step it said was written is there, whole
        assert all(json.dumps(s) for s in steps)


def test_resume_never_follows_a_run_folder_that_is_a_link(tmp_path: Path) -> None:
    from executor.backends.local.runner import resume
    from perfmodel.errors import InputError

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = tmp_path / "runs" / "r1"
    link.parent.mkdir()
    link.symlink_to(elsewhere)
    with pytest.raises(InputError, match="symbolic link"):
        resume(None, {"run_id": "r1", "run_dir": str(link)}, tmp_path / "store.sqlite", 5)  # type: ignore[arg-type]
    assert not any(elsewhere.iterdir())


def test_store_strings_reach_the_terminal_inert(tmp_path: Path, capsys) -> None:
    """A store written by anything else may hold escape sequences: `executor runs` and `show` print them escaped."""
    path = tmp_path / "store.sqlite"
    _store_with_steps(path, 1).close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE runs SET hardware = ?, layout = ? WHERE run_id = 'r1'",
                   ("cpu\x1b]8;;https://e.vil\x1b\\x", "TP1\x1b[2J"))
    assert main(["runs", "--store", str(path)]) == 0
    assert main(["show", "r1", "--store", str(path)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\\x1b]8;;https://e.vil" in out
