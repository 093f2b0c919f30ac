"""SQuAD files and QA tables read into checked examples (exact values on small files and the shared subset)."""

import json
import pathlib

import pandas as pd
import pytest

from tfsent.data.errors import DataError
from tfsent.data.squad import Answer, infer_format, read_examples

SHARED = pathlib.Path(__file__).resolve().parents[2].parent / "shared" / "data" / "squad" / "train-v1.1-first11.json"


def _squad(tmp_path, qas, context="Denver won the game in 2016.", version="1.1", name="s.json"):
    path = tmp_path / name
    path.write_text(json.dumps({"version": version, "data": [
        {"title": "Super_Bowl", "paragraphs": [{"context": context, "qas": qas}]}]}))
    return path


@pytest.mark.skipif(not SHARED.is_file(), reason="../shared/data/squad is not on this machine")
def test_the_shared_subset_reads_whole():
    examples = read_examples(SHARED)
    assert len(examples) == 3807
    assert len({e.title for e in examples}) == 11
    first = examples[0]
    assert first.id == "5733be284776f41900661182"
    assert first.question == "To whom did the Virgin Mary allegedly appear in 1858 in Lourdes France?"
    assert first.answers == (Answer("Saint Bernadette Soubirous", 515),)
    assert first.context[515:541] == "Saint Bernadette Soubirous"
    assert first.title == "University_of_Notre_Dame" and not first.impossible
    assert infer_format(SHARED) == "squad"


def test_a_v2_file_keeps_questions_without_answers(tmp_path):
    path = _squad(tmp_path, [
        {"id": "a", "question": "  Who won? ", "answers": [{"text": "Denver", "answer_start": 0}]},
        {"id": "b", "question": "Who lost?", "answers": [], "is_impossible": True,
         "plausible_answers": [{"text": "Denver", "answer_start": 0}]}], version="v2.0")
    a, b = read_examples(path)
    assert (a.question, a.answers, a.impossible, a.labelled) == ("Who won?", (Answer("Denver", 0),), False, True)
    assert (b.answers, b.impossible, b.labelled) == ((), True, True)
    assert a.context == "Denver won the game in 2016." and a.title == "Super_Bowl"


def test_tables_in_every_format_read_alike(tmp_path):
    rows = [{"id": "q1", "question": "When?", "context": "Denver won in 2016.",
             "answers": {"text": ["2016"], "answer_start": [14]}},
            {"id": "q2", "question": "Who?", "context": " Denver won.", "answers": [{"text": "Denver",
                                                                                       "answer_start": 1}]}]
    (tmp_path / "q.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    frame = pd.DataFrame([{**r, "answers": json.dumps(r["answers"])} for r in rows])
    frame.to_csv(tmp_path / "q.csv", index=False)
    frame.to_parquet(tmp_path / "q.parquet")
    for name in ("q.jsonl", "q.csv", "q.parquet"):
        q1, q2 = read_examples(tmp_path / name)
        assert (q1.id, q1.answers, q2.id, q2.answers) == ("q1", (Answer("2016", 14),), "q2", (Answer("Denver", 1),))
        assert q2.context == " Denver won."  # a context is kept as written: offsets point into it
    # Without answers and ids: unlabelled questions numbered by line.
    (tmp_path / "plain.jsonl").write_text(json.dumps({"question": "Who?", "context": "Denver."}) + "\n")
    (only,) = read_examples(tmp_path / "plain.jsonl")
    assert (only.id, only.answers, only.impossible, only.labelled) == ("1", (), False, False)


@pytest.mark.parametrize("qa, context, message", [
    ({"id": "x1", "question": "Who?", "answers": [{"text": "Denver", "answer_start": 3}]}, None,
     r"question x1: answer 0 'Denver' is not at answer_start=3 \(the context has 'ver wo' there\)"),
    ({"id": "x2", "question": "   ", "answers": []}, None, r"question x2: empty question"),
    ({"id": "x3", "question": "Who?", "answers": [{"text": "Denver"}]}, None,
     r"question x3, answer 0: missing 'answer_start'"),
    ({"id": "x4", "question": "Who?", "answers": [{"text": "Denver", "answer_start": 0}], "is_impossible": True},
     None, r"question x4: is_impossible is true but it lists answers"),
    ({"id": "x5", "question": "Who?", "answers": []}, "  ", r"paragraph 0: empty context"),
    ({"id": "x6", "question": "Who?", "answers": [{"text": "Denver", "answer_start": True}]}, None,
     r"'answer_start' must be an integer, got bool"),
])
def test_a_bad_question_is_one_line_naming_it(tmp_path, qa, context, message):
    path = _squad(tmp_path, [qa], **({"context": context} if context is not None else {}))
    with pytest.raises(DataError, match=message) as err:
        read_examples(path)
    assert "\n" not in str(err.value) and str(path) in str(err.value)


def test_repeated_ids_and_bad_files_are_refused(tmp_path):
    qa = {"id": "same", "question": "Who?", "answers": []}
    with pytest.raises(DataError, match="question id 'same' is used twice"):
        read_examples(_squad(tmp_path, [qa, qa]))
    (tmp_path / "bad.json").write_text('{"version": "1.1", "data": [')
    with pytest.raises(DataError, match=r"bad.json:1: malformed JSON"):
        read_examples(tmp_path / "bad.json", "squad")
    (tmp_path / "list.json").write_text('{"version": "1.1", "data": 3}')
    with pytest.raises(DataError, match="not a SQuAD file"):
        read_examples(tmp_path / "list.json", "squad")
    (tmp_path / "q.csv").write_text("question,context,answers\nWho?,Denver.,not json\n")
    with pytest.raises(DataError, match=r"q.csv:2: column 'answers': answers are not JSON"):
        read_examples(tmp_path / "q.csv")
    (tmp_path / "nocontext.jsonl").write_text(json.dumps({"question": "Who?"}) + "\n")
    with pytest.raises(DataError, match="has no column 'context'"):
        read_examples(tmp_path / "nocontext.jsonl")
    with pytest.raises(DataError, match="cannot tell a question-answering format"):
        infer_format(tmp_path / "q.txt")
