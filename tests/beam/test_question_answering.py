"""tfsent.beam with a question-answering checkpoint writes what tfsent.predict writes: one row per question in input
order, the same columns and answers (scores within 1e-5), SQuAD exact match and F1 beside the output; documents
asked every question; a bad SQuAD file and options of the other kind are one line with nothing written."""

import contextlib
import io
import json
import pathlib

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("apache_beam", reason="apache-beam is not installed: the beam extra (make install-beam)")

from hydra import compose, initialize_config_dir  # noqa: E402

from tfsent.beam.cli import run  # noqa: E402
from tfsent.beam.options import BeamOptions  # noqa: E402
from tfsent.beam.pipeline import score  # noqa: E402
from tfsent.beam.write import WriteBlocks  # noqa: E402
from tfsent.config import ConfigError, conf_dir  # noqa: E402
from tfsent.data.errors import DataError  # noqa: E402
from tfsent.data.squad import QAExample  # noqa: E402
from tfsent.inference.driver import predict  # noqa: E402
from tfsent.inference.options import PredictOptions, QAOptions  # noqa: E402
from tfsent.inference.outputs import OutputError  # noqa: E402

from helpers.qa import BAD_SQUAD, TINY_SQUAD, edited_squad, squad_v2, tiny_qa_model  # noqa: E402

CLASSIFIER = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "hf" / "bert_legacy_bin"
# 64-token windows sharing 16 tokens: most SQuAD contexts take several. Blocks of 16 questions: answers are picked
# on 4 workers' blocks and merged. Graph mode, not XLA (as tests/beam/test_pipeline.py).
SETTINGS = dict(strategy="cpu", global_batch_size=8, max_length=64, jit_compile=False)
BEAM = BeamOptions(**SETTINGS, qa=QAOptions(doc_stride=16), block_size=16)
PREDICT = PredictOptions(**SETTINGS, qa=QAOptions(doc_stride=16), progress=False)


@pytest.fixture(scope="module")
def qa_model(tmp_path_factory):
    return tiny_qa_model(tmp_path_factory.mktemp("qa") / "model")


@pytest.fixture(scope="module")
def squad_run(qa_model, tmp_path_factory):
    """The shipped SQuAD subset through the command line's config and run (one Beam run for the module), and
    through tfsent.predict."""
    folder = tmp_path_factory.mktemp("squad")
    predict(qa_model, TINY_SQUAD, folder / "predict.csv", PREDICT)
    overrides = [f"ckpt_path={qa_model}", f"input={TINY_SQUAD}", f"output={folder / 'beam.csv'}", "strategy=cpu",
                 "global_batch_size=8", "max_length=64", "jit_compile=false", "qa.doc_stride=16", "block_size=16"]
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        cfg = compose(config_name="beam", overrides=overrides)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        summary = run(cfg)
    return folder, summary, printed.getvalue()


def _read(path: pathlib.Path) -> pd.DataFrame:
    return pd.read_csv(path, keep_default_na=False)


def _same_answers(beam: pd.DataFrame, ref: pd.DataFrame) -> None:
    assert list(beam.columns) == list(ref.columns)
    exact = [c for c in ref.columns if c not in ("score", "alternatives")]
    pd.testing.assert_frame_equal(beam[exact], ref[exact])
    np.testing.assert_allclose(beam["score"].to_numpy(), ref["score"].to_numpy(), atol=1e-5)
    for mine, theirs in zip(beam["alternatives"], ref["alternatives"]):
        mine, theirs = json.loads(mine), json.loads(theirs)
        assert [(a["answer"], a["start_char"], a["end_char"]) for a in mine] == \
            [(a["answer"], a["start_char"], a["end_char"]) for a in theirs]
        np.testing.assert_allclose([a["score"] for a in mine], [a["score"] for a in theirs], atol=1e-5)


def test_a_squad_file_answers_as_predict_with_squad_scores(squad_run):
    folder, summary, printed = squad_run
    beam, ref = _read(folder / "beam.csv"), _read(folder / "predict.csv")
    squad = json.loads(TINY_SQUAD.read_text())
    ids = [qa["id"] for a in squad["data"] for p in a["paragraphs"] for qa in p["qas"]]
    assert beam["row"].tolist() == list(range(56)) and beam["id"].tolist() == ids
    assert beam["n_windows"].max() > 1  # questions of several windows, grouped back per question
    _same_answers(beam, ref)
    metrics = json.loads((folder / "beam.metrics.json").read_text())
    assert metrics == json.loads((folder / "predict.metrics.json").read_text())
    assert metrics["squad_version"] == "1.1" and metrics["total"] == 56
    answered = int((beam["answer"] != "").sum())
    assert (summary["kind"], summary["rows"], summary["questions"], summary["answered"]) == \
        ("question_answering", 56, 56, answered)
    assert summary["evaluation"] == {**metrics, "metrics_output": str(folder / "beam.metrics.json")}
    assert f"answers for {answered} of 56 questions; SQuAD v1.1 exact match {metrics['exact_match']:.2f}, F1 " \
           f"{metrics['f1']:.2f} on 56 questions" in printed
    assert sorted(p.name for p in folder.iterdir()) == ["beam.csv", "beam.metrics.json", "predict.csv",
                                                        "predict.metrics.json"]


def test_documents_are_asked_every_question_as_predict(qa_model, tmp_path):
    calls = tmp_path / "calls"
    calls.mkdir()
    (calls / "b.txt").write_text("We expect revenue to grow by ten percent next year. " * 12)
    (calls / "a.txt").write_text("Management guided to flat margins for the coming quarter.")
    (calls / "c.txt").write_text("The board approved a dividend of two dollars per share. " * 4)
    qa = QAOptions(doc_stride=16, questions=("What guidance did management give?", "How much will revenue grow?"))
    predict(qa_model, calls, tmp_path / "predict.csv", PredictOptions(**{**PREDICT.__dict__, "qa": qa}))
    # Blocks of 4 questions: document b's two questions end block 0, c's fill block 1 with nothing else.
    summary = score(qa_model, calls, tmp_path / "beam.csv", BeamOptions(**{**BEAM.__dict__, "qa": qa,
                                                                           "block_size": 4}))
    beam = _read(tmp_path / "beam.csv")
    assert beam[["row", "doc_id", "document"]].values.tolist() == [
        [0, "a", "a.txt"], [1, "a", "a.txt"], [2, "b", "b.txt"], [3, "b", "b.txt"], [4, "c", "c.txt"],
        [5, "c", "c.txt"]]
    assert beam["question"].tolist() == list(qa.questions) * 3
    assert beam["n_windows"].tolist() == [1, 1, 3, 3, 1, 1]  # b's questions: 3 windows each, grouped back
    _same_answers(beam, _read(tmp_path / "predict.csv"))
    assert summary["questions"] == 6 and "evaluation" not in summary
    assert sorted(p.name for p in tmp_path.iterdir()) == ["beam.csv", "calls", "predict.csv"]


@pytest.mark.slow
def test_a_squad_v2_file_lets_no_answer_compete_as_predict(qa_model, tmp_path):
    squad = squad_v2(tmp_path / "v2.json")
    predict(qa_model, squad, tmp_path / "predict.csv", PREDICT)
    summary = score(qa_model, squad, tmp_path / "beam.csv", BEAM)
    beam = _read(tmp_path / "beam.csv")
    assert "no_answer" in beam.columns
    _same_answers(beam, _read(tmp_path / "predict.csv"))
    metrics = json.loads((tmp_path / "beam.metrics.json").read_text())
    assert metrics == json.loads((tmp_path / "predict.metrics.json").read_text())
    assert (metrics["squad_version"], metrics["HasAns_total"], metrics["NoAns_total"]) == ("2.0", 53, 3)
    assert summary["evaluation"]["NoAns_exact"] == metrics["NoAns_exact"]


@pytest.mark.parametrize("edit, message", BAD_SQUAD)
def test_a_bad_squad_file_is_one_error_and_writes_nothing(qa_model, tmp_path, edit, message):
    # The first question is refused while the pipeline is built, the others stop the run on the worker that reads
    # the file or cuts the question into windows.
    with pytest.raises(DataError, match=message):
        score(qa_model, edited_squad(tmp_path / "bad.json", edit), tmp_path / "out.csv", BEAM)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.json"]


@pytest.mark.parametrize("ckpt, options, error, message", [
    ("qa", {"label_names": ("a", "b")}, ConfigError,
     r"label_names=\('a', 'b'\): this checkpoint is a question-answering model, which does not take label_names"),
    ("qa", {"keep_columns": ("date",)}, ConfigError, r"keep_columns=\('date',\): .* does not take keep_columns"),
    ("qa", {"documents": {"mode": "tokens"}}, ConfigError,
     r"documents.mode=tokens: this checkpoint is a question-answering model, which does not take documents.mode"),
    ("classifier", {}, DataError, r"a SQuAD file holds questions for a question-answering model; .* is a "
                                  r"classifier"),
    ("classifier", {"qa": {"questions": ["Who?"]}}, ConfigError,
     r"qa.questions=\('Who\?',\): this checkpoint is a classifier, which does not take qa.questions"),
])
def test_options_of_the_other_kind_are_refused_before_any_work(qa_model, tmp_path, ckpt, options, error, message):
    (tmp_path / "texts.txt").write_text("Profit rose.\n")
    given = TINY_SQUAD if ckpt == "qa" or not options else tmp_path / "texts.txt"
    settings = {**BEAM.__dict__, **({} if ckpt == "qa" else {"qa": QAOptions()}), **options}
    with pytest.raises(error, match=message):
        score(qa_model if ckpt == "qa" else CLASSIFIER, given, tmp_path / "out.csv", BeamOptions(**settings))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["texts.txt"]


def test_a_block_missing_a_window_is_refused():
    example = QAExample("q1", "Who?", "Denver won.")
    window = {"char_start": np.asarray([-1, 0, 7], np.int32), "char_end": np.asarray([-1, 6, 11], np.int32),
              "start_index": np.asarray([1]), "start_logit": np.asarray([1.0]), "end_index": np.asarray([1]),
              "end_logit": np.asarray([1.0]), "null_logit": np.float32(0.0)}
    # Question 5 of a block of 5..6 has 2 windows; only its window 1 came back.
    writer = WriteBlocks("unused", 5, None, [], "tokens", questions=(None, QAOptions()))
    with pytest.raises(OutputError, match=r"^block of questions 5..6: windows missing, duplicated or out of range "
                                          r"\(2 windows, 3 expected\)$"):
        writer._answers([((5, 1), 2, {**window, "example": None}), ((6, 0), 1, {**window, "example": example})],
                        5, 7)
