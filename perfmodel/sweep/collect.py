"""A sweep's rows as they finish, kept out of memory, so a sweep's memory does not grow with its space.

Rows arrive out of order (worker chunks finish in any order). A reorder buffer, bounded by what is in flight, writes
them in enumeration order to an anonymous spill file (no name: nothing is left behind, whatever kills the sweep).
Of each ranked row only its objective value, position and prediction signature stay in memory (24 bytes), plus the
best TOP_KEPT rows whole with their candidates (for plan files, bands and the printed table). `rank` orders the
values once evaluation ends; `write_csv` is the second pass: the spill (pickled batches of row tuples, cheaper to
write than CSV) written as CSV with each row's rank."""

from __future__ import annotations

import csv
import heapq
import pickle
import tempfile
from array import array
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from perfmodel.files import atomic_path
from perfmodel.sweep.space import Candidate

SPILL_BATCH = 512  # rows pickled to the spill at a time
TOP_KEPT = 4000  # whole rows kept, best first: the groups of `perfmodel sweep --top` (at most 1,000) come from these

# What a plan's prediction is: plans equal on all of it differ only in knobs the model does not price
_PREDICTED = ("step_time_s", "step_time_p90_s", "rollout_time_s", "log_probs_time_s", "train_time_s",
              "weight_update_time_s", "mem_train_bytes", "mem_rollout_bytes")


def prediction_signature(row: dict[str, Any]) -> tuple:
    return tuple(None if row.get(k) in (None, "") else float(f"{float(row[k]):.9g}") for k in _PREDICTED)


class SweepRows:
    """Every row of one sweep, in enumeration order, as `add` receives them (each exactly once, any order)."""

    def __init__(self, fields: list[str]) -> None:
        self.fields = fields
        self._spill = tempfile.TemporaryFile()  # batches of rows (tuples in `fields` order), pickled
        self._batch: list[tuple[Any, ...]] = []
        self._waiting: dict[int, tuple[dict[str, Any], Candidate]] = {}
        self._next = 0  # the position the spill waits for
        self._values, self._positions, self._signatures = array("d"), array("q"), array("q")
        self._best: list[tuple[float, int, dict[str, Any], Candidate]] = []  # a max-heap on (value, position)
        self._rank_at: np.ndarray | None = None
        self.statuses: Counter[str] = Counter()
        self.reasons: Counter[str] = Counter()  # why rows were not ranked (the first 80 characters)
        self.top: list[dict[str, Any]] = []  # the kept rows, ranked, best first (after `rank`)
        self.candidates: dict[int, Candidate] = {}  # the kept rows' candidates, by candidate index

    def __len__(self) -> int:
        return self._next

    def add(self, position: int, row: dict[str, Any], candidate: Candidate) -> None:
        self._waiting[position] = (row, candidate)
        while self._next in self._waiting:
            self._write(*self._waiting.pop(self._next))
            self._next += 1

    def _write(self, row: dict[str, Any], candidate: Candidate) -> None:
        self.statuses[row["status"]] += 1
        value = row.get("objective_value")
        if value is None:
            if row["status"] != "ok":
                self.reasons[str(row.get("reason", ""))[:80]] += 1
        else:
            self._values.append(value)
            self._positions.append(self._next)
            self._signatures.append(hash(prediction_signature(row)))
            entry = (-value, -self._next, row, candidate)
            if len(self._best) < TOP_KEPT:
                heapq.heappush(self._best, entry)
            elif entry[:2] > self._best[0][:2]:
                heapq.heapreplace(self._best, entry)
        self._batch.append(tuple(map(row.get, self.fields)))
        if len(self._batch) >= SPILL_BATCH:
            self._flush()

    def _flush(self) -> None:
        if self._batch:
            pickle.dump(self._batch, self._spill, protocol=pickle.HIGHEST_PROTOCOL)
            self._batch = []

    def rank(self) -> None:
        """Rank the ranked rows (objective value, then position: a tie keeps enumeration order) and fill `top`."""
        if self._waiting:
            raise RuntimeError(f"sweep rows: {len(self._waiting)} rows wait for an earlier one that never came")
        values = np.frombuffer(self._values, dtype=np.float64)
        positions = np.frombuffer(self._positions, dtype=np.int64)
        order = np.lexsort((positions, values))
        self._rank_at = np.zeros(self._next, dtype=np.int64)
        self._rank_at[positions[order]] = np.arange(1, len(order) + 1)
        kept = sorted(self._best, key=lambda e: (-e[0], -e[1]))
        self.top = []
        for _, neg_position, row, candidate in kept:
            row["rank"] = int(self._rank_at[-neg_position])
            self.top.append(row)
            self.candidates[candidate.index] = candidate
        self._best = []

    def count_equal(self, row: dict[str, Any]) -> int:
        """How many ranked rows, kept or not, predict exactly what `row` does (ranking.group_equal_plans)."""
        signatures = np.frombuffer(self._signatures, dtype=np.int64)
        return int(np.count_nonzero(signatures == hash(prediction_signature(row))))

    def write_csv(self, path: Path) -> None:
        """The spill written to `path` (atomically) as CSV, in enumeration order, with each ranked row's rank."""
        if self._rank_at is None:
            self.rank()
        assert self._rank_at is not None
        self._flush()
        rank_col = self.fields.index("rank")
        self._spill.seek(0)
        with atomic_path(path) as tmp, tmp.open("w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(self.fields)
            position = 0
            while batch := self._next_batch():
                for values in batch:
                    cells = ["" if v is None else v for v in values]
                    rank = int(self._rank_at[position])
                    if rank:
                        cells[rank_col] = rank
                    writer.writerow(cells)
                    position += 1
        self._spill.seek(0, 2)

    def _next_batch(self) -> list[tuple[Any, ...]]:
        try:
            return pickle.load(self._spill)
        except EOFError:
            return []

    def close(self) -> None:
        self._spill.close()
