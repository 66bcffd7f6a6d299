"""Evaluate sweep candidates: prune by rules and memory, simulate the rest (local processes or a Ray cluster),
rank them, and write the CSV of every candidate, the summary, the top plans and the best plan's trace."""

from __future__ import annotations

import contextlib
import functools
import gc
import itertools
import os
import signal
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

import numpy as np

from perfmodel.errors import InputError
from perfmodel.inputs.hardware import HardwareProfile
from perfmodel.inputs.model import ModelSpec
from perfmodel.invariants import PhysicsError
from perfmodel.memo import Memo
from perfmodel.names import BREAKDOWN_COLUMNS, breakdown_column, training_parts
from perfmodel.schedules import ScheduleError, default_schedule
from perfmodel.signals import HeldSignals, die_with_parent
from perfmodel.signals import exit_code as signal_exit_code
from perfmodel.sim.pipeline import PipelineStall
from perfmodel.sweep.cache import ResultCache, result_key, row_problem
from perfmodel.sweep.collect import SweepRows
from perfmodel.sweep.space import Candidate, recompute_label
from perfmodel.sweep.spec import SweepSpec

# A candidate's layout and recipe choices (`describe_candidate`), apart from its size (nodes, GPUs)
PLAN_FIELDS = ("placement", "actor_gpus", "rollout_gpus", "async", "tp", "pp", "cp", "ep", "etp", "vpp", "schedule",
               "recompute", "offload", "moe_dispatcher", "engine_gpus", "engine_tp", "engine_ep", "engine_dp",
               "dp_attention")
ROW_FIELDS = [
    "index", "nodes", "gpus", "label", *PLAN_FIELDS, "status", "reason", "rank", "objective_value", "step_time_s",
    "step_time_p90_s", "rollout_time_s", "log_probs_time_s", "train_time_s", "weight_update_time_s", "offload_time_s",
    *BREAKDOWN_COLUMNS, "tokens_per_s_per_gpu", "gpu_hours_per_step", "mem_train_bytes", "mem_train_capacity_bytes",
    "mem_rollout_bytes", "mem_rollout_capacity_bytes", "mem_train_weights_bytes", "mem_train_grads_bytes",
    "mem_train_optimizer_bytes", "mem_train_activations_bytes", "mem_train_other_bytes",
]


def describe_candidate(c: Candidate) -> dict[str, Any]:
    run = c.run
    t, lay = run["train"], run["train"]["layout"]
    rl = run.get("rl") or {}
    ro = rl.get("rollout") or {}
    return {
        "index": c.index, "nodes": c.nodes, "gpus": run["gpus"], "label": c.label(),
        "placement": rl.get("placement", ""), "actor_gpus": rl.get("actor_gpus", run["gpus"]),
        "rollout_gpus": rl.get("rollout_gpus", 0), "async": int(bool(rl.get("async"))),
        **{k: lay.get(k, 1) for k in ("tp", "pp", "cp", "ep", "etp", "vpp")},
        "schedule": t.get("schedule") or default_schedule(lay.get("vpp", 1)), "recompute": recompute_label(t),
        "offload": t.get("optimizer_offload_fraction", 0.0), "moe_dispatcher": t.get("moe_dispatcher", "alltoall"),
        "engine_gpus": ro.get("engine_gpus", ""),
        "engine_tp": ro.get("tp", ""), "engine_ep": ro.get("ep", ""), "engine_dp": ro.get("dp", ""),
        "dp_attention": int(bool(ro.get("dp_attention"))),
    }


@dataclass(slots=True)
class _Worker:
    """What one worker process keeps for the sweep it serves: the hardware and model it was started with and the
    memo its candidates share. ProcessPoolExecutor's initializer hands them over once per process, which is why
    this one object is the module's state (set by `_init_worker`, read by `_evaluate_chunk`)."""

    hw: HardwareProfile
    model: ModelSpec
    memo: Memo
    length_samples: int = 1


_WORKER: list[_Worker] = []
_MISS = object()  # not in the cache (None there is a row that did not parse)
FEED_BLOCK = 2048  # candidates read (keyed, looked up in the cache) at a time
NOT_EVALUATED = {"status": "not_evaluated", "reason": "interrupted"}


def _init_worker(hw: HardwareProfile, model: ModelSpec, length_samples: int = 1) -> None:
    _WORKER[:] = [_Worker(hw, model, Memo(), length_samples)]


def _init_pool_worker(hw: HardwareProfile, model: ModelSpec, length_samples: int = 1) -> None:
    """A local worker process: Ctrl-C and SIGTERM are the parent's to handle (a terminal or `kill -- -PGID` sends
    them to the whole group), and the worker dies with its parent, whatever kills the parent (Linux parent-death
    signal)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the parent stops its workers (SIGKILL) once it has what they sent
    die_with_parent()
    _init_worker(hw, model, length_samples)


def evaluate_run(run_data: dict[str, Any], hw: HardwareProfile, model: ModelSpec,
                 memo: Memo | None = None, length_samples: int = 1) -> dict[str, Any]:
    """Prune or simulate one candidate; returns the result columns of its CSV row. `memo`: shared by the
    candidates of one worker (memory of identical training sides, chunk costs, rollouts). `length_samples` > 1
    (an RL run): the step again with the response lengths drawn that many times (the rollout's seed), and their
    90th percentile as `step_time_p90_s`."""
    from perfmodel.cost.memory.rollout import memoized_rollout_memory
    from perfmodel.cost.memory.training import memoized_training_memory
    from perfmodel.inputs.run import RunSpec
    from perfmodel.inputs.scenario import build_scenario
    from perfmodel.predict import simulate_scenario

    try:
        scn = build_scenario(RunSpec.model_validate(run_data), hardware=hw, model=model)
    except InputError as err:
        return {"status": "pruned", "reason": f"layout: {err.field}: {err.message}"}
    except ValueError as err:  # pydantic, for values the enumeration should not produce
        return {"status": "pruned", "reason": f"invalid: {' '.join(str(err).split())[:160]}"}
    memo = memo if memo is not None else Memo()
    mem = memoized_training_memory(scn, memo)  # shared by candidates that differ only on the rollout side
    row: dict[str, Any] = {"mem_train_bytes": mem.total_bytes, "mem_train_capacity_bytes": mem.capacity_bytes,
                           "mem_train_weights_bytes": mem.weights_bytes, "mem_train_grads_bytes": mem.grads_bytes,
                           "mem_train_optimizer_bytes": mem.optimizer_bytes,
                           "mem_train_activations_bytes": mem.activations_bytes,
                           "mem_train_other_bytes": mem.total_bytes - mem.weights_bytes - mem.grads_bytes
                           - mem.optimizer_bytes - mem.activations_bytes}
    if not mem.fits:
        return row | {"status": "pruned", "reason": f"training memory {mem.total_bytes / 1e9:.0f} GB > "
                      f"{mem.capacity_bytes / 1e9:.0f} GB per GPU"}
    if scn.run.rl is not None:
        rmem = memoized_rollout_memory(scn, memo)
        row |= {"mem_rollout_bytes": rmem.total_bytes, "mem_rollout_capacity_bytes": rmem.capacity_bytes}
        if not rmem.fits:
            return row | {"status": "pruned", "reason": f"rollout memory: {rmem.summary()}"}
    try:
        res = simulate_scenario(scn, memory=mem, memo=memo)
    except InputError as err:
        return row | {"status": "pruned", "reason": f"{err.field}: {err.message}"}
    except ScheduleError as err:
        return row | {"status": "pruned", "reason": f"schedule: {err}"}
    except (PhysicsError, PipelineStall) as err:  # a bug, never a plan: counted and explained, not ranked
        return row | {"status": "invalid", "reason": f"{type(err).__name__}: {err}"}
    m = res.metrics()
    gpus = scn.run.gpus
    row |= {"status": "ok", "reason": "", "step_time_s": res.step_time_s,
            "tokens_per_s_per_gpu": m.get("tokens_per_s_per_gpu"),
            "gpu_hours_per_step": res.step_time_s * gpus / 3600.0}
    if res.rl is not None and length_samples > 1:
        from perfmodel.sim.rl_step import simulate_rl_step

        steps = [res.step_time_s] + [simulate_rl_step(scn, seed=k, memo=memo).step_time_s
                                     for k in range(1, length_samples)]
        row["step_time_p90_s"] = float(np.percentile(steps, 90))
    if res.rl is not None:
        ph = res.rl.phases_s
        row |= {"rollout_time_s": ph["rollout"], "log_probs_time_s": ph["log_probs"] + ph.get("ref_log_probs", 0.0),
                "train_time_s": ph["train"], "weight_update_time_s": ph["weight_update"],
                "offload_time_s": res.rl.offload_s}
        row |= {breakdown_column(k): v for k, v in res.rl.breakdown_s.items()}
    else:
        row |= {"train_time_s": res.step_time_s}
        row |= {breakdown_column(k): v for k, v in training_parts(res.train.breakdown_s).items()}
    return row


def _evaluate_chunk(items: list[tuple[int, dict[str, Any]]]) -> list[tuple[int, dict[str, Any]]]:
    w = _WORKER[0]
    return [(i, evaluate_run(run, w.hw, w.model, w.memo, w.length_samples)) for i, run in items]


@dataclass(slots=True)
class SweepOutcome:
    rows: SweepRows  # every row, spilled to disk in enumeration order: `rows.write_csv(path)`, `rows.top`
    evaluated: int
    pruned: int
    invalid: int  # simulated to an impossible result (a bug): refused, never ranked
    cached: int
    elapsed_s: float
    interrupted: bool
    not_evaluated: int = 0  # interrupted before these were evaluated
    rejected_cache_rows: int = 0  # cached rows that failed the checks a fresh result passes: recomputed
    exit_code: int = 0  # 130 (SIGINT) or 143 (SIGTERM) when interrupted

    @property
    def candidates(self) -> int:
        return len(self.rows)

    @property
    def top(self) -> list[dict[str, Any]]:
        """The best ranked rows (up to collect.TOP_KEPT), best first, each with its `rank`."""
        return self.rows.top


def objective_value(row: dict[str, Any], spec: SweepSpec) -> float | None:
    if row.get("status") != "ok":
        return None
    if spec.objective == "tokens_per_gpu":
        return -float(row["tokens_per_s_per_gpu"])
    if spec.objective == "p90_step_time":  # a pre-training run has no length variance: its step
        return float(row.get("step_time_p90_s") or row["step_time_s"])
    if spec.objective == "cost":
        if row["step_time_s"] > (spec.target_step_time_s or float("inf")):
            return None
        return float(row["gpu_hours_per_step"]) * spec.gpu_hour_cost
    return float(row["step_time_s"])


class _Feed:
    """Candidates in blocks of FEED_BLOCK: a block's cache hits become rows at once, its misses are handed out in
    chunks to evaluate. A candidate stays pending from the moment it is read until its row is added, so what is in
    memory is one block plus what the evaluator has queued, whatever the space's size."""

    def __init__(self, candidates: Iterable[Candidate], total: int, spec: SweepSpec, hw: HardwareProfile,
                 model_key: str, cache: ResultCache | None, samples: int, rows: SweepRows,
                 progress: Callable[[int, int], None] | None) -> None:
        self._stream = enumerate(candidates)
        self._spec, self._cache, self._rows, self._progress, self.total = spec, cache, rows, progress, total
        self._key_of = functools.partial(result_key, hw.calibration_params(), hw.id, model_key)
        self._samples = samples
        self._pending: dict[int, tuple[Candidate, str]] = {}
        self._new: list[tuple[str, dict[str, Any]]] = []  # fresh results, for the cache
        self.done = self.cached = self.rejected = 0

    def chunks(self, size: int) -> Iterator[list[tuple[int, dict[str, Any]]]]:
        while block := list(itertools.islice(self._stream, FEED_BLOCK)):
            keys = [self._key_of(c.run if self._samples == 1 else {**c.run, "length_samples": self._samples})
                    for _, c in block]
            hits = self._cache.get_many(keys) if self._cache else {}
            misses = []
            for (position, c), key in zip(block, keys):
                self._pending[position] = (c, key)
                hit = hits.get(key, _MISS)
                if hit is not _MISS and row_problem(hit) is None:
                    self.cached += 1
                    self._finish(position, hit)
                else:
                    self.rejected += hit is not _MISS
                    misses.append((position, c.run))
            self._report()
            for i in range(0, len(misses), size):
                yield misses[i:i + size]

    def take(self, batch: list[tuple[int, dict[str, Any]]]) -> None:
        for position, result in batch:
            self._new.append((self._pending[position][1], result))
            self._finish(position, result)
        if len(self._new) >= FEED_BLOCK:
            self.flush()
        self._report()

    def _finish(self, position: int, result: dict[str, Any]) -> None:
        c, _ = self._pending.pop(position)
        row = describe_candidate(c) | result
        row["objective_value"] = objective_value(row, self._spec)
        self._rows.add(position, row, c)
        self.done += 1

    def _report(self) -> None:
        if self._progress:
            self._progress(self.done, self.total)

    def flush(self) -> None:
        """Write the fresh results to the cache (every FEED_BLOCK of them, and at the end)."""
        if self._cache and self._new:
            self._cache.put_many(self._new)
        self._new = []

    def not_evaluated(self) -> None:
        """Interrupted: every candidate read but not back, and every one not read yet, gets its row as such."""
        for position, (c, _) in sorted(self._pending.items()):
            self._rows.add(position, describe_candidate(c) | NOT_EVALUATED, c)
        self._pending.clear()
        for position, c in self._stream:
            self._rows.add(position, describe_candidate(c) | NOT_EVALUATED, c)


def evaluate_candidates(
    spec: SweepSpec,
    candidates: Iterable[Candidate],
    hw: HardwareProfile,
    model: ModelSpec,
    model_key: str,
    workers: int | None = None,
    ray_address: str | None = None,
    cache: ResultCache | None = None,
    progress: Callable[[int, int], None] | None = None,
    on_evaluated: Callable[[], None] | None = None,
    total: int | None = None,
) -> SweepOutcome:
    """Every candidate's row (cached or simulated), streamed: `candidates` may be a generator (`total` then says
    how many it yields, for the chunk size and `progress`). Rows are spilled to disk as they finish and ranked at
    the end (perfmodel/sweep/collect.py). Interrupted (Ctrl-C, SIGTERM), it returns what was evaluated, the rest
    `not_evaluated`. `on_evaluated` is called as soon as evaluation ends, finished or interrupted: the caller holds
    signals from then until what was kept is written."""
    t0 = time.perf_counter()
    if total is None:
        candidates = list(candidates)
        total = len(candidates)
    samples = spec.length_samples if spec.objective == "p90_step_time" else 1
    rows = SweepRows(ROW_FIELDS)
    feed = _Feed(candidates, total, spec, hw, model_key, cache, samples, rows, progress)
    interrupted, exit_code = False, 0
    try:  # an interrupt anywhere here (keys, cache, workers) keeps what was evaluated
        workers = workers or min(os.cpu_count() or 1, 8)
        chunks = feed.chunks(max(16, min(256, total // (workers * 8) + 1)))
        if ray_address:
            _run_on_ray(ray_address, chunks, workers, hw, model, feed.take, samples)
        elif workers <= 1 or total < 64:
            _run_here(chunks, hw, model, feed.take, samples)
        else:
            _run_on_processes(workers, chunks, hw, model, feed.take, samples)
    except KeyboardInterrupt as err:
        interrupted, exit_code = True, signal_exit_code(err)
    finally:
        if on_evaluated:
            on_evaluated()
    feed.flush()
    if interrupted:
        feed.not_evaluated()
    rows.rank()
    n = rows.statuses
    return SweepOutcome(rows, n["ok"], n["pruned"], n["invalid"], feed.cached, time.perf_counter() - t0,
                        interrupted, not_evaluated=n["not_evaluated"], rejected_cache_rows=feed.rejected,
                        exit_code=exit_code)


def _run_here(chunks: Iterator[list[tuple[int, dict[str, Any]]]], hw: HardwareProfile, model: ModelSpec,
              take: Callable[[list[tuple[int, dict[str, Any]]]], None], length_samples: int = 1) -> None:
    """Chunks in this process. An interrupt is held and read between chunks, so it never cuts a row in half."""
    _init_worker(hw, model, length_samples)
    with HeldSignals() as signals:
        signals.hold()
        for items in chunks:
            if signals.held:
                break
            take(_evaluate_chunk(items))


def _run_on_processes(workers: int, chunks: Iterator[list[tuple[int, dict[str, Any]]]], hw: HardwareProfile,
                      model: ModelSpec, take: Callable[[list[tuple[int, dict[str, Any]]]], None],
                      length_samples: int = 1) -> None:
    """Chunks of candidates on a process pool, at most 3 chunks queued per worker. Ctrl-C or SIGTERM only sets a
    flag here, read between short waits: an interrupt raised inside the pool's own locks (a future's condition)
    would leave them held and hang the shutdown. Once read, the workers are killed and the signal is raised again,
    at a safe point, for the caller to keep what was evaluated."""
    gc.freeze()  # the workers are forked: frozen objects are never traversed by their GC, so never copied
    with ProcessPoolExecutor(workers, initializer=_init_pool_worker,
                             initargs=(hw, model, length_samples)) as pool, HeldSignals() as signals:
        signals.hold()
        pending: set[Future] = set()
        for items in chunks:
            if signals.held:
                break
            pending.add(pool.submit(_evaluate_chunk, items))
            while len(pending) >= workers * 3 and not signals.held:
                pending = _take_finished(pending, take)
        while pending and not signals.held:
            pending = _take_finished(pending, take)
        if signals.held:
            stop_pool(pool)
    gc.unfreeze()


def stop_pool(pool: ProcessPoolExecutor) -> None:
    """An interrupted pool's stop: kill the workers and let the pool fail what is pending, its manager thread
    marking every pending chunk broken and cleaning up. Cancelling the chunks here first raced with that on Python
    3.11 (InvalidStateError for a chunk cancelled under it: a traceback, and the thread's cleanup cut short);
    shutdown's cancel_futures does it in that thread, in order."""
    for proc in list((pool._processes or {}).values()):  # no public way to stop a running chunk
        proc.kill()
    _release_call_queue(pool)
    pool.shutdown(wait=True, cancel_futures=True)


def _release_call_queue(pool: ProcessPoolExecutor) -> None:
    """Close this process's read end of the pool's call queue once its workers are killed. Chunks still queued can
    fill the pipe; with the readers dead the queue's feeder thread then blocks in its write, and the shutdown, which
    joins that thread, hangs (a SIGTERM test of tests/reliability hung 60 s this way). With no read end left the
    write fails and the thread ends. CPython does the same when the pool itself finds a worker dead (gh-94777), but
    not when the shutdown wins that race."""
    reader = getattr(getattr(pool, "_call_queue", None), "_reader", None)
    if reader is not None:
        with contextlib.suppress(OSError):
            reader.close()


def _take_finished(pending: set[Future], take: Callable[[list[tuple[int, dict[str, Any]]]], None]) -> set[Future]:
    """Hand over the chunks that finished within a short wait (a held signal is looked at between waits); the
    rest stay pending."""
    finished, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
    for f in finished:
        take(f.result())
    return pending


def _run_on_ray(address: str, chunks: Iterator[list[tuple[int, dict[str, Any]]]], workers: int,
                hw: HardwareProfile, model: ModelSpec, take: Callable[[list[tuple[int, dict[str, Any]]]], None],
                length_samples: int = 1) -> None:
    """Chunks as Ray tasks, at most 3 per local worker's worth of CPUs in flight (the cluster's size bounds
    nothing here: what is in flight is held in memory)."""
    import ray

    ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
    try:
        @ray.remote
        def chunk_task(items, hw_ref, model_ref):
            _init_worker(hw_ref, model_ref, length_samples)
            return _evaluate_chunk(items)

        hw_ref, model_ref = ray.put(hw), ray.put(model)
        limit = max(workers, int(ray.cluster_resources().get("CPU", 1))) * 3
        pending: list[Any] = []
        with HeldSignals() as signals:  # as on the process pool: an interrupt is read between short waits
            signals.hold()
            for items in chunks:
                if signals.held:
                    break
                pending.append(chunk_task.remote(items, hw_ref, model_ref))
                while len(pending) >= limit and not signals.held:
                    pending = _take_ready(pending, take)
            while pending and not signals.held:
                pending = _take_ready(pending, take)
            for ref in pending if signals.held else []:
                ray.cancel(ref, force=True)
    finally:
        ray.shutdown()


def _take_ready(pending: list[Any], take: Callable[[list[tuple[int, dict[str, Any]]]], None]) -> list[Any]:
    import ray

    ready, pending = ray.wait(pending, num_returns=1, timeout=0.2)
    for ref in ready:
        take(ray.get(ref))
    return pending
