"""Confusion reports: exact scores, the files written, and bad matrices rejected before anything is written."""

import json

import numpy as np
import pytest

from tfsent.training.reports import confusion_metrics, confusion_report, format_report

LABELS = ["negative", "neutral", "positive"]
# The same matrix as tests/test_metrics.py, so the report and the Keras metrics agree on one example.
CONFUSION = np.array([[2, 1, 0], [0, 3, 1], [2, 0, 1]])


def test_scores_match_hand_computation():
    m = confusion_metrics(CONFUSION, LABELS)
    assert m["labels"] == LABELS
    assert m["matrix"] == CONFUSION.tolist()
    assert m["total"] == 10
    assert m["accuracy"] == pytest.approx(0.6)
    assert m["per_class"]["negative"] == pytest.approx({"precision": 0.5, "recall": 2 / 3, "f1": 4 / 7, "support": 3})
    assert m["per_class"]["neutral"] == pytest.approx({"precision": 0.75, "recall": 0.75, "f1": 0.75, "support": 4})
    assert m["per_class"]["positive"] == pytest.approx({"precision": 0.5, "recall": 1 / 3, "f1": 0.4, "support": 3})
    assert m["macro_f1"] == pytest.approx((4 / 7 + 0.75 + 0.4) / 3)
    assert m["macro_precision"] == pytest.approx((0.5 + 0.75 + 0.5) / 3)
    assert m["macro_recall"] == pytest.approx((2 / 3 + 0.75 + 1 / 3) / 3)


def test_empty_class_scores_zero_and_fractional_counts_stay_floats():
    m = confusion_metrics(np.array([[1.5, 0.0], [0.0, 0.0]]), ["a", "b"])
    assert m["per_class"]["b"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 0.0}
    assert m["matrix"] == [[1.5, 0.0], [0.0, 0.0]]
    assert m["macro_f1"] == 0.5
    assert confusion_metrics(np.zeros((2, 2)), ["a", "b"])["accuracy"] == 0.0


def test_report_writes_json_png_and_text(tmp_path):
    out = tmp_path / "reports"
    returned = confusion_report(CONFUSION.astype(np.float32), LABELS, out, "test")
    assert sorted(p.name for p in out.iterdir()) == ["test_confusion.json", "test_confusion.png",
                                                     "test_report.txt"]  # and no temporary files left behind
    assert json.loads((out / "test_confusion.json").read_text()) == returned
    assert returned["matrix"] == CONFUSION.tolist()  # float32 counts written as JSON integers
    assert (out / "test_confusion.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = (out / "test_report.txt").read_text().splitlines()
    assert text[2].split() == ["negative", "0.5000", "0.6667", "0.5714", "3"]
    assert text[-1].split() == ["macro", "avg", "0.5833", "0.5833", "0.5738", "10"]
    assert format_report(returned) == (out / "test_report.txt").read_text()


@pytest.mark.parametrize("matrix,labels,match", [
    (np.zeros((2, 3)), ["a", "b"], "square"),
    (np.zeros((3, 3)), ["a", "b"], "3x3 but there are 2 label names"),
    (np.array([[1, -1], [0, 0]]), ["a", "b"], "negative"),
    (np.array([[1, np.nan], [0, 0]]), ["a", "b"], "non-finite"),
])
def test_bad_matrix_is_rejected_and_nothing_written(tmp_path, matrix, labels, match):
    with pytest.raises(ValueError, match=match):
        confusion_report(matrix, labels, tmp_path, "val")
    assert list(tmp_path.iterdir()) == []


def test_prefix_must_be_a_file_name_part(tmp_path):
    with pytest.raises(ValueError, match="prefix"):
        confusion_report(CONFUSION, LABELS, tmp_path, "../escape")
