"""Issue 25, item 4: sweeps stream. Candidates are read a block at a time and rows spilled to disk as they finish,
so what a sweep holds is bounded by its block and its queue, not its space; the ranking, the CSV and the report
are what a whole, in-memory sweep gives. benchmarks/bench_sweep_memory.py measures the memory itself."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

import perfmodel.sweep.collect as collect
import perfmodel.sweep.run as sweep_run
from perfmodel.inputs.hardware import load_hardware
from perfmodel.inputs.model import load_model
from perfmodel.report import figures as F
from perfmodel.report.sweep_data import load_sweep, read_candidates
from perfmodel.sweep.collect import SweepRows
from perfmodel.sweep.run import ROW_FIELDS, evaluate_candidates
from perfmodel.sweep.space import Candidate, enumerate_candidates, select_candidates
from tests.conftest import sweep_rows
from tests.report.sweep_folder import write_sweep
from tests.sweep.test_sweep import small_spec


def _row(index: int, value: float | None, step: float) -> dict:
    status = "ok" if value is not None else "pruned"
    return {"index": index, "nodes": 4, "gpus": 32, "label": f"c{index}", "status": status,
            "reason": "" if value is not None else f"memory {index % 3}", "objective_value": value,
            "step_time_s": step if value is not None else None}


def test_rows_added_in_any_order_are_written_in_order_and_ranked_as_a_full_sort(monkeypatch, tmp_path: Path) -> None:
    """Rows finish in any order: the CSV is in enumeration order, ranks are those of sorting every row (ties by
    position), only TOP_KEPT rows stay whole, and a group's size counts every ranked row, kept or not."""
    monkeypatch.setattr(collect, "TOP_KEPT", 5)
    rng = random.Random(7)
    values = [None if i % 4 == 0 else float(rng.choice([3, 1, 2, 5, 8, 13])) for i in range(300)]
    rows = SweepRows(ROW_FIELDS)
    order = list(range(300))
    rng.shuffle(order)
    for pos in order:
        rows.add(pos, _row(1000 + pos, values[pos], values[pos] or 0.0), Candidate(1000 + pos, 4, {}))
    rows.rank()
    written = read_candidates_loose(rows, tmp_path)
    assert [int(r["index"]) for r in written] == [1000 + p for p in range(300)]
    ranked = sorted((p for p in range(300) if values[p] is not None), key=lambda p: (values[p], p))
    expect = {1000 + p: k for k, p in enumerate(ranked, 1)}
    assert {int(r["index"]): int(r["rank"]) for r in written if r["rank"]} == expect
    assert [r["index"] for r in rows.top] == [1000 + p for p in ranked[:5]]
    assert len(rows.candidates) == 5 and rows.statuses["ok"] == len(ranked)
    ones = sum(v == 1.0 for v in values)  # every plan stepping 1.0 s predicts the same: one group of them all
    assert ones > 5 and rows.count_equal(rows.top[0]) == ones
    rows.close()


def read_candidates_loose(rows: SweepRows, tmp_path: Path) -> list[dict]:
    import csv

    rows.write_csv(tmp_path / "c.csv")
    with (tmp_path / "c.csv").open(newline="") as f:
        return list(csv.DictReader(f))


def test_an_earlier_row_that_never_comes_is_a_loud_error() -> None:
    rows = SweepRows(ROW_FIELDS)
    rows.add(1, _row(1, 1.0, 1.0), Candidate(1, 4, {}))
    with pytest.raises(RuntimeError, match="wait for an earlier one"):
        rows.rank()
    rows.close()


def test_candidates_are_read_a_block_at_a_time_not_all_at_once(monkeypatch, tmp_path: Path) -> None:
    """The sweep pulls candidates from a generator as it evaluates them: at no moment has it read more than a
    block (and the chunks in flight) beyond what it has finished, whatever the space's size. Materializing the
    space first (the old list) would read all of them before the first row."""
    monkeypatch.setattr(sweep_run, "FEED_BLOCK", 16)
    spec = small_spec(tp=[1, 2, 4], ep=[2, 4, 8], recompute=["full", "selective"])
    hw, model = load_hardware("mi355x"), load_model("deepseek-v4-flash")
    total, stream = select_candidates(spec, "s.yaml", 8, 256, 43)
    assert total > 5 * 16
    read, lag = [0], [0]

    def counted():
        for c in stream:
            read[0] += 1
            yield c

    def progress(done: int, _total: int) -> None:
        lag[0] = max(lag[0], read[0] - done)

    out = evaluate_candidates(spec, counted(), hw, model, "t", workers=1, progress=progress, total=total)
    assert read[0] == total == out.candidates
    assert 0 < lag[0] <= 16 + 16  # a block, plus a chunk of it being evaluated
    listed = evaluate_candidates(spec, list(enumerate_candidates(spec, 8, 256, 43)), hw, model, "t", workers=1)
    assert sweep_rows(out, tmp_path / "a") == sweep_rows(listed, tmp_path / "b")  # streamed == whole


def test_a_sample_is_drawn_in_enumeration_order_without_listing_the_space() -> None:
    spec = small_spec(tp=[1, 2, 4], ep=[2, 4, 8])
    total, _ = select_candidates(spec, "s.yaml", 8, 256, 43)
    n, sample = select_candidates(spec, "s.yaml", 8, 256, 43, sample=7, seed=3)
    indices = [c.index for c in sample]
    assert n == 7 and len(indices) == 7 and indices == sorted(set(indices)) and indices[-1] < total
    again = [c.index for c in select_candidates(spec, "s.yaml", 8, 256, 43, sample=7, seed=3)[1]]
    assert again == indices  # the seed decides


def test_the_report_reads_any_size_keeping_only_what_it_shows(tmp_path: Path) -> None:
    """The report's one pass keeps the best `keep` rows and the best of each node count and family; its counts,
    capacity curve and top rows are those of every row."""
    sweep_dir = write_sweep(tmp_path / "s", measured=False)
    every = read_candidates(sweep_dir / "candidates.csv")
    data = load_sweep(sweep_dir, keep=2)
    ok = sorted((r for r in every if r["status"] == "ok"), key=lambda r: r["rank"])
    assert len(ok) > 4 and [r["index"] for r in data.top(5)] == [r["index"] for r in ok[:2]]
    assert data.digest.candidates == len(every) and data.digest.statuses["ok"] == len(ok)
    assert len(data.rows) < len(every)
    assert F.capacity_points(data.rows) == F.capacity_points(every)
    for n, node in data.digest.nodes.items():
        at_n = [r for r in ok if r["nodes"] == n]
        assert node.candidates == sum(r["nodes"] == n for r in every)
        assert (node.best or {}).get("index") == (at_n[0]["index"] if at_n else None)
