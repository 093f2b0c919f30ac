"""tfsent.beam on the DirectRunner gives what tfsent.predict gives: the same rows, columns, labels and order, and
probabilities within 1e-5; a user's mistake fails clearly and leaves no output."""

import dataclasses
import json
import pathlib
import shutil

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("apache_beam", reason="apache-beam is not installed: the beam extra (make install-beam)")

import apache_beam as beam  # noqa: E402
from apache_beam.testing.util import assert_that, equal_to  # noqa: E402

from tfsent.beam.handler import BucketBatches, bucket_of  # noqa: E402
from tfsent.beam.read import Unit  # noqa: E402
from tfsent.beam.options import BeamOptions  # noqa: E402
from tfsent.beam.pipeline import score  # noqa: E402
from tfsent.data.errors import DataError  # noqa: E402
from tfsent.data.sources import read_records  # noqa: E402
from tfsent.inference.driver import predict  # noqa: E402
from tfsent.inference.engine import assign_buckets  # noqa: E402
from tfsent.inference.options import PredictOptions  # noqa: E402
from tfsent.inference.predictor import NonFiniteError  # noqa: E402
from tfsent.inference.outputs import OutputError  # noqa: E402

from helpers.tiny import LABELS, overflowing_checkpoint, tiny_checkpoint  # noqa: E402

PROBS = [f"prob_{n}" for n in LABELS]
# Blocks of 64 rows: results come back shuffled (Reshuffle, GroupByKey) and are merged from several blocks.
# One in-process worker: with --direct_num_workers=2 in multi_threading mode Beam 2.77's in-memory data channel
# once failed to decode its own stream (NotImplementedError: Invalid PaneInfoEncoding: 6) in a loaded full-suite
# run; bench/beam.py runs 2 worker processes (multi_processing). Graph mode, not XLA, in both: compiling a dozen
# bucket shapes twice would dominate the test's time.
BEAM = BeamOptions(strategy="cpu", global_batch_size=8, block_size=64, jit_compile=False)
PREDICT = PredictOptions(strategy="cpu", global_batch_size=8, jit_compile=False, progress=False)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "model", max_seq_length=128)


def _same_scores(beam: pd.DataFrame, ref: pd.DataFrame) -> None:
    assert list(beam.columns) == list(ref.columns)
    exact = [c for c in ref.columns if c not in PROBS and not c.startswith(("share_", "net_tone"))]
    pd.testing.assert_frame_equal(beam[exact], ref[exact], check_dtype=False)
    inexact = [c for c in ref.columns if c not in exact]
    np.testing.assert_allclose(beam[inexact].to_numpy(float), ref[inexact].to_numpy(float), atol=1e-5)


def test_slabs_hold_one_bucket_and_only_a_buckets_last_is_partial():
    lengths = (16, 32, 64)
    n_tokens = np.random.RandomState(0).randint(3, 65, size=200)
    units = [Unit((i, 0), 1, {}, {"input_ids": np.zeros(n, np.int32)}) for i, n in enumerate(n_tokens)]
    per_bucket = np.bincount(assign_buckets(n_tokens, lengths), minlength=3)

    def describe(slab):
        return sorted({bucket_of(u, lengths) for u in slab}), len(slab)

    with beam.Pipeline() as p:
        slabs = p | beam.Create(units) | BucketBatches(lengths, slab_rows=16) | beam.Map(describe)
        expected = [([b], min(16, n - k)) for b, n in enumerate(per_bucket) for k in range(0, n, 16)]
        assert_that(slabs, equal_to(expected))


def test_200_phrasebank_sentences_as_predict(ckpt, tmp_path, shared_data):
    records = read_records(shared_data / "financial_phrasebank" / "Sentences_AllAgree.txt", "phrasebank")[:200]
    source = tmp_path / "sentences.csv"
    pd.DataFrame({"sid": [f"s{i}" for i in range(200)], "text": [r.text for r in records]}).to_csv(source, index=False)
    ref = tmp_path / "predict.csv"
    predict(ckpt, source, ref, dataclasses.replace(PREDICT, id_column="sid"))
    out = tmp_path / "beam.csv"
    summary = score(ckpt, source, out, dataclasses.replace(BEAM, id_column="sid"))
    beam, ref = pd.read_csv(out), pd.read_csv(ref)
    assert beam["row"].tolist() == list(range(200)) and beam["id"].tolist() == [f"s{i}" for i in range(200)]
    _same_scores(beam, ref)
    assert summary["rows"] == 200 and sum(summary["label_counts"].values()) == 200
    assert sorted(p.name for p in tmp_path.iterdir()) == ["beam.csv", "predict.csv", "sentences.csv"]


def test_text_lines_to_jsonl_as_predict(ckpt, tmp_path):
    (tmp_path / "in.txt").write_text("".join(f"Operating profit rose {i} percent in quarter {i}.\n"
                                             for i in range(30)))
    predict(ckpt, tmp_path / "in.txt", tmp_path / "predict.jsonl", PREDICT)
    score(ckpt, tmp_path / "in.txt", tmp_path / "beam.jsonl", BEAM)
    beam = pd.read_json(tmp_path / "beam.jsonl", lines=True)
    assert beam["row"].tolist() == list(range(30))
    _same_scores(beam, pd.read_json(tmp_path / "predict.jsonl", lines=True))


def test_three_transcripts_as_predict(ckpt, tmp_path, transcripts_dir):
    folder = tmp_path / "docs"
    folder.mkdir()
    for path in sorted((transcripts_dir / "test").glob("*.txt"))[:3]:
        shutil.copy(path, folder / path.name)
    (folder / "empty.txt").write_text("  \n")  # kept as a document without chunks
    predict(ckpt, folder, tmp_path / "predict.parquet", dataclasses.replace(PREDICT, input_format="documents"))
    summary = score(ckpt, folder, tmp_path / "beam.parquet",
                    dataclasses.replace(BEAM, input_format="documents", block_size=2))
    docs, chunks = pd.read_parquet(tmp_path / "beam.parquet"), pd.read_parquet(tmp_path / "beam.chunks.parquet")
    ref_docs = pd.read_parquet(tmp_path / "predict.parquet")
    ref_chunks = pd.read_parquet(tmp_path / "predict.chunks.parquet")
    assert docs["doc_id"].tolist() == sorted(p.stem for p in folder.iterdir())
    assert docs.loc[docs["doc_id"] == "empty", "n_chunks"].tolist() == [0]
    assert len(chunks) > 3 * 5  # whole transcripts: many 128-token chunks each
    _same_scores(docs, ref_docs)
    _same_scores(chunks, ref_chunks)
    assert summary["documents"] == 4 and summary["rows"] == len(chunks)


def test_existing_output_is_refused_before_any_work(ckpt, tmp_path):
    (tmp_path / "in.txt").write_text("profit rose\n")
    (tmp_path / "out.csv").write_text("keep me\n")
    with pytest.raises(OutputError, match=r"out\.csv already exists; pass overwrite=true"):
        score(ckpt, tmp_path / "in.txt", tmp_path / "out.csv", BEAM)
    assert (tmp_path / "out.csv").read_text() == "keep me\n"


def test_bad_row_names_file_and_line_and_writes_nothing(ckpt, tmp_path):
    (tmp_path / "in.csv").write_text("text\nfine\n   \nalso fine\n")
    with pytest.raises(DataError, match=r"in\.csv:3: empty text"):
        score(ckpt, tmp_path / "in.csv", tmp_path / "out.csv", BEAM)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]


def test_a_non_finite_score_names_its_row_and_writes_nothing(tmp_path):
    ckpt = overflowing_checkpoint(tmp_path / "model")
    (tmp_path / "in.txt").write_text("profit rose\nmargins held\nsales fell\ncosts rose\n")
    with pytest.raises(NonFiniteError) as e:
        score(ckpt, tmp_path / "in.txt", tmp_path / "out.csv", dataclasses.replace(BEAM, packing=False))
    # Beam adds the step that failed ("[while running 'Score/...']").
    assert str(e.value).startswith("row 2: the model gave a non-finite probability ([nan, nan, nan]), which is no "
                                   "score; nothing of the run is written")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "model"]


@pytest.mark.parametrize("fixture", ["bert_legacy_bin", "xlm_roberta_sharded_safetensors"])
def test_a_transformers_classifier_scores_as_transformers(fixture, tmp_path):
    # Folders PyTorch transformers wrote (legacy .bin; sharded safetensors with a SentencePiece tokenizer).
    folder = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "hf" / fixture
    expected = json.loads((folder / "expected.json").read_text())
    pd.DataFrame({"text": expected["texts"]}).to_csv(tmp_path / "in.csv", index=False)
    score(str(folder), tmp_path / "in.csv", tmp_path / "beam.csv", BEAM)
    frame = pd.read_csv(tmp_path / "beam.csv")
    assert frame["row"].tolist() == list(range(len(expected["texts"])))
    np.testing.assert_allclose(frame[[f"prob_{n}" for n in expected["labels"]]].to_numpy(), expected["probs"],
                               atol=1e-5)


def test_packed_slabs_score_as_padded_ones(ckpt, tmp_path, shared_data, monkeypatch):
    # Short and long PhraseBank rows: packed (several rows per sequence, each seeing only itself) and padded give
    # the same labels and probabilities within 1e-5, rows in order.
    from tfsent.inference import plan

    plans, real = [], plan.packing_choice
    monkeypatch.setattr(plan, "packing_choice", lambda *a, **k: plans.append(real(*a, **k)) or plans[-1])
    records = read_records(shared_data / "financial_phrasebank" / "Sentences_AllAgree.txt", "phrasebank")[:120]
    texts = [r.text for r in records] + ["Profit rose.", "Up."] * 5
    pd.DataFrame({"text": texts}).to_csv(tmp_path / "in.csv", index=False)
    frames = {}
    for packing in (True, False):
        out = tmp_path / f"beam-{packing}.csv"
        plans.clear()
        score(ckpt, tmp_path / "in.csv", out, dataclasses.replace(BEAM, packing=packing))
        frames[packing] = pd.read_csv(out)
        packed = [p for p in plans if p is not None]
        # packing=true: every slab packed, some sequences holding several rows; false: none.
        assert (len(packed) == len(plans) > 0 and max(p.counts.max() for p in packed) > 1) \
            if packing else (plans and not packed)
    assert frames[True]["row"].tolist() == list(range(len(texts)))
    _same_scores(frames[True], frames[False])
    with pytest.raises(ValueError, match="packing='yes' must be true, false or auto"):
        BeamOptions(packing="yes")
