"""One writer of a ship state store at a time, across processes.

`ship run` holds an exclusive lock on `<state_path>.lock` for as long as it runs; an operator
command that changes records (`ship blocked expire`) takes the same lock, so it never races a
running client, and a second `ship run` on the same state refuses to start. The lock is the
kernel's (flock): it goes away with the process, however that ends.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from tidesync.domain.errors import ErrorCode, TidesyncError


class StateInUse(TidesyncError):
    """Another process holds the state store."""

    code = ErrorCode.STATE_IN_USE


@contextlib.contextmanager
def exclusive(state_path: str | Path, holder: str) -> Iterator[None]:
    """Hold the state store's lock; raises StateInUse at once if another process holds it."""
    path = Path(f"{state_path}.lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            held_by = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "unknown"
            raise StateInUse(f"the ship state {state_path} is in use ({held_by})") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{holder}, pid {os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)
