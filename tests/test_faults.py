"""Real faults: SIGKILL a training or prediction process at seeded random points, re-run it, check the result.

Training resumes through BackupAndRestore (backups every step) and must end with exactly the planned number of
optimizer updates; prediction resumes from its finished parts and must write every row exactly once, in order,
with the same scores as an uninterrupted run. Each test kills its process 5 times and prints where each kill
landed. Kill points are drawn from a seeded generator as "after the k-th new backup / finished part, plus a
random delay", so they land at different points of a step or a part write, yet never depend on machine speed to
land at all.
"""

import json
import pathlib
import random
import time

import numpy as np
import pandas as pd
import pytest
import tensorflow as tf

from helpers.tiny import tiny_checkpoint
from tfsent.inference.driver import predict
from tfsent.inference.options import PredictOptions

from fault_helpers import checkpoint_files, kill, launch, processes, read_step, tails, wait_all, wait_for

KILLS = 5
SEED = 7
LABELS = ["negative", "neutral", "positive"]

TRAIN = ["+experiment=finbert_tone_tiny", "strategy=cpu", "trainer.jit_compile=false",
         "trainer.steps_per_execution=1", "trainer.epochs=2", "trainer.steps_per_epoch=12",
         "trainer.global_batch_size=16", "trainer.eval_batch_size=32", "callbacks.backup_save_freq=1",
         "callbacks.tensorboard=false", "data.num_shards={train:1,validation:1,test:1}"]
PLANNED_UPDATES = 2 * 12


def _report(title: str, rows: list[dict]) -> None:
    print(f"\n{title}: {len(rows)} kills")
    for i, r in enumerate(rows, 1):
        print(f"  kill {i}: " + ", ".join(f"{k}={v}" for k, v in r.items()))


@pytest.mark.slow
def test_training_survives_sigkill_and_ends_with_planned_updates(tmp_path):
    rng = random.Random(SEED)
    run = tmp_path / "run"
    args = ["-m", "tfsent.train", *TRAIN, f"paths.prepared_dir={tmp_path / 'prepared'}", f"hydra.run.dir={run}"]
    backup = run / "backup" / "chief"
    logs: list[pathlib.Path] = []
    landed = []
    with processes() as procs:
        for k in range(KILLS):
            logs.append(tmp_path / f"attempt{k}.log")
            before = read_step(tf.train.latest_checkpoint(str(backup))) if checkpoint_files(backup) else 0
            seen = checkpoint_files(backup)
            new_backups, delay = rng.randint(1, 2), round(rng.uniform(0.0, 0.6), 2)
            proc = launch(args, logs[-1])
            procs.append(proc)
            # A backup replaces the previous one (max_to_keep=1): count distinct checkpoint names seen.
            names = set(seen)

            def backed_up(names=names, seen=seen, n=new_backups):
                names |= checkpoint_files(backup)
                return len(names - seen) >= n

            reached = wait_for(backed_up, proc, timeout=900)
            time.sleep(delay)
            alive = proc.poll() is None
            kill(proc)
            in_fit = bool(checkpoint_files(backup))  # fit() deletes its backup when it completes
            after = read_step(tf.train.latest_checkpoint(str(backup))) if in_fit else 0
            landed.append({"resumed_from_update": before, "after_new_backups": new_backups, "delay_s": delay,
                           "killed_while_running": alive and reached, "phase": "fit" if in_fit else "after fit",
                           "backup_update_at_kill": after})
            assert alive and reached, f"attempt {k} ended before its kill point\n{tails(logs)}"
        logs.append(tmp_path / "final.log")
        procs.append(launch(args, logs[-1]))
        assert wait_all(procs[-1:], 900, logs) == [0], tails(logs)
    _report("training", landed)

    # Every kill landed in a running process, and each attempt resumed from the backup the previous one left. A kill
    # after fit() (during the test evaluation or the export) finds no backup, so that attempt starts over.
    assert all(r["killed_while_running"] for r in landed)
    assert [r["resumed_from_update"] for r in landed[1:]] == [r["backup_update_at_kill"] for r in landed[:-1]]
    assert all(0 < r["backup_update_at_kill"] < PLANNED_UPDATES for r in landed if r["phase"] == "fit")
    resumed = [line for line in logs[-1].read_text().splitlines() if "training finbert_tone_tiny" in line]
    assert resumed, tails(logs[-1:])
    assert read_step(tf.train.latest_checkpoint(str(run / "checkpoints" / "last"))) == PLANNED_UPDATES
    metrics = json.loads((run / "metrics.json").read_text())
    assert (metrics["updates"], metrics["epochs"], metrics["steps_per_epoch"]) == (PLANNED_UPDATES, 2, 12)
    assert sorted(set(pd.read_csv(run / "metrics.csv")["epoch"])) == [0, 1]
    assert not checkpoint_files(backup)  # fit() completed and deleted its backup
    assert (run / "model" / "tf_model.h5").is_file()


@pytest.fixture(scope="module")
def tiny_ckpt(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "model", max_seq_length=64, labels=LABELS)


@pytest.mark.slow
def test_prediction_survives_sigkill_with_every_row_once(tiny_ckpt, tmp_path):
    rng = random.Random(SEED)
    n, part_size = 960, 6  # many short parts, so a kill up to 3 parts + 1.5 s after its mark still lands mid-run
    n_parts = n // part_size
    words = "revenue profit loss growth decline quarter guidance margin sales costs strong weak".split()
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) + f" {i}" for i in range(n)]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    out = tmp_path / "scores.csv"
    parts = tmp_path / "scores.csv.parts"
    args = ["-m", "tfsent.predict", f"ckpt_path={tiny_ckpt}", f"input={tmp_path / 'in.txt'}", f"output={out}",
            "strategy=cpu", "global_batch_size=4", "buckets=[16]", f"part_size={part_size}", "progress=false",
            f"hydra.run.dir={tmp_path / 'hydra'}"]

    def done() -> int:
        return len(list(parts.glob("rows-*.parquet")))

    logs: list[pathlib.Path] = []
    landed = []
    with processes() as procs:
        for k in range(KILLS):
            logs.append(tmp_path / f"attempt{k}.log")
            before = done()
            target, delay = before + rng.randint(1, 3), round(rng.uniform(0.0, 1.5), 2)
            proc = launch(args, logs[-1])
            procs.append(proc)
            reached = wait_for(lambda: done() >= target, proc, timeout=600)
            time.sleep(delay)
            alive = proc.poll() is None
            kill(proc)
            landed.append({"parts_done_at_start": before, "kill_after_part": target, "delay_s": delay,
                           "killed_while_running": alive and reached, "parts_done_at_kill": done(),
                           "stray_temp_files": len(list(parts.glob(".*")))})
            assert alive and reached, f"attempt {k} ended before its kill point\n{tails(logs)}"
            assert not out.exists()
        logs.append(tmp_path / "final.log")
        procs.append(launch(args, logs[-1]))
        assert wait_all(procs[-1:], 600, logs) == [0], tails(logs)
    _report("prediction", landed)

    assert all(r["killed_while_running"] for r in landed)
    assert [r["parts_done_at_start"] for r in landed[1:]] == [r["parts_done_at_kill"] for r in landed[:-1]]
    assert landed[-1]["parts_done_at_kill"] < n_parts
    frame = pd.read_csv(out)
    assert frame["row"].tolist() == list(range(n))
    assert not parts.exists()
    reference = tmp_path / "reference.csv"
    predict(tiny_ckpt, tmp_path / "in.txt", reference, PredictOptions(strategy="cpu", global_batch_size=4,
                                                                      buckets=(16,), part_size=part_size,
                                                                      progress=False))
    ref = pd.read_csv(reference)
    assert frame["label"].tolist() == ref["label"].tolist()
    np.testing.assert_allclose(frame.filter(like="prob_").to_numpy(), ref.filter(like="prob_").to_numpy(),
                               rtol=1e-5, atol=1e-6)
