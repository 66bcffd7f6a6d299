"""Writing files so that a reader never sees half of one, and owning a folder while it is written.

Every file the tools write goes through `atomic_path` (a temporary file in the same folder, fsync, rename over the
target): a kill at any moment leaves the old file or the new one, never a mix. `FolderLock` is an advisory lock
(flock on FOLDER/.lock, released by the kernel when its holder dies) that a second writer of the same folder is
refused by, with the holder's pid and command in the message. docs/reliability.md lists who uses them."""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from perfmodel.errors import InputError

LOCK_NAME = ".lock"


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path beside `path`; when the block ends without an error it is synced and renamed to `path`
    (and the folder synced), else removed."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, target)
        _sync_folder(target.parent)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def write_text_atomic(path: str | Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def _sync_folder(folder: Path) -> None:
    with contextlib.suppress(OSError):  # not every filesystem lets a folder be opened for fsync
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def writable_folder(path: str | Path, field: str) -> Path:
    """`path` as a folder this process can write (created if missing); InputError naming `field` otherwise, before
    any work is done."""
    folder = Path(path)
    if not str(folder).isprintable():
        raise InputError(repr(str(folder)), field, "holds a control character (a newline?): choose a plain name")
    if folder.exists() and not folder.is_dir():
        raise InputError(str(folder), field, "is a file, not a folder: choose a folder name")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as err:
        raise InputError(str(folder), field, f"cannot write there ({err.strerror or err}): choose another "
                         "folder") from None
    return folder


def writable_file(path: str | Path, field: str) -> Path:
    """`path` as a file this process can create or replace: its folder exists and is writable; InputError else."""
    target = Path(path)
    if target.is_dir():
        raise InputError(str(target), field, "is a folder: give a file name")
    parent = target.parent
    if not parent.is_dir():
        raise InputError(str(target), field, f"folder {str(parent)!r} does not exist: create it or choose another "
                         "path")
    if not os.access(parent, os.W_OK):
        raise InputError(str(target), field, f"folder {str(parent)!r} is not writable: choose another path")
    return target


class FolderLock:
    """An exclusive advisory lock on FOLDER/.lock for as long as the folder is written; a second holder is refused
    with the first one's pid and command."""

    def __init__(self, folder: Path, field: str = "--out") -> None:
        self.path = folder / LOCK_NAME
        self.field = field
        self._fd: int | None = None

    def __enter__(self) -> FolderLock:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as err:
            raise InputError(str(self.path.parent), self.field, f"cannot write there ({err.strerror or err}): "
                             "choose another folder") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 300, 0).decode("utf-8", "replace").strip() or "another process"
            os.close(fd)
            raise InputError(str(self.path.parent), self.field, f"is being written by {holder}: wait for it or "
                             "choose another folder") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} ({' '.join(sys.argv)[:200]})".encode(), 0)
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing releases the flock
            self._fd = None
