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


def main(model, tok_dir, texts_path, out_path, batch=64, max_length=128):
    t = {"imports": time.perf_counter() - START}
    tok = Tokenizer.from_file(str(pathlib.Path(tok_dir) / "tokenizer.json"))
    tok.enable_truncation(max_length)
    tok.no_padding()  # a tokenizer.json may pad every row to a fixed length (MiniLM-L6's pads to 128)
    texts = pathlib.Path(texts_path).read_text(encoding="utf-8").splitlines()
    enc = tok.encode_batch(texts)
    t["tokenizer"] = time.perf_counter() - START
    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}
    t["session"] = time.perf_counter() - START
    order = np.argsort([len(e.ids) for e in enc], kind="stable")
    chunks = []
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
        chunks.append((rows, e / e.sum(-1, keepdims=True)))
        if s == 0:
            t["first_batch"] = time.perf_counter() - START
    probs = np.zeros((len(texts), chunks[0][1].shape[1]), np.float32)
    for rows, p in chunks:
        probs[rows] = p
    t["scored"] = time.perf_counter() - START
    with open(out_path, "w") as f:
        f.write("label_id," + ",".join(f"prob_{k}" for k in range(probs.shape[1])) + "\n")
        for p in probs:
            f.write(f"{int(p.argmax())}," + ",".join(f"{x:.7g}" for x in p) + "\n")
    t["total"] = time.perf_counter() - START
    print("ort-timing: " + json.dumps({k: round(v, 4) for k, v in t.items()}))


if __name__ == "__main__":
    main(*sys.argv[1:5])
