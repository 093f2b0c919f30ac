"""This process's role in a cluster, from ``TF_CONFIG``, and the folder it may write.

Every worker of a multi-worker run takes part in every checkpoint save (reading a sync-on-read variable such as a
metric is a collective op), but only the chief may write the run directory. :func:`write_dir` gives the chief the
run directory and any other worker a private scratch folder ``<run_dir>/.workers/worker-<i>/`` (the standard Keras
pattern) whose ``backup`` entry links back to the shared ``<run_dir>/backup``: Keras's ``BackupAndRestore`` already
splits that folder into ``chief/`` (read by every worker on restart) and ``workertemp_<i>/``, so a killed
multi-worker run resumes on every worker from the chief's state.

Free of TensorFlow, so prediction's sharding and the strategy factory can both use it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib

from tfsent.errors import UserError

WORKERS_DIR = ".workers"
BACKUP_DIR = "backup"


class WorkerConfigError(UserError):
    """``TF_CONFIG`` is malformed."""


@dataclasses.dataclass(frozen=True)
class WorkerInfo:
    """This process's place in the cluster: ``index`` of ``count`` workers; the chief writes shared outputs."""

    index: int = 0
    count: int = 1
    is_chief: bool = True


def worker_info(tf_config: str | None = None) -> WorkerInfo:
    """Read the worker index and count from ``TF_CONFIG`` (the environment's, unless given).

    The chief is the ``chief`` task when the cluster has one, else worker 0 (MultiWorkerMirroredStrategy's rule).
    Without ``TF_CONFIG`` the process is the only worker.

    Raises:
        WorkerConfigError: ``TF_CONFIG`` is not JSON, or lacks ``cluster`` / ``task``, or names a task outside the cluster.
    """
    raw = os.environ.get("TF_CONFIG") if tf_config is None else tf_config
    if not raw:
        return WorkerInfo()
    try:
        config = json.loads(raw)
        cluster, task = config["cluster"], config["task"]
        kind, index = str(task["type"]), int(task["index"])
    except (ValueError, KeyError, TypeError) as e:
        raise WorkerConfigError(f"TF_CONFIG is malformed ({type(e).__name__}: {e}); expected "
                         '{"cluster": {"worker": [...]}, "task": {"type": "worker", "index": i}}') from None
    order = [("chief", i) for i in range(len(cluster.get("chief", [])))] + \
            [("worker", i) for i in range(len(cluster.get("worker", [])))]
    if (kind, index) not in order:
        raise WorkerConfigError(f"TF_CONFIG task {kind}:{index} is not in its cluster {sorted(cluster)}")
    return WorkerInfo(order.index((kind, index)), len(order), order.index((kind, index)) == 0)


def write_dir(run_dir: str | os.PathLike, info: WorkerInfo | None = None) -> pathlib.Path:
    """The folder this worker writes its run files to: ``run_dir`` on the chief, a private scratch elsewhere.

    The scratch folder's ``backup`` is a link to ``run_dir/backup`` so that BackupAndRestore state stays shared.

    Args:
        run_dir: the run directory every worker was given (on storage all workers see).
        info: this worker; default: from ``TF_CONFIG``.

    Returns:
        The folder (created).
    """
    info = info or worker_info()
    run_dir = pathlib.Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    if info.is_chief:
        return run_dir
    scratch = run_dir / WORKERS_DIR / f"worker-{info.index}"
    scratch.mkdir(parents=True, exist_ok=True)
    (run_dir / BACKUP_DIR).mkdir(exist_ok=True)
    link = scratch / BACKUP_DIR
    if not link.is_symlink():
        link.symlink_to(os.path.relpath(run_dir / BACKUP_DIR, scratch), target_is_directory=True)
    return scratch
