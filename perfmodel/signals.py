"""Interruption as a normal ending: SIGTERM handled like Ctrl-C (as `Terminated`, a KeyboardInterrupt, so every
`except KeyboardInterrupt` that keeps partial results keeps them for both), worker processes that die with their
parent, and signals held while results are written. docs/reliability.md says what each command does on each."""

from __future__ import annotations

import contextlib
import ctypes
import signal
import sys
import threading
from collections.abc import Iterator

EXIT_SIGINT = 130
EXIT_SIGTERM = 143
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


class Terminated(KeyboardInterrupt):
    """SIGTERM received: the same path as Ctrl-C, exit 143 instead of 130."""


def exit_code(err: KeyboardInterrupt) -> int:
    return EXIT_SIGTERM if isinstance(err, Terminated) else EXIT_SIGINT


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated()


def handle_sigterm() -> None:
    """In a command's main process: SIGTERM raises `Terminated` (only the main thread may set handlers)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_terminated)


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """This process gets `sig` when its parent dies (Linux prctl PR_SET_PDEATHSIG; elsewhere nothing): a sweep's
    workers never outlive a sweep killed with -9."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """SIGINT and SIGTERM held while results are written (a second Ctrl-C must not lose what the first kept);
    the first one held is delivered when the block ends, so the user still gets their exit."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    previous = {s: signal.signal(s, lambda signum, _frame: held.append(signum))
                for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        for s in held[:1]:
            signal.raise_signal(s)
