"""Whether an output path can be created, checked before any model loads: one line naming the path and the cause.

Every entry point checks its outputs (a prediction file, an export folder, a run directory, the cache folder) here
first, so a parent that is a regular file, a folder without write permission, a read-only mount or a name too long
is refused in the first seconds, not after the compute when the first file is written.
"""

from __future__ import annotations

import errno
import os
import pathlib

from tfsent.errors import UserError

# Bytes tfsent adds to an output's name for the files it writes beside it: ``.tmp-<name>.XXXXXXXX`` while writing,
# ``<name>.parts``, ``<stem>.chunks<suffix>``, a shard's ``<name>.shard-00000-of-00000.parts``.
DERIVED_NAME_BYTES = 32


class PathError(UserError):
    """An output path that cannot be created or written; the message names it and the cause."""


def _name_max(folder: pathlib.Path) -> int:
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def _nearest_existing(path: pathlib.Path) -> pathlib.Path:
    folder = path
    while True:
        try:
            os.stat(folder)
            return folder
        except FileNotFoundError:
            folder = folder.parent
        except NotADirectoryError:
            folder = folder.parent
        except OSError as e:
            if e.errno == errno.ENAMETOOLONG:
                folder = folder.parent
            else:
                raise


def check_writable(path: str | os.PathLike, key: str, *, derived: bool = True) -> pathlib.Path:
    """Check that ``path`` (a file or folder to create or replace) can be written; return it made absolute.

    Args:
        path: the output (it may exist; its folders may not exist yet).
        key: the setting that names it (``output``, ``hydra.run.dir``, ``TFSENT_CACHE_DIR``), for the message.
        derived: leave room in the last name for the temporary and parts names tfsent derives from it.

    Returns:
        The absolute path (relative paths are taken from the current folder).

    Raises:
        PathError: a name too long (ENAMETOOLONG), an existing component that is not a folder (ENOTDIR), or a
            nearest existing folder that this process cannot write (permissions, read-only mount).
    """
    path = pathlib.Path(os.path.abspath(path))
    anchor = _nearest_existing(path)
    name_max = _name_max(anchor if anchor.is_dir() else anchor.parent)
    for part in path.relative_to("/").parts:
        limit = name_max - (DERIVED_NAME_BYTES if derived and part == path.name else 0)
        size = len(os.fsencode(part))
        if size > limit:
            room = f"; tfsent adds up to {DERIVED_NAME_BYTES} for its temporary files" if limit < name_max else ""
            raise PathError(f"{key}={path}: file name too long ({size} bytes in {part[:24]}...; at most {limit}"
                            f"{room}) (ENAMETOOLONG)")
    if len(os.fsencode(str(path))) + (DERIVED_NAME_BYTES if derived else 0) > 4000:
        raise PathError(f"{key}={path}: path too long ({len(os.fsencode(str(path)))} bytes) (ENAMETOOLONG)")
    if anchor != path and not anchor.is_dir():
        raise PathError(f"{key}={path}: cannot create it, {anchor} is a file, not a folder (ENOTDIR)")
    folder = anchor if anchor != path else path.parent
    if anchor == path and path.is_dir() and not derived:
        folder = path  # an existing folder that is itself the output (a run directory): written into
    if not os.access(folder, os.W_OK | os.X_OK):
        cause = "read-only file system" if _read_only(folder) else "permission denied"
        raise PathError(f"{key}={path}: cannot write in {folder} ({cause})")
    return path


def check_readable(path: str | os.PathLike, key: str) -> None:
    """Fail in one line when ``path`` (an input or checkpoint) cannot even be looked up: a name too long, a parent
    that is a file, a symlink loop. A missing or unreadable path is left to the reader, which names it.

    Raises:
        PathError: the lookup failed for one of those causes.
    """
    try:
        os.stat(path)
    except (FileNotFoundError, PermissionError):
        return
    except OSError as e:
        name = errno.errorcode.get(e.errno, str(e.errno))
        if e.errno == errno.ENOTDIR:
            anchor = _nearest_existing(pathlib.Path(os.path.abspath(path)))
            raise PathError(f"{key}={path}: not found, {anchor} is a file, not a folder (ENOTDIR)") from None
        raise PathError(f"{key}={path}: {e.strerror.lower()} ({name})") from None


def _read_only(folder: pathlib.Path) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        return False
