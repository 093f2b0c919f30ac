"""Paths a Beam worker reads and writes: local ones as they are, remote ones (``gs://``, ``s3://``, ...) through
Beam's ``FileSystems``.

tfsent's readers and loaders take local paths (they name the file and line of a bad row, and load checkpoints
with ``transformers``), so a remote input file or checkpoint folder is copied to the worker's disk once, and the
reader runs on the copy.
"""

from __future__ import annotations

import contextlib
import pathlib
import shutil
import tempfile
from collections.abc import Iterator

from apache_beam.io.filesystems import FileSystems

_COPY_CHUNK = 1 << 20


def is_local(path: str) -> bool:
    """True for a path of this machine's filesystem (no ``scheme://``)."""
    return "://" not in str(path) or str(path).startswith("file://")


def join(folder: str, name: str) -> str:
    """``folder/name`` for a local or remote folder."""
    return str(pathlib.Path(folder) / name) if is_local(folder) else FileSystems.join(folder, name)


def sibling(path: str, name: str) -> str:
    """The file ``name`` in the folder of a local or remote ``path``."""
    if is_local(path):
        return str(pathlib.Path(path).with_name(name))
    return path[: len(path) - len(FileSystems.split(path)[1])] + name


def exists(path: str) -> bool:
    """Whether a local or remote file (or folder) exists."""
    return pathlib.Path(path).exists() if is_local(path) else FileSystems.exists(path)


def _download(path: str, target: pathlib.Path) -> None:
    with FileSystems.open(path) as src, open(target, "wb") as dst:
        shutil.copyfileobj(src, dst, _COPY_CHUNK)


@contextlib.contextmanager
def local_file(path: str) -> Iterator[pathlib.Path]:
    """A local path holding ``path``'s bytes for the duration of the block (the file itself when it is local)."""
    if is_local(path):
        yield pathlib.Path(path)
        return
    with tempfile.TemporaryDirectory(prefix="tfsent-beam-") as tmp:
        target = pathlib.Path(tmp) / FileSystems.split(path)[1]
        _download(path, target)
        yield target


def local_folder(path: str, cache: pathlib.Path) -> pathlib.Path:
    """A local copy of a (checkpoint) folder: ``path`` itself when local, else its files copied under ``cache``.

    The copy lives as long as the worker (``cache`` is the worker's scratch folder): a model is loaded once.
    """
    if is_local(path):
        return pathlib.Path(path)
    target = cache / FileSystems.split(path.rstrip("/"))[1]
    if not target.is_dir():
        partial = pathlib.Path(tempfile.mkdtemp(prefix=target.name + ".", dir=cache))
        for meta in FileSystems.match([path.rstrip("/") + "/*"])[0].metadata_list:
            _download(meta.path, partial / FileSystems.split(meta.path)[1])
        partial.rename(target)
    return target


def checkpoint_cache() -> pathlib.Path:
    """The worker's scratch folder for remote checkpoints (one copy per worker machine, reused by its processes)."""
    cache = pathlib.Path(tempfile.gettempdir()) / "tfsent-beam-ckpt"
    cache.mkdir(exist_ok=True)
    return cache


def list_files(pattern: str) -> list[str]:
    """The paths matching a local or remote glob, sorted."""
    return sorted(m.path for m in FileSystems.match([pattern])[0].metadata_list)


def delete_folder(path: str) -> None:
    """Remove a local or remote folder and what it holds; a missing one is fine."""
    if is_local(path):
        shutil.rmtree(path, ignore_errors=True)
    elif FileSystems.exists(path):
        FileSystems.delete([path])
