"""Rows aggregated chunk by chunk: label shares, confidence histograms, examples and evaluation, exactly."""

import numpy as np
import pytest

from tfsent.inference.evaluation import Confusion
from tfsent.reporting.rows import BINS, RowStats, cut
from tfsent.reporting.tables import ReportError, open_table
from tfsent.training.reports import confusion_metrics

from helpers.predictions import LABELS, predictions

PROBS = [[0.10, 0.20, 0.70],   # positive, top 0.70 (bin 14), tone +0.60
         [0.80, 0.10, 0.10],   # negative, 0.80 (bin 16), -0.70
         [0.30, 0.40, 0.30],   # neutral, 0.40 (bin 8), under 0.5, 0.00
         [0.05, 0.05, 0.90],   # positive, 0.90 (bin 18), +0.85
         [0.45, 0.35, 0.20],   # negative, 0.45 (bin 9), under 0.5, -0.25
         [0.20, 0.50, 0.30],   # neutral, 0.50 (bin 10), not under, +0.10
         [0.10, 0.10, 0.80]]   # positive, 0.80 (bin 16), +0.70
GOLD = ["positive", "negative", "negative", "positive", "neutral", "neutral", "neutral"]


def _stats(tmp_path, chunk_rows, examples=2, **columns):
    path = tmp_path / "scores.csv"
    predictions(PROBS, **columns).to_csv(path, index=False)
    table = open_table(path)
    stats = RowStats(table, threshold=0.5, examples=examples)
    held = []
    for frame in table.chunks(chunk_rows):
        assert len(frame) <= chunk_rows
        stats.add(frame)
        held.append(stats.held())
    return stats, held


@pytest.mark.parametrize("chunk_rows", [1, 3, 100])
def test_counts_histograms_and_examples_are_exact_whatever_the_chunking(tmp_path, chunk_rows):
    stats, held = _stats(tmp_path, chunk_rows)
    assert stats.rows == 7 and stats.counts.tolist() == [2, 2, 3]
    assert stats.shares() == pytest.approx({"negative": 2 / 7, "neutral": 2 / 7, "positive": 3 / 7})
    expected = np.zeros((3, BINS), int)
    for label, b in [(2, 14), (0, 16), (1, 8), (2, 18), (0, 9), (1, 10), (2, 16)]:
        expected[label, b] += 1
    assert stats.hist.tolist() == expected.tolist()
    assert stats.under.tolist() == [1, 1, 0]
    assert stats.truncated == 0 and stats.tokens == 70
    assert [e.where for _, e in stats.most_positive.items()] == ["row 3", "row 6"]
    assert [round(s, 6) for s, _ in stats.most_positive.items()] == [0.85, 0.7]
    assert [e.where for _, e in stats.most_negative.items()] == ["row 1", "row 4"]
    assert [e.where for _, e in stats.least_confident.items()] == ["row 2", "row 4"]
    assert stats.most_positive.items()[0][1].text == "text 3"
    assert stats.evaluation() is None
    assert max(held) <= 3 * 2  # never more rows than the three lists hold


def test_labelled_rows_score_as_tfsent_evaluation_does(tmp_path):
    stats, held = _stats(tmp_path, 2, true_label=GOLD)
    reference = Confusion()
    frame = predictions(PROBS, true_label=GOLD)
    reference.add(frame)
    scores = stats.evaluation()
    assert scores == {"rows": 7, "unlabelled": 0, **confusion_metrics(reference.matrix, LABELS)}
    # by hand: rows 0, 1, 3, 5 are right; 2 (negative as neutral), 4 (neutral as negative), 6 (neutral as positive)
    assert scores["matrix"] == [[1, 1, 0], [1, 1, 1], [0, 0, 2]]
    assert scores["accuracy"] == pytest.approx(4 / 7)
    assert [e.where for _, e in stats.wrong.items()] == ["row 6", "row 4"]  # the most confident mistakes first
    assert stats.wrong.items()[0][1].true_label == "neutral"
    assert max(held) <= 4 * 2


def test_a_true_label_the_model_lacks_names_its_row(tmp_path):
    with pytest.raises(ReportError, match=r"scores.csv: row 3: true_label 'bullish'"):
        _stats(tmp_path, 2, true_label=GOLD[:2] + ["bullish"] + GOLD[3:])


def test_a_model_without_tone_labels_keeps_no_tone_lists(tmp_path):
    path = tmp_path / "scores.csv"
    predictions([[0.9, 0.1], [0.3, 0.7]], labels=["bearish", "bullish"]).to_csv(path, index=False)
    stats = RowStats(open_table(path), threshold=0.5, examples=3)
    for frame in open_table(path).chunks():
        stats.add(frame)
    assert not stats.has_tone and stats.most_positive.items() == []
    assert [e.where for _, e in stats.least_confident.items()] == ["row 1", "row 0"]


def test_long_texts_are_cut_with_an_ellipsis():
    assert cut("x" * 600) == "x" * 499 + "…" and cut(float("nan")) == "" and cut("short") == "short"


def test_tone_labels_are_found_by_name_in_any_case(tmp_path):
    path = tmp_path / "tone.csv"
    # FinBERT-tone's order and spelling: Neutral, Positive, Negative
    predictions([[0.2, 0.7, 0.1], [0.1, 0.1, 0.8]], labels=["Neutral", "Positive", "Negative"]).to_csv(path, index=False)
    table = open_table(path)
    stats = RowStats(table, threshold=0.5, examples=1)
    for frame in table.chunks():
        stats.add(frame)
    assert stats.has_tone
    assert [(e.where, round(s, 6)) for s, e in stats.most_positive.items()] == [("row 0", 0.6)]
    assert [(e.where, round(s, 6)) for s, e in stats.most_negative.items()] == [("row 1", -0.7)]
