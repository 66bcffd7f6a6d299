"""Where the executor keeps what it measured, per user and never relative to the current folder: the store lives
in $XDG_DATA_HOME/perfmodel (default ~/.local/share/perfmodel), so `executor show` finds a run from wherever it is
typed, and each run's folder beside its store (runs/<run id>/). $EXECUTOR_STORE names another store; --store and
--run-dir override them."""

from __future__ import annotations

import os
from pathlib import Path


def data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "perfmodel"


def default_store_path() -> Path:
    return Path(os.environ["EXECUTOR_STORE"]) if os.environ.get("EXECUTOR_STORE") else data_dir() / "executor.sqlite"


def default_run_dir(store_path: Path, run_id: str) -> Path:
    """A run's folder (logs, trace, weights it wrote) beside the store that records it."""
    return Path(store_path).resolve().parent / "runs" / run_id
