"""Result cache: a SQLite table keyed by a hash of (hardware with calibration, model, run, code), so a repeated
sweep is instant. "Code" is a fingerprint of the perfmodel sources and bundled data, not the package version: an
edited cost model (an editable install, a patched checkout) never reads results of the old one. Safe with several
processes (WAL, short transactions)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import sqlite3
import sys
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

from perfmodel.errors import InputError
from perfmodel.names import BREAKDOWN_COLUMNS
from perfmodel.version import __version__

BREAKDOWN_SET = frozenset(BREAKDOWN_COLUMNS)

CACHE_SCHEMA = 2
PACKAGE_DIR = Path(__file__).resolve().parents[1]


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """sha256 over the perfmodel package's Python sources and bundled data (catalogue, defaults), in path order."""
    from perfmodel.inputs.stack import stacks_dir

    h = hashlib.sha256(__version__.encode())
    stacks = stacks_dir()
    outside = [] if stacks.is_relative_to(PACKAGE_DIR) else sorted(stacks.glob("*.yaml"))  # a checkout's stacks/
    for path in sorted(PACKAGE_DIR.rglob("*")) + outside:
        if path.is_file() and path.suffix in (".py", ".json", ".yaml") and "__pycache__" not in path.parts:
            h.update((path.name if path.parent == stacks else str(path.relative_to(PACKAGE_DIR))).encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def default_cache_path() -> Path:
    root = Path(os.environ.get("PERFMODEL_CACHE_DIR", Path.home() / ".cache" / "perfmodel"))
    return root / "results.sqlite"


def result_key(hw_params: dict[str, float], hw_id: str, model_key: str, run: dict[str, Any]) -> str:
    blob = json.dumps([CACHE_SCHEMA, code_fingerprint(), hw_id, hw_params, model_key, run], sort_keys=True,
                      default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


# what a row must hold to be used as a fresh result would be (perfmodel/sweep/run.py: evaluate_run): its text
# columns, and numbers everywhere else
_STATUSES = ("ok", "pruned", "invalid")
_TEXT = frozenset(("status", "reason"))
_NUMBER = (int, float)


def row_problem(row: Any) -> str | None:
    """Why a cached row cannot stand for a fresh result (None: it can): the shape `evaluate_run` returns, finite
    non-negative figures, and the same physics invariant as a fresh one (its time breakdown sums to its step).
    One pass over the row (a few microseconds): it runs once per cached row."""
    if type(row) is not dict or row.get("status") not in _STATUSES or type(row.get("reason", "")) is not str:
        return "not a result row"
    if row["status"] != "ok":
        return None
    breakdown = 0.0
    for key, value in row.items():
        if value is None or key in _TEXT:
            continue
        if type(value) not in _NUMBER or not 0 <= value < math.inf:
            return f"{key} is not a finite non-negative number"
        if key in BREAKDOWN_SET:
            breakdown += value
    step = row.get("step_time_s")
    if type(step) not in _NUMBER or step <= 0 or type(row.get("gpu_hours_per_step")) not in _NUMBER:
        return "no step time"
    if breakdown and abs(breakdown - step) > max(1e-6, 1e-3 * step):
        return "breakdown does not sum to the step time"
    return None


class ResultCache:
    """The cache, verified: a file SQLite cannot read is set aside (renamed `*.damaged-<time>`, said in one line on
    stderr) and a new one started; rows are checked by `row_problem` before use."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._db: sqlite3.Connection | None = None
        if path is not None:
            try:
                self._db = self._open(path)
            except sqlite3.DatabaseError as err:
                self._set_aside(err)
                self._db = self._open(path)

    @staticmethod
    def _open(path: Path) -> sqlite3.Connection:
        if path.is_dir():
            raise InputError(str(path), "PERFMODEL_CACHE_DIR", "the cache file is a folder: move it, or sweep "
                             "with --no-cache")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise InputError(str(path.parent), "PERFMODEL_CACHE_DIR", f"cannot create the cache folder "
                             f"({err.strerror or err}): set PERFMODEL_CACHE_DIR or sweep with --no-cache") from None
        db = sqlite3.connect(path, timeout=30)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("CREATE TABLE IF NOT EXISTS results (key TEXT PRIMARY KEY, row TEXT NOT NULL)")
            db.execute("SELECT key, row FROM results LIMIT 1").fetchall()
            db.commit()
        except sqlite3.DatabaseError:
            db.close()
            raise
        return db

    def _set_aside(self, err: Exception) -> None:
        """Move the damaged file (and its WAL side files) out of the way, keeping it for a look."""
        assert self.path is not None
        if self._db is not None:
            with contextlib.suppress(sqlite3.Error):
                self._db.close()
            self._db = None
        aside = self.path.with_name(f"{self.path.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
        for suffix in ("", "-wal", "-shm"):
            side = self.path.with_name(self.path.name + suffix)
            if side.exists():
                side.replace(aside.with_name(aside.name + suffix))
        print(f"warning: {self.path}: result cache damaged ({err}); set aside as {aside.name}, starting a new one "
              "(--no-cache skips the cache)", file=sys.stderr)

    def get_many(self, keys: list[str]) -> dict[str, Any]:
        if self._db is None or not keys:
            return {}
        out: dict[str, Any] = {}
        try:
            for i in range(0, len(keys), 500):
                chunk = keys[i:i + 500]
                q = f"SELECT key, row FROM results WHERE key IN ({','.join('?' * len(chunk))})"
                for k, row in self._db.execute(q, chunk):
                    try:
                        out[k] = json.loads(row)
                    except (ValueError, TypeError, RecursionError):
                        out[k] = None  # refused by row_problem, like any row of the wrong shape
        except sqlite3.DatabaseError as err:  # damaged past the header: read nothing from it, replace it
            self._set_aside(err)
            assert self.path is not None
            self._db = self._open(self.path)
            return {}
        return out

    def put_many(self, items: list[tuple[str, dict[str, Any]]]) -> None:
        if self._db is None or not items:
            return
        try:
            with self._db:
                self._db.executemany("INSERT OR REPLACE INTO results (key, row) VALUES (?, ?)",
                                     [(k, json.dumps(v)) for k, v in items])
        except sqlite3.DatabaseError as err:  # the results are in the sweep's folder; only the cache misses them
            print(f"warning: {self.path}: results not cached ({err})", file=sys.stderr)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
