"""python -m tfsent.export on a QA model: a token-id SavedModel returning each window's top-k starts and ends, whose
answers, picked on the host with tfsent.inference.spans, are tfsent.predict's."""

import json
import pathlib

import numpy as np
import pandas as pd
import tensorflow as tf

from tfsent.data.qa_windows import build_windows
from tfsent.data.squad import QAExample
from tfsent.inference.driver import predict
from tfsent.inference.options import PredictOptions, QAOptions
from tfsent.inference.spans import SpanOptions, predict_answers
from tfsent.models import load_tokenizer

from helpers.commands import run

QA = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "hf_qa" / "bert_legacy_bin"


def test_an_exported_qa_model_answers_as_predict(tmp_path):
    expected = json.loads((QA / "expected.json").read_text(encoding="utf-8"))
    out = tmp_path / "export"
    done = run(["-m", "tfsent.export", f"ckpt_path={QA}", f"output={out}", f"hydra.run.dir={tmp_path / 'hydra'}"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "exporting a token-id signature" in done.stdout and "top_k 20 per window" in done.stdout
    meta = json.loads((out / "tfsent_export.json").read_text())
    assert meta["outputs"] == ["start_index", "start_logit", "end_index", "end_logit", "null_logit"]
    assert meta["inputs"] == ["input_ids", "attention_mask", "token_type_ids"] and meta["top_k"] == 20

    # The host side of serving: cut windows with the exported tokenizer, run the SavedModel, pick answers.
    served = tf.saved_model.load(str(out)).signatures["serving_default"]
    tokenizer = load_tokenizer(out / "tokenizer")
    questions = [QAExample(q["id"], q["question"], q["context"]) for q in expected["questions"]]
    windows = build_windows(questions, tokenizer, expected["max_seq_length"], expected["doc_stride"],
                            features=meta["inputs"])
    tops = []
    for i in range(len(windows)):
        feed = {k: tf.constant([v[i]], tf.int32) for k, v in windows.features.items()}
        tops.append({k: v.numpy()[0] for k, v in served(**feed).items()})
    top = {k: np.stack([t[k] for t in tops]) for k in tops[0]}
    answers = predict_answers(top, windows.example, windows.char_start, windows.char_end,
                              [q.context for q in questions], SpanOptions(max_answer_length=30))

    (tmp_path / "q.jsonl").write_text("".join(json.dumps(q) + "\n" for q in expected["questions"]))
    predict(QA, tmp_path / "q.jsonl", tmp_path / "answers.csv",
            PredictOptions(strategy="cpu", progress=False, max_length=expected["max_seq_length"],
                           qa=QAOptions(doc_stride=expected["doc_stride"])))
    frame = pd.read_csv(tmp_path / "answers.csv", keep_default_na=False)
    assert [a.answer.text for a in answers] == frame["answer"].tolist()
    assert [a.answer.start for a in answers] == frame["start_char"].tolist()
