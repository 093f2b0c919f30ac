"""Texts in, probabilities out, in CPU seconds: tfsent's engine against the ONNX Runtime script's loop (issue 36).

``python bench/pipeline_cpu.py MODEL_DIR MODEL.onnx [--threads 1] [--rounds 3]``: in one process, interleaved, both
score every PhraseBank 50Agree sentence, tokenization included:

- ``tfsent``: ``tokenize_texts`` + ``predict_bucketed`` (XLA fp32, packing auto, batches of 64), as the driver runs
  a part (no file reading or writing);
- ``ort``: the loop of ``bench/ort_score.py`` (fast tokenizer, sorted by length, batches of 64 padded to the longest).

Reported per round: wall and process CPU seconds. With one intra-op thread each, CPU seconds barely depend on what
else a shared machine runs (wall seconds do), so their ratio compares the work each does; the model-alone CPU
seconds of tfsent's own batches (its compiled ``predict_step`` on each batch it ran, timed the same way) split
tfsent's figure into the model and everything around it (Keras predict loop, tf.data, planning, re-ordering).
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def _clock(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model_dir")
    p.add_argument("onnx")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--rows", type=int, default=0, help="first N sentences only (0: all)")
    args = p.parse_args(argv)

    import numpy as np

    import tfsent  # noqa: F401
    import onnxruntime as ort
    import tensorflow as tf

    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    from bench.inference import BUCKETS, read_phrasebank
    from tfsent.inference import engine
    from tfsent.inference.driver import load_with_options
    from tfsent.inference.options import PredictOptions
    from tfsent.inference.packing import PackedRows
    from tfsent.inference.tokens import tokenize_texts
    from tfsent.runtime.strategy import make_strategy

    texts = read_phrasebank(REPO / "data" / "financial_phrasebank" / "Sentences_50Agree.txt")
    texts = texts[:args.rows] if args.rows else texts
    strategy = make_strategy("cpu")
    options = PredictOptions(strategy="cpu", progress=False, jit_compile=True)
    predictor = load_with_options(args.model_dir, strategy, 1, options)
    packing = predictor.packing("auto")
    results = {}

    def tfsent_run():
        tokens = tokenize_texts(predictor.tokenizer, texts, BUCKETS[-1], features=predictor.features)
        results["tfsent"] = engine.predict_bucketed(predictor.model, strategy, tokens, buckets=BUCKETS,
                                                    global_batch_size=64, pad_values=predictor.pad_values,
                                                    packing=packing)["probs"]

    opts = ort.SessionOptions()
    if args.threads:
        opts.intra_op_num_threads = args.threads
    sess = ort.InferenceSession(args.onnx, opts, providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}
    tok = predictor.tokenizer

    def ort_run():
        enc = tok(texts, truncation=True, max_length=128, return_token_type_ids=True)
        ids = enc["input_ids"]
        order = np.argsort([len(x) for x in ids], kind="stable")
        probs = np.zeros((len(texts), 3), np.float32)
        for s in range(0, len(order), 64):
            rows = order[s:s + 64]
            width = max(len(ids[i]) for i in rows)
            feed = {k: np.zeros((len(rows), width), np.int64) for k in ("input_ids", "attention_mask",
                                                                        "token_type_ids")}
            for j, i in enumerate(rows):
                n = len(ids[i])
                feed["input_ids"][j, :n], feed["attention_mask"][j, :n] = ids[i], 1
                feed["token_type_ids"][j, :n] = enc["token_type_ids"][i]
            logits = sess.run(None, {k: v for k, v in feed.items() if k in names})[0]
            e = np.exp(logits - logits.max(-1, keepdims=True))
            probs[rows] = e / e.sum(-1, keepdims=True)
        results["ort"] = probs

    # Warm-up: every shape tfsent's plan uses is compiled, ORT's first run allocates its arenas.
    tfsent_run()
    ort_run()
    # The model alone on tfsent's own batches: the same plan, each batch through the compiled predict_step.
    tokens = tokenize_texts(predictor.tokenizer, texts, BUCKETS[-1], features=predictor.features)
    units = engine.choose_units(tokens, BUCKETS, packing, predictor.pad_values, 64, 1)
    step = tf.function(predictor.model.predict_step, jit_compile=True)
    batches = []
    for length, mine, batch, steps in engine.plan_batches(units.lengths, BUCKETS, 64, 1):
        arrays = units.batch(mine, length, batch)
        for s in range(steps):
            batches.append({k: tf.constant(v[s * batch:(s + 1) * batch]) for k, v in arrays.items()})

    def model_alone():
        for b in batches:
            tf.nest.map_structure(lambda t: t.numpy(), step(b))

    model_alone()
    rounds = {"tfsent": [], "ort": [], "model alone": []}
    for r in range(args.rounds):
        rounds["tfsent"].append(_clock(tfsent_run))
        rounds["ort"].append(_clock(ort_run))
        rounds["model alone"].append(_clock(model_alone))
        print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1][0]:.2f} s wall / {v[-1][1]:.2f} s CPU"
                                             for k, v in rounds.items()), file=sys.stderr, flush=True)
    diff = float(np.max(np.abs(results["tfsent"] - results["ort"])))
    same = float(np.mean(results["tfsent"].argmax(-1) == results["ort"].argmax(-1)))
    print(f"# pipeline, {len(texts)} sentences, threads {args.threads}, {args.rounds} rounds, "
          f"{len(batches)} tfsent batches ({'packed' if isinstance(units, PackedRows) else 'padded'})\n")
    print("| mode | wall s median (min-max) | CPU s median (min-max) | CPU x ort per round |\n|---|---|---|---|")
    for k, v in rounds.items():
        walls, cpus = [w for w, _ in v], [c for _, c in v]
        ratio = statistics.median(o[1] / c for o, c in zip(rounds["ort"], cpus))
        print(f"| {k} | {statistics.median(walls):.2f} ({min(walls):.2f}-{max(walls):.2f}) | "
              f"{statistics.median(cpus):.2f} ({min(cpus):.2f}-{max(cpus):.2f}) | {ratio:.2f} |")
    share = statistics.median(m[1] / t[1] for m, t in zip(rounds["model alone"], rounds["tfsent"]))
    print(f"\nmodel alone / tfsent CPU seconds: {share:.0%} (the rest is tokenizer, planning, Keras predict loop, "
          f"tf.data, re-ordering); tfsent vs ort: max |prob diff| {diff:.2g}, labels equal {same:.2%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
