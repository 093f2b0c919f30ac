"""Atomic writes (a file or folder appears complete under its final name, or not at all) and file hashing.

Everything is first written under a temporary name in the destination's own folder (same filesystem, so the
final ``os.replace`` is atomic), then renamed. A crash or an error leaves at most a stray ``.tmp-*`` entry, never a
half-written output under the real name.

A folder is replaced only when tfsent wrote it: :func:`directory` with ``overwrite`` names the metadata file that
marks the kind of folder it writes (``tfsent_model.json``, ``tfsent_export.json``, a tfsent ``manifest.json``) and
refuses, in one line, a folder without it, a file, or a symbolic link (:func:`check_replaceable`).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
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


class NotOursError(UserError):
    """A path tfsent was asked to replace or clear holds something tfsent did not write; names it."""


def check_replaceable(path: str | os.PathLike, marker: str, marker_format: str | None = None) -> None:
    """Refuse to replace ``path`` unless it is absent, an empty folder, or a folder tfsent wrote.

    A folder tfsent wrote holds its metadata file ``marker`` (a regular file); with ``marker_format``
    (``tfsent.export/1``), its JSON ``format`` must be of that kind, any version (``tfsent.export/...``). A symbolic
    link is never replaced (nor is anything behind it), nor is a file.

    Raises:
        NotOursError: naming ``path`` and why it is not tfsent's.
    """
    path = pathlib.Path(path)
    if not os.path.lexists(path):
        return
    fix = "move it away or choose another path"
    if path.is_symlink():
        raise NotOursError(f"{path}: a symbolic link; tfsent never replaces a link or what it points to: remove the "
                           "link or choose another path")
    if not path.is_dir():
        raise NotOursError(f"{path}: a file, not a folder tfsent wrote; not replaced: {fix}")
    if not any(path.iterdir()):
        return  # an empty folder holds nothing to lose
    if not _carries(path / marker, marker_format):
        kind = f"{marker} of format {_kind(marker_format)}/*" if marker_format else marker
        raise NotOursError(f"{path}: holds no {kind}, so tfsent did not write it; tfsent replaces only a folder it "
                           f"wrote: {fix}")


def _carries(marker: pathlib.Path, marker_format: str | None) -> bool:
    if marker.is_symlink() or not marker.is_file():
        return False
    if marker_format is None:
        return True
    try:
        return _kind(str(json.loads(marker.read_text()).get("format", ""))) == _kind(marker_format)
    except (OSError, ValueError, AttributeError):
        return False


def _kind(fmt: str) -> str:
    return fmt.split("/")[0]  # tfsent.export/1 -> tfsent.export: any version of the kind is tfsent's


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
def directory(path: str | os.PathLike, overwrite: bool = False, *, marker: str | None = None,
              marker_format: str | None = None) -> Iterator[pathlib.Path]:
    """Yield a temporary folder that becomes ``path`` when the block succeeds.

    Args:
        path: the final folder.
        overwrite: replace an existing ``path`` that tfsent wrote (:func:`check_replaceable`, checked before the
            block and again before the rename); otherwise an existing one is an error.
        marker: the metadata file that marks a folder of this kind as tfsent's (required with ``overwrite``); a
            folder a concurrent writer renamed into place during the block is replaced only when it carries it.
        marker_format: the marker's JSON ``format`` (any version of its kind), where the name says little.

    Raises:
        FileExistsError: ``path`` exists and ``overwrite`` is false.
        NotOursError: ``path`` exists and tfsent did not write it.
    """
    path = pathlib.Path(path)
    if overwrite and marker is None:
        raise ValueError(f"{path}: overwrite needs the marker file of a folder tfsent wrote")
    if path.parent.is_dir():
        sweep_dead_writers(path)
    if os.path.lexists(path):
        if not overwrite:
            raise FileExistsError(f"{path}: already exists; remove it or pass overwrite=True")
        check_replaceable(path, marker, marker_format)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".tmp-{path.name}.{_writer()}.", dir=path.parent))
    try:
        yield tmp
        umask_modes(tmp)  # mkdtemp creates 0700, safetensors writes 0600: what the block wrote gets the umask's
        if os.path.lexists(path):
            # An existing folder (overwrite), or one a concurrent writer renamed into place meanwhile: only tfsent's.
            if marker is None:
                raise FileExistsError(f"{path}: appeared while it was written; remove it or pass overwrite=True")
            check_replaceable(path, marker, marker_format)
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
