"""Question + context windows: the features an extractive QA model reads, built as the field builds them.

Each example becomes one or more windows of at most ``max_seq_length`` tokens: ``[CLS] question [SEP] context
piece [SEP]`` (the tokenizer's own special tokens and order), consecutive pieces of a long context sharing
``doc_stride`` tokens (the Hugging Face tokenizer's ``stride``, as ``run_qa.py`` and the ``question-answering``
pipeline use it). Every window keeps the character span of each context token in the original context
(``char_start``/``char_end``; -1 for question, special and padding tokens), so an answer comes back as characters of
the context, and the example it belongs to and its number within it.

Training labels follow ``run_qa.py``'s ``prepare_train_features``: a window holding the first gold answer entirely
gets the answer's first and last token; a window that does not (and a question without an answer) points both at
the window's first token (``[CLS]``, the "no answer" position).

A question so long that no window has room for more context tokens than ``doc_stride`` is an error naming the
question (the tokenizer itself would abort the process).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from tfsent.data.errors import DataError
from tfsent.data.squad import QAExample


@dataclasses.dataclass
class QAWindows:
    """The windows of a list of examples, in example order.

    Attributes:
        features: model features per window (``input_ids``, ``attention_mask``, ``token_type_ids`` as asked),
            each a list of token lists.
        example: index of each window's example in the list given to :func:`build_windows`.
        window: number of each window within its example (0, 1, ...).
        char_start, char_end: per window, ``int32 [length]`` character span of each token in its context; -1 for
            tokens outside the context.
        start_positions, end_positions: training labels (token index of the answer's first and last token, or 0).
    """

    features: dict[str, list[list[int]]]
    example: np.ndarray
    window: np.ndarray
    char_start: list[np.ndarray]
    char_end: list[np.ndarray]
    start_positions: np.ndarray
    end_positions: np.ndarray

    def __len__(self) -> int:
        return len(self.example)

    @classmethod
    def spans(cls, example: np.ndarray, window: np.ndarray, char_start: list[np.ndarray],
              char_end: list[np.ndarray]) -> QAWindows:
        """Windows as answers are picked from them: each one's question and its tokens' characters, without token
        features or training labels (scored windows gathered back from elsewhere, as ``tfsent.beam`` does)."""
        none = np.zeros(len(example), np.int64)
        return cls({}, np.asarray(example, np.int64), np.asarray(window, np.int64), list(char_start),
                   list(char_end), none, none.copy())

    def context_mask(self, i: int) -> np.ndarray:
        """``bool [length]``: which tokens of window ``i`` are context."""
        return self.char_start[i] >= 0


def concat_windows(pieces: Sequence[QAWindows]) -> QAWindows:
    """The windows of several consecutive lists of examples as one (example indices continue across pieces)."""
    if len(pieces) == 1:
        return pieces[0]
    shift = np.cumsum([0] + [int(p.example.max()) + 1 if len(p) else 0 for p in pieces[:-1]])
    names = list(pieces[0].features)
    return QAWindows({n: [row for p in pieces for row in p.features[n]] for n in names},
                     np.concatenate([p.example + s for p, s in zip(pieces, shift)]),
                     np.concatenate([p.window for p in pieces]),
                     [a for p in pieces for a in p.char_start], [a for p in pieces for a in p.char_end],
                     np.concatenate([p.start_positions for p in pieces]),
                     np.concatenate([p.end_positions for p in pieces]))


def check_window(max_seq_length: int, doc_stride: int) -> None:
    """Fail on a window length or stride that can never work.

    Raises:
        DataError: ``doc_stride`` negative or not below ``max_seq_length``.
    """
    if max_seq_length < 8:
        raise DataError(f"max_seq_length={max_seq_length} is too short for a question and a context")
    if not 0 <= doc_stride < max_seq_length:
        raise DataError(f"doc_stride={doc_stride} must be >= 0 and below max_seq_length={max_seq_length} "
                        "(it is the tokens two windows of one context share)")


def build_windows(examples: Sequence[QAExample], tokenizer, max_seq_length: int, doc_stride: int, *,
                  features: Sequence[str] = ("input_ids", "attention_mask", "token_type_ids")) -> QAWindows:
    """Tokenize examples into question + context windows.

    Args:
        examples: the questions with their contexts.
        tokenizer: a Hugging Face fast tokenizer (offsets are needed).
        max_seq_length: tokens per window, special tokens included.
        doc_stride: tokens shared by consecutive windows of one context.
        features: the token features to keep (``token_type_ids`` only where the model reads them).

    Returns:
        The windows, in example order.

    Raises:
        DataError: a slow tokenizer; a question that leaves no more than ``doc_stride`` tokens of context per
            window (naming it); an impossible window or stride.
    """
    check_window(max_seq_length, doc_stride)
    if not getattr(tokenizer, "is_fast", False):
        raise DataError("question answering needs a fast tokenizer (character offsets)")
    question_first = tokenizer.padding_side == "right"
    context_index = 1 if question_first else 0
    examples = list(examples)
    if not examples:
        return _empty(features)
    _check_questions(examples, tokenizer, max_seq_length, doc_stride)
    questions = [e.question for e in examples]
    contexts = [e.context for e in examples]
    enc = tokenizer(questions if question_first else contexts, contexts if question_first else questions,
                    truncation="only_second" if question_first else "only_first", max_length=max_seq_length,
                    stride=doc_stride, return_overflowing_tokens=True, return_offsets_mapping=True,
                    return_token_type_ids="token_type_ids" in features, padding=False, verbose=False)
    mapping = np.asarray(enc["overflow_to_sample_mapping"], dtype=np.int64)
    n = len(mapping)
    window = np.zeros(n, np.int64)
    starts, ends = np.zeros(n, np.int64), np.zeros(n, np.int64)
    char_start, char_end = [], []
    for i in range(n):
        if i and mapping[i] == mapping[i - 1]:
            window[i] = window[i - 1] + 1
        seq = enc.sequence_ids(i)
        offsets = np.asarray(enc["offset_mapping"][i], dtype=np.int64).reshape(-1, 2)
        is_context = np.fromiter((s == context_index for s in seq), bool, len(seq))
        char_start.append(np.where(is_context, offsets[:, 0], -1).astype(np.int32))
        char_end.append(np.where(is_context, offsets[:, 1], -1).astype(np.int32))
        starts[i], ends[i] = _label(examples[mapping[i]], char_start[-1], char_end[-1])
    kept = {name: list(enc[name]) for name in features if name in enc}
    return QAWindows(kept, mapping, window, char_start, char_end, starts, ends)


def _empty(features: Sequence[str]) -> QAWindows:
    none = np.zeros(0, np.int64)
    return QAWindows({name: [] for name in features}, none, none.copy(), [], [], none.copy(), none.copy())


def _check_questions(examples: list[QAExample], tokenizer, max_seq_length: int, doc_stride: int) -> None:
    lengths = [len(ids) for ids in tokenizer([e.question for e in examples], add_special_tokens=False,
                                              return_attention_mask=False, return_token_type_ids=False,
                                              verbose=False)["input_ids"]]
    room = max_seq_length - tokenizer.num_special_tokens_to_add(pair=True)
    for example, length in zip(examples, lengths):
        if room - length <= doc_stride:
            where = example.where if example.id in example.where else f"{example.where}, question {example.id!r}"
            raise DataError(f"{where}: the question takes {length} tokens, which leaves "
                            f"{max(room - length, 0)} tokens of context per window of max_seq_length="
                            f"{max_seq_length}; windows need more than doc_stride={doc_stride}: shorten the "
                            "question, or raise max_seq_length or lower doc_stride")


def _label(example: QAExample, char_start: np.ndarray, char_end: np.ndarray) -> tuple[int, int]:
    """``run_qa.py``'s training label of one window: the first answer's token span, or 0 (the window's [CLS])."""
    if not example.answers:
        return 0, 0
    answer = example.answers[0]
    context = np.flatnonzero(char_start >= 0)
    if not len(context):
        return 0, 0
    first, last = context[0], context[-1]
    if not (char_start[first] <= answer.start and char_end[last] >= answer.end):
        return 0, 0
    # The first context token that starts after the answer's start, minus one; the last that ends before its end,
    # plus one (a token straddling an edge belongs to the answer, as in run_qa.py).
    start = first + int(np.searchsorted(char_start[first:last + 1], answer.start, side="right")) - 1
    ends_ = char_end[first:last + 1]
    end = first + int(np.flatnonzero(ends_ >= answer.end)[0]) if (ends_ >= answer.end).any() else last
    return int(max(start, first)), int(end)
