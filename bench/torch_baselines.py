"""PyTorch baselines, run by ``bench/run.py`` inside ``bench/.venv-torch`` (torch never enters tfsent's venv).

Usage: ``bench/.venv-torch/bin/python bench/torch_baselines.py JOB.json`` prints one JSON object:
``{"torch": version, "threads": n, "matmul_fp32": FLOP/s, "results": [{"name", "rows", "seconds", "note"}, ...]}``.

The job file holds ``texts``, ``model_dir`` (config + tokenizer, and weights when ``random_config`` is null),
``random_config`` (BertConfig fields for a randomly initialised model, e.g. BERT-base), ``label`` (for the
mode names), ``batch_size``, ``max_length``, ``pipeline_rows`` (the pipeline is slow: it runs on a prefix).

Timed: texts in, label ids out, tokenization included, model loading and a short warm-up excluded, the same
for every mode here and in the TF modes.
"""

from __future__ import annotations

import json
import sys
import time


def _model(job):
    from transformers import AutoModelForSequenceClassification, BertConfig, BertForSequenceClassification

    if job["random_config"]:
        return BertForSequenceClassification(BertConfig(**job["random_config"], num_labels=3)).eval()
    # The packaged MiniLM is a bare BertModel: the classification head starts random, as in fine-tuning.
    return AutoModelForSequenceClassification.from_pretrained(job["model_dir"], num_labels=3).eval()


def pipeline_mode(job, model, tokenizer) -> dict:
    """``pipeline("text-classification")`` called on a list of strings, as its documentation shows."""
    from transformers import pipeline

    clf = pipeline("text-classification", model=model, tokenizer=tokenizer, device=-1,
                   truncation=True, max_length=job["max_length"])
    texts = job["texts"][: job["pipeline_rows"]]
    clf(texts[:8])
    start = time.perf_counter()
    out = clf(texts)
    seconds = time.perf_counter() - start
    assert len(out) == len(texts)
    return {"name": f"HF pipeline, torch ({job['label']})", "rows": len(texts), "seconds": seconds,
            "note": "pipeline(texts), default batch_size=1"}


def batched_mode(job, model, tokenizer) -> dict:
    """Batches of ``batch_size``, padded to the longest in each batch, under ``torch.inference_mode``."""
    import torch

    texts, bs = job["texts"], job["batch_size"]

    def run(items):
        labels = []
        with torch.inference_mode():
            for i in range(0, len(items), bs):
                enc = tokenizer(items[i:i + bs], padding=True, truncation=True, max_length=job["max_length"],
                                return_tensors="pt")
                labels.append(model(**enc).logits.argmax(-1))
        return torch.cat(labels)

    run(texts[: 2 * bs])
    start = time.perf_counter()
    out = run(texts)
    seconds = time.perf_counter() - start
    assert len(out) == len(texts)
    return {"name": f"batched torch ({job['label']})", "rows": len(texts), "seconds": seconds,
            "note": f"batch {bs}, pad to longest in batch, inference_mode"}


def matmul_rate(size: int = 1024, chain: int = 8, repeats: int = 5) -> float:
    """torch's fp32 matmul rate in FLOP/s, measured as ``bench.flops.matmul_rate`` measures TF's (best of
    ``repeats`` calls of ``chain`` independent ``size x size`` products): the ceiling the torch baselines run under."""
    import torch

    pairs = [(torch.randn(size, size), torch.randn(size, size)) for _ in range(chain)]

    def products():
        return sum(float(torch.mm(x, y).sum()) for x, y in pairs)

    products()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        products()
        best = min(best, time.perf_counter() - start)
    return 2.0 * chain * size ** 3 / best


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    import torch
    from transformers import AutoTokenizer

    with open(argv[1]) as f:
        job = json.load(f)
    tokenizer = AutoTokenizer.from_pretrained(job["model_dir"])
    model = _model(job)
    results = []
    for mode in job["modes"]:
        results.append({"pipeline": pipeline_mode, "batched": batched_mode}[mode](job, model, tokenizer))
    print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(), "matmul_fp32": matmul_rate(),
                      "results": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
