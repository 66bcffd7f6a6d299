"""Collectives between `--world-size` processes on this machine: gloo on CPU, NCCL on CUDA (one GPU per rank).

The ranks are spawned with torch.multiprocessing and meet on a TCP store on 127.0.0.1. Rank 0 times every call
between barriers and sends its rows to the parent through a queue; the parent alone writes the table, so stopping
the ranks (Ctrl-C, a failure) can never leave half a row in it. The ranks ignore SIGINT: the parent stops them."""

from __future__ import annotations

import contextlib
import queue as queue_mod
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

from executor.bench_kernels.config import BenchConfig
from executor.bench_kernels.timing import MAX_SAMPLES, MIN_SAMPLES, WARMUP_CALLS, Timing, calls_per_sample, summarize

SILENCE_LIMIT_S = 300.0  # no message from the ranks for this long (start-up included): give up
Emit = Callable[[str, dict[str, int], str, str, Timing], None]


class CollectiveError(RuntimeError):
    """The ranks failed or stopped answering; the message is one line."""


def backend_of(device: str) -> str:
    """torch.distributed's backend name (ROCm's torch runs RCCL under the name nccl)."""
    return "nccl" if device == "cuda" else "gloo"


def backend_label(device: str) -> str:
    """The table's backend column: what really ran."""
    import torch

    return ("rccl" if torch.version.hip else "nccl") if device == "cuda" else "gloo"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _buffers(op: str, nbytes: int, world: int, device: Any, dtype: Any) -> tuple[Callable[[], object], int]:
    """The call for one `op` of about `nbytes` and the bytes it really moves, named as docs/kernels.md does: the
    buffer (all-reduce), the gathered output (all-gather), the full input (reduce-scatter, as nccl-tests) and one
    rank's send buffer (all-to-all). The element count is rounded down to a multiple of the world size."""
    import torch
    import torch.distributed as dist

    elem = torch.tensor([], dtype=dtype).element_size()
    count = max(world, nbytes // elem // world * world)
    full = torch.zeros(count, dtype=dtype, device=device)  # zeros: repeated sums never overflow
    part = torch.zeros(count // world, dtype=dtype, device=device)
    other = torch.empty_like(full)
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor  # newer torch renamed them
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    calls: dict[str, Callable[[], object]] = {
        "all_reduce": lambda: dist.all_reduce(full),
        "all_gather": lambda: gather(full, part),
        "reduce_scatter": lambda: scatter(part, full),
        "all_to_all": lambda: dist.all_to_all_single(other, full),
    }
    return calls[op], count * elem


def _time_collective(call: Callable[[], object], sync: Callable[[], None], barrier: Callable[[], None],
                     ctrl: Any, budget_s: float) -> Timing:
    """Rank 0's time per call, each sample started on a barrier; rank 0 decides, and broadcasts, how many calls a
    sample makes and when to stop, so every rank runs the same calls."""
    import torch.distributed as dist

    for _ in range(WARMUP_CALLS):
        call()
    sync()
    barrier()
    t0 = time.perf_counter()
    call()
    sync()
    ctrl[0], ctrl[1] = calls_per_sample(time.perf_counter() - t0), 1
    dist.broadcast(ctrl, 0)
    inner = int(ctrl[0])
    samples: list[float] = []
    deadline = time.perf_counter() + budget_s
    while int(ctrl[1]):
        barrier()
        t0 = time.perf_counter()
        for _ in range(inner):
            call()
        sync()
        samples.append((time.perf_counter() - t0) / inner)
        ctrl[1] = int(len(samples) < MAX_SAMPLES and (len(samples) < MIN_SAMPLES or time.perf_counter() < deadline))
        dist.broadcast(ctrl, 0)
    return summarize(samples, inner)


def _measure(rank: int, world: int, device_kind: str, ops: tuple[str, ...], sizes: tuple[int, ...],
             budget_s: float, queue: Any) -> None:
    import torch
    import torch.distributed as dist

    cuda = device_kind == "cuda"
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    dtype, dtype_name = (torch.bfloat16, "bf16") if cuda else (torch.float32, "fp32")  # gloo's bf16 is patchy
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    barrier = (lambda: dist.barrier(device_ids=[rank])) if cuda else dist.barrier
    ctrl = torch.zeros(2, dtype=torch.int64, device=device)
    for op in ops:
        for nbytes in sizes:
            call, actual_bytes = _buffers(op, nbytes, world, device, dtype)
            try:
                call()
            except (RuntimeError, NotImplementedError, ValueError) as err:  # the same on every rank
                if rank == 0:
                    first = str(err).splitlines()[0][:160] if str(err) else type(err).__name__
                    queue.put(("skip", f"{op}: skipped, {backend_of(device_kind)} here cannot run it ({first})"))
                break
            timing = _time_collective(call, sync, barrier, ctrl, budget_s)
            if rank == 0:
                queue.put(("row", op, {"bytes": actual_bytes}, dtype_name, timing.median_s, timing.spread,
                           timing.repetitions))


def _worker(rank: int, world: int, port: int, device_kind: str, ops: tuple[str, ...], sizes: tuple[int, ...],
            budget_s: float, queue: Any) -> None:
    import torch
    import torch.distributed as dist

    if device_kind == "cuda":
        torch.cuda.set_device(rank)
    else:
        torch.set_num_threads(1)  # one core per rank, as the cpu-local profile assumes
    try:
        dist.init_process_group(backend_of(device_kind), init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world, timeout=timedelta(seconds=120))
        _measure(rank, world, device_kind, ops, sizes, budget_s, queue)
    except Exception as err:  # reported to the parent in one line; it stops every rank
        first = str(err).splitlines()[0][:200] if str(err) else ""
        queue.put(("error", f"rank {rank}: {type(err).__name__}: {first}"))
        return
    if rank == 0:
        queue.put(("done",))
    dist.destroy_process_group()


@contextlib.contextmanager
def _sigint_ignored() -> Iterator[None]:
    """Children started inside inherit SIG_IGN for SIGINT, and Python keeps it: Ctrl-C reaches only the parent."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _drain(queue: Any, procs: list[Any], emit: Emit, backend: str) -> None:
    """Rows to `emit` as rank 0 sends them, until it says done; raises CollectiveError when a rank fails."""
    heard = time.monotonic()
    while True:
        try:
            msg = queue.get(timeout=0.5)
        except queue_mod.Empty:
            # a clean exit (code 0) comes only after rank 0's last message, so only a failed one is news
            failed = [(rank, p.exitcode) for rank, p in enumerate(procs) if p.exitcode not in (None, 0)]
            if failed:
                rank, code = failed[0]
                raise CollectiveError(f"rank {rank} exited (code {code}) before the collectives finished") from None
            if time.monotonic() - heard > SILENCE_LIMIT_S:
                raise CollectiveError(f"no word from the ranks in {SILENCE_LIMIT_S:.0f} s") from None
            continue
        heard = time.monotonic()
        if msg[0] == "done":
            return
        if msg[0] == "error":
            raise CollectiveError(msg[1])
        if msg[0] == "skip":
            print(msg[1], flush=True)
            continue
        _, op, shape, dtype, median_s, spread, reps = msg
        emit(op, shape, dtype, backend, Timing(median_s, spread, reps))


def _stop(procs: list[Any], grace_s: float) -> None:
    for p in procs:
        p.join(timeout=grace_s)
    for p in procs:
        if p.is_alive():
            p.terminate()
            p.join(timeout=2.0)
        if p.is_alive():
            p.kill()
            p.join()


def run_collectives(cfg: BenchConfig, ops: tuple[str, ...], emit: Emit) -> None:
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    args = (cfg.world_size, _free_port(), cfg.device, ops, cfg.grid.message_bytes, cfg.grid.budget_per_shape_s, queue)
    procs = [ctx.Process(target=_worker, args=(rank, *args), daemon=True) for rank in range(cfg.world_size)]
    clean = False
    try:
        with _sigint_ignored():
            for p in procs:
                p.start()
        _drain(queue, procs, emit, backend_label(cfg.device))
        clean = True
    finally:
        _stop([p for p in procs if p.pid is not None], grace_s=2.0 if clean else 0.0)
        queue.close()
