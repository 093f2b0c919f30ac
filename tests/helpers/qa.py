"""The tiny question-answering model the tests share, and the shipped SQuAD subset they ask it about."""

import json
import pathlib

import tf_keras

from tfsent.models import architectures, load_tokenizer

from helpers.architectures import tiny_hf_config

#: 56 questions of 4 SQuAD v1.1 articles (``data/squad/SOURCE.md``).
TINY_SQUAD = pathlib.Path(__file__).resolve().parents[2] / "data" / "squad" / "tiny-v1.1.json"


def tiny_qa_model(folder: pathlib.Path) -> pathlib.Path:
    """A seeded random tiny BERT ``...ForQuestionAnswering`` folder that transformers writes, with the MiniLM
    WordPiece vocabulary (SQuAD questions fit its 64-token windows)."""
    tf_keras.utils.set_random_seed(5)
    config = tiny_hf_config("bert", labels=("LABEL_0", "LABEL_1"), head="ForQuestionAnswering")
    model = architectures.get("bert").task_cls("ForQuestionAnswering")(config)
    model.build_in_name_scope()
    model.save_pretrained(str(folder))
    load_tokenizer("minilm_l6").save_pretrained(str(folder))
    return folder


#: Edits of the shipped SQuAD subset that make it a bad input, and the one-line error each gives (the first question
#: is read before any model loads, the others while the questions are read or cut into windows).
BAD_SQUAD = [
    (lambda d: d["data"][0]["paragraphs"][0]["qas"][0]["answers"][0].update(answer_start=3),
     r"question 5733be284776f41900661182: answer 0 'Saint Bernadette Soubirous' is not at answer_start=3"),
    (lambda d: d["data"][0]["paragraphs"][0]["qas"][1].update(question=" "),
     r"question 5733be284776f4190066117f: empty question"),
    (lambda d: d["data"][1]["paragraphs"][0].update(context=""), r"paragraph 0: empty context"),
    (lambda d: d["data"][0]["paragraphs"][0]["qas"][2].update(question="why " * 80),
     r"question 5733be284776f41900661180: the question takes 80 tokens"),
]


def edited_squad(path: pathlib.Path, edit) -> pathlib.Path:
    """The shipped SQuAD subset with ``edit`` applied to its JSON, written to ``path``."""
    data = json.loads(TINY_SQUAD.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    return path


def squad_v2(path: pathlib.Path) -> pathlib.Path:
    """The shipped subset as a SQuAD v2.0 file whose first 3 questions have no answer (53 HasAns, 3 NoAns)."""

    def no_answers(data):
        data["version"] = "v2.0"
        for qa in data["data"][0]["paragraphs"][0]["qas"][:3]:
            qa.update(answers=[], is_impossible=True)

    return edited_squad(path, no_answers)
