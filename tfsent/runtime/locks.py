"""Exclusive locks on output folders: two runs never write the same parts at once.

A lock is ``fcntl.flock`` on a small file holding the owner's pid and host. The kernel drops it when the holder
exits, however it exits (SIGKILL included), so a lock file left behind by a crash is harmless: the next run takes
it at once. A second run that finds the lock held fails immediately, naming the holder.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pathlib
import socket
from collections.abc import Iterator

from tfsent.errors import UserError


class LockedError(UserError):
    """Another process holds the lock."""


@contextlib.contextmanager
def exclusive(path: str | os.PathLike, what: str) -> Iterator[pathlib.Path]:
    """Hold an exclusive, non-blocking lock on ``path`` for the duration of the block.

    Args:
        path: the lock file (created if missing; its folder must exist).
        what: what the lock protects, for the error message (e.g. the parts folder).

    Yields:
        The lock file's path.

    Raises:
        LockedError: another process holds the lock; the message names its pid and host.
    """
    path = pathlib.Path(path)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown pid"
            raise LockedError(f"{what} is in use by another run ({holder}); wait for it to finish or stop it "
                              f"(lock file {path})") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        yield path
    finally:
        os.close(fd)  # closing the descriptor releases the flock
