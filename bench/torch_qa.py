"""The PyTorch side of the QA bench (``bench/qa.py``): a persistent worker in ``bench/.venv-torch`` speaking the
protocol of ``bench/torch_baselines.py``, with question-answering modes.

- ``{"cmd": "load", "name": key, "model_dir": ...}``: a ``...ForQuestionAnswering`` folder (a tfsent QA folder
  carries PyTorch-named ``model.safetensors``) and its tokenizer;
- ``{"cmd": "run", "name": key, "mode": "pipeline" | "batched", "questions": [{"question", "context"}],
  "batch_size": n, "max_length": n, "doc_stride": n}``: warm up once, then time the mode: ``{"seconds", "rows",
  "answers"}``. ``pipeline`` is ``pipeline("question-answering")`` called on the list of questions as its
  documentation shows; ``batched`` cuts the windows with the tokenizer, runs them in batches of ``batch_size``
  padded to the longest, and picks answers as ``run_qa.py`` does (``bench/qa_reference.py``): what a user writes
  by hand. Timed: questions in, answers out, tokenization included.
"""

from __future__ import annotations

import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from bench.qa_reference import postprocess  # noqa: E402
from bench.torch_baselines import _info, serve  # noqa: E402

_models: dict = {}
_warm: set = set()


def _load(req) -> dict:
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer

    _models[req["name"]] = {"model": AutoModelForQuestionAnswering.from_pretrained(req["model_dir"]).eval(),
                            "tokenizer": AutoTokenizer.from_pretrained(req["model_dir"]), "pipeline": None}
    return {"loaded": req["name"]}


def _pipeline(entry, questions, req) -> list[str]:
    if entry["pipeline"] is None:
        from transformers import pipeline

        entry["pipeline"] = pipeline("question-answering", model=entry["model"], tokenizer=entry["tokenizer"],
                                     device=-1)
    out = entry["pipeline"](question=[q["question"] for q in questions], context=[q["context"] for q in questions],
                            max_seq_len=req["max_length"], doc_stride=req["doc_stride"], max_answer_len=30)
    return [a["answer"] for a in (out if isinstance(out, list) else [out])]


def _batched(entry, questions, req) -> list[str]:
    import torch

    tok, model = entry["tokenizer"], entry["model"]
    enc = tok([q["question"] for q in questions], [q["context"] for q in questions], truncation="only_second",
              max_length=req["max_length"], stride=req["doc_stride"], return_overflowing_tokens=True,
              return_offsets_mapping=True)
    n, bs = len(enc["input_ids"]), req["batch_size"]
    keys = [k for k in ("input_ids", "token_type_ids", "attention_mask") if k in enc]
    windows: dict[int, list] = {}
    with torch.inference_mode():
        for lo in range(0, n, bs):
            rows = range(lo, min(n, lo + bs))
            width = max(len(enc["input_ids"][i]) for i in rows)
            batch = {k: torch.tensor([list(enc[k][i]) + [tok.pad_token_id if k == "input_ids" else 0]
                                      * (width - len(enc[k][i])) for i in rows]) for k in keys}
            out = model(**batch)
            for j, i in enumerate(rows):
                length = len(enc["input_ids"][i])
                offsets = [tuple(o) if s == 1 else None for o, s in zip(enc["offset_mapping"][i], enc.sequence_ids(i))]
                windows.setdefault(enc["overflow_to_sample_mapping"][i], []).append(
                    ((out.start_logits[j, :length].numpy(), out.end_logits[j, :length].numpy()), offsets))
    return [postprocess([w for w, _ in windows[q]], [o for _, o in windows[q]], questions[q]["context"], n_best=20,
                        max_answer_length=30)[0] for q in range(len(questions))]


MODES = {"pipeline": _pipeline, "batched": _batched}


def _run(req) -> dict:
    entry, fn, questions = _models[req["name"]], MODES[req["mode"]], req["questions"]
    if (req["name"], req["mode"]) not in _warm:
        fn(entry, questions[: min(len(questions), 2 * req["batch_size"])], req)
        _warm.add((req["name"], req["mode"]))
    start = time.perf_counter()
    answers = fn(entry, questions, req)
    seconds = time.perf_counter() - start
    if len(answers) != len(questions):
        raise RuntimeError(f"{req['mode']} returned {len(answers)} answers for {len(questions)} questions")
    return {"seconds": seconds, "rows": len(answers), "answers": answers}


HANDLERS = {"load": _load, "run": _run, "info": _info, "ping": lambda req: {"pong": True}}


def main() -> int:
    def write(text):
        sys.stdout.write(text)
        sys.stdout.flush()

    serve(sys.stdin, write, HANDLERS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
