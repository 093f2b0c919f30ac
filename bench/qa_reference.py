"""run_qa.py's answer post-processing on full logits, transcribed: the reference tfsent's QA answers are checked
against (``bench/hf_qa_fixtures.py`` writes its answers into the fixtures; ``tests/inference/test_spans.py`` compares
``tfsent.inference.spans`` with it on random logits).

The loop of ``postprocess_qa_predictions`` in transformers' ``examples/pytorch/question-answering/utils_qa.py``,
over one question's windows, with two differences that tfsent documents: where no span is valid it answers nothing
(run_qa.py answers the word "empty"), and a window's top-k positions never include its padding (run_qa.py pads every
window to the same length and ranks the padding too, so its answers depend on the batch's padding).
NumPy only: it runs in tfsent's venv and in the torch venv alike.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def postprocess(windows: Sequence[tuple[np.ndarray, np.ndarray]], offsets: Sequence[Sequence], context: str, *,
                n_best: int, max_answer_length: int, version_2: bool = False,
                null_threshold: float = 0.0) -> tuple[str, float, int, int]:
    """One question's answer from its windows' full start/end logits.

    Args:
        windows: ``(start_logits, end_logits)`` per window, unpadded.
        offsets: per window, each token's ``(start, end)`` characters in the context, or None outside it.
        context: the question's context.
        n_best, max_answer_length, version_2, null_threshold: run_qa.py's settings.

    Returns:
        ``(answer, probability, start_char, end_char)``; ``("", p, -1, -1)`` for no answer.
    """
    min_null, prelim = None, []
    for (start, end), offs in zip(windows, offsets):
        start, end = np.asarray(start, np.float32), np.asarray(end, np.float32)
        null = start[0] + end[0]
        if min_null is None or min_null["score"] > null:
            min_null = {"offsets": (-1, -1), "score": null, "start_logit": start[0], "end_logit": end[0]}
        for s in np.argsort(-start, kind="stable")[:n_best]:
            for e in np.argsort(-end, kind="stable")[:n_best]:
                if s >= len(offs) or e >= len(offs) or offs[s] is None or offs[e] is None:
                    continue
                if e < s or e - s + 1 > max_answer_length:
                    continue
                prelim.append({"offsets": (offs[s][0], offs[e][1]), "score": start[s] + end[e],
                               "start_logit": start[s], "end_logit": end[e]})
    if version_2:
        prelim.append(min_null)
    predictions = sorted(prelim, key=lambda x: x["score"], reverse=True)[:n_best]
    if version_2 and not any(p is min_null for p in predictions):
        predictions.append(min_null)
    spans = [p for p in predictions if p is not min_null]
    if not spans:
        return "", (1.0 if predictions else 0.0), -1, -1
    scores = np.array([p["score"] for p in predictions])
    probs = np.exp(scores - scores.max())
    probs /= probs.sum()
    best = spans[0]
    if version_2 and min_null["score"] - best["start_logit"] - best["end_logit"] > null_threshold:
        return "", float(probs[predictions.index(min_null)]), -1, -1
    a, b = best["offsets"]
    return context[a:b], float(probs[predictions.index(best)]), int(a), int(b)
