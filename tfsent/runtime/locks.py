"""Exclusive locks on output folders: two runs never write the same parts at once.

A lock is ``fcntl.flock`` on a small file holding the owner's pid, host and start time. The kernel drops the flock
when the holder exits, however it exits (SIGKILL included). A holder that ends normally deletes the file while it
still holds the lock, so a lock file found with a record in it was left by a run that died: the next run takes it
over and says so in one log line. A second run that finds the lock held fails at once, naming the holder.

Deleting a lock file races with a run that opened it just before: that run may get the flock of a file no longer
in the folder. So a taker checks, after locking, that the path still names the file it locked, and starts again
if not (the usual protocol for lock files that are removed).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import logging
import os
import pathlib
import re
import socket
import time
from collections.abc import Iterator

from tfsent.errors import UserError

log = logging.getLogger(__name__)

_RECORD = re.compile(r"pid (\d+) on (\S+)(?:, started (.+))?")


class LockedError(UserError):
    """Another process holds the lock."""


@dataclasses.dataclass(frozen=True)
class Holder:
    """Who holds (or held) a lock: pid, host and start time, as written in the lock file."""

    pid: int | None
    host: str | None
    started: str | None
    text: str

    @classmethod
    def parse(cls, text: str) -> "Holder":
        match = _RECORD.fullmatch(text.strip())
        if match is None:
            return cls(None, None, None, text.strip() or "unknown pid")
        return cls(int(match.group(1)), match.group(2), match.group(3), text.strip())

    def on_this_host(self) -> bool:
        return self.host == socket.gethostname()

    def alive(self) -> bool | None:
        """Whether the pid runs here; None when it cannot be checked (another host, no record)."""
        if self.pid is None or not self.on_this_host():
            return None
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # another user's live process
            return True
        return True


def _record() -> str:
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    return f"pid {os.getpid()} on {socket.gethostname()}, started {started}\n"


def _open_locked(path: pathlib.Path, what: str) -> int:
    """A descriptor of ``path`` holding its flock, the path still naming that file; retries after a removal."""
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except FileNotFoundError:
            # The folder went away between the caller's mkdir and this open (its last holder removed it).
            path.parent.mkdir(parents=True, exist_ok=True)
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = Holder.parse(os.pread(fd, 400, 0).decode(errors="replace"))
            os.close(fd)
            where = "" if holder.alive() is not None or holder.pid is None else (
                "; it runs on another host, which tfsent cannot check from here")
            raise LockedError(f"{what} is in use by another run ({holder.text}){where}; wait for it to finish or "
                              f"stop it (lock file {path})") from None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)  # locked a file its holder had just removed: take the one now under that name


def _say_takeover(path: pathlib.Path, holder: Holder) -> None:
    alive = holder.alive()
    if alive is None and holder.pid is not None:
        why = f"its host {holder.host} cannot be checked from here, but the lock was free"
    elif alive:
        why = f"pid {holder.pid} runs but no longer holds the lock (a reused pid)"
    else:
        why = "that process is no longer running"
    log.warning("%s: took over a lock left by a run that did not finish (%s): %s", path, holder.text, why)


@contextlib.contextmanager
def exclusive(path: str | os.PathLike, what: str) -> Iterator[pathlib.Path]:
    """Hold an exclusive, non-blocking lock on ``path`` for the duration of the block; delete it on release.

    Args:
        path: the lock file (created if missing; its folder too).
        what: what the lock protects, for the error message (e.g. the parts folder).

    Yields:
        The lock file's path.

    Raises:
        LockedError: another process holds the lock; the message names its pid, host and start time.
    """
    path = pathlib.Path(path)
    fd = _open_locked(path, what)
    try:
        left = os.pread(fd, 400, 0).decode(errors="replace")
        if left.strip():
            _say_takeover(path, Holder.parse(left))
        os.ftruncate(fd, 0)
        os.pwrite(fd, _record().encode(), 0)
        yield path
    finally:
        # Deleted while still held: a run that opened it meanwhile finds, once it gets the flock, that the path no
        # longer names its file, and starts again (see _open_locked).
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        os.close(fd)  # closing the descriptor releases the flock


def remove_if_free(path: str | os.PathLike) -> bool:
    """Delete the lock file ``path`` unless a live run holds it (a lock left by a killed run); True if gone."""
    path = pathlib.Path(path)
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return True
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        with contextlib.suppress(FileNotFoundError):
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                os.unlink(path)
        return True
    finally:
        os.close(fd)
