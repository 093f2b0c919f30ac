"""A model's LiteRT conversion in a background process, started by a job that scored on TensorFlow instead
(:mod:`tfsent.inference.conversion_policy`), so that the next job finds the model converted.

The job that starts it holds ``converting.lock`` in the model's LiteRT cache folder (created exclusively: two jobs
never convert the same model at once; a lock whose process is gone, or older than :data:`STALE_S`, is taken over).
The background process runs at a lower priority, in its own session (it outlives the job's process and is not hit
by its terminal's signals), writes ``conversion.log`` beside the lock, converts exactly what the job's own LiteRT
run would have converted (through the same predictor, so the same cache key and checks), and removes the lock
whatever happens. Its conversions are written atomically like every cache file: a killed conversion leaves none.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import pathlib
import subprocess
import sys
import time

log = logging.getLogger(__name__)

LOCK = "converting.lock"
LOG = "conversion.log"
# A conversion takes under two minutes for BERT-base on 2 cores: a lock this old is a process that died badly.
STALE_S = 1800.0
NICE = 10


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a finished child its parent has not reaped yet (a notebook that started it) is a zombie, not alive
        return pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _stale(lock: pathlib.Path) -> bool:
    try:
        held = json.loads(lock.read_text())
        pid = int(held["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        # Unreadable: being written this instant, or damaged; age decides.
        try:
            return time.time() - lock.stat().st_mtime > STALE_S
        except OSError:
            return True
    return not _alive(pid) or time.time() - float(held.get("started", 0)) > STALE_S


def _take(lock: pathlib.Path) -> bool:
    """Create the lock exclusively (taking over a stale one); False when another process holds it."""
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            if not _stale(lock):
                return False
            lock.unlink(missing_ok=True)
            continue
        os.close(fd)
        return True
    return False


def wait(folder: pathlib.Path, poll_s: float = 1.0) -> None:
    """Wait while another process converts the model (a job about to convert it itself reads its files instead)."""
    lock = pathlib.Path(folder) / LOCK
    if not lock.exists() or _stale(lock):
        return
    log.info("LiteRT: waiting for the conversion already running (%s)", folder / LOG)
    while lock.exists() and not _stale(lock):
        time.sleep(poll_s)


def start(folder: pathlib.Path, ckpt_path: pathlib.Path, kind: str, settings: dict, packs: bool) -> int | None:
    """Start converting the model in the background; its pid, or None (another process is converting it, or the
    cache folder cannot be written: the next job then decides again).

    Args:
        folder: the model's LiteRT cache folder.
        ckpt_path: the checkpoint.
        kind: its model kind.
        settings: the converter settings of its cache key (a QA model's ``top_k``).
        packs: convert the packed signature too (a classifier whose rows may be packed).
    """
    folder, ckpt_path = pathlib.Path(folder).resolve(), pathlib.Path(ckpt_path).resolve()
    lock = folder / LOCK
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if not _take(lock):
            log.info("LiteRT: another process is converting %s", ckpt_path)
            return None
        with open(folder / LOG, "w", encoding="utf-8") as out:
            child = subprocess.Popen(
                [sys.executable, "-m", __name__, str(ckpt_path), kind, json.dumps(settings),
                 "packed" if packs else "padded", str(lock)],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                close_fds=True)
        lock.write_text(json.dumps({"pid": child.pid, "started": time.time(), "ckpt": str(ckpt_path)}))
    except OSError as e:
        lock.unlink(missing_ok=True)
        log.warning("LiteRT: the background conversion of %s did not start (%s)", ckpt_path, e.strerror or e)
        return None
    log.info("LiteRT: converting %s in the background (pid %d, log %s); the next job scores on it", ckpt_path,
             child.pid, folder / LOG)
    return child.pid


def convert(ckpt_path: pathlib.Path, kind: str, settings: dict, packs: bool) -> None:
    """What a job's first LiteRT run converts: the padded signature, and the packed one where rows may pack."""
    from tfsent.inference.options import PredictOptions, QAOptions
    from tfsent.inference.predictor import load_predictor

    options = PredictOptions(qa=QAOptions(n_best=int(settings["top_k"]))) if "top_k" in settings else PredictOptions()
    predictor = load_predictor(ckpt_path, None, max_length=None, jit_compile=None, steps_per_execution=1,
                               options=options)
    if packs:
        predictor.model.supports("packed")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Convert a model for LiteRT (started by tfsent.predict)")
    parser.add_argument("ckpt_path", type=pathlib.Path)
    parser.add_argument("kind")
    parser.add_argument("settings", type=json.loads)
    parser.add_argument("signatures", choices=["packed", "padded"], help="packed: the padded one and the packed")
    parser.add_argument("lock", type=pathlib.Path)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    began = time.perf_counter()
    try:
        os.nice(NICE)
        convert(args.ckpt_path, args.kind, args.settings, args.signatures == "packed")
        log.info("converted %s in %.1f s", args.ckpt_path, time.perf_counter() - began)
        return 0
    except Exception:  # the log is the only reader: record what failed; the next job decides again
        log.exception("conversion of %s failed", args.ckpt_path)
        return 1
    finally:
        args.lock.unlink(missing_ok=True)


if __name__ == "__main__":
    sys.exit(main())
