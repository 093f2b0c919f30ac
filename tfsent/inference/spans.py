"""From each window's top-k start and end logits to one answer per question, as Hugging Face's ``run_qa.py`` does.

The device returns, per window, the ``k`` highest start logits and the ``k`` highest end logits with their token
positions (padding excluded) and the null logit ``start[0] + end[0]``; nothing of size ``[windows, length]`` leaves
it. Here, per question, over all of its windows in order (``postprocess_qa_predictions`` of transformers'
``examples/pytorch/question-answering/utils_qa.py``):

1. every pair of a top start and a top end is a candidate when both tokens are context tokens, the end is not
   before the start, and the span has at most ``max_answer_length`` tokens; its score is the sum of its logits;
2. with ``version_2`` the window with the smallest null logit adds a "no answer" candidate;
3. the ``n_best`` highest scores (ties in candidate order: window, start rank, end rank) are kept, the null one
   added when it fell out, and their probabilities are a softmax over those scores;
4. the answer is the best candidate; with ``version_2`` it is "no answer" when the null logit exceeds the best
   span's by more than ``null_threshold``.

An answer is the context's characters from its first token's start to its last token's end. A question none of
whose candidates is valid gets the empty answer with score 0 (``run_qa.py`` writes the word "empty").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

#: The engine's outputs per window, ``[windows, k]`` each, and ``null_logit`` ``[windows]``.
TOP_KEYS = ("start_index", "start_logit", "end_index", "end_logit")


@dataclasses.dataclass(frozen=True)
class SpanOptions:
    """How answers are chosen.

    Attributes:
        n_best: candidates kept per question (and the top-k positions per window the device returns).
        max_answer_length: the longest answer, in tokens.
        version_2: questions may have no answer (SQuAD v2.0): the null score competes.
        null_threshold: with ``version_2``, "no answer" wins when null logit - best span logit exceeds it.
        alternatives: runner-up answers reported beside the best one.
    """

    n_best: int = 20
    max_answer_length: int = 30
    version_2: bool = False
    null_threshold: float = 0.0
    alternatives: int = 3

    def __post_init__(self):
        if self.n_best < 1 or self.max_answer_length < 1 or self.alternatives < 0:
            raise ValueError(f"n_best ({self.n_best}) and max_answer_length ({self.max_answer_length}) must be >= 1 "
                             f"and alternatives ({self.alternatives}) >= 0")


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One candidate answer of a question.

    Attributes:
        text: the answer (empty for "no answer").
        start, end: its character span in the context (``-1, -1`` for "no answer").
        logit: its score, start logit + end logit.
        probability: softmax of its score among the question's kept candidates.
        null: the "no answer" candidate.
    """

    text: str
    start: int
    end: int
    logit: float
    probability: float
    null: bool = False


@dataclasses.dataclass(frozen=True)
class Prediction:
    """A question's answer and its candidates, best first.

    Attributes:
        answer: the chosen candidate (``no_answer``: the null one, or an empty one when nothing was valid).
        candidates: the kept candidates, best first (probabilities over these).
        null_margin: null logit minus the best span's logit (``version_2``; NaN otherwise or without a span).
    """

    answer: Candidate
    candidates: tuple[Candidate, ...]
    null_margin: float = float("nan")

    @property
    def no_answer(self) -> bool:
        return self.answer.null or not self.answer.text

    def alternatives(self, n: int) -> list[Candidate]:
        """Up to ``n`` other span candidates, best first (the null one and the answer left out)."""
        return [c for c in self.candidates if c is not self.answer and not c.null][:n]


_EMPTY = Candidate("", -1, -1, 0.0, 0.0)


def predict_answers(top: Mapping[str, np.ndarray], example: np.ndarray, char_start: Sequence[np.ndarray],
                    char_end: Sequence[np.ndarray], contexts: Sequence[str], options: SpanOptions) -> list[Prediction]:
    """The answer of every question from its windows' top-k logits.

    Args:
        top: ``start_index``, ``start_logit``, ``end_index``, ``end_logit`` (``[windows, k]``; an index of -1 is an
            empty slot) and ``null_logit`` (``[windows]``), one row per window in window order.
        example: the question of each window (indices into ``contexts``), windows of a question consecutive.
        char_start, char_end: per window, each token's character span in its context (-1: not context).
        contexts: each question's context.
        options: the :class:`SpanOptions`.

    Returns:
        One :class:`Prediction` per question, in order (a question without windows gets the empty answer).
    """
    example = np.asarray(example, dtype=np.int64)
    predictions = []
    bounds = np.searchsorted(example, np.arange(len(contexts) + 1), side="left")
    if len(example) and (np.diff(example) < 0).any():
        raise ValueError("the windows of a question must be consecutive and in question order")
    for q, context in enumerate(contexts):
        predictions.append(_question(top, range(bounds[q], bounds[q + 1]), char_start, char_end, context, options))
    return predictions


def _question(top, windows: range, char_start, char_end, context: str, options: SpanOptions) -> Prediction:
    scores, spans, logits = [], [], []
    null = None
    for w in windows:
        s_idx, e_idx = top["start_index"][w], top["end_index"][w]
        s_log = np.asarray(top["start_logit"][w], np.float32)
        e_log = np.asarray(top["end_logit"][w], np.float32)
        s_ok, s_chars = _context_tokens(s_idx, char_start[w], char_end[w])
        e_ok, e_chars = _context_tokens(e_idx, char_start[w], char_end[w])
        length = e_idx[None, :] - s_idx[:, None] + 1
        ok = s_ok[:, None] & e_ok[None, :] & (length >= 1) & (length <= options.max_answer_length)
        rows, cols = np.nonzero(ok)  # row-major: start rank, then end rank, as run_qa.py's loops
        scores.append(s_log[rows] + e_log[cols])
        spans.append(np.stack([s_chars[rows, 0], e_chars[cols, 1]], axis=1))
        logits.append(np.stack([s_log[rows], e_log[cols]], axis=1))
        if options.version_2:
            value = np.float32(top["null_logit"][w])
            if null is None or value < null:  # the first window with the smallest null score
                null = value
    score = np.concatenate(scores) if scores else np.zeros(0, np.float32)
    span = np.concatenate(spans) if spans else np.zeros((0, 2), np.int64)
    if null is not None:
        score = np.append(score, np.float32(null))
        span = np.concatenate([span, [[-1, -1]]])
    order = np.argsort(-score, kind="stable")[:options.n_best]
    null_at = len(score) - 1 if null is not None else -1
    if null is not None and null_at not in order:
        order = np.append(order, null_at)
    if not len(order):
        return Prediction(_EMPTY, ())
    kept = score[order]
    probs = np.exp(kept - kept.max())
    probs = probs / probs.sum()
    candidates = tuple(
        Candidate("" if i == null_at else context[span[i, 0]:span[i, 1]], int(span[i, 0]), int(span[i, 1]),
                  float(score[i]), float(p), null=i == null_at) for i, p in zip(order, probs))
    spans_only = [c for c in candidates if not c.null]
    if null is None:
        return Prediction(candidates[0], candidates)
    null_candidate = next(c for c in candidates if c.null)
    if not spans_only:
        return Prediction(null_candidate, candidates)
    best = spans_only[0]
    margin = float(np.float32(null) - np.float32(best.logit))
    return Prediction(null_candidate if margin > options.null_threshold else best, candidates, margin)


def _context_tokens(index: np.ndarray, char_start: np.ndarray, char_end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which top-k positions are context tokens of the window, and their ``[k, 2]`` character spans."""
    index = np.asarray(index, dtype=np.int64)
    inside = (index >= 0) & (index < len(char_start))
    safe = np.where(inside, index, 0)
    ok = inside & (char_start[safe] >= 0) if len(char_start) else np.zeros(len(index), bool)
    chars = np.stack([char_start[safe], char_end[safe]], axis=1) if len(char_start) else np.zeros((len(index), 2))
    return ok, chars.astype(np.int64)


def snippet(context: str, start: int, end: int, width: int = 80) -> str:
    """The answer with up to ``width`` characters of its context on each side, cut at spaces, on one line (an
    ellipsis where the context goes on); empty for no answer."""
    if start < 0 or end <= start:
        return ""
    lo, hi = max(0, start - width), min(len(context), end + width)
    if lo > 0:
        space = context.find(" ", lo, start)
        lo = space + 1 if space >= 0 else lo
    if hi < len(context):
        space = context.rfind(" ", end, hi)
        hi = space if space >= 0 else hi
    text = " ".join(context[lo:hi].split())
    return ("…" if lo > 0 else "") + text + ("…" if hi < len(context) else "")
