"""SIGKILL, SIGTERM and SIGINT at seeded random moments of predict, documents, evaluation, export and train, each
followed by a re-run whose output must be byte-identical to an uninterrupted run's.

Each command runs once uninterrupted (the reference, and its wall time T). Then, for each of ``POINTS`` points, a
seeded generator draws the signal and a delay in ``[0, T)`` after the start; the run gets the signal then, and the
same command is run again to its end (or, when the signal came after the output was complete, says in one line
that it exists). Its output files are compared byte for byte with the reference's, and nothing
of tfsent's may be left beside them (parts, locks, temporary files). Points land everywhere a run goes: during the
imports, the model load, a part, a part's write, the merge, the final rename. Then the outputs are removed for the
next point (a training run's folder too, so each point trains from the start).
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import random
import shutil
import signal
import time

import pandas as pd
import pytest

from fault_helpers import kill, launch, processes, tails, wait_all
from helpers.commands import leftovers, predict_args, sentences
from tfsent.inference.driver import predict
from tfsent.inference.options import PredictOptions
from tfsent.inference.outputs import OutputError
from tfsent.inference.parts import MERGING, PartInfo, PartStore
from tfsent.runtime.atomic import sha256_tree

POINTS = int(os.environ.get("TFSENT_FAULT_POINTS", "20"))
SEED = 27
SIGNALS = (signal.SIGKILL, signal.SIGTERM, signal.SIGINT)

TRAIN = ["-m", "tfsent.train", "+experiment=finbert_tone_tiny", "strategy=cpu", "model.hidden_dropout=0.0",
         "model.attention_dropout=0.0", "model.classifier_dropout=0.0", "trainer.shuffle_buffer=1",
         "trainer.jit_compile=false", "trainer.steps_per_execution=1", "trainer.epochs=2", "trainer.steps_per_epoch=4",
         "trainer.global_batch_size=16", "trainer.eval_batch_size=32", "callbacks.backup_save_freq=1",
         "callbacks.tensorboard=false", "data.num_shards={train:1,validation:1,test:1}"]

def _job(kind: str, ckpt: pathlib.Path, root: pathlib.Path) -> tuple[list[str], list[pathlib.Path], pathlib.Path]:
    """(command, the outputs compared, the folder that must hold nothing else of tfsent's) for one kind."""
    work = root / "work"
    work.mkdir()
    if kind == "predict":
        (root / "in.txt").write_text("\n".join(sentences(300)) + "\n")
        out = work / "scores.csv"
        return predict_args(ckpt, root / "in.txt", out, root / "hydra", "part_size=15"), [out], work
    if kind == "documents":
        docs = root / "docs"
        docs.mkdir()
        for d in range(12):
            (docs / f"call_{d:02d}.txt").write_text(". ".join(sentences(25, seed=d)) + ".\n")
        out = work / "docs.csv"
        args = predict_args(ckpt, docs, out, root / "hydra", "input_format=documents", "max_length=32", "part_size=6")
        return args, [out, work / "docs.chunks.csv"], work
    if kind == "evaluation":
        labels = ["negative", "neutral", "positive"]
        rows = [f'"{s}",{labels[i % 3]}' for i, s in enumerate(sentences(300))]
        (root / "gold.csv").write_text("text,label\n" + "\n".join(rows) + "\n")
        out = work / "eval.csv"
        args = predict_args(ckpt, root / "gold.csv", out, root / "hydra", "label_column=label", "part_size=15")
        return args, [out, work / "eval.metrics.json", work / "eval.confusion.txt", work / "eval.confusion.png"], work
    if kind == "export":
        out = work / "export"
        return (["-m", "tfsent.export", f"ckpt_path={ckpt}", f"output={out}", "inputs=token_ids",
                 f"hydra.run.dir={root / 'hydra'}"], [out], work)
    run = work / "run"
    return ([*TRAIN, f"paths.prepared_dir={root / 'prepared'}", f"hydra.run.dir={run}"],
            [run / "model" / "model.safetensors", run / "model" / "tf_model.h5"], work)


def _digest(path: pathlib.Path) -> str:
    if not path.is_dir():
        return sha256_tree(path) if path.exists() else "missing"
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(file.relative_to(path).as_posix().encode() + b"\0")
        digest.update(_saved_model_fingerprint(file) if file.name == "fingerprint.pb" else file.read_bytes())
    return digest.hexdigest()


def _saved_model_fingerprint(file: pathlib.Path) -> bytes:
    # TensorFlow gives every save a random uuid (its fingerprint's only per-save field); the hashes of the graph,
    # signatures, objects and variables beside it are compared.
    from tensorflow.core.protobuf import fingerprint_pb2

    fingerprint = fingerprint_pb2.FingerprintDef.FromString(file.read_bytes())
    fingerprint.ClearField("uuid")
    return fingerprint.SerializeToString(deterministic=True)


def _digests(paths: list[pathlib.Path]) -> dict[str, str]:
    return {p.name: _digest(p) for p in paths}


def _clear(kind: str, outputs: list[pathlib.Path], work: pathlib.Path) -> None:
    if kind == "train":
        shutil.rmtree(work / "run", ignore_errors=True)
        return
    for p in outputs:
        shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["predict", "documents", "evaluation", "export", "train"])
def test_a_rerun_after_a_signal_writes_the_uninterrupted_output(kind, ckpt, tmp_path, cases):
    args, outs, work = _job(kind, ckpt, tmp_path)
    logs: list[pathlib.Path] = [tmp_path / "reference.log"]
    with processes() as procs:
        start = time.monotonic()
        procs.append(launch(args, logs[0]))
        assert wait_all(procs[-1:], 900, logs) == [0], tails(logs)
        took = time.monotonic() - start
    want = _digests(outs)
    assert "missing" not in want.values() and leftovers(work) == [], (want, leftovers(work))
    _clear(kind, outs, work)

    rng = random.Random(f"{SEED}-{kind}")
    broken = []
    for k in range(POINTS):
        sig, delay = rng.choice(SIGNALS), round(rng.uniform(0.0, took), 2)
        logs = [tmp_path / f"point{k}.log", tmp_path / f"rerun{k}.log"]
        with processes() as procs:
            procs.append(launch(args, logs[0]))
            time.sleep(delay)
            landed = "running" if procs[0].poll() is None else f"already exited {procs[0].returncode}"
            kill(procs[0], sig)
            first = procs[0].wait(timeout=120)
            # A signal after the final rename finds the work done: the same command then says the output exists
            # (train: that the run directory holds a finished run).
            done_before = _digests(outs) == want
            procs.append(launch(args, logs[1]))
            again = wait_all(procs[-1:], 900, logs)
        got = _digests(outs)
        left = leftovers(work)
        rerun = logs[1].read_text()
        refused = "already exists" in rerun or "holds a finished run" in rerun
        finished = again == [0] or (done_before and again == [2] and refused)
        held = finished and got == want and left == [] and "Traceback" not in rerun
        what = (f"{kind} point {k}: {signal.Signals(sig).name} after {delay} s ({landed}, exit {first}"
                f"{', output already complete' if done_before else ''}); re-run exit {again[0]}, outputs "
                f"{'identical' if got == want else 'DIFFER'}, leftovers {left}")
        print(what)
        cases.add(f"faults (signals): {kind}", what, held)
        if not held:
            broken.append(what + "\n" + tails(logs))
        _clear(kind, outs, work)
    assert not broken, "\n".join(broken)


def test_parts_left_by_a_run_stopped_after_writing_its_output_are_removed_by_the_rerun(ckpt, tmp_path):
    # Found by the signal cases: a SIGTERM (or SIGKILL) between the output's rename and the parts' removal left
    # <output>.parts behind, and the re-run only said the output exists.
    src = tmp_path / "in.txt"
    src.write_text("profit rose\nsales fell\n")
    out = tmp_path / "out.csv"
    options = PredictOptions(strategy="cpu", global_batch_size=4, buckets=(16,), jit_compile=False, progress=False)
    predict(ckpt, src, out, options)
    want = out.read_bytes()
    with PartStore(tmp_path / "out.csv.parts", "fp") as store:  # what the stopped run left: a part, the marker
        store.write(PartInfo(0, 0, 2, 2, "x"), pd.DataFrame({"row": [0, 1]}))
        (store.dir / MERGING).write_text("{}\n")
    os.utime(out)  # the output was renamed into place after the merge began
    with pytest.raises(OutputError, match="out.csv already exists"):
        predict(ckpt, src, out, options)
    assert out.read_bytes() == want and leftovers(tmp_path) == []
    # An output older than the merge marker is not that merge's: its parts stay for the resume.
    with PartStore(tmp_path / "out.csv.parts", "fp") as store:
        store.write(PartInfo(0, 0, 2, 2, "x"), pd.DataFrame({"row": [0, 1]}))
    os.utime(out, ns=(0, 0))
    (tmp_path / "out.csv.parts" / MERGING).write_text("{}\n")
    with pytest.raises(OutputError, match="out.csv already exists"):
        predict(ckpt, src, out, options)
    assert leftovers(tmp_path) == ["out.csv.parts"]
