"""Multi-worker training: two real worker processes on loopback ports train to the same weights as one process with
the same global batch. (Prediction over many hosts: tests/inference/test_sharded.py.)"""

import json
import pathlib

import numpy as np
import pandas as pd
import pytest

from tfsent.runtime.workers import worker_info, write_dir

from fault_helpers import free_ports, launch, processes, tails, tf_config, wait_all

# Same function on 1 and 2 replicas: no dropout, no shuffle (buffer 1), one train shard so that the two workers'
# pipelines take alternate records and each global batch holds the same 16 records as the single process's.
TRAIN = ["+experiment=finbert_tone_tiny", "model.hidden_dropout=0.0", "model.attention_dropout=0.0",
         "model.classifier_dropout=0.0", "optimizer.learning_rate=3e-3", "optimizer.dft_rate=1.0",
         "trainer.shuffle_buffer=1", "trainer.jit_compile=false", "trainer.steps_per_execution=1",
         "trainer.steps_per_epoch=3", "trainer.global_batch_size=16", "trainer.eval_batch_size=16",
         "callbacks.tensorboard=false", "data.num_shards={train:1,validation:1,test:1}"]


def _weights(model_dir: pathlib.Path) -> dict[str, np.ndarray]:
    import h5py

    out = {}
    with h5py.File(model_dir / "tf_model.h5") as f:
        f.visititems(lambda name, obj: out.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None)
    return out


def _losses(run: pathlib.Path) -> list[float]:
    return pd.read_csv(run / "metrics.csv")["loss"].tolist()


@pytest.mark.slow
def test_two_workers_train_like_one_process(tmp_path):
    prepared = tmp_path / "prepared"
    single, run = tmp_path / "single", tmp_path / "multi"
    common = [*TRAIN, f"paths.prepared_dir={prepared}"]
    logs = [tmp_path / "single.log"]
    # Prepare once first, so the workers do not race to write the same dataset.
    with processes() as procs:
        procs.append(launch(["-m", "tfsent.train", *common, "strategy=cpu", f"hydra.run.dir={single}"], logs[0]))
        assert wait_all(procs, 900, logs) == [0], tails(logs)
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
    one, two = _weights(single / "model"), _weights(run / "model")
    assert one.keys() == two.keys() and one
    for name in one:
        np.testing.assert_allclose(two[name], one[name], rtol=1e-4, atol=2e-5, err_msg=name)
    # Only the chief wrote the run directory; the other worker's files went to its scratch folder.
    assert (run / "model" / "tf_model.h5").is_file() and (dirs[1] / "metrics.json").is_file()
    assert sorted(p.name for p in (run / ".workers").iterdir()) == ["worker-1"]
