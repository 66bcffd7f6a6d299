"""Interruption as a normal ending: SIGTERM handled like Ctrl-C (as `Terminated`, a KeyboardInterrupt, so every
`except KeyboardInterrupt` that keeps partial results keeps them for both), worker processes that die with their
parent, and signals held while results are written. docs/reliability.md says what each command does on each."""

from __future__ import annotations

import contextlib
import ctypes
import signal
import sys
import threading
from typing import Any

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


class HeldSignals:
    """A block in which, once `hold()` is called (the first interrupt was taken, or results are being written),
    SIGINT and SIGTERM are recorded instead of raised: a second Ctrl-C cannot cut the writing of what the first
    kept. When the block ends the handlers are restored and the first held signal is raised, so the user still
    gets the exit they asked for."""

    def __init__(self) -> None:
        self.held: list[int] = []
        self._previous: dict[int, Any] | None = None

    def hold(self) -> None:
        if self._previous is None and threading.current_thread() is threading.main_thread():
            # a signal this process was started ignoring (nohup, `cmd &` in a script) stays ignored
            self._previous = {s: signal.signal(s, self._record) for s in (signal.SIGINT, signal.SIGTERM)
                              if signal.getsignal(s) is not signal.SIG_IGN}

    def _record(self, signum: int, _frame: object) -> None:
        self.held.append(signum)

    def __enter__(self) -> HeldSignals:
        return self

    def __exit__(self, exc_type: object, *_: object) -> None:
        if self._previous is not None:
            for s, handler in self._previous.items():
                signal.signal(s, handler)
            self._previous = None
        if self.held and exc_type is None:
            signal.raise_signal(self.held[0])
