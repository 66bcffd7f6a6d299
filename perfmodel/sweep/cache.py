"""Result cache: a SQLite table keyed by a hash of (hardware with calibration, model, run, code), so a repeated
sweep is instant. "Code" is a fingerprint of the perfmodel sources and bundled data, not the package version: an
edited cost model (an editable install, a patched checkout) never reads results of the old one. Safe with several
processes (WAL, short transactions)."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from functools import lru_cache
from pathlib import Path
from typing import Any

from perfmodel.version import __version__

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


class ResultCache:
    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._db: sqlite3.Connection | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(path, timeout=30)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("CREATE TABLE IF NOT EXISTS results (key TEXT PRIMARY KEY, row TEXT NOT NULL)")
            self._db.commit()

    def get_many(self, keys: list[str]) -> dict[str, dict[str, Any]]:
        if self._db is None or not keys:
            return {}
        out: dict[str, dict[str, Any]] = {}
        for i in range(0, len(keys), 500):
            chunk = keys[i:i + 500]
            q = f"SELECT key, row FROM results WHERE key IN ({','.join('?' * len(chunk))})"
            for k, row in self._db.execute(q, chunk):
                out[k] = json.loads(row)
        return out

    def put_many(self, items: list[tuple[str, dict[str, Any]]]) -> None:
        if self._db is None or not items:
            return
        with self._db:
            self._db.executemany("INSERT OR REPLACE INTO results (key, row) VALUES (?, ?)",
                                 [(k, json.dumps(v)) for k, v in items])

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
