"""Benchmarks side by side (issue 6): tfsent against what users do today, and against the machine's limit.

``make bench`` (= ``.venv/bin/python bench/run.py``) measures in one run, on the same Financial PhraseBank
sentences and the same models, and writes ``bench/RESULTS.md``:

1. inference: HF ``pipeline`` and batched PyTorch (in ``bench/.venv-torch``, created on demand: torch never enters
   tfsent's venv), the eager TF loop, plain ``model.predict()`` padded to 128, and tfsent's bucketed predict, for
   MiniLM-L6 (real weights) and a random BERT-base (FinBERT's cost) on a smaller sample;
2. the limit: matmul FLOPs of the shapes tfsent ran against this machine's TF matmul rate (fp32, bf16);
3. training: fit() as tfsent.train builds it vs a hand-written tf.function step, and the RoBERTa-small MLM rate;
4. scaling: tfsent predict at 1k, 10k and 100k sentences (per-row cost, peak memory).

``--quick`` is a smoke run (small samples, a few minutes); see ``bench/README.md`` for the full run's duration.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # run as a script: make `bench` and `tfsent` importable from the checkout

from bench import table  # noqa: E402

PHRASEBANK = REPO / "data" / "financial_phrasebank" / "Sentences_50Agree.txt"
TORCH_VENV = REPO / "bench" / ".venv-torch"
TORCH_REQUIREMENTS = ["torch==2.13.0", "transformers>=4.46,<5"]
BATCH = 64


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small smoke run (samples of a few hundred rows)")
    p.add_argument("--sizes", default=None,
                   help="comma-separated row counts for the scaling section (default 1000,10000,100000; "
                        "--quick: 128,512)")
    p.add_argument("--out", default=str(REPO / "bench" / "RESULTS.md"), help="where to write the results")
    p.add_argument("--minilm-rows", type=int, default=None, help="sentences for the MiniLM-L6 modes")
    p.add_argument("--bert-rows", type=int, default=None, help="sentences for the BERT-base modes")
    p.add_argument("--pipeline-rows", type=int, default=None,
                   help="sentences for the HF pipeline (batch 1, the slowest mode); BERT-base uses half")
    p.add_argument("--skip-torch", action="store_true", help="leave out the PyTorch baselines")
    p.add_argument("--skip-training", action="store_true", help="leave out the training section")
    args = p.parse_args(argv)
    quick = args.quick
    args.minilm_rows = args.minilm_rows or (96 if quick else 1024)
    args.bert_rows = args.bert_rows or (32 if quick else 192)
    args.pipeline_rows = args.pipeline_rows or (24 if quick else 512)
    args.matmul_size = 512 if quick else 1024
    sizes = args.sizes or ("128,512" if quick else "1000,10000,100000")
    try:
        args.sizes = [int(s) for s in sizes.split(",") if s.strip()]
    except ValueError:
        p.error(f"--sizes must be comma-separated integers, got {sizes!r}")
    if not args.sizes or min(args.sizes) < 1:
        p.error(f"--sizes needs positive row counts, got {sizes!r}")
    return args


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def ensure_torch_venv(venv: pathlib.Path = TORCH_VENV, requirements: list[str] = TORCH_REQUIREMENTS) -> pathlib.Path:
    """The torch venv's python, creating the venv first (with ``requirements``) if it is missing or incomplete.

    Raises:
        RuntimeError: the venv could not be created or the packages not installed (pip's output included).
    """
    python = venv / "bin" / "python"
    check = [str(python), "-c", "import torch, transformers"]
    if python.is_file() and subprocess.run(check, capture_output=True).returncode == 0:
        return python
    log(f"creating {venv} ({' '.join(requirements)}); torch stays out of tfsent's venv")
    for cmd in (["python3", "-m", "venv", str(venv)],
                [str(python), "-m", "pip", "install", "-q", *requirements]):
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"`{' '.join(cmd)}` failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return python


def torch_baselines(python: pathlib.Path, texts, model_dir, random_config, label, pipeline_rows, shape, tokenizer
                    ) -> tuple[list[table.Measurement], str, float]:
    """Run ``bench/torch_baselines.py`` in the torch venv.

    Returns:
        The measurements (with the useful FLOPs of their rows, counted for ``shape``), the torch version and
        torch's fp32 matmul rate in FLOP/s.
    """
    job = {"texts": list(texts), "model_dir": str(model_dir), "random_config": random_config, "label": label,
           "batch_size": BATCH, "max_length": 128, "pipeline_rows": pipeline_rows, "modes": ["pipeline", "batched"]}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(job, f)
    try:
        # TF_USE_LEGACY_KERAS etc. are harmless there; PYTHONPATH must not leak tfsent's venv into torch's.
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env.update(TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        done = subprocess.run([str(python), str(REPO / "bench" / "torch_baselines.py"), f.name],
                              capture_output=True, text=True, env=env)
    finally:
        os.unlink(f.name)
    if done.returncode:
        raise RuntimeError(f"torch baselines failed ({done.returncode}):\n{done.stderr[-3000:]}")
    from bench import flops, inference

    result = json.loads(done.stdout.strip().splitlines()[-1])
    lengths = inference.token_lengths(tokenizer, texts)
    # Each mode ran a prefix of the texts; its useful FLOPs (real tokens only) are the work any run must do.
    ms = [table.Measurement(r["name"], r["rows"], r["seconds"], r["note"],
                            flops=flops.useful_flops(shape, lengths[: r["rows"]])) for r in result["results"]]
    return ms, f"torch {result['torch']} ({result['threads']} threads)", float(result["matmul_fp32"])


def _flop_rows(ms, fp32_rate):
    rows = []
    for m in ms:
        rate = m.flop_rate()
        if rate is not None:
            rows.append([m.name, f"{m.flops / 1e9:.1f}", f"{rate / 1e9:.1f}", f"{rate / fp32_rate:.0%}"])
    return rows


def main(argv=None) -> int:
    args = parse_args(argv)
    t0 = time.perf_counter()
    command = "python bench/run.py " + " ".join(argv if argv is not None else sys.argv[1:])

    import tfsent  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
    import tensorflow as tf

    from bench import flops, inference, machine, training
    from tfsent.runtime import atomic
    from tfsent.models import load_tokenizer, resolve_source
    from tfsent.runtime.strategy import make_strategy

    tf.get_logger().setLevel("ERROR")
    desc = machine.describe()
    log(f"machine: {desc}")
    section_seconds: dict[str, float] = {}

    def timed(name):
        section_seconds[name] = time.perf_counter() - timed.start
        timed.start = time.perf_counter()
        log(f"{name} done in {section_seconds[name]:.0f} s")
    timed.start = time.perf_counter()

    # 2 first: the ceiling, measured before anything else has warmed or fragmented memory.
    fp32 = flops.matmul_rate("float32", size=args.matmul_size)
    bf16 = flops.matmul_rate("bfloat16", size=args.matmul_size)
    log(f"matmul: fp32 {fp32 / 1e9:.1f} GFLOP/s, bf16 {bf16 / 1e9:.1f} GFLOP/s")
    timed("matmul")

    sentences = inference.read_phrasebank(PHRASEBANK)
    minilm_texts = inference.repeat_to(sentences, args.minilm_rows)
    bert_texts = inference.repeat_to(sentences, args.bert_rows)
    model_dir = resolve_source("minilm_l6")
    tokenizer = load_tokenizer("minilm_l6")
    strategy = make_strategy("cpu")

    minilm: list[table.Measurement] = []
    bert: list[table.Measurement] = []
    torch_version, torch_fp32 = "not run", None
    if not args.skip_torch:
        python = ensure_torch_venv()
        minilm_shape = flops.EncoderShape.from_config(json.loads((model_dir / "config.json").read_text()),
                                                      num_labels=len(inference.LABELS))
        ms, torch_version, torch_fp32 = torch_baselines(python, minilm_texts, model_dir, None, "MiniLM-L6",
                                                        args.pipeline_rows, minilm_shape, tokenizer)
        minilm += ms
        bert_cfg = {k: v for k, v in inference.BERT_BASE.items() if k != "arch"}
        bert_shape = flops.EncoderShape.from_config(bert_cfg, num_labels=len(inference.LABELS))
        ms, _, _ = torch_baselines(python, bert_texts, model_dir, bert_cfg, "BERT-base",
                                   max(8, args.pipeline_rows // 8), bert_shape, tokenizer)
        bert += ms
        timed("torch baselines")

    clf = inference.build_model(strategy, "minilm")
    minilm.append(inference.eager_loop(clf, tokenizer, minilm_texts, BATCH, "MiniLM-L6"))
    minilm.append(inference.keras_predict(clf, tokenizer, minilm_texts, BATCH, "MiniLM-L6"))
    tfs_minilm, tfs_minilm_useful = inference.tfsent_predict(clf, strategy, tokenizer, minilm_texts, BATCH,
                                                             "MiniLM-L6")
    minilm.append(tfs_minilm)
    minilm.append(inference.tfsent_predict_cold(clf, tokenizer, minilm_texts, BATCH, "MiniLM-L6"))
    timed("MiniLM-L6 TF modes")
    bf16_clf = inference.build_model(strategy, "minilm", precision="mixed_bfloat16")
    tfs_bf16, _ = inference.tfsent_predict(bf16_clf, strategy, tokenizer, minilm_texts, BATCH, "MiniLM-L6",
                                           name="tfsent predict mixed_bfloat16")
    minilm.append(tfs_bf16)
    del bf16_clf
    gc.collect()
    timed("MiniLM-L6 bf16")

    del clf
    gc.collect()

    tiny = inference.build_model(strategy, "bert_tiny")
    scaling = []
    for n in args.sizes:
        m, _ = inference.tfsent_predict(tiny, strategy, tokenizer, inference.repeat_to(sentences, n), BATCH,
                                        "BERT-tiny")
        m.name = f"tfsent predict, {n} rows"
        scaling.append(m)
        log(f"scaling {n}: {m.rate:.1f} rows/s, peak RSS {m.peak_rss_mb:.0f} MB")
    del tiny
    gc.collect()
    timed("scaling")

    bclf = inference.build_model(strategy, "bert_base")
    bert.append(inference.eager_loop(bclf, tokenizer, bert_texts, BATCH, "BERT-base"))
    bert.append(inference.keras_predict(bclf, tokenizer, bert_texts, BATCH, "BERT-base"))
    tfs_bert, tfs_bert_useful = inference.tfsent_predict(bclf, strategy, tokenizer, bert_texts, BATCH, "BERT-base")
    bert.append(tfs_bert)
    del bclf
    gc.collect()
    timed("BERT-base TF modes")

    train_ms = []
    if not args.skip_training:
        prepared = REPO / "bench" / ".cache" / "prepared"
        # --quick: length 32, one shape (the experiment's buckets need length 128 and three compilations).
        fit, hand = training.fit_vs_hand_step(
            prepared, max_seq_length=32 if args.quick else 128, steps=8,
            extra_overrides=("trainer.length_buckets=null",) if args.quick else ())
        mlm = training.mlm_step_rate(steps=8, batch=16 if args.quick else 64)
        train_ms = [hand, fit, mlm]
        timed("training")

    text = render(args, command, desc, torch_version, torch_fp32, fp32, bf16, minilm, bert, tfs_minilm,
                  tfs_minilm_useful, tfs_bf16, tfs_bert, tfs_bert_useful, scaling, train_ms, section_seconds,
                  time.perf_counter() - t0)
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_text(out, text)
    print(text)
    log(f"wrote {out} in {time.perf_counter() - t0:.0f} s total")
    return 0


def _find(ms, prefix):
    return next((m for m in ms if m.name.startswith(prefix)), None)


def _ceilings(fp32, torch_fp32, minilm, bert) -> list[str]:
    """Why a speed-up over the pipeline is bounded: the best ratio any implementation could reach if it ran only
    the useful FLOPs at 100% of the matmul rate, against what the pipeline achieves."""
    lines = []
    for label, ms in (("MiniLM-L6", minilm), ("BERT-base", bert)):
        ref = _find(ms, "HF pipeline")
        if ref is None or not ref.flops:
            continue
        lines.append(f"- {label}: the HF pipeline (batch 1, so no padding) runs its useful FLOPs at "
                     f"{ref.flop_rate() / 1e9:.1f} GFLOP/s, {ref.flop_rate() / fp32:.0%} of TF's fp32 matmul rate; "
                     f"a run of only those FLOPs at 100% of that rate would be at most "
                     f"**{fp32 / ref.flop_rate():.2f}x** the pipeline.")
    if lines and torch_fp32:
        lines.append(f"- torch's fp32 matmul rate here, measured the same way: {torch_fp32 / 1e9:.1f} GFLOP/s "
                     f"({torch_fp32 / fp32:.2f}x TF's): the two frameworks share one ceiling.")
    if lines:
        lines = ["Ceiling on the ratio to the pipeline:", ""] + lines + [""]
    return lines


def render(args, command, desc, torch_version, torch_fp32, fp32, bf16, minilm, bert, tfs_minilm, tfs_minilm_useful,
           tfs_bf16, tfs_bert, tfs_bert_useful, scaling, train_ms, section_seconds, total_seconds) -> str:
    """The RESULTS.md text: machine, command, targets, then one table per section."""
    targets = []
    for label, ms, tfs in (("MiniLM-L6", minilm, tfs_minilm), ("BERT-base", bert, tfs_bert)):
        for prefix, goal in (("HF pipeline", 4.0), ("eager TF loop", 6.0)):
            ref = _find(ms, prefix)
            if ref is not None:
                targets.append(table.Target(f"tfsent predict / {prefix} ({label}), x", table.speedup(tfs, ref), goal))
    targets.append(table.Target("tfsent predict fp32 (MiniLM-L6), fraction of fp32 matmul rate",
                                tfs_minilm.flop_rate() / fp32, 0.6))
    if train_ms:
        hand, fit = train_ms[0], train_ms[1]
        targets.append(table.Target("fit() overhead: hand-written step rate / fit() rate", table.speedup(hand, fit),
                                    1.15, higher_is_better=False))
    if len(scaling) > 1:
        # Against the cheapest smaller size: small runs pay a fixed per-bucket start-up, so their per-row cost is
        # higher; what must not happen is the largest run costing more per row than a smaller one did.
        best = min(scaling[:-1], key=lambda m: m.ms_per_row)
        targets.append(table.Target(f"per-row cost at {scaling[-1].rows} / at {best.rows} rows (flat)",
                                    scaling[-1].ms_per_row / best.ms_per_row, 1.2, higher_is_better=False))

    parts = ["# tfsent benchmarks", "",
             "Generated by `bench/run.py`. Ratios between modes measured in the same run are the result; absolute "
             "times depend on the machine and on whatever else ran on it.", ""]
    if args.quick:
        parts += ["**Smoke run (`--quick`): the samples are too small for these numbers to mean anything; run "
                  "`make bench` on an idle machine for the real table.**", ""]
    parts += ["## Machine", ""]
    parts += [f"- {k}: {v}" for k, v in desc.items()]
    parts += [f"- torch baselines: {torch_version} in `bench/.venv-torch`", "",
              "## Command", "", "```", command.strip(), "```", "",
              f"Run time {total_seconds / 60:.1f} min ("
              + ", ".join(f"{k} {v:.0f} s" for k, v in section_seconds.items()) + ").",
              f"Samples: MiniLM-L6 {args.minilm_rows} sentences (HF pipeline on the first {args.pipeline_rows}), "
              f"BERT-base {args.bert_rows} (pipeline on the first {max(8, args.pipeline_rows // 8)}); "
              "Financial PhraseBank 50Agree, repeated where a size exceeds its 4846 sentences.", "",
              "## Targets (issue 6)", "", table.targets_table(targets), "",
              *_ceilings(fp32, torch_fp32, minilm, bert),
              "## 1. Inference", "",
              "Timed: texts in, label ids out, tokenization included; model loading and warm-up (tracing, XLA "
              "compilation of the shapes used) excluded, except in the cold `tfsent.predict()` line. Batch 64 "
              "everywhere but the pipeline.", "",
              "### MiniLM-L6 (real weights)", ""]
    ref = _find(minilm, "HF pipeline") or _find(minilm, "eager TF loop")
    parts += [table.throughput_table(minilm, ref), ""]
    parts += ["### BERT-base shape, random weights (FinBERT's cost)", ""]
    ref = _find(bert, "HF pipeline") or _find(bert, "eager TF loop")
    parts += [table.throughput_table(bert, ref), ""]
    parts += ["## 2. Against the machine's limit", "",
              f"TF matmul rate (best of 5 calls of a tf.function computing 8 independent "
              f"{args.matmul_size}x{args.matmul_size} products, "
              "graph runtime or XLA, whichever is faster): fp32 "
              f"**{fp32 / 1e9:.1f} GFLOP/s**, bf16 **{bf16 / 1e9:.1f} GFLOP/s**. FLOPs count the encoder's matrix "
              "products for the shapes actually run (see `bench/flops.py`): *executed* = padded buckets with "
              "filler rows, *useful* = each sentence's real token count.", "",
              table.markdown(["run", "GFLOP", "GFLOP/s", "of fp32 matmul rate"],
                             _flop_rows([tfs_minilm, tfs_minilm_useful, tfs_bf16, tfs_bert, tfs_bert_useful]
                                        + [m for m in minilm + bert if m.name.startswith(("eager", "model.predict"))]
                                        + [dataclasses.replace(m, name=f"{m.name}, useful FLOPs") for m in minilm + bert
                                           if m.name.startswith(("HF pipeline", "batched torch"))],
                                        fp32)), "",
              f"bf16 predict runs at {tfs_bf16.flop_rate() / bf16:.0%} of the bf16 matmul rate "
              f"({tfs_bf16.rate / tfs_minilm.rate:.2f}x the fp32 predict's rows/s).", ""]
    if train_ms:
        parts += ["## 3. Training", "",
                  "fit() built as `tfsent.train` builds it (`+experiment=finbert_tone strategy=cpu`, its length "
                  "buckets included), timed on its third 8-step epoch; the hand-written step loop runs the same "
                  "model and optimizer over the same batches. Rows are sequences.", "",
                  table.throughput_table(train_ms[:2], train_ms[0]), "",
                  "RoBERTa-small masked LM (`conf/model/roberta_small.yaml` shape), fit() with tfsent's dynamic "
                  "masking and optimizer, random token blocks:", "",
                  table.throughput_table(train_ms[2:], train_ms[2]), "",
                  table.markdown(["run", "GFLOP", "GFLOP/s", "of fp32 matmul rate"], _flop_rows(train_ms, fp32)), ""]
    parts += ["## 4. Scaling with work", "",
              "tfsent predict (fp32, warm model) on PhraseBank sentences repeated to each size, with a BERT-tiny "
              "shape (2 layers, hidden 128, random weights): a small model leaves tfsent's own per-row work "
              "(tokenizing, bucketing, padding, re-ordering) visible, so a cost that grew with the row count would "
              "show; MiniLM-L6 would take ~30 min for 100k rows on 2 cores. Peak RSS is the process's resident "
              "memory sampled during each run (it includes the models loaded earlier).", "",
              table.markdown(["rows", "seconds", "rows/s", "ms/row", "GFLOP/s", "peak RSS MB", "RSS before MB"],
                             [[m.rows, round(m.seconds, 1), round(m.rate, 1), round(m.ms_per_row, 3),
                               round(m.flop_rate() / 1e9, 1), round(m.peak_rss_mb), round(m.rss_before_mb)]
                              for m in scaling]), ""]
    return "\n".join(parts)


if __name__ == "__main__":
    sys.exit(main())
