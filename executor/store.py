"""The measurement store: SQLite in WAL mode, one transaction per step.

A crash loses at most the step in flight: each step is written and committed on its own (synchronous=FULL),
and a reader sees only committed steps. Tables: `runs` (one row per launch) and `steps` (one row per GRPO step,
the phase columns for queries and the whole `StepRecord` as JSON), and `superseded_steps` (steps of an earlier
attempt that a resumed run ran again: moved there, not lost).
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

from executor.records import RunRecord, StepRecord, to_json_text
from perfmodel.errors import InputError

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    plan_id TEXT NOT NULL,
    plan_hash TEXT NOT NULL,
    plan_path TEXT NOT NULL,
    backend TEXT NOT NULL,
    hardware TEXT NOT NULL,
    layout TEXT NOT NULL,
    run_dir TEXT NOT NULL,
    status TEXT NOT NULL,
    started_at REAL NOT NULL,
    finished_at REAL,
    environment TEXT NOT NULL,
    predicted TEXT NOT NULL,
    info TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS steps (
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    step INTEGER NOT NULL,
    started_at REAL NOT NULL,
    step_s REAL,
    rollout_s REAL,
    log_probs_s REAL,
    train_s REAL,
    weight_update_s REAL,
    reward_mean REAL,
    logprob_abs_diff REAL,
    rollout_kl REAL,
    record TEXT NOT NULL,
    written_at REAL NOT NULL,
    PRIMARY KEY (run_id, step)
);
-- steps a resumed run ran again (after the checkpoint it resumed from): kept, never overwritten
CREATE TABLE IF NOT EXISTS superseded_steps (
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    step INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    record TEXT NOT NULL,
    superseded_at REAL NOT NULL,
    PRIMARY KEY (run_id, step, attempt)
);
"""


# A stored step record holds at least these, of these types (what `executor show` and export read)
STEP_KEYS: dict[str, type | tuple[type, ...]] = {
    "step": int, "phases_s": dict, "reward_mean": (int, float), "train_rollout_logprob_abs_diff": (int, float),
    "train_rollout_kl": (int, float), "train_stats": dict, "peak_rss_bytes": dict, "tokens": dict}


def damaged_store(path: Path, err: Exception) -> InputError:
    return InputError(str(path), "--store", f"not a readable executor store ({err}): move it aside (the next "
                      "launch starts a new one) or pass another --store")


def step_problem(record: Any) -> str | None:
    """Why a stored step record cannot be read as one (None: it can)."""
    if not isinstance(record, dict):
        return "not a record"
    for key, kind in STEP_KEYS.items():
        if not isinstance(record.get(key), kind) or isinstance(record.get(key), bool):
            return f"{key} missing or not {getattr(kind, '__name__', 'a number')}"
    return None


class Store:
    """The store, verified as read: a file SQLite cannot open is refused in one line naming it; a step record
    that does not parse or lacks what readers need is set aside (counted in `damaged`, skipped), the rest used."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.damaged: list[str] = []  # "run step: why" for every record set aside while reading
        if self.path.is_dir():
            raise InputError(str(self.path), "--store", "is a folder: give the store's file (store.sqlite)")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.conn = sqlite3.connect(str(self.path), timeout=30, isolation_level=None)
            self.conn.row_factory = sqlite3.Row
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=FULL")
            self.conn.execute("PRAGMA busy_timeout=30000")
            self.conn.executescript(SCHEMA)
            self.conn.execute("SELECT run_id FROM runs LIMIT 1").fetchall()
        except (sqlite3.DatabaseError, OSError) as err:
            raise damaged_store(self.path, err) from None

    def close(self) -> None:
        self.conn.close()

    def journal_mode(self) -> str:
        return str(self.conn.execute("PRAGMA journal_mode").fetchone()[0])

    # -------------------------------------------------------------- writing

    def create_run(self, run: RunRecord) -> None:
        with self._transaction():
            self.conn.execute(
                "INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (run.run_id, run.plan_id, run.plan_hash, run.plan_path, run.backend, run.hardware, run.layout,
                 run.run_dir, run.status, run.started_at, run.finished_at, to_json_text(run.environment),
                 to_json_text(run.predicted), to_json_text(run.info)),
            )

    def update_run_info(self, run_id: str, **info: Any) -> None:
        with self._transaction():
            row = self.conn.execute("SELECT info FROM runs WHERE run_id=?", (run_id,)).fetchone()
            merged = {**json.loads(row["info"]), **info} if row else info
            self.conn.execute("UPDATE runs SET info=? WHERE run_id=?", (to_json_text(merged), run_id))

    def finish_run(self, run_id: str, status: str) -> None:
        with self._transaction():
            self.conn.execute("UPDATE runs SET status=?, finished_at=? WHERE run_id=?", (status, time.time(), run_id))

    def reopen_run(self, run_id: str, after_step: int, attempt: int) -> int:
        """A run resumed from its checkpoint of `after_step`: one transaction moves its steps after that one to
        `superseded_steps` under `attempt` (they will run again) and marks the run running. Returns how many moved."""
        with self._transaction():
            moved = self.conn.execute(
                "INSERT INTO superseded_steps SELECT run_id, step, ?, record, ? FROM steps WHERE run_id=? AND step>?",
                (attempt, time.time(), run_id, after_step)).rowcount
            self.conn.execute("DELETE FROM steps WHERE run_id=? AND step>?", (run_id, after_step))
            self.conn.execute("UPDATE runs SET status='running', finished_at=NULL WHERE run_id=?", (run_id,))
        return int(moved)

    def superseded_steps(self, run_id: str) -> list[dict[str, Any]]:
        rows = self._read("SELECT attempt, record FROM superseded_steps WHERE run_id=? ORDER BY attempt, step",
                          (run_id,))
        records = [(self._record(r["record"], f"{run_id} superseded"), r["attempt"]) for r in rows]
        return [dict(rec, attempt=attempt) for rec, attempt in records if rec is not None]

    def write_step(self, run_id: str, record: StepRecord) -> None:
        """One transaction: the step is either fully stored or not at all."""
        p = record.phases_s
        with self._transaction():
            self.conn.execute(
                "INSERT OR REPLACE INTO steps VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (run_id, record.step, record.started_at, p.get("step"), p.get("rollout"), p.get("log_probs"),
                 p.get("train"), p.get("weight_update"), record.reward_mean, record.train_rollout_logprob_abs_diff,
                 record.train_rollout_kl, to_json_text(record.to_json()), time.time()),
            )

    def _transaction(self) -> _Transaction:
        return _Transaction(self.conn)

    # -------------------------------------------------------------- reading

    def _read(self, query: str, args: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        try:
            return self.conn.execute(query, args).fetchall()
        except sqlite3.DatabaseError as err:
            raise damaged_store(self.path, err) from None

    def _record(self, text: Any, where: str) -> dict[str, Any] | None:
        try:
            record = json.loads(text)
        except (TypeError, ValueError, RecursionError):
            record = None
        why = step_problem(record)
        if why is not None:
            self.damaged.append(f"{where}: {why}")
            return None
        return record

    def runs(self) -> list[dict[str, Any]]:
        rows = self._read("SELECT r.*, (SELECT COUNT(*) FROM steps s WHERE s.run_id=r.run_id) AS steps "
                          "FROM runs r ORDER BY started_at")
        return [_row(r) for r in rows]

    def run(self, run_id: str) -> dict[str, Any] | None:
        rows = self._read("SELECT * FROM runs WHERE run_id=?", (run_id,))
        return _row(rows[0]) if rows else None

    def steps(self, run_id: str) -> list[dict[str, Any]]:
        rows = self._read("SELECT step, record FROM steps WHERE run_id=? ORDER BY step", (run_id,))
        records = (self._record(r["record"], f"{run_id} step {r['step']}") for r in rows)
        return [r for r in records if r is not None]

    def step_count(self, run_id: str) -> int:
        return int(self._read("SELECT COUNT(*) FROM steps WHERE run_id=?", (run_id,))[0][0])


def find_run(store: Store, prefix: str) -> dict[str, Any]:
    """The one run whose id starts with `prefix`; InputError naming the store otherwise."""
    matches = [r for r in store.runs() if r["run_id"].startswith(prefix)]
    if len(matches) != 1:
        raise InputError(str(store.path), "run", f"'{prefix}' matches {len(matches)} runs; `executor runs` lists them")
    run = store.run(matches[0]["run_id"])
    assert run is not None
    return run


class _Transaction:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> sqlite3.Connection:
        self.conn.execute("BEGIN IMMEDIATE")
        return self.conn

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.conn.execute("ROLLBACK" if exc_type else "COMMIT")


def _row(row: sqlite3.Row) -> dict[str, Any]:
    """A run row with its JSON columns parsed; a column that does not parse as an object reads as {} (and the
    row's `damaged` lists it), never stops the reader."""
    out = dict(row)
    for key in ("environment", "predicted", "info"):
        if key in out and isinstance(out[key], str):
            try:
                value = json.loads(out[key])
            except (ValueError, RecursionError):
                value = None
            if not isinstance(value, dict):
                out.setdefault("damaged", []).append(key)
                value = {}
            out[key] = value
    return out
