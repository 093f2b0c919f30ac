"""SQuAD exact match and F1, computed as the official evaluation scripts compute them.

- v1.1 (``evaluate-v1.1.py``): answers are normalised (lower case, punctuation removed, the articles ``a``, ``an``,
  ``the`` removed, whitespace collapsed); exact match and token-overlap F1 take the maximum over the gold answers.
- v2.0 (``evaluate-v2.0.py``): the same normalisation; gold answers that normalise to nothing are dropped, and a
  question without gold answers has the empty answer as its gold, so predicting "no answer" scores 1 there and
  anything else 0; F1 between an empty and a non-empty answer is 0. Totals also split into ``HasAns`` (questions
  with an answer) and ``NoAns``.

Scores are percentages, as both scripts print them.
"""

from __future__ import annotations

import collections
import re
import string
from collections.abc import Mapping, Sequence

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower case, no punctuation, no articles, single spaces (both official scripts)."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, gold: str) -> int:
    """1 when both normalise to the same text."""
    return int(normalize_answer(prediction) == normalize_answer(gold))


def f1(prediction: str, gold: str, version: str = "1.1") -> float:
    """Token-overlap F1 of the normalised answers (v2.0 only: where either is empty, 1 if both are, else 0)."""
    pred, ref = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if version == "2.0" and (not pred or not ref):
        return float(pred == ref)
    common = collections.Counter(pred) & collections.Counter(ref)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(ref)
    return 2 * precision * recall / (precision + recall)


def gold_answers(answers: Sequence[str], version: str) -> list[str]:
    """The gold answers a prediction is compared with: v2.0 drops those that normalise to nothing and uses the
    empty answer for a question without any."""
    if version == "2.0":
        return [a for a in answers if normalize_answer(a)] or [""]
    return list(answers)


def score_question(prediction: str, answers: Sequence[str], version: str) -> tuple[int, float]:
    """``(exact match, F1)`` of one prediction: the maximum over its gold answers."""
    golds = gold_answers(answers, version)
    if not golds:
        raise ValueError("a question without gold answers cannot be scored under SQuAD v1.1")
    return max(exact_match(prediction, g) for g in golds), max(f1(prediction, g, version) for g in golds)


def squad_scores(predictions: Mapping[str, str], answers: Mapping[str, Sequence[str]], version: str = "1.1") -> dict:
    """Exact match and F1 over every question that has gold answers (v2.0: every question).

    Args:
        predictions: question id -> predicted answer ("" for no answer).
        answers: question id -> gold answer texts (empty for a v2.0 question without an answer).
        version: ``1.1`` or ``2.0``.

    Returns:
        ``exact_match``, ``f1`` (percent) and ``total``; v2.0 adds ``HasAns_exact``, ``HasAns_f1``,
        ``HasAns_total`` and ``NoAns_exact``, ``NoAns_f1``, ``NoAns_total`` where such questions exist.

    Raises:
        ValueError: an unknown version, or a gold question with no prediction.
    """
    if version not in ("1.1", "2.0"):
        raise ValueError(f"SQuAD version {version!r}; expected 1.1 or 2.0")
    exact, overlap, has = {}, {}, {}
    for qid, gold in answers.items():
        if version == "1.1" and not gold:
            continue
        if qid not in predictions:
            raise ValueError(f"question {qid!r} has gold answers but no prediction")
        exact[qid], overlap[qid] = score_question(predictions[qid], gold, version)
        has[qid] = bool(gold)  # as the v2.0 script decides it: the raw answer list
    total = len(exact)
    result = {"exact_match": _percent(exact.values()), "f1": _percent(overlap.values()), "total": total}
    if version == "2.0":
        for name, flag in (("HasAns", True), ("NoAns", False)):
            ids = [q for q in exact if has[q] == flag]
            if ids:
                result.update({f"{name}_exact": _percent(exact[q] for q in ids),
                               f"{name}_f1": _percent(overlap[q] for q in ids), f"{name}_total": len(ids)})
    return result


def _percent(values) -> float:
    values = list(values)
    return 100.0 * sum(values) / len(values) if values else 0.0
