"""The report of a question-answering output: answers with their context, how sure the model was, EM/F1.

:class:`AnswerStats` reads a QA output a chunk at a time (``question``, ``answer``, ``score``, ``snippet``; ``doc_id``
and ``document`` in documents mode; ``gold_answers``, ``exact_match`` and ``f1`` where gold answers were given) and
keeps bounded aggregates: a score histogram, per-question figures when questions repeat (documents mode: every
document is asked the same questions), exact match and F1 sums, and the most and least confident answers.
"""

from __future__ import annotations

import dataclasses
import json
from html import escape

import numpy as np
import pandas as pd

from tfsent.reporting import svg
from tfsent.reporting.page import Section, cards, table, value
from tfsent.reporting.rows import BINS, cut
from tfsent.reporting.tables import Table
from tfsent.reporting.topk import TopK

#: Distinct questions counted one by one (documents mode asks a few, a SQuAD file one per row).
MAX_QUESTIONS = 50


@dataclasses.dataclass(frozen=True)
class AnswerExample:
    """One answer shown on the page: where it is, the question, the answer in its context, its score and gold."""

    where: str
    question: str
    answer: str
    snippet: str
    score: float
    gold: str | None = None
    f1: float | None = None


class AnswerStats:
    """Answers counted, binned by score, scored against gold answers, and the extreme ones kept.

    Args:
        table: a QA output (``kind == "answers"``).
        examples: answers kept per example list.
    """

    def __init__(self, table: Table, *, examples: int):
        self.table = table
        self.rows = self.answered = 0
        self.hist = np.zeros(BINS, np.int64)
        self.scored = 0
        self.exact = self.overlap = 0.0
        self.questions: dict[str, list[float]] = {}  # question -> [asked, answered, score sum]
        self.repeated = "doc_id" in table.columns
        self.most_confident = TopK(examples, largest=True)
        self.least_confident = TopK(examples, largest=False)
        self.wrong = TopK(examples, largest=True) if "f1" in table.columns else None

    def add(self, frame: pd.DataFrame) -> None:
        """Count one chunk of the table (its index: the rows' 0-based positions in the file)."""
        score = pd.to_numeric(frame["score"], errors="coerce").fillna(0).to_numpy(np.float64)
        answer = frame["answer"].fillna("").astype(str).to_numpy()
        answered = answer != ""
        self.rows += len(frame)
        self.answered += int(answered.sum())
        np.add.at(self.hist, np.minimum((score[answered] * BINS).astype(np.int64), BINS - 1), 1)
        if "f1" in frame:
            f1 = pd.to_numeric(frame["f1"], errors="coerce").to_numpy(np.float64)
            em = pd.to_numeric(frame["exact_match"], errors="coerce").to_numpy(np.float64)
            known = ~np.isnan(f1)
            self.scored += int(known.sum())
            self.exact += float(em[known].sum())
            self.overlap += float(f1[known].sum())
        if self.repeated:
            for question, ok, s in zip(frame["question"].astype(str), answered, score):
                counts = self.questions.get(question)
                if counts is None and len(self.questions) < MAX_QUESTIONS:
                    counts = self.questions[question] = [0, 0, 0.0]
                if counts is not None:
                    counts[0] += 1
                    counts[1] += int(ok)
                    counts[2] += s if ok else 0.0
        order = frame.index.to_numpy(np.int64)
        make = self._payload(frame, score)
        self.most_confident.offer(np.where(answered, score, np.nan), order, make)
        self.least_confident.offer(np.where(answered, score, np.nan), order, make)
        if self.wrong is not None:
            f1 = pd.to_numeric(frame["f1"], errors="coerce").to_numpy(np.float64)
            self.wrong.offer(np.where(f1 < 1.0, score, np.nan), order, make)

    def _payload(self, frame: pd.DataFrame, score: np.ndarray):
        def make(i: int) -> AnswerExample:
            row = frame.iloc[i]
            if "doc_id" in frame:
                where = f"{row.get('document', row['doc_id'])}"
            elif "id" in frame:
                where = f"id {row['id']}"
            else:
                where = f"row {int(frame.index[i]) + 1}"
            gold = None
            if "gold_answers" in frame:
                gold = " | ".join(json.loads(row["gold_answers"]) or ["(no answer)"])
            f1 = float(row["f1"]) if "f1" in frame and not pd.isna(row["f1"]) else None
            return AnswerExample(where, cut(row["question"], 200), str(row["answer"] or ""),
                                 cut(row.get("snippet", ""), 400), float(score[i]), gold, f1)
        return make

    def held(self) -> int:
        """Answers held in memory between chunks (the example lists)."""
        return sum(len(k) for k in (self.most_confident, self.least_confident, self.wrong or ()))


def sections(stats: AnswerStats, beside: dict | None) -> list[Section]:
    """The QA page's sections: answers (figures, score histogram, per question), examples, evaluation."""
    figures = [(value("questions", stats.rows, f"{stats.rows:,}"), "questions asked"),
               (value("answered", stats.answered, f"{stats.answered:,}"), "answered")]
    chart = svg.histogram(list(stats.hist), start=0.0, step=1 / BINS, label="score of the answers",
                          title=f"answer score ({stats.answered:,})", fill=svg.colour("answer", 0), width=420)
    parts = [cards(figures), "<p>How sure the model was: each answer's probability among its question's candidate "
             "spans.</p>", f'<div class="charts">{chart}</div>']
    if stats.questions:
        rows = [[escape(q), f"{int(c[0]):,}", f"{int(c[1]):,}", f"{c[2] / c[1]:.3f}" if c[1] else "–"]
                for q, c in stats.questions.items()]
        parts.append("<h3>Per question</h3>" + table(["question", "asked", "answered", "mean score"], rows,
                                                      numeric=(1, 2, 3), text=(0,)))
    built = [Section("answers", "Answers", "".join(parts))]
    examples = ["<h3>Most confident answers</h3>", _examples(stats.most_confident.items()),
                "<h3>Least confident answers</h3><p class=\"note\">lowest score first</p>",
                _examples(stats.least_confident.items())]
    built.append(Section("examples", "Examples", "".join(examples)))
    if stats.scored:
        em, f1 = 100 * stats.exact / stats.scored, 100 * stats.overlap / stats.scored
        scores = [(value("exact-match", em, f"{em:.2f}"), "exact match"), (value("f1", f1, f"{f1:.2f}"), "F1"),
                  (value("scored", stats.scored, f"{stats.scored:,}"), "questions with gold answers")]
        parts = [cards(scores), '<p class="note">SQuAD\'s exact match and F1 (percent), as the official script '
                 "computes them.</p>"]
        if beside is not None and "f1" in beside:
            same = abs(beside["f1"] - f1) < 1e-6 and abs(beside["exact_match"] - em) < 1e-6
            parts.append(f'<p class="note">{"Same scores as" if same else "<span class=warn>Differs from</span>"} '
                         "the metrics file predict wrote beside the output.</p>")
        parts += ["<h3>Answers that missed</h3><p class=\"note\">F1 below 1, the most confident first</p>",
                  _examples(stats.wrong.items())]
        built.append(Section("evaluation", "Evaluation", "".join(parts)))
    return built


def _examples(items) -> str:
    if not items:
        return '<p class="note">none</p>'
    gold = any(e.gold is not None for _, e in items)
    rows = []
    for _, e in items:
        context = escape(e.snippet).replace(escape(e.answer), f"<mark>{escape(e.answer)}</mark>", 1) \
            if e.answer else escape(e.snippet)
        row = [escape(e.where), escape(e.question), f"<b>{escape(e.answer)}</b>", context, f"{e.score:.3f}"]
        if gold:
            row += [escape(e.gold or ""), "–" if e.f1 is None else f"{e.f1:.2f}"]
        rows.append(row)
    headers = ["where", "question", "answer", "in context", "score"] + (["gold", "F1"] if gold else [])
    return table(headers, rows, numeric=(4, 6), text=(1, 3), cls="examples")
