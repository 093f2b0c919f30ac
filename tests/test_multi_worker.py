"""Multi-worker training: two real worker processes on loopback ports train to the same weights as one process with
the same global batch. (Prediction over many hosts: tests/inference/test_sharded.py.)"""

import json
import pathlib

import numpy as np
import pandas as pd
import pytest

from tfsent.runtime.workers import worker_info, write_dir

from fault_helpers import (SAME_FUNCTION_TRAIN as TRAIN, assert_same_model, free_ports, launch, processes, tails,
                           tf_config, train_to_the_end, wait_all)


def _losses(run: pathlib.Path) -> list[float]:
    return pd.read_csv(run / "metrics.csv")["loss"].tolist()


@pytest.mark.slow
def test_two_workers_train_like_one_process(tmp_path):
    prepared = tmp_path / "prepared"
    single, run = tmp_path / "single", tmp_path / "multi"
    common = [*TRAIN, f"paths.prepared_dir={prepared}"]
    logs = [tmp_path / "single.log"]
    # Prepare once first, so the workers do not race to write the same dataset.
    train_to_the_end([*common, "strategy=cpu", f"hydra.run.dir={single}"], logs[0])
    ports = free_ports(2)
    dirs = [write_dir(run, worker_info(tf_config(ports, i))) for i in range(2)]
    logs += [tmp_path / f"worker{i}.log" for i in range(2)]
    with processes() as procs:
        for i in range(2):
            # Every worker gets the same run directory, as on a pod; tfsent.train sends non-chief files to scratch.
            procs.append(launch(["-m", "tfsent.train", *common, "strategy=multi_worker", f"hydra.run.dir={run}"],
                                logs[1 + i], TF_CONFIG=tf_config(ports, i)))
        assert wait_all(procs, 1200, logs) == [0, 0], tails(logs)

    chief = json.loads((run / "metrics.json").read_text())
    assert chief["replicas"] == 2 and chief["steps_per_epoch"] == 3
    ref = json.loads((single / "metrics.json").read_text())
    print(f"\nlosses: single {_losses(single)}  two workers {_losses(run)}; "
          f"test_loss single {ref['test_loss']:.6f} two workers {chief['test_loss']:.6f}")
    np.testing.assert_allclose(_losses(run), _losses(single), rtol=1e-4)
    assert chief["test_loss"] == pytest.approx(ref["test_loss"], rel=1e-4)
    assert_same_model(run / "model", single / "model")
    # Only the chief wrote the run directory; the other worker's files went to its scratch folder.
    assert (run / "model" / "tf_model.h5").is_file() and (dirs[1] / "metrics.json").is_file()
    assert sorted(p.name for p in (run / ".workers").iterdir()) == ["worker-1"]
