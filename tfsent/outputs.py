"""Prediction outputs: atomic CSV/JSONL/Parquet writers and resumable, per-part output folders.

Nothing is ever half-written: each file goes to a temporary name in its own directory and is renamed when
complete. Large inputs are predicted in parts of ``part_size`` rows; each finished part is its own Parquet file
in ``<output>.parts/`` beside a ``manifest.json`` holding the run's fingerprint (input bytes + every setting that
changes the result). A re-run with the same fingerprint skips finished parts; a different fingerprint discards
them, so a changed input or config is never mixed in. :meth:`PartStore.finish` joins the parts, checks that the
row ids are exactly ``0..n-1`` (no duplicate, no gap), writes the final file and removes the folder.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import pathlib
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping

import numpy as np
import pandas as pd

log = logging.getLogger(__name__)

FORMATS = ("csv", "jsonl", "parquet")
ROW_ID = "row"


class OutputError(ValueError):
    """An output path or format that cannot be written, or parts that do not join into a whole."""


def infer_format(path: str | os.PathLike, fmt: str | None = None) -> str:
    """The output format: ``fmt`` if given, else from the suffix (``.csv``, ``.jsonl``/``.json``, ``.parquet``).

    Raises:
        OutputError: unknown format or suffix.
    """
    if fmt:
        if fmt not in FORMATS:
            raise OutputError(f"output_format={fmt!r}; expected one of {', '.join(FORMATS)}")
        return fmt
    suffix = pathlib.Path(path).suffix.lower()
    by_suffix = {".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet", ".pq": "parquet"}
    if suffix not in by_suffix:
        raise OutputError(f"cannot tell the output format of {path}; use a .csv/.jsonl/.parquet name or set "
                          "output_format")
    return by_suffix[suffix]


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike):
    """Yield a temporary path beside ``path``; rename it onto ``path`` only if the block succeeds."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield pathlib.Path(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_table(frame: pd.DataFrame, path: str | os.PathLike, fmt: str | None = None) -> pathlib.Path:
    """Write ``frame`` atomically as CSV, JSON Lines or Parquet.

    List-valued columns (e.g. probability vectors) are kept as lists in JSONL/Parquet and written as JSON text
    in CSV.

    Returns:
        The path written.
    """
    fmt = infer_format(path, fmt)
    with atomic_path(path) as tmp:
        if fmt == "csv":
            frame = frame.copy()
            for col in frame.columns:
                if frame[col].dtype == object and frame[col].map(lambda v: isinstance(v, (list, tuple))).any():
                    frame[col] = frame[col].map(json.dumps)
            frame.to_csv(tmp, index=False)
        elif fmt == "jsonl":
            frame.to_json(tmp, orient="records", lines=True, force_ascii=False)
        else:
            frame.to_parquet(tmp, index=False)
    return pathlib.Path(path)


def fingerprint(files: Iterable[str | os.PathLike], settings: Mapping) -> str:
    """sha256 over the bytes of ``files`` (in the given order, with their names) and the JSON of ``settings``."""
    h = hashlib.sha256()
    for f in files:
        f = pathlib.Path(f)
        h.update(f.name.encode() + b"\0")
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    h.update(json.dumps(settings, sort_keys=True, default=str).encode())
    return h.hexdigest()


def checkpoint_files(ckpt: str | os.PathLike) -> list:
    """Name, size and mtime of each file of a checkpoint folder, for a fingerprint's settings.

    Cheap, and it changes whenever the weights are rewritten, so parts predicted by older weights are discarded.
    """
    return [(p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(pathlib.Path(ckpt).iterdir())
            if p.is_file()]


class PartStore:
    """The ``<output>.parts/`` folder of one resumable prediction run.

    Args:
        output: the final output path.
        fingerprint: identifies input + settings; parts from another fingerprint are discarded.
        n_rows: total rows of the run.
        part_size: rows per part.
    """

    def __init__(self, output: str | os.PathLike, fingerprint: str, n_rows: int, part_size: int):
        if part_size < 1:
            raise OutputError(f"part_size must be >= 1, got {part_size}")
        self.output = pathlib.Path(output)
        self.dir = self.output.with_name(self.output.name + ".parts")
        self.n_rows, self.part_size = n_rows, part_size
        self.n_parts = max(1, -(-n_rows // part_size))
        manifest = {"fingerprint": fingerprint, "n_rows": n_rows, "part_size": part_size}
        existing = self._read_manifest()
        if existing is not None and existing != manifest:
            log.warning("%s belongs to another input or config; discarding its parts", self.dir)
            shutil.rmtree(self.dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        if existing != manifest:
            with atomic_path(self.dir / "manifest.json") as tmp:
                tmp.write_text(json.dumps(manifest, indent=1))

    def _read_manifest(self) -> dict | None:
        path = self.dir / "manifest.json"
        if not path.is_file():
            return None if not self.dir.exists() else {}
        try:
            return json.loads(path.read_text())
        except ValueError:
            return {}

    def bounds(self, part: int) -> tuple[int, int]:
        """Rows ``[start, stop)`` of ``part``."""
        return part * self.part_size, min(self.n_rows, (part + 1) * self.part_size)

    def _path(self, part: int, table: str) -> pathlib.Path:
        return self.dir / f"{table}-{part:05d}-of-{self.n_parts:05d}.parquet"

    def is_done(self, part: int, tables: Iterable[str] = ("rows",)) -> bool:
        """True when every table of ``part`` was written by a run with this fingerprint."""
        return all(self._path(part, t).is_file() for t in tables)

    def write(self, part: int, table: str, frame: pd.DataFrame) -> None:
        """Write one table of one finished part atomically (Parquet keeps dtypes and lists exactly)."""
        write_table(frame, self._path(part, table), "parquet")

    def read(self, table: str) -> pd.DataFrame:
        """All parts of ``table`` joined in part order."""
        frames = [pd.read_parquet(self._path(p, table)) for p in range(self.n_parts)
                  if self._path(p, table).is_file()]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    def run(self, predict_part: Callable[[int, int, Callable[[int], None]], pd.DataFrame], *,
            progress: bool = True, desc: str = "predict") -> int:
        """Predict and write every unfinished part; return how many finished parts were skipped.

        Args:
            predict_part: ``(lo, hi, on_rows) -> rows lo..hi-1 as a frame``; it may call ``on_rows(k)`` as
                rows complete (fillers included: the bar never counts past the part).
            progress: show a tqdm bar over all rows.
            desc: the bar's label.
        """
        from tqdm.auto import tqdm

        skipped = 0
        with tqdm(total=self.n_rows, unit="row", disable=not progress, desc=desc) as bar:
            for part in range(self.n_parts):
                lo, hi = self.bounds(part)
                if self.is_done(part):
                    skipped += 1
                    bar.update(hi - lo)
                    continue
                seen = [0]

                def on_rows(k, size=hi - lo, seen=seen):
                    step = min(k, size - seen[0])
                    seen[0] += step
                    bar.update(step)

                self.write(part, "rows", predict_part(lo, hi, on_rows))
                bar.update(hi - lo - seen[0])
        return skipped

    def finish(self, table: str = "rows") -> pd.DataFrame:
        """Join the parts of ``table`` and check its ``row`` ids are exactly ``0..n_rows-1``.

        Raises:
            OutputError: a missing part, or row ids with a gap or a duplicate.
        """
        missing = [p for p in range(self.n_parts) if not self._path(p, table).is_file()]
        if missing:
            raise OutputError(f"{self.dir}: part(s) {missing[:10]} of {table!r} are missing")
        frame = self.read(table)
        ids = frame[ROW_ID].to_numpy() if ROW_ID in frame else None
        if ids is None or len(ids) != self.n_rows or (ids != np.arange(self.n_rows)).any():
            raise OutputError(f"{self.dir}: {table!r} parts hold {len(frame)} rows, expected ids 0..{self.n_rows - 1} "
                              "in order")
        return frame

    def remove(self) -> None:
        """Delete the parts folder (after the final files are written)."""
        shutil.rmtree(self.dir, ignore_errors=True)
