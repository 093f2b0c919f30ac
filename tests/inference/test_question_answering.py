"""A QA model through tfsent.predict's every path: SQuAD files with EM/F1 beside the output, documents asked the
same questions, resumed parts, shards, and every bad input one line with nothing written."""

import json
import pathlib

import pandas as pd
import pytest

from tfsent.config import ConfigError
from tfsent.data.errors import DataError
from tfsent.inference.driver import predict
from tfsent.inference.options import PredictOptions, QAOptions
from tfsent.inference.squad_metrics import squad_scores

from helpers.commands import one_error, run
from helpers.qa import BAD_SQUAD, TINY_SQUAD, edited_squad, squad_v2, tiny_qa_model

CLASSIFIER = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "hf" / "bert_legacy_bin"
OPTS = PredictOptions(strategy="cpu", global_batch_size=8, progress=False, max_length=64,
                      qa=QAOptions(doc_stride=16))


@pytest.fixture(scope="module")
def qa_model(tmp_path_factory):
    return tiny_qa_model(tmp_path_factory.mktemp("qa") / "model")


def test_a_squad_file_gets_answers_in_order_and_squad_scores(qa_model, tmp_path):
    summary = predict(qa_model, TINY_SQUAD, tmp_path / "answers.csv", OPTS)
    frame = pd.read_csv(tmp_path / "answers.csv", keep_default_na=False)
    squad = json.loads(TINY_SQUAD.read_text())
    ids = [qa["id"] for a in squad["data"] for p in a["paragraphs"] for qa in p["qas"]]
    assert frame["id"].tolist() == ids and summary["rows"] == 56
    assert list(frame.columns) == ["row", "id", "question", "gold_answers", "answer", "score", "start_char",
                                   "end_char", "snippet", "alternatives", "n_windows", "exact_match", "f1"]
    golds = {i: json.loads(g) for i, g in zip(frame["id"], frame["gold_answers"])}
    want = squad_scores(dict(zip(frame["id"], frame["answer"])), golds)
    metrics = json.loads((tmp_path / "answers.metrics.json").read_text())
    assert metrics["exact_match"] == pytest.approx(want["exact_match"]) and metrics["total"] == 56
    assert metrics["f1"] == pytest.approx(100 * frame["f1"].mean())
    assert summary["evaluation"]["f1"] == pytest.approx(metrics["f1"])
    # Answers are spans of their own contexts.
    contexts = {qa["id"]: p["context"] for a in squad["data"] for p in a["paragraphs"] for qa in p["qas"]}
    for _, row in frame.iterrows():
        assert contexts[row["id"]][row["start_char"]:row["end_char"]] == row["answer"]
        assert " ".join(row["answer"].split()) in row["snippet"] and len(row["snippet"]) <= len(row["answer"]) + 162
    assert all(len(json.loads(a)) <= 3 for a in frame["alternatives"])


def test_documents_are_asked_every_question(qa_model, tmp_path):
    folder = tmp_path / "calls"
    folder.mkdir()
    (folder / "b.txt").write_text("We expect revenue to grow by ten percent next year. " * 12)
    (folder / "a.txt").write_text("Management guided to flat margins for the coming quarter.")
    (tmp_path / "q.txt").write_text("What guidance did management give?\n\nHow much will revenue grow?\n")
    summary = predict(qa_model, folder, tmp_path / "out.csv",
                      PredictOptions(**{**OPTS.__dict__, "qa": QAOptions(doc_stride=16,
                                                                         questions=str(tmp_path / "q.txt"))}))
    frame = pd.read_csv(tmp_path / "out.csv", keep_default_na=False)
    assert summary["rows"] == 4
    assert frame[["doc_id", "document"]].values.tolist() == [["a", "a.txt"]] * 2 + [["b", "b.txt"]] * 2
    assert frame["question"].tolist() == ["What guidance did management give?", "How much will revenue grow?"] * 2
    assert frame["n_windows"].tolist()[:2] == [1, 1] and min(frame["n_windows"].tolist()[2:]) > 1
    text = (folder / "b.txt").read_text()
    assert text[frame["start_char"][2]:frame["end_char"][2]] == frame["answer"][2]
    with pytest.raises(DataError, match="qa.questions: documents mode asks every document the same questions"):
        predict(qa_model, folder, tmp_path / "none.csv", OPTS)


def test_a_killed_run_resumes_and_shards_join_as_one(qa_model, tmp_path):
    opts = PredictOptions(**{**OPTS.__dict__, "part_size": 40})  # windows per part: several parts
    whole = predict(qa_model, TINY_SQUAD, tmp_path / "whole.csv", opts)
    assert whole["parts"] > 2
    for index in (0, 1):
        predict(qa_model, TINY_SQUAD, tmp_path / "sharded.csv",
                PredictOptions(**{**opts.__dict__, "num_shards": 2, "shard_index": index}))
    predict(qa_model, TINY_SQUAD, tmp_path / "sharded.csv", PredictOptions(**{**opts.__dict__, "num_shards": 2,
                                                                          "merge": True}))
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "whole.csv"), pd.read_csv(tmp_path / "sharded.csv"))
    # A second run over finished parts (kept by a run that stopped before merging) predicts nothing again.
    again = predict(qa_model, TINY_SQUAD, tmp_path / "again.csv", opts)
    assert again["parts_skipped"] == 0  # nothing was left to resume: a finished run removes its parts


@pytest.mark.parametrize("edit, message", BAD_SQUAD)
def test_bad_squad_files_are_one_line_and_write_nothing(qa_model, tmp_path, edit, message):
    with pytest.raises(DataError, match=message):
        predict(qa_model, edited_squad(tmp_path / "bad.json", edit), tmp_path / "out.csv", OPTS)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.json"]


def test_options_of_the_other_kind_are_refused(qa_model, tmp_path):
    with pytest.raises(ConfigError, match="label_column=label: this checkpoint is a question-answering model"):
        predict(qa_model, TINY_SQUAD, tmp_path / "out.csv", PredictOptions(**{**OPTS.__dict__, "label_column": "label"}))
    with pytest.raises(DataError, match="a SQuAD file holds questions for a question-answering model; .* is a "
                                        "classifier"):
        predict(CLASSIFIER, TINY_SQUAD, tmp_path / "out.csv", OPTS)
    (tmp_path / "texts.txt").write_text("Profit rose.\n")
    with pytest.raises(ConfigError, match=r"^qa.doc_stride=16: this checkpoint is a classifier, which does not take "
                                          r"qa.doc_stride$"):
        predict(CLASSIFIER, tmp_path / "texts.txt", tmp_path / "out.csv", OPTS)
    with pytest.raises(ConfigError, match=r"^documents.overlap=1: this checkpoint is a question-answering model, "
                                          r"which does not take documents.overlap$"):
        predict(qa_model, TINY_SQUAD, tmp_path / "out.csv",
                PredictOptions(**{**OPTS.__dict__, "documents": {"overlap": 1}}))
    (tmp_path / "q.jsonl").write_text(json.dumps({"question": "Who?", "context": "Denver."}) + "\n")
    with pytest.raises(DataError, match="qa.questions is for documents mode"):
        predict(qa_model, tmp_path / "q.jsonl", tmp_path / "out.csv",
                PredictOptions(**{**OPTS.__dict__, "qa": QAOptions(questions=("Who?",))}))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q.jsonl", "texts.txt"]


def test_the_command_line_prints_scores_and_one_error_line(qa_model, tmp_path):
    args = ["-m", "tfsent.predict", f"ckpt_path={qa_model}", f"input={TINY_SQUAD}", "strategy=cpu", "progress=false",
            "max_length=64", "qa.doc_stride=16", f"hydra.run.dir={tmp_path / 'run'}"]
    done = run(args + [f"output={tmp_path / 'out.csv'}"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "answers for 56 of 56 questions; SQuAD v1.1 exact match" in done.stdout
    bad = run(args + [f"output={tmp_path / 'bad.csv'}", "qa.n_bset=3"])
    assert "qa.n_bset" in one_error(bad)


def test_the_report_shows_answers_in_context_and_squad_scores(qa_model, tmp_path):
    from tfsent.reporting.build import build_report

    predict(qa_model, TINY_SQUAD, tmp_path / "answers.csv", OPTS)
    summary = build_report(tmp_path / "answers.csv")
    page = (tmp_path / "answers.report.html").read_text()
    frame = pd.read_csv(tmp_path / "answers.csv", keep_default_na=False)
    assert summary["kind"] == "answers" and summary["rows"] == 56
    assert 'data-value="questions" data-exact="56"' in page
    assert f'data-value="answered" data-exact="{int((frame["answer"] != "").sum())}"' in page
    metrics = json.loads((tmp_path / "answers.metrics.json").read_text())
    assert f'data-value="f1" data-exact="{metrics["f1"]}"' in page
    assert "Same scores as the metrics file" in page and "<mark>" in page


def test_a_squad_v2_file_lets_no_answer_compete(qa_model, tmp_path):
    summary = predict(qa_model, squad_v2(tmp_path / "v2.json"), tmp_path / "v2.csv", OPTS)
    frame = pd.read_csv(tmp_path / "v2.csv", keep_default_na=False)
    assert "no_answer" in frame.columns
    no_answer = frame["no_answer"].astype(str).str.lower() == "true"
    assert (frame.loc[no_answer, "answer"] == "").all() and (frame.loc[no_answer, "start_char"] == -1).all()
    metrics = json.loads((tmp_path / "v2.metrics.json").read_text())
    assert metrics["squad_version"] == "2.0" and metrics["NoAns_total"] == 3 and metrics["HasAns_total"] == 53
    golds = {i: json.loads(g) for i, g in zip(frame["id"], frame["gold_answers"])}
    assert metrics == {**squad_scores(dict(zip(frame["id"], frame["answer"])), golds, "2.0"),
                       "squad_version": "2.0"}
    assert summary["evaluation"]["NoAns_exact"] == metrics["NoAns_exact"]
    # A threshold far below zero makes "no answer" win everywhere: every question answers nothing.
    predict(qa_model, tmp_path / "v2.json", tmp_path / "none.csv",
            PredictOptions(**{**OPTS.__dict__, "qa": QAOptions(doc_stride=16, null_threshold=-1e9)}))
    assert (pd.read_csv(tmp_path / "none.csv", keep_default_na=False)["answer"] == "").all()
