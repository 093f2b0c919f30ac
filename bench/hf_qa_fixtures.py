"""Write the PyTorch-format question-answering fixtures of ``tests/fixtures/hf_qa/`` with real torch and
transformers.

Run in the optional torch environment (``bench/.venv-torch``), never in tfsent's own::

    bench/.venv-torch/bin/python bench/hf_qa_fixtures.py          # rewrites tests/fixtures/hf_qa/

Each fixture is the QA twin of a classifier fixture of ``bench/hf_fixtures.py``: the same architecture, tokenizer
and weight format, with a randomly initialised ``*ForQuestionAnswering`` head instead. ``expected.json`` holds the
questions and contexts (written here; no data set is copied), every window as transformers' tokenizer cuts it
(``max_seq_length`` = the model's length, ``doc_stride`` 16), the start and end logits PyTorch computes for each, the
answers of run_qa.py's post-processing of those logits (``bench/qa_reference.py``) and, for the questions whose
context fits one window, the answers of transformers' own ``pipeline("question-answering")`` (``max_answer_len``
30, ``align_to_words=False``: character spans as the tokenizer's offsets give them).
"""

from __future__ import annotations

import json
import pathlib
import sys

import torch
import transformers

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from bench.hf_fixtures import CORPUS, FIXTURES, TINY, max_length, new_folder, save_weights  # noqa: E402
from bench.qa_reference import postprocess  # noqa: E402

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "hf_qa"
DOC_STRIDE, N_BEST, MAX_ANSWER = 16, 20, 30
LONG = " ".join(CORPUS[:12])  # several windows at 64 tokens
QUESTIONS = [
    ("short-0", "What rose?", "Operating profit rose to EUR 13.1 mn from EUR 8.7 mn."),
    ("short-1", "Who cut its outlook?", "Net sales decreased by 5 percent and the company cut its outlook."),
    ("short-2", "Why was the merger cancelled?", "The merger was cancelled after regulators raised concerns."),
    ("long-0", "What does the board propose?", LONG),
    ("long-1", "How much is the new contract worth?", LONG),
    ("long-2", "Why was cash flow negative?", LONG + " " + LONG),
    ("short-3", "Ünïcödé?", "Ünïcödé façade: naïve café, 北京 and emoji 🙂 in one line."),
]


def windows_of(tokenizer, length: int):
    question_first = tokenizer.padding_side == "right"
    questions, contexts = [q for _, q, _ in QUESTIONS], [c for _, _, c in QUESTIONS]
    return tokenizer(questions if question_first else contexts, contexts if question_first else questions,
                     truncation="only_second" if question_first else "only_first", max_length=length,
                     stride=DOC_STRIDE, return_overflowing_tokens=True, return_offsets_mapping=True)


def write(name: str, spec) -> None:
    config_name, model_name, extra, make_tokenizer, how, keep = spec
    model_name = model_name.replace("ForSequenceClassification", "ForQuestionAnswering")
    folder = OUT / name
    tokenizer = new_folder(folder, make_tokenizer, keep)
    torch.manual_seed(sum(map(ord, name)) + 1)
    # initializer_range 0.1, not the classifiers' 0.5: span logits differ between tokens anyway, and smaller
    # activations keep float32 rounding (PyTorch's kernels against TensorFlow's) below the 1e-5 the test asks.
    tiny = {k: v for k, v in TINY.items() if k not in ("num_labels", "id2label", "label2id")}
    tiny["initializer_range"] = 0.1
    config = getattr(transformers, config_name)(vocab_size=len(tokenizer), **{**tiny, **extra})
    model = getattr(transformers, model_name)(config).eval()
    save_weights(folder, model, model_name, how)
    loaded = transformers.AutoTokenizer.from_pretrained(str(folder))
    reloaded = transformers.AutoModelForQuestionAnswering.from_pretrained(str(folder)).eval()
    length = max_length(config)
    enc = windows_of(loaded, length)
    context_index = 1 if loaded.padding_side == "right" else 0
    windows, per_question = [], {}
    for i, ids in enumerate(enc["input_ids"]):
        q = enc["overflow_to_sample_mapping"][i]
        feed = {"input_ids": torch.tensor([ids]), "attention_mask": torch.tensor([enc["attention_mask"][i]])}
        if "token_type_ids" in enc and config.model_type not in ("roberta", "xlm-roberta", "camembert", "mpnet",
                                                                 "distilbert"):
            feed["token_type_ids"] = torch.tensor([enc["token_type_ids"][i]])
        with torch.no_grad():
            out = reloaded(**feed)
        start, end = out.start_logits[0].numpy(), out.end_logits[0].numpy()
        offsets = [tuple(o) if s == context_index else None for o, s in zip(enc["offset_mapping"][i],
                                                                             enc.sequence_ids(i))]
        windows.append({"question": int(q), "input_ids": list(ids), "start_logits": start.tolist(),
                        "end_logits": end.tolist()})
        per_question.setdefault(int(q), []).append(((start, end), offsets))
    answers = {}
    for q, (qid, _, context) in enumerate(QUESTIONS):
        text, prob, a, b = postprocess([w for w, _ in per_question[q]], [o for _, o in per_question[q]], context,
                                       n_best=N_BEST, max_answer_length=MAX_ANSWER)
        answers[qid] = {"answer": text, "start_char": a, "end_char": b, "score": prob}
    qa = transformers.pipeline("question-answering", model=reloaded, tokenizer=loaded, device=-1)
    pipeline = {}
    for q, (qid, question, context) in enumerate(QUESTIONS):
        if len(per_question[q]) == 1:
            got = qa(question=question, context=context, max_seq_len=length, doc_stride=DOC_STRIDE,
                     max_answer_len=MAX_ANSWER, align_to_words=False)
            pipeline[qid] = {"answer": got["answer"], "start_char": got["start"], "end_char": got["end"],
                             "score": got["score"]}
    expected = {"questions": [{"id": i, "question": q, "context": c} for i, q, c in QUESTIONS],
                "max_seq_length": length, "doc_stride": DOC_STRIDE, "n_best": N_BEST,
                "max_answer_length": MAX_ANSWER, "windows": windows, "answers": answers, "pipeline": pipeline,
                "weights": how, "model_type": config.model_type,
                "written_by": f"torch {torch.__version__}, transformers {transformers.__version__}"}
    (folder / "expected.json").write_text(json.dumps(expected, indent=1, ensure_ascii=False) + "\n",
                                          encoding="utf-8")
    agree = sum(pipeline[k]["answer"] == answers[k]["answer"] for k in pipeline)
    print(f"{name}: {len(windows)} windows; pipeline = run_qa.py on {agree} of {len(pipeline)} one-window "
          f"questions; {sorted(p.name for p in folder.iterdir())}")


def main(names) -> None:
    for name in names or FIXTURES:
        write(name, FIXTURES[name])


if __name__ == "__main__":
    main(sys.argv[1:])
