"""Multi-worker: TF_CONFIG roles, chief-only writes, predict sharded across workers, and two real worker processes
on loopback ports training to the same weights as one process with the same global batch."""

import json
import pathlib

import numpy as np
import pandas as pd
import pytest

from tfsent import multi_worker as mw
from tfsent.models import load_tokenizer
from helpers.tiny import tiny_checkpoint
from tfsent.outputs import OutputError
from tfsent.predict import predict
from tfsent.runtime.workers import WorkerInfo, worker_info, write_dir

from fault_helpers import free_ports, launch, processes, tails, tf_config, wait_all

LABELS = ["negative", "neutral", "positive"]


def test_shard_bounds_cover_every_row_once():
    assert [mw.shard_bounds(10, 3, i) for i in range(3)] == [(0, 4), (4, 7), (7, 10)]
    assert [mw.shard_bounds(1, 3, i) for i in range(3)] == [(0, 1), (1, 1), (1, 1)]
    for n in range(0, 30):
        for count in range(1, 6):
            rows = [r for i in range(count) for r in range(*mw.shard_bounds(n, count, i))]
            assert rows == list(range(n))
    with pytest.raises(ValueError, match="worker index 2 outside 0..1"):
        mw.shard_bounds(5, 2, 2)


def test_merge_shards_refuses_gaps_and_duplicates(tmp_path):
    out = tmp_path / "merged.csv"
    for i, ids in enumerate([[0, 1], [2, 2]]):
        path = mw.shard_path(out, i, 2)
        path.parent.mkdir(exist_ok=True)
        pd.DataFrame({"row": [0, 1], "id": [str(k) for k in ids], "label": ["a", "b"]}).to_parquet(path)
    with pytest.raises(OutputError, match=r"shards hold 4 rows, expected ids 0..3 each exactly once"):
        mw.merge_shards(out, 2, 4)
    mw.shard_path(out, 1, 2).unlink()
    with pytest.raises(OutputError, match=r"1 of 2 worker shard\(s\) missing: .*shard-00001-of-00002.parquet"):
        mw.merge_shards(out, 2, 4)
    assert not out.exists()


@pytest.fixture(scope="module")
def tiny_ckpt(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "model", max_seq_length=64)


def test_predict_sharded_over_two_workers_equals_one_run(tiny_ckpt, tmp_path):
    texts = [f"line {i}: revenue {'rose' if i % 3 else 'fell'} by {i} percent" for i in range(23)]
    (tmp_path / "in.csv").write_text("text,key\n" + "".join(f"{t},k{i}\n" for i, t in enumerate(texts)))
    kw = dict(strategy="cpu", global_batch_size=4, buckets=(16,), part_size=5, progress=False)
    out = tmp_path / "merged.jsonl"
    # Worker 1 first: the chief's merge then finds every shard without waiting.
    one = mw.predict_sharded(tiny_ckpt, tmp_path / "in.csv", out, info=WorkerInfo(1, 2, False), **kw)
    assert (one["lo"], one["hi"], one["rows"]) == (12, 23, 11) and not out.exists()
    chief = mw.predict_sharded(tiny_ckpt, tmp_path / "in.csv", out, info=WorkerInfo(0, 2, True), wait_s=0, **kw)
    assert (chief["lo"], chief["hi"], chief["merged_rows"]) == (0, 12, 23)
    merged = pd.read_json(out, lines=True)
    assert merged["row"].tolist() == list(range(23))
    assert not (tmp_path / "merged.jsonl.workers").exists()

    predict(tiny_ckpt, tmp_path / "in.csv", tmp_path / "single.jsonl", **kw)
    single = pd.read_json(tmp_path / "single.jsonl", lines=True)
    assert list(merged.columns) == list(single.columns)
    pd.testing.assert_frame_equal(merged.drop(columns=[c for c in merged if c.startswith("prob_")]),
                                  single.drop(columns=[c for c in single if c.startswith("prob_")]))
    np.testing.assert_allclose(merged.filter(like="prob_").to_numpy(), single.filter(like="prob_").to_numpy(),
                               rtol=1e-5, atol=1e-6)


# ---- real worker processes -----------------------------------------------------------------------------------

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


@pytest.mark.slow
def test_two_worker_processes_predict_sharded_input(tiny_ckpt, tmp_path):
    n = 37
    (tmp_path / "in.txt").write_text("".join(f"sentence {i} on margins and {'growth' if i % 2 else 'losses'}\n"
                                             for i in range(n)))
    out = tmp_path / "scores.csv"
    ports = free_ports(2)
    code = ("import sys, json; from tfsent.multi_worker import predict_sharded; "
            "s = predict_sharded(sys.argv[1], sys.argv[2], sys.argv[3], strategy='cpu', global_batch_size=4, "
            "buckets=(16,), part_size=8, progress=False, wait_s=600); print('SUMMARY', json.dumps(s, default=str))")
    logs = [tmp_path / f"worker{i}.log" for i in range(2)]
    with processes() as procs:
        for i in range(2):
            procs.append(launch(["-c", code, str(tiny_ckpt), str(tmp_path / "in.txt"), str(out)], logs[i],
                                TF_CONFIG=tf_config(ports, i)))
        assert wait_all(procs, 900, logs) == [0, 0], tails(logs)
    frame = pd.read_csv(out)
    assert frame["row"].tolist() == list(range(n))
    assert frame["n_tokens"].tolist() == [len(load_tokenizer(tiny_ckpt)(line)["input_ids"])
                                          for line in (tmp_path / "in.txt").read_text().splitlines()]
    assert not (tmp_path / "scores.csv.workers").exists()
