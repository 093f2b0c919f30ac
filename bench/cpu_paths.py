"""Candidate CPU paths for issue 36, the model alone on tfsent's fixed bucket shapes, against ONNX Runtime fp32.

``python bench/cpu_paths.py MODEL_DIR --anchor MODEL.onnx --shapes 64x48,64x128 --modes ort,tf-xla,...``

Each mode lives in its own worker process (XLA, oneDNN and thread options are read once, at start-up, from the
environment), loads the model, builds or converts what it runs and warms up on every shape; then the driver times
the modes in interleaved rounds (``bench/rounds.py``: A B C A B C ..., medians with min-max, ratios per round) with
``--calls`` calls of one batch per round. Batches are PhraseBank 50Agree sentences padded to the bucket length, the
same arrays for every mode. Each mode's probabilities are compared with the first mode's (the anchor: ONNX Runtime
on the ``torch.onnx`` export, i.e. transformers' numbers). ``--agreement`` also labels every 50Agree sentence
(length-bucketed batches of 64, tfsent's buckets up to 128) and counts labels equal to the anchor's. Prints
markdown; writes nothing into the repository (converted models go to ``--work``).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

BUCKETS = (16, 24, 32, 40, 48, 64, 80, 96, 128)
# name -> (environment, kind, options). Environment entries are added to the worker's (XLA_FLAGS appended).
MODES = {
    "ort": ({}, "ort", {"model": "anchor"}),
    "ort-int8": ({}, "ort", {"model": "int8"}),
    "ort-2threads": ({}, "ort", {"model": "anchor", "threads": 2}),
    "tf-xla": ({}, "tf", {"precision": "float32", "jit": True}),
    "tf-xla-fastmath": ({"XLA_FLAGS": "--xla_cpu_enable_fast_math=true"}, "tf", {"precision": "float32", "jit": True}),
    "tf-xla-onednn": ({"XLA_FLAGS": "--xla_cpu_use_onednn=true"}, "tf", {"precision": "float32", "jit": True}),
    "tf-xla-xnnpack": ({"XLA_FLAGS": "--xla_cpu_use_xnnpack=true"}, "tf", {"precision": "float32", "jit": True}),
    "tf-xla-nothunk": ({"XLA_FLAGS": "--xla_cpu_use_thunk_runtime=false"}, "tf",
                       {"precision": "float32", "jit": True}),
    "tf-xla-bf16": ({}, "tf", {"precision": "mixed_bfloat16", "jit": True}),
    "tf-graph": ({}, "tf", {"precision": "float32", "jit": False}),
    "tf-graph-noonednn": ({"TF_ENABLE_ONEDNN_OPTS": "0"}, "tf", {"precision": "float32", "jit": False}),
    "tf-graph-bf16": ({}, "tf", {"precision": "mixed_bfloat16", "jit": False}),
    "tflite": ({}, "tflite", {}),
    "tf2onnx": ({}, "tf2onnx", {"optimize": False}),
    "tf2onnx-opt": ({}, "tf2onnx", {"optimize": True}),
    "tf2onnx-opt-int8": ({}, "tf2onnx", {"optimize": True, "int8": True}),
}


# ---------------------------------------------------------------------------------------------------- worker side


def _texts():
    from bench.inference import read_phrasebank

    return read_phrasebank(REPO / "data" / "financial_phrasebank" / "Sentences_50Agree.txt")


def _batch(tokenizer, texts, length):
    import numpy as np

    enc = tokenizer(list(texts), padding="max_length", truncation=True, max_length=length,
                    return_token_type_ids=True, return_tensors="np")
    return {k: enc[k].astype(np.int32) for k in ("input_ids", "attention_mask", "token_type_ids")}


def _softmax(logits):
    import numpy as np

    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _tf_runner(model_dir, precision, jit):
    import tensorflow as tf

    from tfsent.models import load_classifier
    from tfsent.runtime.precision import set_policy

    set_policy(precision, tf.distribute.get_strategy())
    clf = load_classifier(model_dir)
    step = tf.function(clf.predict_step, jit_compile=jit)

    def run(feats):
        import numpy as np

        out = step({**{k: tf.constant(v) for k, v in feats.items()},
                    "example_id": tf.range(len(feats["input_ids"]), dtype=tf.int32)})
        return np.asarray(out["probs"])
    return run


def _ort_runner(path, threads=None):  # threads: None = ORT's default (one per physical core)
    import numpy as np
    import onnxruntime as ort

    opts = ort.SessionOptions()
    if threads:
        opts.intra_op_num_threads = threads
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    types = {i.name: i.type for i in sess.get_inputs()}
    out_name = sess.get_outputs()[0].name

    def run(feats):
        feed = {k: v.astype(np.int64 if types[k] == "tensor(int64)" else np.int32) for k, v in feats.items()
                if k in types}
        out = sess.run([out_name], feed)[0]
        return out if out_name == "probs" else _softmax(out)
    return run


def _probs_function(model_dir):
    """A tf.function features -> probs over the loaded classifier (fp32), for converters."""
    import tensorflow as tf

    from tfsent.models import load_classifier

    clf = load_classifier(model_dir)
    _erf_gelu(clf)

    def probs(input_ids, attention_mask, token_type_ids):
        feats = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
        return {"probs": tf.nn.softmax(clf(feats), -1)}
    return clf, probs


def _erf_gelu(model) -> int:
    """Keras's exact GELU computes ``erfc``, which tf2onnx 1.17 writes as an ``Erfc`` node that ONNX does not have
    (the model then fails to load); the same function as ``0.5 x (1 + erf(x / sqrt 2))`` converts."""
    import math

    import tensorflow as tf
    import tf_keras

    def gelu(x):
        return 0.5 * x * (1.0 + tf.math.erf(x * (1.0 / math.sqrt(2.0))))

    replaced = 0
    for layer in model._flatten_layers(include_self=True, recursive=True):
        for name, value in list(vars(layer).items()):
            if value is tf_keras.activations.gelu:
                object.__setattr__(layer, name, gelu)
                replaced += 1
    return replaced


def _tf2onnx_model(model_dir, work: pathlib.Path, optimize: bool, int8: bool) -> pathlib.Path:
    import tensorflow as tf

    work.mkdir(parents=True, exist_ok=True)
    base = work / "tf2onnx.onnx"
    if not base.exists():
        import tf2onnx

        clf, fn = _probs_function(model_dir)
        spec = [tf.TensorSpec([None, None], tf.int32, name=n)
                for n in ("input_ids", "attention_mask", "token_type_ids")]
        tf2onnx.convert.from_function(tf.function(fn, input_signature=spec), input_signature=spec, opset=17,
                                      output_path=str(base))
    path = base
    if optimize:
        path = work / "tf2onnx.opt.onnx"
        if not path.exists():
            from onnxruntime.transformers.optimizer import optimize_model

            cfg = json.loads((pathlib.Path(model_dir) / "config.json").read_text())
            opt = optimize_model(str(base), model_type="bert_tf", num_heads=cfg["num_attention_heads"],
                                 hidden_size=cfg["hidden_size"])
            print(f"fusions: {opt.get_fused_operator_statistics()}", file=sys.stderr)
            opt.save_model_to_file(str(path))
    if int8:
        quant = path.with_suffix(".int8.onnx")
        if not quant.exists():
            from onnxruntime.quantization import QuantType, quantize_dynamic

            quantize_dynamic(str(path), str(quant), weight_type=QuantType.QInt8)
        path = quant
    return path


def _tflite_runner(model_dir, work: pathlib.Path, threads: int):
    """One TFLite model per (rows, length) shape: static shapes, XNNPACK (TFLite's default CPU delegate)."""
    import numpy as np
    import tensorflow as tf

    clf, fn = _probs_function(model_dir)
    interpreters = {}

    def interpreter(shape):
        if shape not in interpreters:
            spec = [tf.TensorSpec(shape, tf.int32, name=n) for n in ("input_ids", "attention_mask", "token_type_ids")]
            concrete = tf.function(fn, input_signature=spec).get_concrete_function()
            conv = tf.lite.TFLiteConverter.from_concrete_functions([concrete], clf)
            path = work / f"tflite-{shape[0]}x{shape[1]}.tflite"
            work.mkdir(parents=True, exist_ok=True)
            path.write_bytes(conv.convert())
            it = tf.lite.Interpreter(model_path=str(path), num_threads=threads)
            it.allocate_tensors()
            interpreters[shape] = it
        return interpreters[shape]

    def run(feats):
        it = interpreter(tuple(feats["input_ids"].shape))
        for d in it.get_input_details():
            name = next(k for k in feats if k in d["name"])
            it.set_tensor(d["index"], feats[name].astype(np.int32))
        it.invoke()
        return it.get_tensor(it.get_output_details()[0]["index"]).copy()
    return run


def worker(name: str, model_dir: str, shapes, anchor: str | None, int8: str | None, work: pathlib.Path) -> None:
    """Serve one mode: ``{"shape": i, "calls": n}`` -> seconds of ``n`` calls and the probabilities;
    ``{"labels": true}`` -> every 50Agree sentence's label and probabilities (buckets of 64 rows)."""
    import numpy as np

    import tfsent  # noqa: F401  (TF_USE_LEGACY_KERAS before TensorFlow loads)
    from tfsent.models import load_tokenizer

    _, kind, opts = MODES[name]
    threads = int(os.environ.get("CPU_PATHS_THREADS", "0")) or None
    if threads:
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    if kind == "tf":
        run = _tf_runner(model_dir, opts["precision"], opts["jit"])
    elif kind == "ort":
        run = _ort_runner(anchor if opts["model"] == "anchor" else int8, opts.get("threads") or threads)
    elif kind == "tf2onnx":
        run = _ort_runner(_tf2onnx_model(model_dir, work, opts["optimize"], opts.get("int8", False)), threads)
    else:
        run = _tflite_runner(model_dir, work, threads or os.cpu_count())
    tokenizer = load_tokenizer(model_dir)
    texts = _texts()
    batches = [_batch(tokenizer, texts[:rows], length) for rows, length in shapes]
    for b in batches:
        run(b)
    print(json.dumps({"ready": name}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        if req.get("labels"):
            lengths = np.array([len(x) for x in tokenizer(texts, truncation=True, max_length=BUCKETS[-1])["input_ids"]])
            which = np.searchsorted(BUCKETS, lengths)
            probs = np.zeros((len(texts), 3), np.float32)
            for b, length in enumerate(BUCKETS):
                rows = np.flatnonzero(which == b)
                for s in range(0, len(rows), 64):
                    chunk = rows[s:s + 64]
                    feats = _batch(tokenizer, [texts[i] for i in chunk], length)
                    pad = 64 - len(chunk)  # fixed shapes: fill the last batch with copies of its first row
                    feats = {k: np.concatenate([v, np.repeat(v[:1], pad, 0)]) for k, v in feats.items()}
                    probs[chunk] = run(feats)[:len(chunk)]
            print(json.dumps({"probs": probs.tolist()}), flush=True)
            continue
        b = batches[req["shape"]]
        start, cpu = time.perf_counter(), time.process_time()
        for _ in range(req["calls"]):
            out = run(b)
        print(json.dumps({"seconds": time.perf_counter() - start, "cpu": time.process_time() - cpu,
                          "probs": np.asarray(out).tolist()}), flush=True)


# ---------------------------------------------------------------------------------------------------- driver side


class Worker:
    def __init__(self, name, args):
        env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "TF_CPP_MIN_LOG_LEVEL": "2",
               "CPU_PATHS_THREADS": str(args.threads)}
        for k, v in MODES[name][0].items():
            env[k] = f"{env.get(k, '')} {v}".strip() if k == "XLA_FLAGS" else v
        cmd = [sys.executable, __file__, "--worker", name, args.model_dir, "--shapes", args.shapes,
               "--work", str(args.work)]
        cmd += ["--anchor", str(args.anchor)] if args.anchor else []
        cmd += ["--int8", str(args.int8)] if args.int8 else []
        args.work.mkdir(parents=True, exist_ok=True)
        self.log = args.work / f"worker-{name}.log"
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                                     stderr=open(self.log, "w"))

    def error(self) -> str:
        """The last error line the worker logged (why it failed)."""
        lines = [l for l in self.log.read_text(errors="replace").splitlines() if "Error" in l or "error" in l]
        return (lines[-1] if lines else "exited")[:300]

    def ask(self, **req):
        if req:
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"worker exited ({self.proc.wait()})")
            if line.startswith("{"):
                return json.loads(line)

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model_dir")
    p.add_argument("--anchor", type=pathlib.Path, help="the torch.onnx export (bench/onnx_export.py)")
    p.add_argument("--int8", type=pathlib.Path, help="its quantize_dynamic copy")
    p.add_argument("--shapes", default="64x48,64x128")
    p.add_argument("--modes", default="ort,tf-xla,tf-graph,tf-graph-bf16")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=2)
    p.add_argument("--agreement", action="store_true")
    p.add_argument("--threads", type=int, default=0,
                   help="intra-op threads of every runtime (0: each runtime's default); with 1, CPU seconds per "
                        "batch hardly depend on what else the shared machine runs")
    p.add_argument("--work", type=pathlib.Path, default=pathlib.Path("/tmp/tfsent-cpu-paths"))
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    if args.worker:
        worker(args.worker, args.model_dir, shapes, args.anchor and str(args.anchor), args.int8 and str(args.int8),
               args.work)
        return 0

    import numpy as np

    from bench.rounds import Mode, Spread, run_rounds, speedup
    from tfsent.runtime.execution import cpu_flags

    names = args.modes.split(",")
    workers, failed = {}, {}
    for n in names:  # one at a time: loading and compiling two models at once would only slow both
        w = Worker(n, args)
        try:
            w.ask()
            workers[n] = w
        except RuntimeError:
            failed[n] = w.error()
    names = [n for n in names if n in workers]
    flags = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in cpu_flags()]
    print(f"# CPU paths: {args.model_dir}; {args.rounds} rounds x {args.calls} calls; threads {args.threads or 'default'}; "
          f"flags {' '.join(flags)}; load {os.getloadavg()[0]:.2f}; XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}; "
          f"ONEDNN_MAX_CPU_ISA={os.environ.get('ONEDNN_MAX_CPU_ISA', '')!r}\n")
    for n, why in failed.items():
        print(f"- {n}: failed: `{why}`")
    print()
    for i, (rows, length) in enumerate(shapes):
        last, cpu = {}, {n: [] for n in names}

        def timer(n, i=i):
            def run():
                answer = workers[n].ask(shape=i, calls=args.calls)
                last[n] = np.asarray(answer["probs"])
                cpu[n].append(answer["cpu"] / args.calls)
                return answer["seconds"] / args.calls
            return run

        modes = [Mode(n, rows, timer(n)) for n in names]
        series = run_rounds(modes, args.rounds, log=lambda m: print(f"<!-- {m} -->", file=sys.stderr))
        ref = series[names[0]]
        print(f"## batch {rows} x {length} (load {os.getloadavg()[0]:.2f})\n")
        print(f"| mode | ms per batch, median (min-max) | rows/s | x {names[0]} per round | CPU ms per batch | "
              f"x {names[0]} in CPU time | max abs prob diff | labels equal |\n|---|---|---|---|---|---|---|---|")
        for n in names:
            s = series[n]
            diff = float(np.max(np.abs(last[n] - last[names[0]])))
            same = float(np.mean(last[n].argmax(-1) == last[names[0]].argmax(-1)))
            t = s.time
            c = Spread.of(cpu[n])
            per_round = Spread.of([a / b for a, b in zip(cpu[names[0]], cpu[n])])
            print(f"| {n} | {t.median * 1e3:.0f} ({t.low * 1e3:.0f}-{t.high * 1e3:.0f}) | {s.rate.median:.0f} | "
                  f"{speedup(s, ref)} | {c.median * 1e3:.0f} ({c.low * 1e3:.0f}-{c.high * 1e3:.0f}) | {per_round} | "
                  f"{diff:.2g} | {same:.1%} |")
        print()
    if args.agreement:
        labels = {n: np.asarray(workers[n].ask(labels=True)["probs"]) for n in names}
        ref = labels[names[0]]
        print(f"## labels on all {len(ref)} PhraseBank 50Agree sentences against {names[0]}\n")
        print("| mode | labels equal | rows that differ | max abs prob diff |\n|---|---|---|---|")
        for n, pr in labels.items():
            same = pr.argmax(-1) == ref.argmax(-1)
            print(f"| {n} | {same.mean():.2%} | {int((~same).sum())} | {np.max(np.abs(pr - ref)):.2g} |")
        print()
    for w in workers.values():
        w.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
