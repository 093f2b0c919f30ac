"""Answers from per-window top-k logits, against hand-worked cases and against run_qa.py's post-processing of the
full logits (bench/qa_reference.py, the loop of transformers' examples/.../utils_qa.py)."""

import sys

import numpy as np
import pytest

from conftest import REPO
from tfsent.inference.spans import SpanOptions, predict_answers, snippet

sys.path.insert(0, str(REPO))
from bench.qa_reference import postprocess  # noqa: E402


def _top(start, end, k):
    """What the device returns for full logits of one window (padding already cut off)."""
    start, end = np.asarray(start, np.float32), np.asarray(end, np.float32)
    si = np.argsort(-start, kind="stable")[:k]
    ei = np.argsort(-end, kind="stable")[:k]
    pad = k - len(si)
    return (np.r_[si, [-1] * pad], np.r_[start[si], [0] * pad], np.r_[ei, [-1] * pad], np.r_[end[ei], [0] * pad],
            start[0] + end[0])


def _stack(windows, k):
    tops = [_top(s, e, k) for s, e in windows]
    return {"start_index": np.stack([t[0] for t in tops]), "start_logit": np.stack([t[1] for t in tops]),
            "end_index": np.stack([t[2] for t in tops]), "end_logit": np.stack([t[3] for t in tops]),
            "null_logit": np.asarray([t[4] for t in tops], np.float32)}


def _offsets_to_chars(offsets):
    starts = np.asarray([-1 if o is None else o[0] for o in offsets], np.int32)
    ends = np.asarray([-1 if o is None else o[1] for o in offsets], np.int32)
    return starts, ends


@pytest.mark.parametrize("v2", [False, True])
def test_random_windows_match_run_qa(v2):
    rng = np.random.default_rng(7)
    context = "".join(chr(97 + i % 26) for i in range(400))
    for trial in range(60):
        n_windows = int(rng.integers(1, 4))
        windows, offsets = [], []
        for _ in range(n_windows):
            length = int(rng.integers(8, 48))
            question = int(rng.integers(2, 6))  # [CLS] + question + [SEP] are not context; the last [SEP] neither
            offs = [None] * question + [(c * 3, c * 3 + 2) for c in range(length - question - 1)] + [None]
            windows.append((rng.normal(size=length) * 3, rng.normal(size=length) * 3))
            offsets.append(offs)
        n_best, max_len = int(rng.integers(1, 21)), int(rng.integers(1, 12))
        threshold = float(rng.normal())
        options = SpanOptions(n_best=n_best, max_answer_length=max_len, version_2=v2, null_threshold=threshold)
        chars = [_offsets_to_chars(o) for o in offsets]
        (got,) = predict_answers(_stack(windows, n_best), np.zeros(n_windows, np.int64), [c[0] for c in chars],
                                 [c[1] for c in chars], [context], options)
        want_text, want_prob, _, _ = postprocess(windows, offsets, context, n_best=n_best, max_answer_length=max_len,
                                                  version_2=v2, null_threshold=threshold)
        assert got.answer.text == want_text, trial
        assert got.answer.probability == pytest.approx(float(want_prob), rel=1e-5), trial


def test_hand_worked_windows_and_questions():
    context = "Denver beat Carolina"
    #         tokens: [CLS] q [SEP] Denver beat Carolina [SEP]
    offs = [None, None, None, (0, 6), (7, 11), (12, 20), None]
    cs, ce = _offsets_to_chars(offs)
    w0 = ([0.0, 5.0, 0.0, 3.0, 1.0, 0.5, 9.0], [0.0, 5.0, 0.0, 2.0, 0.5, 2.5, 9.0])
    w1 = ([0.0, 0.0, 0.0, 0.0, 1.0, 4.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0, 4.5, 0.0])
    top = _stack([w0, w1, w0], k=3)
    # Question 0 has windows 0 and 1, question 1 window 2 (top-3 only: question tokens and [SEP] crowd it).
    first, second = predict_answers(top, np.array([0, 0, 1]), [cs] * 3, [ce] * 3, [context, context],
                                    SpanOptions(n_best=3, max_answer_length=5))
    # Window 0's valid pairs from top-3 starts {6, 1, 3} x ends {6, 1, 5}: only (3, 5) = 3 + 2.5; window 1's
    # (5, 5) = 8.5 wins.
    assert (first.answer.text, first.answer.start, first.answer.end) == ("Carolina", 12, 20)
    assert [c.text for c in first.candidates] == ["Carolina", "Denver beat Carolina", "beat Carolina"]
    assert first.answer.logit == 8.5 and first.answer.probability == pytest.approx(
        1 / (1 + 2 * np.exp(-3.0)))  # 8.5 against two spans of 5.5
    assert second.answer.text == "Denver beat Carolina" and [c.text for c in second.alternatives(3)] == []
    # A span of at most 2 tokens: window 0's only pair is too long.
    short = predict_answers(_stack([w0], 3), np.array([0]), [cs], [ce], [context],
                            SpanOptions(n_best=3, max_answer_length=2))[0]
    assert short.answer.text == "" and short.no_answer and short.candidates == ()
    # v2: window 0's null logit 0 + 0 = 0 against "beat Carolina"'s... threshold decides.
    v2 = predict_answers(_stack([w1], 3), np.array([0]), [cs], [ce], [context],
                         SpanOptions(n_best=3, max_answer_length=5, version_2=True, null_threshold=-9.0))[0]
    assert v2.no_answer and v2.answer.null and v2.null_margin == pytest.approx(-8.5)
    kept = predict_answers(_stack([w1], 3), np.array([0]), [cs], [ce], [context],
                           SpanOptions(n_best=3, max_answer_length=5, version_2=True))[0]
    assert kept.answer.text == "Carolina" and not kept.no_answer
    # A question without windows, and windows out of order.
    assert predict_answers(_stack([w1], 3), np.array([1]), [cs], [ce], ["a", "b"], SpanOptions())[0].no_answer
    with pytest.raises(ValueError, match="consecutive"):
        predict_answers(_stack([w1, w1], 3), np.array([1, 0]), [cs] * 2, [ce] * 2, ["a", "b"], SpanOptions())


def test_snippets_cut_at_spaces_on_one_line():
    context = "The board met in March.\nDenver Broncos won the title after a long season of games."
    start = context.index("Denver")
    assert snippet(context, start, start + 14, width=10) == "…March. Denver Broncos won the…"
    assert snippet(context, start, start + 14, width=200) == " ".join(context.split())
    assert snippet(context, -1, -1) == ""
