"""PyTorch baselines as a persistent worker, run by ``bench/run.py`` inside ``bench/.venv-torch`` (torch never enters
tfsent's venv).

Usage: ``bench/.venv-torch/bin/python bench/torch_baselines.py``, then one JSON request per line on stdin, one JSON
answer per line on stdout. The worker lives for the whole bench, so torch and the models load once and each
interleaved round costs only the timed work:

- ``{"cmd": "load", "name": key, "model_dir": ..., "random_config": {...} | null}``: load a model (the packaged
  MiniLM, or a random BertConfig model such as BERT-base) and its tokenizer under ``key``;
- ``{"cmd": "run", "name": key, "mode": "pipeline" | "batched", "texts": [...], "batch_size": n,
  "max_length": n}``: warm the mode up on its first call for that model, then time it:
  ``{"seconds": s, "rows": n}``;
- ``{"cmd": "load_onnx", "name": key, "model_dir": ..., "folder": ...}``: export a classifier folder to ONNX as
  ``bench/onnx_export.py`` does (fp32, and ``quantize_dynamic`` int8) into ``folder`` and open an ONNX Runtime
  session of each; they run as modes ``ort fp32`` and ``ort int8`` (``bench/ort_score.py``'s loop: sorted by length,
  batches padded to their longest);
- ``{"cmd": "gemm", "rows": m, "inner": k, "outer": n, "calls": c, "threads": t}``: ONNX Runtime's fp32 ``x @ w + b``
  (one MatMul and one Add, CPU provider, ``t`` intra-op threads; built and warmed up on its first request):
  ``{"seconds": s}`` for ``c`` calls;
- ``{"cmd": "info"}``: ``{"torch": version, "threads": n, "matmul_fp32": FLOP/s, "cpu_capability": "AVX512"}``;
- ``{"cmd": "ping"}``: ``{"pong": true}`` (no torch needed); ``{"cmd": "quit"}``.

An error answers ``{"error": text}`` and the worker keeps serving. Timed: texts in, label ids out, tokenization
included, the same as every TF mode.
"""

from __future__ import annotations

import json
import pathlib
import sys
import time
import traceback

_models: dict = {}
_warm: set = set()


def _load(req) -> dict:
    from transformers import (AutoModelForSequenceClassification, AutoTokenizer, BertConfig,
                              BertForSequenceClassification)

    tokenizer = AutoTokenizer.from_pretrained(req["model_dir"])
    if req.get("random_config"):
        model = BertForSequenceClassification(BertConfig(**req["random_config"], num_labels=3)).eval()
    else:
        # The packaged MiniLM is a bare BertModel: the classification head starts random, as in fine-tuning.
        model = AutoModelForSequenceClassification.from_pretrained(req["model_dir"], num_labels=3).eval()
    _models[req["name"]] = {"model": model, "tokenizer": tokenizer, "pipeline": None}
    return {"loaded": req["name"]}


def _pipeline(entry, texts, req) -> int:
    """``pipeline("text-classification")`` called on a list of strings, as its documentation shows (batch 1)."""
    if entry["pipeline"] is None:
        from transformers import pipeline

        entry["pipeline"] = pipeline("text-classification", model=entry["model"], tokenizer=entry["tokenizer"],
                                     device=-1, truncation=True, max_length=req["max_length"])
    return len(entry["pipeline"](texts))


def _batched(entry, texts, req) -> int:
    """Batches of ``batch_size``, padded to the longest in each batch, under ``torch.inference_mode``."""
    import torch

    bs, labels = req["batch_size"], []
    with torch.inference_mode():
        for i in range(0, len(texts), bs):
            enc = entry["tokenizer"](texts[i:i + bs], padding=True, truncation=True, max_length=req["max_length"],
                                     return_tensors="pt")
            labels.append(entry["model"](**enc).logits.argmax(-1))
    return len(torch.cat(labels))


def _load_onnx(req) -> dict:
    import onnx_export
    import ort_score

    folder = pathlib.Path(req["folder"])
    fp32 = onnx_export.export(pathlib.Path(req["model_dir"]), folder / f"{req['name']}.onnx")
    int8 = onnx_export.quantize(fp32)
    _models[req["name"]] = {"tokenizer": ort_score.tokenizer(req["model_dir"]),
                            "ort fp32": ort_score.session(fp32), "ort int8": ort_score.session(int8)}
    return {"loaded": req["name"], "files": [str(fp32), str(int8)]}


def _ort(kind):
    def run(entry, texts, req) -> int:
        import ort_score

        return len(ort_score.score(entry[kind], entry["tokenizer"], texts, req["batch_size"]))
    return run


MODES = {"pipeline": _pipeline, "batched": _batched, "ort fp32": _ort("ort fp32"), "ort int8": _ort("ort int8")}


def _run(req) -> dict:
    entry, fn, texts = _models[req["name"]], MODES[req["mode"]], req["texts"]
    if (req["name"], req["mode"]) not in _warm:
        fn(entry, texts[: min(len(texts), 2 * req["batch_size"])], req)
        _warm.add((req["name"], req["mode"]))
    start = time.perf_counter()
    rows = fn(entry, texts, req)
    seconds = time.perf_counter() - start
    if rows != len(texts):
        raise RuntimeError(f"{req['mode']} returned {rows} labels for {len(texts)} texts")
    return {"seconds": seconds, "rows": rows}


def _gemm(req) -> dict:
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    rows, inner, outer = int(req["rows"]), int(req["inner"]), int(req["outer"])
    key = ("gemm", rows, inner, outer, int(req["threads"]))
    if key not in _models:
        rng = np.random.default_rng(0)
        weight = (rng.standard_normal((inner, outer)) / np.sqrt(inner)).astype(np.float32)
        bias = rng.standard_normal(outer).astype(np.float32)
        graph = helper.make_graph(
            [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["y"])], "gemm",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, inner])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, outer])],
            [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(bias, "b")])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        options = ort.SessionOptions()
        options.intra_op_num_threads = int(req["threads"])
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        x = np.random.default_rng(1).standard_normal((rows, inner)).astype(np.float32)
        session.run(None, {"x": x})
        _models[key] = (session, x)
    session, x = _models[key]
    start = time.perf_counter()
    for _ in range(int(req["calls"])):
        session.run(None, {"x": x})
    return {"seconds": time.perf_counter() - start}


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


def _info(req) -> dict:
    import torch

    return {"torch": torch.__version__, "threads": torch.get_num_threads(), "matmul_fp32": matmul_rate(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability()}


HANDLERS = {"load": _load, "load_onnx": _load_onnx, "run": _run, "info": _info, "gemm": _gemm,
            "ping": lambda req: {"pong": True}}


def serve(lines, write, handlers=None) -> None:
    """Answer each JSON request line with one JSON line until ``quit`` or the end of input (``handlers``: command ->
    function, default this worker's)."""
    handlers = HANDLERS if handlers is None else handlers
    for line in lines:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
            if req.get("cmd") == "quit":
                return
            answer = handlers[req["cmd"]](req)
        except Exception as e:  # noqa: BLE001  (the bench shows the worker's error; the worker keeps serving)
            answer = {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-2000:]}
        write(json.dumps(answer) + "\n")


def main() -> int:
    def write(text):
        sys.stdout.write(text)
        sys.stdout.flush()

    serve(sys.stdin, write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
