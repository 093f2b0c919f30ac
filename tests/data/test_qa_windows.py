"""Question + context windows with the real MiniLM-L6 WordPiece tokenizer: exact tokens, offsets and labels."""

import numpy as np
import pytest

from tfsent.data.errors import DataError
from tfsent.data.qa_windows import build_windows
from tfsent.data.squad import Answer, QAExample
from tfsent.data.tokenize import load_tokenizer

CONTEXT = ("Denver Broncos defeated the Carolina Panthers 24-10 in Super Bowl 50, played at Levi's Stadium in "
           "Santa Clara.")


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("minilm_l6")


def _example(qid, question, answer=None):
    answers = (Answer(answer, CONTEXT.index(answer)),) if answer else ()
    return QAExample(qid, question, CONTEXT, answers, where=f"test {qid}")


def test_long_contexts_become_overlapping_windows_with_answer_labels(tokenizer):
    examples = [_example("q0", "Who won Super Bowl 50?", "Denver Broncos"),
                _example("q1", "Where was it played?", "Levi's Stadium")]
    w = build_windows(examples, tokenizer, max_seq_length=24, doc_stride=4)
    assert w.example.tolist() == [0, 0, 1, 1] and w.window.tolist() == [0, 1, 0, 1]
    assert tokenizer.convert_ids_to_tokens(w.features["input_ids"][1]) == [
        "[CLS]", "who", "won", "super", "bowl", "50", "?", "[SEP]", "bowl", "50", ",", "played", "at", "levi", "'",
        "s", "stadium", "in", "santa", "clara", ".", "[SEP]"]
    # Window 0 ends with "bowl 50 , played": the 4 tokens window 1 starts with (doc_stride).
    assert tokenizer.convert_ids_to_tokens(w.features["input_ids"][0])[-5:-1] == ["bowl", "50", ",", "played"]
    # The answer's tokens where the window holds it whole, else [CLS] (0) for both.
    assert w.start_positions.tolist() == [8, 0, 0, 11] and w.end_positions.tolist() == [9, 0, 0, 14]
    for i, answer in ((0, "Denver Broncos"), (3, "Levi's Stadium")):
        s, e = w.start_positions[i], w.end_positions[i]
        assert CONTEXT[w.char_start[i][s]:w.char_end[i][e]] == answer
    # Offsets: -1 outside the context; inside, each token's characters.
    assert w.char_start[1][:8].tolist() == [-1] * 8 and w.char_start[1][-1] == -1
    assert CONTEXT[w.char_start[1][8]:w.char_end[1][20]] == "Bowl 50, played at Levi's Stadium in Santa Clara."
    assert w.context_mask(3).sum() == 12
    assert set(w.features) == {"input_ids", "attention_mask", "token_type_ids"}
    assert w.features["token_type_ids"][0] == [0] * 8 + [1] * 16


def test_an_answer_on_the_window_edge_and_unlabelled_questions(tokenizer):
    # "played" is the last context token of window 0 (run_qa.py walks past it into [SEP]; here it stays on it).
    w = build_windows([_example("q", "Who won Super Bowl 50?", "played")], tokenizer, 24, 4)
    assert (w.start_positions[0], w.end_positions[0]) == (22, 22)
    assert CONTEXT[w.char_start[0][22]:w.char_end[0][22]] == "played"
    plain = build_windows([_example("u", "Who won?")], tokenizer, 64, 16, features=("input_ids", "attention_mask"))
    assert len(plain) == 1 and plain.start_positions.tolist() == [0] and set(plain.features) == {
        "input_ids", "attention_mask"}
    assert len(build_windows([], tokenizer, 64, 16)) == 0


def test_a_question_that_leaves_no_room_is_named(tokenizer):
    long = _example("long-one", "what " * 20 + "?")
    with pytest.raises(DataError, match=r"test long-one: the question takes 21 tokens, which leaves 0 tokens "
                                        r"of context per window of max_seq_length=24"):
        build_windows([long], tokenizer, 24, 4)
    # Room for 9 context tokens, but windows that overlap by 10 would never advance.
    short = _example("s", "who " * 12)
    with pytest.raises(DataError, match=r"leaves 9 tokens of context .* more than doc_stride=10"):
        build_windows([short], tokenizer, 24, 10)
    with pytest.raises(DataError, match="doc_stride=30 must be >= 0 and below max_seq_length=24"):
        build_windows([short], tokenizer, 24, 30)
    # 9 context tokens a window, 8 shared: each window moves one token on (23 context tokens -> 16 windows).
    tight = build_windows([short], tokenizer, 24, 8)
    assert np.array_equal(tight.window, np.arange(16)) and not tight.example.any()
