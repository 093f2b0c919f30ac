"""Exact match and F1 as the official SQuAD v1.1 and v2.0 scripts compute them, on hand-worked cases."""

import pytest

from tfsent.inference.squad_metrics import f1, normalize_answer, score_question, squad_scores


def test_normalisation():
    assert normalize_answer("The  Denver Broncos!") == "denver broncos"
    assert normalize_answer("an apple, a pear; the end.") == "apple pear end"
    assert normalize_answer("Theatre") == "theatre"  # whole words only
    assert normalize_answer(" A ") == ""


def test_f1_and_exact_match_take_the_best_gold():
    # "Denver Broncos" vs "the Broncos": overlap 1, precision 1/2, recall 1/1 -> 2/3.
    assert f1("Denver Broncos", "the Broncos") == pytest.approx(2 / 3)
    assert score_question("Denver Broncos", ["the Broncos", "Denver  broncos."], "1.1") == (1, 1.0)
    assert score_question("in 2016", ["2016", "2015"], "1.1") == (0, pytest.approx(2 / 3))
    # v1.1 has no empty rule: nothing in common is 0 even when both normalise to nothing.
    assert f1("the", "a", "1.1") == 0.0 and f1("the", "a", "2.0") == 1.0


def test_v1_totals():
    scores = squad_scores({"a": "Denver Broncos", "b": "in 2016", "c": "nothing"},
                          {"a": ["Denver Broncos"], "b": ["2016"], "c": ["Carolina"]})
    assert scores == {"exact_match": pytest.approx(100 / 3), "f1": pytest.approx(100 * (1 + 2 / 3) / 3), "total": 3}
    with pytest.raises(ValueError, match="question 'z' has gold answers but no prediction"):
        squad_scores({}, {"z": ["x"]})


def test_v2_splits_has_and_no_answer():
    scores = squad_scores({"a": "Denver", "b": "", "c": "Carolina", "d": ""},
                          {"a": ["Denver"], "b": [], "c": [], "d": ["Panthers"]}, version="2.0")
    assert scores == {"exact_match": 50.0, "f1": 50.0, "total": 4,
                      "HasAns_exact": 50.0, "HasAns_f1": 50.0, "HasAns_total": 2,
                      "NoAns_exact": 50.0, "NoAns_f1": 50.0, "NoAns_total": 2}
    # A gold that normalises to nothing is dropped: its question's gold becomes the empty answer.
    assert score_question("", ["the"], "2.0") == (1, 1.0)
