"""The question-answering predictor: one answer per question, from every window of its context.

A part holds whole questions. Their windows (:mod:`tfsent.data.qa_windows`) are the engine's rows: length buckets,
filler rows, ``example_id`` order, on every replica; the device returns each window's top-k start and end
positions and its null logit (:class:`~tfsent.models.question_answering.QuestionAnswerer`), and the host picks each
question's answer over all of its windows (:mod:`tfsent.inference.spans`). A part's output rows are its questions.

Columns: the source's (``id``, ``question``, and ``gold_answers`` for a file with answers; documents: ``doc_id``,
``document``, ``question``), then ``answer``, ``score`` (the answer's probability among the question's candidates),
``start_char``, ``end_char`` (its characters in the context; -1 for no answer), ``snippet`` (the answer in up to 80
characters of context on each side), ``no_answer`` (when "no answer" competes), ``alternatives`` (runner-up answers as JSON: answer, score, start_char, end_char), ``n_windows``, and with
gold answers ``exact_match`` and ``f1``. Summary: ``questions``, ``answered``, and with gold answers ``evaluation``
(SQuAD exact match and F1, :mod:`tfsent.inference.squad_metrics`), also written to ``<stem>.metrics.json``.
"""

from __future__ import annotations

import json
import os
import pathlib
import time
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from tfsent.data.qa_windows import QAWindows, build_windows
from tfsent.data.squad import QAExample
from tfsent.inference.options import QAOptions
from tfsent.inference.predictor import Predictor, Summary, check_finite, compiled, litert_backend
from tfsent.inference.qa_inputs import open_questions
from tfsent.inference.spans import SpanOptions, predict_answers, snippet
from tfsent.inference.squad_metrics import score_question, squad_scores
from tfsent.inference.tokens import TokenRows
from tfsent.data.tokenize import load_tokenizer
from tfsent.models.facts import qa_facts, qa_window
from tfsent.models.loading import sequence_length
from tfsent.runtime import atomic


def windowing(own: int, stride: int, config, max_length: int | None, doc_stride: int | None) -> tuple[int, int]:
    """The window length and stride a QA model answers with.

    Args:
        own, stride: the model's own window and stride (:func:`tfsent.models.question_answering.window`).
        config: its config (for the position embeddings).
        max_length: ``max_length``, up to the position embeddings; None: ``own``.
        doc_stride: ``qa.doc_stride``; None: ``stride``, at most half the window.

    Returns:
        ``(window length, doc stride)``.
    """
    length = sequence_length(own, config, max_length)
    return length, doc_stride if doc_stride is not None else min(stride, length // 2)


def answer_frame(examples: Sequence[QAExample], windows: QAWindows, out: Mapping[str, np.ndarray], source,
                 qa: QAOptions, first_row: int) -> pd.DataFrame:
    """The output rows of consecutive questions, one per question, from their windows' top-k outputs.

    ``tfsent.predict`` calls it per part, ``tfsent.beam`` per block of questions gathered back from its workers.

    Args:
        examples: the questions, in input order.
        windows: their windows in order (:attr:`~tfsent.data.qa_windows.QAWindows.example` indexes ``examples``;
            only each window's question and character spans are read).
        out: the engine's outputs, one row per window: ``start_index``, ``start_logit``, ``end_index``,
            ``end_logit`` ``[windows, k]`` and ``null_logit``.
        source: the question source (:mod:`tfsent.inference.qa_inputs`): its columns, whether "no answer"
            competes and whether gold answers were given.
        qa: how answers are picked.
        first_row: the input position of ``examples[0]`` (the ``row`` column).

    Raises:
        NonFiniteError: a NaN or infinite logit (broken weights or input), naming the question.
    """
    rows = np.arange(first_row, first_row + len(examples), dtype=np.int64)
    # A window with a NaN or infinite logit makes its question's answer no answer at all: refused, naming it.
    broken = np.zeros(len(examples), bool)
    for key in ("start_logit", "end_logit", "null_logit"):
        values = np.asarray(out[key], np.float64).reshape(len(windows), -1)
        np.logical_or.at(broken, windows.example, ~np.isfinite(values).all(axis=1))
    check_finite(np.where(broken, np.nan, 0.0), "start or end logit", {"row": rows, "id": [e.id for e in examples]})
    options = SpanOptions(n_best=qa.n_best, max_answer_length=qa.max_answer_length, version_2=source.no_answer,
                          null_threshold=qa.null_threshold, alternatives=qa.alternatives)
    predictions = predict_answers(out, windows.example, windows.char_start, windows.char_end,
                                  [e.context for e in examples], options)
    cols = {"row": rows, **source.columns(examples)}
    cols.update(answer=[p.answer.text for p in predictions],
                score=np.asarray([p.answer.probability for p in predictions], np.float64),
                start_char=np.asarray([p.answer.start for p in predictions], np.int64),
                end_char=np.asarray([p.answer.end for p in predictions], np.int64))
    cols["snippet"] = [snippet(e.context, p.answer.start, p.answer.end) for e, p in zip(examples, predictions)]
    if source.no_answer:
        cols["no_answer"] = [p.no_answer for p in predictions]
    cols["alternatives"] = [json.dumps([{"answer": c.text, "score": round(c.probability, 6), "start_char": c.start,
                                         "end_char": c.end} for c in p.alternatives(qa.alternatives)],
                                       ensure_ascii=False) for p in predictions]
    cols["n_windows"] = np.bincount(windows.example, minlength=len(examples)).astype(np.int64)
    if source.labelled:
        version = "2.0" if source.no_answer else "1.1"
        scores = [score_question(p.answer.text, [a.text for a in e.answers], version) if e.labelled
                  else (np.nan, np.nan) for p, e in zip(predictions, examples)]
        cols["exact_match"] = np.asarray([s[0] for s in scores], np.float64)
        cols["f1"] = np.asarray([s[1] for s in scores], np.float64)
    return pd.DataFrame(cols)


def metrics_path(output: str | os.PathLike) -> pathlib.Path:
    """``<output stem>.metrics.json`` beside the output."""
    output = pathlib.Path(output)
    return output.with_name(f"{output.stem}.metrics.json")


class QuestionAnsweringSummary(Summary):
    """Counts answered questions and gathers predictions and gold answers for SQuAD's scores."""

    def __init__(self):
        self.questions = self.answered = 0
        self.predictions: dict[str, str] = {}
        self.golds: dict[str, list[str]] = {}
        self.version = "1.1"

    def add(self, frame: pd.DataFrame) -> None:
        self.questions += len(frame)
        self.answered += int((frame["answer"] != "").sum())
        if "gold_answers" in frame:
            self.version = "2.0" if "no_answer" in frame else "1.1"
            for qid, answer, gold in zip(frame["id"], frame["answer"], frame["gold_answers"]):
                self.predictions[str(qid)] = str(answer)
                self.golds[str(qid)] = json.loads(gold)

    def result(self) -> dict:
        result = {"questions": self.questions, "answered": self.answered}
        if self.golds:
            result["evaluation"] = {"squad_version": self.version, **squad_scores(self.predictions, self.golds,
                                                                                   self.version)}
        return result


class QuestionAnsweringPredictor(Predictor):
    """A QA folder (tfsent's, or any transformers ``...ForQuestionAnswering`` folder) under ``strategy.scope()``."""

    kind = "question_answering"
    source_kinds = ("questions",)
    groups_rows = True

    @classmethod
    def litert_settings(cls, options) -> dict:
        return {"top_k": options.qa.n_best}  # the top-k is converted with the model

    def __init__(self, ckpt_path: str | os.PathLike, strategy, *, max_length: int | None,
                 jit_compile: bool | None, steps_per_execution: int, options):
        qa = options.qa
        began = time.perf_counter()
        self.tokenizer = load_tokenizer(ckpt_path)
        self.load_seconds = {"tokenizer": time.perf_counter() - began}
        if strategy is None:  # LiteRT: the model's top-k is converted with it, so it keys the cache
            facts = qa_facts(ckpt_path)
            self.model = litert_backend(ckpt_path, self.kind, self.litert_settings(options),
                                        lambda: _load(ckpt_path, qa.n_best), self.load_seconds,
                                        int8=options.precision == "int8")
            self.max_length, self.doc_stride = windowing(*qa_window(facts), facts.config, max_length, qa.doc_stride)
            self.features = facts.features
        else:
            began = time.perf_counter()
            self.model = compiled(strategy, lambda: _load(ckpt_path, qa.n_best), jit_compile=jit_compile,
                                  steps_per_execution=steps_per_execution)
            self.load_seconds["model"] = time.perf_counter() - began
            self.max_length, self.doc_stride = windowing(self.model.max_seq_length, self.model.doc_stride,
                                                         self.model.hf_model.config, max_length, qa.doc_stride)
            self.features = self.model.features
        self.pad_values = {"input_ids": self.tokenizer.pad_token_id or 0}
        self.qa = qa

    @classmethod
    def open_source(cls, ckpt_path, input, fmt: str, options, documents: Sequence[str] | None = None):
        """Questions of a SQuAD file or a table, or of every document of a folder (``qa.questions``).

        Args:
            documents: a documents folder's files as the caller listed them (``tfsent.beam``); None: listed here.

        Raises:
            DataError: a bad input; ConfigError: options that only a classifier takes (its labels, the text column
                and kept columns of rows, the chunking of documents).
        """
        cls.refuse_options(options, ("label_column", "label_map", "keep_columns", "text_column", "keep_text",
                                     "documents"))
        return open_questions(input, fmt, options.qa, id_column=options.id_column, encoding=options.encoding,
                              documents=documents)

    @classmethod
    def job_bytes(cls, source, input: pathlib.Path) -> int:
        """The bytes of question and context text the job scores: every question re-reads its context (a SQuAD
        file's paragraph, a folder's document), so the file's bytes would undercount it several times over."""
        return source.text_bytes()

    def windows(self, examples) -> QAWindows:
        """The windows of a part's questions, at this model's window length and stride."""
        return build_windows(examples, self.tokenizer, self.max_length, self.doc_stride, features=self.features)

    def tokens(self, windows: QAWindows) -> TokenRows:
        """The windows as the engine's rows."""
        return TokenRows.from_ragged(windows.features)

    def empty_outputs(self) -> dict[str, np.ndarray]:
        k = self.qa.n_best
        return {"start_index": np.zeros((0, k), np.int32), "start_logit": np.zeros((0, k), np.float32),
                "end_index": np.zeros((0, k), np.int32), "end_logit": np.zeros((0, k), np.float32),
                "null_logit": np.zeros(0, np.float32)}

    def frame(self, out, job) -> pd.DataFrame:
        """One row per question of the part, from its windows' top-k outputs (:func:`answer_frame`)."""
        examples, windows, source = job.extra
        return answer_frame(examples, windows, out, source, self.qa, job.lo)

    @staticmethod
    def summary() -> Summary:
        return QuestionAnsweringSummary()

    @classmethod
    def finish(cls, summary: dict, output: pathlib.Path) -> None:
        """Write ``<stem>.metrics.json`` when the questions had gold answers."""
        if "evaluation" in summary:
            path = metrics_path(output)
            atomic.write_text(path, json.dumps(summary["evaluation"], indent=2) + "\n")
            summary["evaluation"]["metrics_output"] = str(path)

    @classmethod
    def describe(cls, summary: dict) -> str:
        line = f"answers for {summary['answered']} of {summary['questions']} questions"
        if "evaluation" in summary:
            e = summary["evaluation"]
            line += (f"; SQuAD v{e['squad_version']} exact match {e['exact_match']:.2f}, F1 {e['f1']:.2f} on "
                     f"{e['total']} questions ({e['metrics_output']})")
        return line


def _load(ckpt_path, top_k: int):
    from tfsent.models.question_answering import load_question_answering

    return load_question_answering(ckpt_path, top_k=top_k)
