"""Where the CPU spends a forward pass: tfsent's compiled ``predict_step`` and ONNX Runtime on the same batch.

``python bench/op_profile.py MODEL_DIR --onnx MODEL.onnx --length 48 --rows 64 --calls 3`` (tfsent's venv, with
``onnxruntime``): the same ``[rows, length]`` batch of PhraseBank sentences (padded, no packing, so both runtimes
compute the same thing) goes through

- ``tf-xla``, ``tf-graph`` (fp32) and ``tf-graph-bf16``: ``tf.function(model.predict_step)``, as the engine runs it;
- ``ort``: ``onnxruntime.InferenceSession`` with default options (CPU provider), ``--onnx`` files, each its own mode.

Each mode is warmed up; then the runtime's own profiler splits a call by operator class (:func:`op_type_class`:
matmul, GELU, softmax, layer norm, gathers, layout, other elementwise): ONNX Runtime's ``enable_profiling``,
TensorFlow's profiler for graph mode (one event per kernel), and for XLA its thunk events joined with the optimised
HLO it dumps (a fusion is classed by the TensorFlow ops it came from). XLA's thunk events cover a dot's run time
only with one intra-op thread (``--threads 1``). ``perf record`` then samples the process over ``--calls`` calls,
split by shared object (generated code, the runtime's library, its framework, Python, the OS): the framework's
share per call. Prints markdown; writes nothing into the repository.
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

# perf's samples by shared object: XLA's and oneDNN's kernels are generated at run time, so they have no symbol;
# what perf can split is generated code against the runtimes' own libraries, Python and the operating system.
DSO_CLASSES = [
    ("generated code (XLA kernels, oneDNN JIT)", r"^\[JIT\]|perf-\d+\.map"),
    ("ONNX Runtime library (MLAS kernels, executor)", r"onnxruntime"),
    ("TensorFlow kernels (libtensorflow_cc: Eigen, TF ops, XLA runtime)", r"libtensorflow_cc"),
    ("TensorFlow framework (executor, eager, thread pool)", r"libtensorflow_framework|_pywrap"),
    ("Python interpreter", r"python|libpython"),
    ("libc, kernel", r"libc|kernel|ld-linux|libm|libgomp|vdso"),
]


def first_match(table: list[tuple[str, str]], text: str, default: str) -> str:
    """The name of the first ``(name, regular expression)`` of ``table`` that matches ``text``."""
    return next((name for name, pattern in table if re.search(pattern, text)), default)


def batch(texts, tokenizer, rows: int, length: int):
    """``rows`` PhraseBank sentences padded (or cut) to ``length``: int32 features plus ``example_id``."""
    import numpy as np

    enc = tokenizer(list(texts[:rows]), padding="max_length", truncation=True, max_length=length,
                    return_token_type_ids=True, return_tensors="np")
    feats = {k: enc[k].astype(np.int32) for k in ("input_ids", "attention_mask", "token_type_ids")}
    feats["example_id"] = np.arange(rows, dtype=np.int32)
    return feats


def tf_mode(model_dir: str, precision: str, jit: bool, feats):
    import tensorflow as tf

    from tfsent.models import load_classifier
    from tfsent.runtime.precision import set_policy

    strategy = tf.distribute.get_strategy()
    set_policy(precision, strategy)
    clf = load_classifier(model_dir)
    set_policy("float32", strategy)
    step = tf.function(clf.predict_step, jit_compile=jit)
    inputs = {k: tf.constant(v) for k, v in feats.items()}

    def call():
        return tf.nest.map_structure(lambda t: t.numpy(), step(inputs))["probs"]
    return call


def ort_mode(path: str, feats, profile_prefix: str | None = None, threads: int = 0):
    import numpy as np
    import onnxruntime as ort

    opts = ort.SessionOptions()
    if threads:
        opts.intra_op_num_threads = threads
    if profile_prefix:
        opts.enable_profiling = True
        opts.profile_file_prefix = profile_prefix
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    names = {i.name: i.type for i in sess.get_inputs()}
    feed = {k: v.astype(np.int64 if names[k] == "tensor(int64)" else np.int32) for k, v in feats.items()
            if k in names}

    def call():
        logits = sess.run(None, feed)[0]
        e = np.exp(logits - logits.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)
    return call, sess


def perf_classes(call, calls: int, freq: int = 1999) -> tuple[float, dict[str, float]]:
    """Seconds per call, and the share of perf's samples per :data:`DSO_CLASSES`, over ``calls`` calls."""
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "perf.data")
        proc = subprocess.Popen(["perf", "record", "-q", "-F", str(freq), "-p", str(os.getpid()), "-o", data],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)
        start = time.perf_counter()
        for _ in range(calls):
            call()
        seconds = (time.perf_counter() - start) / calls
        proc.send_signal(signal.SIGINT)
        proc.wait()
        out = subprocess.run(["perf", "report", "-i", data, "--stdio", "--no-children", "--sort", "dso",
                              "--percent-limit", "0.05", "-q"], capture_output=True, text=True).stdout
        if os.environ.get("OP_PROFILE_DUMP"):
            pathlib.Path(os.environ["OP_PROFILE_DUMP"]).write_text(out)
    shares: dict[str, float] = collections.Counter()
    for line in out.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+(.+?)\s*$", line)
        if m:
            shares[first_match(DSO_CLASSES, m.group(2), "other")] += float(m.group(1))
    return seconds, dict(shares)


def ort_op_shares(profile_json: str) -> dict[str, float]:
    """ONNX Runtime profiler: share of node time per op type (the session's own kernels only)."""
    events = json.load(open(profile_json))
    per = collections.Counter()
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            per[e.get("args", {}).get("op_name", "?")] += e["dur"]
    total = sum(per.values()) or 1
    return {k: v / total for k, v in per.most_common(14)}


OP_TYPE_CLASSES = [
    ("matmul", r"MatMul|Gemm|Einsum|Attention"),  # ORT's fused Attention is mostly its two products
    ("erf / GELU", r"Gelu|Erf"),
    ("exp / softmax", r"Softmax|Exp"),
    ("layer norm", r"LayerNorm|Mean|SquaredDifference|Rsqrt|Sqrt|Pow|ReduceMean|FusedBatchNorm"),
    ("gather / embeddings", r"Gather|Embed|ResourceGather"),
    ("transpose / copy", r"Transpose|Reshape|Concat|Slice|Identity|Squeeze|Unsqueeze|Expand|Tile|Pack|Copy"),
    ("quantize / cast", r"Quantize|Cast"),
]


def op_type_class(op: str) -> str:
    """The class of an ONNX or TensorFlow op type (``MatMul``, ``_MklNativeFusedMatMul``, ``BiasGelu`` ...)."""
    return first_match(OP_TYPE_CLASSES, op, "elementwise (other)")


def by_class(ops: dict[str, float]) -> dict[str, float]:
    out = collections.Counter()
    for op, share in ops.items():
        out[op_type_class(op)] += share
    return dict(out.most_common())


def hlo_classes(dump_dir: str) -> dict[str, str]:
    """XLA instruction name -> class, from the optimised HLO XLA dumped (``--xla_dump_to``): a dot is a matmul;
    a fusion is named for the TensorFlow ops it came from (its ``op_name`` metadata)."""
    out = {}
    for path in glob.glob(f"{dump_dir}/*cpu_after_optimizations.txt"):
        for line in open(path):
            m = re.match(r"\s*(?:ROOT )?%([\w.\-]+) = .*? (\w[\w\-]*)\(", line)
            if not m:
                continue
            name, op = m.groups()
            meta = re.search(r'op_name="([^"]*)"', line)
            out[name] = hlo_class(op, meta.group(1) if meta else "")
            out[name + ".clone"] = out[name]
    return out


def hlo_class(op: str, op_name: str) -> str:
    if op == "dot" or op == "convolution":
        return "matmul"
    for cls, pattern in (("layer norm", r"LayerNorm"), ("erf / GELU", r"intermediate|[Gg]elu|Erf"),
                         ("exp / softmax", r"[Ss]oftmax|attention/self/(?!query|key|value)"),
                         ("gather / embeddings", r"embeddings|[Gg]ather"), ("reduce (head, argmax)", r"ArgMax|Max")):
        if re.search(pattern, op_name):
            return cls
    if op in ("transpose", "copy", "bitcast", "reshape", "concatenate", "slice"):
        return "transpose / copy"
    return "elementwise (other)" if op == "fusion" else op


def tf_op_shares(call, calls: int, classes: dict[str, str] | None = None) -> dict[str, float]:
    """TensorFlow's profiler: share of kernel time per op type (graph mode), or per class of XLA instruction
    (``classes`` from :func:`hlo_classes`; thunk events are only trustworthy with one intra-op thread)."""
    import tensorflow as tf
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    with tempfile.TemporaryDirectory() as tmp:
        tf.profiler.experimental.start(tmp)
        for _ in range(calls):
            call()
        tf.profiler.experimental.stop()
        space = xplane_pb2.XSpace()
        space.ParseFromString(open(glob.glob(f"{tmp}/**/*.xplane.pb", recursive=True)[0], "rb").read())
    per = collections.Counter()
    for plane in space.planes:
        names = {k: v.name for k, v in plane.event_metadata.items()}
        for line in plane.lines:
            for ev in line.events:
                name = names[ev.metadata_id]
                if classes is not None:
                    if name in classes and not name.startswith("call"):
                        per[classes[name]] += ev.duration_ps
                elif re.match(r"[\w.\-]+/[^:]+:\w+$", name):  # a graph kernel: "layer/.../MatMul:_MklMatMul"
                    per[name.rsplit(":", 1)[1]] += ev.duration_ps
    total = sum(per.values()) or 1
    return {k: v / total for k, v in per.most_common(14)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model_dir")
    p.add_argument("--onnx", action="append", default=[], help="an ONNX file of the same model (repeatable)")
    p.add_argument("--modes", default="tf-xla,tf-graph,tf-graph-bf16,ort")
    p.add_argument("--rows", type=int, default=64)
    p.add_argument("--length", type=int, default=48)
    p.add_argument("--calls", type=int, default=3)
    p.add_argument("--threads", type=int, default=0, help="intra-op threads (0: default)")
    args = p.parse_args(argv)
    os.environ.setdefault("ONEDNN_JIT_PROFILE", "1")  # oneDNN's JIT kernels named in perf's map
    dump = tempfile.mkdtemp(prefix="op-profile-hlo-")
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_dump_to={dump} --xla_dump_hlo_as_text".strip()
    if args.threads:
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.threads)

    import numpy as np

    import tfsent  # noqa: F401  (TF_USE_LEGACY_KERAS before TensorFlow loads)
    from bench.inference import read_phrasebank
    from tfsent.models import load_tokenizer

    texts = read_phrasebank(REPO / "data" / "financial_phrasebank" / "Sentences_50Agree.txt")
    feats = batch(texts, load_tokenizer(args.model_dir), args.rows, args.length)
    modes = args.modes.split(",")
    runs = []
    for mode in modes:
        if mode == "ort":
            for path in args.onnx:
                with tempfile.TemporaryDirectory() as tmp:
                    call, sess = ort_mode(path, feats, profile_prefix=os.path.join(tmp, "ort"), threads=args.threads)
                    call()
                    runs.append((f"ort {pathlib.Path(path).name}", call, *perf_classes(call, args.calls)))
                    ops = ort_op_shares(sess.end_profiling())
                runs[-1] += (ops,)
        else:
            precision = "mixed_bfloat16" if mode.endswith("bf16") else "float32"
            call = tf_mode(args.model_dir, precision, mode == "tf-xla", feats)
            call()
            call()
            ops = tf_op_shares(call, 1, hlo_classes(dump) if mode == "tf-xla" else None)
            runs.append((mode, call, *perf_classes(call, args.calls), ops))
    ref = runs[0][1]()
    print(f"# op profile: {args.model_dir}, batch [{args.rows}, {args.length}], {args.calls} calls\n")
    for name, call, seconds, shares, ops in runs:
        diff = float(np.max(np.abs(call() - ref)))
        print(f"## {name}: {seconds * 1000:.0f} ms per call, max |prob - {runs[0][0]}| {diff:.2g}\n")
        print("perf samples by code: " + ", ".join(f"{k} {v:.1f}%" for k, v in
                                                    sorted(shares.items(), key=lambda kv: -kv[1])))
        if ops:
            print("\nruntime profiler, op types: " + ", ".join(f"{k} {v:.1%}" for k, v in ops.items()))
            if not name.startswith("tf-xla"):
                ops = by_class(ops)
            print("\nruntime profiler, classes: " + ", ".join(f"{k} {v:.1%}" for k, v in ops.items()))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
