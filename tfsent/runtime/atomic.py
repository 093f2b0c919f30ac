"""Atomic writes (a file or folder appears complete under its final name, or not at all) and file hashing.

Everything is first written under a temporary name in the destination's own folder (same filesystem, so the
final ``os.replace`` is atomic), then renamed. A crash or an error leaves at most a stray ``.tmp-*`` entry, never a
half-written output under the real name.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import pathlib
import re
import shutil
import socket
import tempfile
from collections.abc import Iterator

from tfsent.errors import UserError

# Write failures the user fixes outside tfsent (space, quota, permissions, a read-only mount): one line, no traceback.
_USER_ERRNOS = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded",
                errno.EROFS: "read-only file system", errno.EACCES: "permission denied",
                errno.EPERM: "operation not permitted"}


class WriteError(UserError):
    """Writing an output failed for a reason outside tfsent (full disk, quota, permissions); names the file."""


def _user_cause(error: BaseException) -> OSError | None:
    """The OSError with a user-fixable errno behind ``error`` (writers such as pyarrow wrap the one they got)."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in _USER_ERRNOS:
            return error
        if "No space left on device" in str(error):
            # pyarrow (an OSError) and TensorFlow (ResourceExhaustedError) keep only the message
            return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        error = error.__cause__ or error.__context__
    return None


def _raise_user_cause(path: pathlib.Path, error: BaseException) -> None:
    """Raise :class:`WriteError` naming ``path`` when ``error`` comes from a full disk, a quota or permissions."""
    cause = _user_cause(error)
    if cause is not None:
        raise WriteError(f"{path}: {_USER_ERRNOS[cause.errno]} while writing; nothing was written under this "
                         "name (free space or fix the permissions, then run the same command again)") from None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def umask_modes(path: str | os.PathLike) -> None:
    """Give ``path`` and, for a folder, everything in it the mode the user's umask gives a new file or folder.

    Writers create some files with their own mode (``tempfile.mkstemp``/``mkdtemp`` 0600/0700, safetensors 0600),
    so a model saved by one user could not be read by another (a serving container, a team folder). Applied to
    every temporary file and folder before it is renamed into place, the result is what the umask says, whoever
    wrote the bytes. Executable files (none are written today) keep their execute bits, filtered by the umask.
    """
    mask = _umask()
    path = pathlib.Path(path)
    entries = [path, *path.rglob("*")] if path.is_dir() and not path.is_symlink() else [path]
    for entry in entries:
        if entry.is_symlink():
            continue
        mode = entry.stat().st_mode
        full = 0o777 if entry.is_dir() or mode & 0o111 else 0o666
        os.chmod(entry, full & ~mask)


@contextlib.contextmanager
def open_for_write(path: str | os.PathLike, mode: str = "w", **kwargs) -> Iterator:
    """Open a temporary sibling of ``path`` for writing; rename it to ``path`` only if the block succeeds.

    Raises:
        WriteError: the disk is full, a quota is exceeded or the folder is not writable: the temporary file is
            removed and the message names ``path`` and the cause.
    """
    path = pathlib.Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        sweep_dead_writers(path)
        fd, tmp = tempfile.mkstemp(prefix=f".tmp-{path.name}.{_writer()}.", dir=path.parent)
    except OSError as e:
        if e.errno in _USER_ERRNOS:
            raise WriteError(f"{path}: cannot write ({_USER_ERRNOS[e.errno]})") from None
        raise
    os.close(fd)
    try:
        with open(tmp, mode, **kwargs) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        umask_modes(tmp)  # mkstemp creates 0600; give the file the usual permissions
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        _raise_user_cause(path, e)
        raise


def write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> None:
    """Write ``text`` to ``path`` atomically."""
    with open_for_write(path, "w", encoding=encoding) as f:
        f.write(text)


@contextlib.contextmanager
def directory(path: str | os.PathLike, overwrite: bool = False) -> Iterator[pathlib.Path]:
    """Yield a temporary folder that becomes ``path`` when the block succeeds.

    Args:
        path: the final folder.
        overwrite: replace an existing ``path``; otherwise an existing one is an error.

    Raises:
        FileExistsError: ``path`` exists and ``overwrite`` is false.
    """
    path = pathlib.Path(path)
    if path.parent.is_dir():
        sweep_dead_writers(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path}: already exists; remove it or pass overwrite=True")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".tmp-{path.name}.{_writer()}.", dir=path.parent))
    try:
        yield tmp
        umask_modes(tmp)  # mkdtemp creates 0700, safetensors writes 0600: what the block wrote gets the umask's
        if path.exists():
            old = path.with_name(f".old-{path.name}.{_writer()}")
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        _raise_user_cause(path, e)
        raise


def _writer() -> str:
    # Who writes a temporary folder, in its name: a folder left by a writer that was killed is known by it.
    return f"pid{os.getpid()}@{socket.gethostname()}"


def sweep_dead_writers(path: str | os.PathLike) -> list[pathlib.Path]:
    """Clear what a killed writer of ``path`` (:func:`directory`, :func:`open_for_write`) left beside it, on this host.

    A SIGKILL (or a signal with no handler) before the rename leaves ``.tmp-<name>.pid<N>@<host>.*`` (a file or folder);
    one between the two renames of a replacement leaves the previous folder as ``.old-<name>.pid<N>@<host>`` and no
    ``path``. When pid N no longer runs here, the temporary folder is removed and a lone previous folder is put back
    (the interrupted replacement never happened). Writers on other hosts and live ones are left alone.

    Returns:
        The paths removed or restored.
    """
    from tfsent.runtime.locks import Holder

    path = pathlib.Path(path)
    host = socket.gethostname()
    name, at = re.escape(path.name), re.escape(host)
    left = re.compile(rf"^\.(?:(tmp)-{name}\.pid(\d+)@{at}\.[^.]+|(old)-{name}\.pid(\d+)@{at})$")
    done = []
    for entry in sorted(path.parent.iterdir()):
        match = left.match(entry.name)
        if not match or entry.is_symlink():
            continue
        kind, pid = ("tmp", int(match.group(2))) if match.group(1) else ("old", int(match.group(4)))
        if kind == "old" and not entry.is_dir():
            continue
        if Holder(pid, host, None, "").alive() is not False:
            continue
        if kind == "old" and not path.exists():
            os.replace(entry, path)
        elif entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
        done.append(entry)
    return done


def update_with_file(digest, path: str | os.PathLike) -> None:
    """Feed a file's bytes into a ``hashlib`` digest, a block at a time (memory stays flat for large files)."""
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)


def sha256_file(path: str | os.PathLike) -> str:
    """Hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    update_with_file(digest, path)
    return digest.hexdigest()


def sha256_tree(path: str | os.PathLike) -> str:
    """Hex SHA-256 of a file, or of a folder's files (relative names and bytes, in sorted order)."""
    path = pathlib.Path(path)
    if not path.is_dir():
        return sha256_file(path)
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(file.relative_to(path).as_posix().encode("utf-8") + b"\0")
        update_with_file(digest, file)
    return digest.hexdigest()
