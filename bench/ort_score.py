"""The short script a speed-minded user scores a text file with: ONNX Runtime, CPU provider, default options.

``python bench/ort_score.py MODEL.onnx TOKENIZER_DIR texts.txt out.csv``: the folder's fast tokenizer
(``tokenizers``, truncation at 128), rows sorted by length and scored in batches of 64 padded to the longest,
softmax, written in input order. Needs only ``onnxruntime``, ``tokenizers`` and numpy (no torch, no TensorFlow),
so it runs in either venv. Prints one ``ort-timing:`` line of JSON (seconds from process start: imports,
tokenizer, session, first batch, scoring, total) for the whole-process rows of issue 36.
"""

import time

START = time.perf_counter()

import json  # noqa: E402
import pathlib  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402


def tokenizer(tok_dir, max_length=128):
    """The folder's fast tokenizer, truncating at ``max_length``, without the padding a tokenizer.json may fix."""
    tok = Tokenizer.from_file(str(pathlib.Path(tok_dir) / "tokenizer.json"))
    tok.enable_truncation(max_length)
    tok.no_padding()  # a tokenizer.json may pad every row to a fixed length (MiniLM-L6's pads to 128)
    return tok


def session(model, threads=0):
    """An ONNX Runtime session on the CPU provider, default options (``threads`` > 0 sets the intra-op pool)."""
    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    return ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])


def score(sess, tok, texts, batch=64, on_first=None):
    """Probabilities of ``texts`` in input order: tokenized, sorted by length, batches of ``batch`` padded to their
    longest row, softmax."""
    enc = tok.encode_batch(list(texts))
    names = {i.name for i in sess.get_inputs()}
    order = np.argsort([len(e.ids) for e in enc], kind="stable")
    probs = None
    for s in range(0, len(order), batch):
        rows = order[s:s + batch]
        width = max(len(enc[i].ids) for i in rows)
        feed = {k: np.zeros((len(rows), width), np.int64) for k in ("input_ids", "attention_mask", "token_type_ids")}
        for j, i in enumerate(rows):
            n = len(enc[i].ids)
            feed["input_ids"][j, :n], feed["attention_mask"][j, :n] = enc[i].ids, 1
            feed["token_type_ids"][j, :n] = enc[i].type_ids
        logits = sess.run(None, {k: v for k, v in feed.items() if k in names})[0]
        e = np.exp(logits - logits.max(-1, keepdims=True))
        if probs is None:
            probs = np.zeros((len(texts), logits.shape[1]), np.float32)
        probs[rows] = e / e.sum(-1, keepdims=True)
        if s == 0 and on_first is not None:
            on_first()
    return probs


def main(model, tok_dir, texts_path, out_path, batch=64, max_length=128):
    t = {"imports": time.perf_counter() - START}
    tok = tokenizer(tok_dir, max_length)
    texts = pathlib.Path(texts_path).read_text(encoding="utf-8").splitlines()
    t["tokenizer"] = time.perf_counter() - START
    sess = session(model)
    t["session"] = time.perf_counter() - START
    probs = score(sess, tok, texts, batch, on_first=lambda: t.setdefault("first_batch", time.perf_counter() - START))
    t["scored"] = time.perf_counter() - START
    with open(out_path, "w") as f:
        f.write("label_id," + ",".join(f"prob_{k}" for k in range(probs.shape[1])) + "\n")
        for p in probs:
            f.write(f"{int(p.argmax())}," + ",".join(f"{x:.7g}" for x in p) + "\n")
    t["total"] = time.perf_counter() - START
    print("ort-timing: " + json.dumps({k: round(v, 4) for k, v in t.items()}))


if __name__ == "__main__":
    main(*sys.argv[1:5])
