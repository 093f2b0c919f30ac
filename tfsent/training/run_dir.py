"""The training run directory: what a run writes at its top level, the marker that says a run wrote it, and the
only code that deletes in it.

A run claims its directory (:func:`claim`) before anything else and, once every check before compute has passed,
marks it with ``tfsent_run.json`` (:func:`mark`: the names a run writes there, listed). ``overwrite=true`` on a finished run and ``resume=false`` on a killed one clear it
(:func:`clear`): only the entries a run writes (``backup/``, ``checkpoints/``, ``metrics.csv``, ``metrics.json``,
``model/``, ``reports/``, ``tensorboard/``, ``.workers/``, the marker, and the ``.tmp-``/``.old-`` siblings of an
atomic write of one of them), each removed whole and never through a symbolic link, and only in a marked folder.
Hydra's own files of the new run (``.hydra/``, ``<job>.log``) are kept. A folder that holds anything else (a user's
file, a folder, any symbolic link) is refused in one line naming one such entry, and nothing is deleted: with
``hydra.run.dir=.`` that is the working directory, which is never cleared.
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
import re
import shutil
from collections.abc import Collection

import tensorflow as tf

from tfsent.config import ConfigError
from tfsent.runtime import atomic
from tfsent.runtime.atomic import NotOursError
from tfsent.runtime.workers import BACKUP_DIR, WORKERS_DIR
from tfsent.training.callbacks import BEST_DIR, CHECKPOINT_META, CSV_FILE, LAST_DIR, REPORTS_DIR, TENSORBOARD_DIR

log = logging.getLogger(__name__)

MARKER = "tfsent_run.json"
MARKER_FORMAT = "tfsent.run/1"
METRICS_FILE = "metrics.json"
MODEL_DIR = "model"
# What Hydra writes into the run directory before train() starts (the job's config and log): the new run's, kept.
HYDRA_FILES = (".hydra", "train.log")
# Every top-level entry a run writes, and whether it is a folder.
ENTRIES = {BACKUP_DIR: True, BEST_DIR.split("/")[0]: True, CSV_FILE: False, METRICS_FILE: False, MODEL_DIR: True,
           REPORTS_DIR: True, TENSORBOARD_DIR: True, WORKERS_DIR: True, MARKER: False}
# The siblings tfsent.runtime.atomic writes before a rename: .tmp-<name>.pid<N>@<host>.<suffix>, .old-<name>...
_ATOMIC = re.compile(r"^\.(?:tmp|old)-(?P<name>.+?)\.pid\d+@")


def is_run_entry(entry: pathlib.Path) -> bool:
    """Whether ``entry`` (at the top of a run directory) is one a run writes: its name and kind, never a link."""
    if entry.is_symlink():
        return False
    temporary = _ATOMIC.match(entry.name)
    if temporary:
        return temporary.group("name") in ENTRIES
    return entry.name in ENTRIES and entry.is_dir() == ENTRIES[entry.name]


def claim(run_dir: pathlib.Path, *, overwrite: bool, resume: bool | str = True, may_clear: bool = True,
          keep: Collection[str] = HYDRA_FILES) -> bool:
    """Create the run directory; refuse one that holds a finished run unless ``overwrite`` (then clear it).

    A finished run (``metrics.json`` written) left its checkpoints, reports and per-epoch CSV behind; training into
    it again would mix two runs. A killed run has no ``metrics.json`` and resumes instead, unless ``resume`` says
    otherwise: False clears what it left, ``"last"`` drops its backup so that training restarts from
    ``checkpoints/last``.

    Args:
        run_dir: the run directory.
        overwrite: clear a finished run.
        resume: True, False or ``"last"`` (above).
        may_clear: this process deletes (the chief of a multi-worker run, or the only process).
        keep: entries of the new run that are not tfsent's to delete (Hydra's config folder and log file).

    Returns:
        Whether the run may :func:`mark` the folder: it is marked already, or holds no run entry (a new run's, or
        one just cleared). A killed run's folder of a tfsent before the marker resumes unmarked: what it holds was
        never proven to be a run's, so it never becomes clearable.

    Raises:
        ConfigError: ``run_dir`` holds a finished run and ``overwrite`` is false; ``resume=last`` without a
            ``checkpoints/last``.
        NotOursError: a clear was asked of a folder that holds entries a run does not write, or no marker.
    """
    if (run_dir / METRICS_FILE).is_file():
        if not overwrite:
            raise ConfigError(f"{run_dir}: holds a finished run ({METRICS_FILE}); pass overwrite=true to clear it "
                              "and train again, or choose another run directory")
        if may_clear:
            log.info("overwrite=true: clearing the finished run in %s", run_dir)
            clear(run_dir, keep=keep, asked="overwrite=true")
    elif resume is False and run_dir.is_dir() and any(e.name not in keep for e in run_dir.iterdir()):
        if may_clear:
            log.info("resume=false: clearing the unfinished run in %s", run_dir)
            clear(run_dir, keep=keep, asked="resume=false")
    elif resume == "last":
        last = run_dir / LAST_DIR
        if not (last / CHECKPOINT_META).is_file() or tf.train.latest_checkpoint(str(last)) is None:
            raise ConfigError(f"resume=last: {last} holds no checkpoint of a finished epoch; use resume=false")
        if may_clear:
            remove_backup(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    return _marked(run_dir) or not any(is_run_entry(e) for e in run_dir.iterdir())


def clear(run_dir: pathlib.Path, *, keep: Collection[str] = HYDRA_FILES, asked: str = "clearing") -> None:
    """Delete the entries a run wrote in ``run_dir``, keeping ``keep``; delete nothing unless all the rest is a
    run's and the folder is marked.

    Args:
        run_dir: the run directory.
        keep: entries left as they are (the new run's Hydra files).
        asked: the setting that asked for the clear, for the message.

    Raises:
        NotOursError: an entry a run does not write (named, with how many more), or no marker.
    """
    entries = sorted(e for e in run_dir.iterdir() if e.name not in keep)
    foreign = [e for e in entries if not is_run_entry(e)]
    fix = "move it out of the folder, or choose another hydra.run.dir"
    if foreign:
        first = foreign[0]
        what = "a symbolic link" if first.is_symlink() else "a folder" if first.is_dir() else "a file"
        more = f" (and {len(foreign) - 1} more)" if len(foreign) > 1 else ""
        raise NotOursError(f"{run_dir}: holds {first.name} ({what}){more}, which a training run does not write; "
                           f"{asked} deletes only a run's own files, so nothing was deleted", hint=fix)
    if entries and not _marked(run_dir):
        raise NotOursError(f"{run_dir}: holds {entries[0].name} but no {MARKER}, so no tfsent run marked the folder "
                           f"as its own; {asked} deletes only in a marked run directory, so nothing was deleted",
                           hint="delete the run's files yourself (a run directory of a tfsent before the marker), or "
                                "choose another hydra.run.dir")
    # The marker goes last: a clear cut short leaves a folder still marked, which the next clear finishes.
    for entry in sorted(entries, key=lambda e: e.name == MARKER):
        if entry.is_dir():
            shutil.rmtree(entry)  # removes links inside, never what they point to
        else:
            entry.unlink()


def mark(run_dir: pathlib.Path) -> None:
    """Write the marker into a run directory that has none; the loop calls it, where :func:`claim` allowed it, once
    the run's checks have passed, before the run writes anything there."""
    if os.path.lexists(run_dir / MARKER):
        return
    atomic.write_text(run_dir / MARKER, json.dumps({"format": MARKER_FORMAT, "entries": sorted(ENTRIES)}, indent=1)
                      + "\n")


def _marked(run_dir: pathlib.Path) -> bool:
    marker = run_dir / MARKER
    if marker.is_symlink() or not marker.is_file():
        return False
    try:
        return json.loads(marker.read_text()).get("format") == MARKER_FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def remove_backup(run_dir: pathlib.Path) -> None:
    """Delete the run's ``backup/`` (a finished run's, or one ``resume=last`` drops); a link there is removed as a
    link, never followed."""
    backup = run_dir / BACKUP_DIR
    if backup.is_symlink():
        backup.unlink()
    elif backup.is_dir():
        shutil.rmtree(backup)
