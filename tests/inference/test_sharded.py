"""Many hosts: shards predict contiguous slices into their own parts; the merge checks and joins them; two real
processes (num_shards, and TF_CONFIG workers with strategy=multi_worker) give the one-process output exactly."""

import json

import numpy as np
import pandas as pd
import pytest

from tfsent.inference import sharded
from tfsent.inference.driver import predict
from tfsent.inference.options import PredictOptions
from tfsent.inference.outputs import OutputError
from tfsent.inference.parts import FORMAT, MANIFEST

from fault_helpers import free_ports, launch, processes, tails, tf_config, wait_all
from helpers.tiny import tiny_checkpoint

KW = dict(strategy="cpu", global_batch_size=4, buckets=(16,), part_size=5, progress=False)


def test_shard_bounds_cover_every_row_once():
    assert [sharded.shard_bounds(10, 3, i) for i in range(3)] == [(0, 4), (4, 7), (7, 10)]
    assert [sharded.shard_bounds(1, 3, i) for i in range(3)] == [(0, 1), (1, 1), (1, 1)]
    for n in range(0, 30):
        for count in range(1, 6):
            rows = [r for i in range(count) for r in range(*sharded.shard_bounds(n, count, i))]
            assert rows == list(range(n))
    with pytest.raises(ValueError, match="worker index 2 outside 0..1"):
        sharded.shard_bounds(5, 2, 2)


def _fake_shard(out, i, count, lo, hi, total, fp="fp"):
    folder = sharded.parts_folder(out, i, count)
    folder.mkdir(exist_ok=True)
    (folder / MANIFEST).write_text(json.dumps({"format": FORMAT, "fingerprint": fp, "shard": i, "shards": count}))
    sharded.mark_complete(folder, lo, hi, total, 1)
    return folder


def test_merge_refuses_gaps_duplicates_missing_and_stale_shards(tmp_path):
    out = tmp_path / "merged.csv"
    _fake_shard(out, 0, 2, 0, 3, 4)
    _fake_shard(out, 1, 2, 2, 4, 4)
    with pytest.raises(OutputError, match=r"shard 1 \(.*shard-00001-of-00002.parts\) starts at unit 2, expected 3: "
                                          r"duplicated rows 2..2"):
        sharded.check_shards(out, 2, "fp")
    _fake_shard(out, 1, 2, 3, 4, 4, fp="other")
    with pytest.raises(OutputError, match=r"stale shard 1: .*shard-00001-of-00002.parts/manifest.json was written "
                                          r"for another input or setting"):
        sharded.check_shards(out, 2, "fp")
    (sharded.parts_folder(out, 1, 2) / sharded.COMPLETE).unlink()
    with pytest.raises(OutputError, match=r"shard 1 of 2 is unfinished: .*shard-00001-of-00002.parts"):
        sharded.check_shards(out, 2, "fp")
    with pytest.raises(OutputError, match=r"shard 2 of 3 is missing: .*shard-00002-of-00003.parts"):
        _fake_shard(out, 0, 3, 0, 2, 4)
        _fake_shard(out, 1, 3, 2, 3, 4)
        for p in tmp_path.glob("*of-00002.parts"):
            p.rename(p.with_name("x" + p.name))
        sharded.check_shards(out, 3, "fp")
    _fake_shard(out, 1, 2, 3, 4, 4)
    with pytest.raises(OutputError, match=r"duplicated shard\(s\): .*merged.csv.shard-00001-of-00002.parts belong "
                                          r"to a run with another shard count"):
        sharded.check_shards(out, 3, "fp")
    assert not out.exists()


@pytest.fixture(scope="module")
def tiny_ckpt(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "model", max_seq_length=64)


def _same(merged: pd.DataFrame, single: pd.DataFrame) -> None:
    assert list(merged.columns) == list(single.columns)
    pd.testing.assert_frame_equal(merged.drop(columns=[c for c in merged if c.startswith("prob_")]),
                                  single.drop(columns=[c for c in single if c.startswith("prob_")]))
    np.testing.assert_allclose(merged.filter(like="prob_").to_numpy(), single.filter(like="prob_").to_numpy(),
                               rtol=1e-5, atol=1e-6)


def test_two_shards_then_merge_equal_one_run(tiny_ckpt, tmp_path):
    texts = [f"line {i}: revenue {'rose' if i % 3 else 'fell'} by {i} percent" for i in range(23)]
    (tmp_path / "in.csv").write_text("text,key\n" + "".join(f"{t},k{i}\n" for i, t in enumerate(texts)))
    out = tmp_path / "merged.jsonl"
    one = predict(tiny_ckpt, tmp_path / "in.csv", out, PredictOptions(**KW, id_column="key", num_shards=2,
                                                                      shard_index=1))
    # 23 rows split evenly, whatever the parts: shard 0 takes rows 0..11, shard 1 rows 12..22 (in parts of 5).
    assert (one["lo"], one["hi"], one["rows"], one["parts"]) == (12, 23, 11, 3) and not out.exists()
    with pytest.raises(OutputError, match=r"shard 0 of 2 is missing: .*merged.jsonl.shard-00000-of-00002.parts"):
        predict(tiny_ckpt, tmp_path / "in.csv", out, PredictOptions(**KW, id_column="key", num_shards=2, merge=True))
    zero = predict(tiny_ckpt, tmp_path / "in.csv", out, PredictOptions(**KW, id_column="key", num_shards=2,
                                                                       shard_index=0))
    assert (zero["lo"], zero["hi"]) == (0, 12) and not out.exists()
    merged = predict(tiny_ckpt, tmp_path / "in.csv", out, PredictOptions(**KW, id_column="key", num_shards=2,
                                                                         merge=True))
    assert merged["rows"] == 23
    assert not list(tmp_path.glob("*.parts"))
    predict(tiny_ckpt, tmp_path / "in.csv", tmp_path / "single.jsonl", PredictOptions(**KW, id_column="key"))
    frame = pd.read_json(out, lines=True)
    assert frame["row"].tolist() == list(range(23)) and frame["id"].tolist() == [f"k{i}" for i in range(23)]
    _same(frame, pd.read_json(tmp_path / "single.jsonl", lines=True))


CLI = ["strategy=cpu", "global_batch_size=4", "buckets=[16]", "part_size=8", "progress=false"]


def _cli_single(ckpt, src, tmp_path):
    single = tmp_path / "single.csv"
    logs = [tmp_path / "single.log"]
    with processes() as procs:
        procs.append(launch(["-m", "tfsent.predict", f"ckpt_path={ckpt}", f"input={src}", f"output={single}", *CLI,
                             f"hydra.run.dir={tmp_path / 'h-single'}"], logs[0]))
        assert wait_all(procs, 900, logs) == [0], tails(logs)
    return pd.read_csv(single)


def _input(tmp_path, n=37):
    src = tmp_path / "in.txt"
    src.write_text("".join(f"sentence {i} on margins and {'growth' if i % 2 else 'losses'}\n" for i in range(n)))
    return src


@pytest.mark.slow
def test_two_processes_with_num_shards_then_merge_equal_one_process(tiny_ckpt, tmp_path):
    src, out = _input(tmp_path), tmp_path / "scores.csv"
    base = ["-m", "tfsent.predict", f"ckpt_path={tiny_ckpt}", f"input={src}", f"output={out}", *CLI]
    logs = [tmp_path / f"shard{i}.log" for i in range(2)] + [tmp_path / "merge.log"]
    with processes() as procs:
        for i in range(2):
            procs.append(launch([*base, "num_shards=2", f"shard_index={i}", f"hydra.run.dir={tmp_path / f'h{i}'}"],
                                logs[i]))
        assert wait_all(procs, 900, logs) == [0, 0], tails(logs)
        assert not out.exists()
        procs.append(launch([*base, "num_shards=2", "merge=true", f"hydra.run.dir={tmp_path / 'hm'}"], logs[2]))
        assert wait_all(procs[2:], 900, logs) == [0], tails(logs)
    _same(pd.read_csv(out), _cli_single(tiny_ckpt, src, tmp_path))
    assert not list(tmp_path.glob("*.parts"))


@pytest.mark.slow
def test_two_tf_config_workers_with_multi_worker_strategy_equal_one_process(tiny_ckpt, tmp_path):
    src, out = _input(tmp_path), tmp_path / "scores.csv"
    ports = free_ports(2)
    logs = [tmp_path / f"worker{i}.log" for i in range(2)]
    with processes() as procs:
        for i in range(2):
            procs.append(launch(["-m", "tfsent.predict", f"ckpt_path={tiny_ckpt}", f"input={src}", f"output={out}",
                                 *CLI[1:], "strategy=multi_worker", f"hydra.run.dir={tmp_path / f'h{i}'}"], logs[i],
                                TF_CONFIG=tf_config(ports, i)))
        assert wait_all(procs, 900, logs) == [0, 0], tails(logs)
    frame = pd.read_csv(out)
    assert frame["row"].tolist() == list(range(37))
    _same(frame, _cli_single(tiny_ckpt, src, tmp_path))
    assert not list(tmp_path.glob("*.parts"))


def test_shards_split_the_rows_evenly_whatever_the_part_size(tiny_ckpt, tmp_path):
    # 7 rows in one part of 100,000: each shard still gets its share.
    (tmp_path / "in.txt").write_text("".join(f"line {i} about costs\n" for i in range(7)))
    out = tmp_path / "out.csv"
    options = dict(KW, part_size=100_000)
    slices = [predict(tiny_ckpt, tmp_path / "in.txt", out, PredictOptions(**options, num_shards=3, shard_index=i))
              for i in (2, 1, 0)]
    assert [(s["lo"], s["hi"], s["rows"], s["units"]) for s in slices] == [
        (5, 7, 2, "rows"), (3, 5, 2, "rows"), (0, 3, 3, "rows")]
    merged = predict(tiny_ckpt, tmp_path / "in.txt", out, PredictOptions(**options, num_shards=3, merge=True))
    assert merged["rows"] == 7
    predict(tiny_ckpt, tmp_path / "in.txt", tmp_path / "single.csv", PredictOptions(**options))
    _same(pd.read_csv(out), pd.read_csv(tmp_path / "single.csv"))


def test_a_shard_without_rows_says_so_in_one_line_and_merges(tiny_ckpt, tmp_path, caplog):
    (tmp_path / "in.txt").write_text("line 0 about costs\nline 1 about sales\n")
    out = tmp_path / "out.csv"
    with caplog.at_level("WARNING", logger="tfsent.inference.driver"):
        empty = predict(tiny_ckpt, tmp_path / "in.txt", out, PredictOptions(**KW, num_shards=3, shard_index=2))
    assert (empty["lo"], empty["hi"], empty["rows"]) == (2, 2, 0)
    assert [r.getMessage() for r in caplog.records] == [
        "shard 2 of 3 has no rows to predict: the input has 2 rows for 3 shards"]
    for i in (1, 0):
        assert predict(tiny_ckpt, tmp_path / "in.txt", out, PredictOptions(**KW, num_shards=3,
                                                                           shard_index=i))["rows"] == 1
    merged = predict(tiny_ckpt, tmp_path / "in.txt", out, PredictOptions(**KW, num_shards=3, merge=True))
    assert merged["rows"] == 2 and pd.read_csv(out)["row"].tolist() == [0, 1]
