"""Worker roles from TF_CONFIG and chief-only writes (tfsent.runtime.workers)."""

import json

import pytest

from tfsent.runtime.workers import WorkerConfigError, WorkerInfo, worker_info, write_dir

from fault_helpers import tf_config


def test_worker_info_from_tf_config():
    assert worker_info("") == WorkerInfo(0, 1, True)
    assert worker_info(tf_config([1, 2, 3], 0)) == WorkerInfo(0, 3, True)
    assert worker_info(tf_config([1, 2, 3], 2)) == WorkerInfo(2, 3, False)
    with_chief = json.dumps({"cluster": {"chief": ["h:1"], "worker": ["h:2", "h:3"]},
                             "task": {"type": "worker", "index": 0}})
    assert worker_info(with_chief) == WorkerInfo(1, 3, False)
    with pytest.raises(WorkerConfigError, match=r"TF_CONFIG task worker:5 is not in its cluster \['worker'\]"):
        worker_info(tf_config([1, 2], 5))
    with pytest.raises(WorkerConfigError, match=r"TF_CONFIG is malformed \(KeyError: 'task'\)"):
        worker_info(json.dumps({"cluster": {"worker": ["h:1"]}}))


def test_only_the_chief_writes_the_run_dir(tmp_path):
    run = tmp_path / "run"
    assert write_dir(run, WorkerInfo(0, 2, True)) == run
    scratch = write_dir(run, WorkerInfo(1, 2, False))
    assert scratch == run / ".workers" / "worker-1"
    # BackupAndRestore state stays shared: Keras reads <backup>/chief on every worker when it restarts.
    assert (scratch / "backup").is_symlink() and (scratch / "backup").resolve() == (run / "backup").resolve()
    assert write_dir(run, WorkerInfo(1, 2, False)) == scratch  # idempotent on a restart
