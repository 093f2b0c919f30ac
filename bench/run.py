"""Benchmarks side by side (issues 6 and 18): tfsent against what users do today, and against the machine's limit.

``make bench`` (= ``.venv/bin/python bench/run.py``) measures in one run, on the same Financial PhraseBank
sentences and the same models, and writes ``bench/RESULTS.md``:

1. inference, in interleaved rounds (``bench/rounds.py``, ``bench/compare.py``): tfsent's chosen execution path
   (``precision``/``jit_compile: auto``) against the HF ``pipeline`` and batched PyTorch (a persistent worker in
   ``bench/.venv-torch``, created on demand: torch never enters tfsent's venv), the eager TF loop and plain
   ``model.predict()`` padded to 128, plus every path tfsent can choose (XLA/graph, fp32/bf16), for MiniLM-L6 (real
   weights) and a random BERT-base (FinBERT's cost), on 32-, 256- and 1,024-row jobs; the chosen path's fraction
   of its precision's matmul rate on executed and on useful FLOPs;
2. cold starts (``bench/cold.py``): ``python -m tfsent.predict`` file to file in fresh processes, first and second
   run of the same model and buckets, 100 and 1,000 sentences;
3. training: fit() as tfsent.train builds it vs a hand-written tf.function step, and the RoBERTa-small MLM rate;
4. scaling: tfsent predict at 1k, 10k and 100k sentences (per-row cost, peak memory).

``--quick`` is a smoke run (a few rows, 2 rounds; a couple of minutes); see ``bench/README.md`` for the full run.
"""

from __future__ import annotations

import argparse
import gc
import pathlib
import statistics
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
# ONNX Runtime and its exporter's needs beside torch: the ONNX rows of issue 36 (bench/onnx_export.py, ort_score.py).
TORCH_REQUIREMENTS = ["torch==2.13.0", "transformers>=4.46,<5", "onnxruntime==1.32.0", "onnx==1.23.2",
                      "onnxscript==0.7.2"]
BATCH = 64


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="smoke run: a few rows, 2 rounds (figures meaningless)")
    p.add_argument("--rounds", type=int, default=None, help="interleaved rounds per comparison (default 5)")
    p.add_argument("--sizes", default=None,
                   help="comma-separated row counts for the scaling section (default 1000,10000,100000; "
                        "--quick: 128,512)")
    p.add_argument("--out", default=None,
                   help="where to write the results (default bench/RESULTS.md; with --max-isa, RESULTS-<isa>.md)")
    p.add_argument("--max-isa", choices=["avx2"], default=None,
                   help="run as an AVX2-only machine would: cap oneDNN, XLA, torch and MKL at AVX2 (bench/isa.py)")
    p.add_argument("--minilm-jobs", default=None, help="MiniLM-L6 job sizes (default 32,256,1024,4846)")
    p.add_argument("--bert-jobs", default=None, help="BERT-base job sizes (default 32,256)")
    p.add_argument("--cold-sizes", default=None, help="cold file-to-file sizes (default 100,1000)")
    p.add_argument("--skip-torch", action="store_true", help="leave out the PyTorch baselines")
    p.add_argument("--skip-training", action="store_true", help="leave out the training section")
    p.add_argument("--skip-cold", action="store_true", help="leave out the cold-start section")
    p.add_argument("--skip-agreement", action="store_true",
                   help="leave out bf16 against fp32 labels (fine-tunes MiniLM-L6 once, cached in bench/.cache)")
    p.add_argument("--skip-whole", action="store_true",
                   help="leave out the whole-process section (tfsent.predict against the ONNX Runtime script)")
    p.add_argument("--whole-models", default=None,
                   help="models of the whole-process section (default MiniLM-L6,BERT-base; BERT-base: fp32 only, "
                        "at most 3 rounds)")
    p.add_argument("--whole-rows", type=int, default=None,
                   help="rows of the whole-process file (default 4846, all of PhraseBank 50Agree; --quick: 48)")
    p.add_argument("--auto-rows", type=int, default=None,
                   help="rows of the cold auto-against-forced job (default 1024; --quick: 32)")
    args = p.parse_args(argv)
    quick = args.quick
    args.rounds = args.rounds or (2 if quick else 5)
    if args.rounds < 5 and not quick:
        p.error(f"--rounds {args.rounds}: comparisons need at least 5 interleaved rounds (or --quick)")
    args.matmul_size = 512 if quick else 1024
    args.out = args.out or str(REPO / "bench" / (f"RESULTS-{args.max_isa}.md" if args.max_isa else "RESULTS.md"))

    def ints(value, default, name):
        text = value or default
        try:
            out = [int(s) for s in text.split(",") if s.strip()]
        except ValueError:
            p.error(f"--{name} must be comma-separated integers, got {text!r}")
        if not out or min(out) < 1:
            p.error(f"--{name} needs positive row counts, got {text!r}")
        return out

    args.sizes = ints(args.sizes, "128,512" if quick else "1000,10000,100000", "sizes")
    args.minilm_jobs = ints(args.minilm_jobs, "16,48" if quick else "32,256,1024,4846", "minilm-jobs")
    args.whole_rows = args.whole_rows or (48 if quick else 4846)
    args.whole_models = [m for m in (args.whole_models or "MiniLM-L6,BERT-base").split(",") if m]
    args.bert_jobs = ints(args.bert_jobs, "16" if quick else "32,256", "bert-jobs")
    args.cold_sizes = ints(args.cold_sizes, "20" if quick else "100,1000", "cold-sizes")
    args.auto_rows = args.auto_rows or (32 if quick else 1024)
    return args


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def ensure_torch_venv(venv: pathlib.Path = TORCH_VENV, requirements: list[str] = TORCH_REQUIREMENTS) -> pathlib.Path:
    """The torch venv's python, creating the venv first (with ``requirements``) if it is missing or incomplete.

    Raises:
        RuntimeError: the venv could not be created or the packages not installed (pip's output included).
    """
    python = venv / "bin" / "python"
    check = [str(python), "-c", "import torch, transformers, onnxruntime, onnx"]
    if python.is_file() and subprocess.run(check, capture_output=True).returncode == 0:
        return python
    log(f"creating {venv} ({' '.join(requirements)}); torch stays out of tfsent's venv")
    for cmd in (["python3", "-m", "venv", str(venv)],
                [str(python), "-m", "pip", "install", "-q", *requirements]):
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"`{' '.join(cmd)}` failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return python


def main(argv=None) -> int:
    args = parse_args(argv)
    t0 = time.perf_counter()
    command = "python bench/run.py " + " ".join(argv if argv is not None else sys.argv[1:])

    if args.max_isa:
        from bench import isa

        log(f"instruction set capped: {isa.apply(args.max_isa)}")
    import tfsent  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
    import tensorflow as tf

    from bench import agreement, cold, compare, flops, inference, machine, training, whole
    from bench.torch_client import TorchWorker
    from tfsent.models import load_tokenizer, resolve_source
    from tfsent.runtime import atomic
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

    # The ceiling first, measured before anything else has warmed or fragmented memory.
    matmul = {"fp32": flops.matmul_rate("float32", size=args.matmul_size),
              "bf16": flops.matmul_rate("bfloat16", size=args.matmul_size)}
    log(f"matmul: fp32 {matmul['fp32'] / 1e9:.1f} GFLOP/s, bf16 {matmul['bf16'] / 1e9:.1f} GFLOP/s")
    timed("matmul")

    sentences = inference.read_phrasebank(PHRASEBANK)
    tokenizer = load_tokenizer("minilm_l6")
    strategy = make_strategy("cpu")
    models = {"MiniLM-L6": ("minilm", args.minilm_jobs, sorted(args.minilm_jobs)[len(args.minilm_jobs) // 2],
                            16 if args.quick else 128, None),
              "BERT-base": ("bert_base", args.bert_jobs, min(args.bert_jobs), 8 if args.quick else 32,
                            {k: v for k, v in inference.BERT_BASE.items() if k != "arch"})}
    results, cold_results, torch_info, auto_cost, labels, whole_result = [], [], None, None, None, None
    with tempfile.TemporaryDirectory(prefix="tfsent-bench-") as tmp:
        ckpts = {}
        for label, (key, *_rest) in models.items():
            clf = inference.build_model(strategy, key)
            ckpts[label] = clf.save_pretrained(pathlib.Path(tmp) / key, tokenizer=tokenizer)
            del clf
        gc.collect()
        worker = None
        if not args.skip_torch:
            worker = TorchWorker(ensure_torch_venv())
            torch_info = worker.request(cmd="info")
            for label, (key, _, _, _, random_config) in models.items():
                worker.load(label, resolve_source("minilm_l6"), random_config)
                # ONNX Runtime scores this very checkpoint: its model.safetensors exported by torch.onnx.
                worker.load_onnx(f"{label} onnx", ckpts[label], pathlib.Path(tmp) / "onnx")
            timed("torch worker start")
        try:
            for label, (key, jobs, main_size, padded, _) in models.items():
                results.append(compare.compare_model(
                    label, ckpts[label], strategy, sentences, jobs, main_size, padded, args.rounds, BATCH,
                    worker=worker, torch_name=label, smoke=args.quick, log=log,
                    onnx_name=f"{label} onnx" if worker is not None else None))
                gc.collect()
                timed(f"{label} rounds")
            gemm = gemm_ceilings(ckpts, args.rounds, quick=args.quick, worker=worker)
            if gemm:
                timed("GEMM ceilings")
        finally:
            if worker is not None:
                worker.close()
        if not args.skip_cold:
            # The second run of "auto + XLA cache" finds both caches: the calibration's choice and the executables.
            variants = {"default config": ((), False),
                        "auto + XLA cache": (("precision=auto", "jit_compile=auto"), True)}
            cold_results = cold.cold_runs(ckpts["MiniLM-L6"], sentences, args.cold_sizes, variants, log=log)
            auto_cost = cold.auto_cost(ckpts["MiniLM-L6"], sentences, args.auto_rows, args.rounds, log=log,
                                       smoke=args.quick)
            timed("cold starts")
        if not args.skip_whole and not args.skip_torch:
            texts = cold.write_texts(pathlib.Path(tmp) / "whole.txt", sentences, args.whole_rows)
            whole_result = []
            for label in args.whole_models:
                onnx = pathlib.Path(tmp) / "onnx" / f"{label} onnx.onnx"
                rounds, int8 = whole.plan(label, args.rounds)
                whole_result.append(whole.whole_process(
                    label, ckpts[label], onnx, onnx.with_suffix(".int8.onnx"), ensure_torch_venv(), texts,
                    args.whole_rows, pathlib.Path(tmp) / "whole" / label, rounds, log=log, int8=int8))
            timed("whole process")

    if not args.skip_agreement:
        trained = agreement.trained_classifier(log=log)
        pool = sentences[:200] if args.quick else sentences
        labels = (agreement.path_labels(trained, strategy, pool, BATCH, inference.BUCKETS), len(pool))
        timed("agreement")

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

    text = render(args, command, desc, torch_info, matmul, results, cold_results, scaling, train_ms,
                  section_seconds, time.perf_counter() - t0, auto_cost=auto_cost, labels=labels,
                  whole_result=whole_result, gemm=gemm)
    out = pathlib.Path(args.out)
    text = carry_over(out.read_text() if out.is_file() else "", text)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_text(out, text)
    print(text)
    log(f"wrote {out} in {time.perf_counter() - t0:.0f} s total")
    return 0


def gemm_ceilings(ckpts: dict[str, pathlib.Path], rounds: int, *, quick: bool = False, worker=None) -> dict:
    """Per model, XNNPACK's int8 and fp32 GEMM rates at its feed-forward shape (:mod:`bench.gemm`), with oneDNN's
    and (given the torch ``worker``) ONNX Runtime's fp32 rates in the same rounds; empty without LiteRT."""
    from bench import gemm
    from tfsent.inference import litert
    from tfsent.models.loading import read_config

    if not litert.available():
        return {}
    out = {}
    for label, ckpt in ckpts.items():
        config = read_config(ckpt)
        shape = (64 * 32, config.hidden_size, config.intermediate_size)
        mlas = worker.gemm_timer(*shape, threads=litert.threads()) if worker is not None else None
        out[label] = gemm.gemm_rates(*shape, rounds=rounds, calls=2 if quick else 20, mlas=mlas)
        ratios = out[label].fp32_ratios
        log(f"{label} int8 / fp32 GEMM: {out[label].ratio:.2f}x" + (
            f"; XNNPACK / MLAS fp32 GEMM {statistics.median(ratios):.2f}x" if ratios else ""))
    return out


def _find(ms, prefix):
    return next((m for m in ms if m.name.startswith(prefix)), None)


def _ceilings(fp32, torch_fp32, minilm, bert, results=(), gemm=None) -> list[str]:
    """Why a speed-up over the pipeline is bounded: the best ratio any implementation could reach if it ran only
    the useful FLOPs at 100% of the matmul rate, against what the pipeline achieves; then the tighter bound of the
    rate this CPU runs each model's own shapes at (``compare.padding_ceiling``)."""
    from bench import compare

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
    for r in results:
        lines += compare.padding_ceiling(r)
    if lines:
        lines = ["Ceiling on the ratio to the pipeline:", ""] + lines + [""]
    rate = [line for r in results for line in compare.rate_ceiling(r)]
    if rate:
        lines += ["Ceiling on the useful FLOP rate:", ""] + rate + [""]
    if gemm:
        lines += ["Ceiling on `precision=int8`'s gain over the fp32 path (`bench/gemm.py`):", ""]
        lines += [rates.line(label) for label, rates in gemm.items()] + [""]
        fp32_lines = [line for label, rates in gemm.items() if (line := rates.fp32_line(label))]
        if fp32_lines:
            lines += ["Ceiling on the default (exact) path against ONNX Runtime fp32: the fp32 GEMM each runs most "
                      "of its time in, same rounds (`bench/gemm.py`):", ""] + fp32_lines + [""]
    return lines


def _capped_note() -> str:
    from bench import isa
    from tfsent.runtime import execution as ex

    if not isa.describe():
        return ""
    return (" This run capped the instruction set (header; `bench/isa.py`): bf16 is emulated on every path"
            + (", and graph bf16, which would abort in oneDNN without its bf16 kernels, is left out."
               if ex.graph_bf16_blocked(ex.cpu_flags()) else "."))


def _pipeline_measurements(results) -> dict[str, list[table.Measurement]]:
    """Per model, the HF pipeline at the main job as a Measurement holding the useful FLOPs of its rows."""
    out = {}
    for r in results:
        ms = []
        for job in r.jobs:
            pipe = next((s for n, s in job.series.items() if n.startswith("HF pipeline")), None)
            if pipe is not None and r.chosen in job.flops and len(job.series) > 3:
                ms.append(table.Measurement(pipe.name, pipe.rows, pipe.time.median, flops=job.flops[r.chosen][1]))
        out[r.label] = ms
    return out


def _flop_rows(ms, fp32_rate):
    rows = []
    for m in ms:
        rate = m.flop_rate()
        if rate is not None:
            rows.append([m.name, f"{m.flops / 1e9:.1f}", f"{rate / 1e9:.1f}", f"{rate / fp32_rate:.0%}"])
    return rows


def carry_over(previous: str, text: str) -> str:
    """``text`` followed by the numbered sections of ``previous`` that this run did not write (``## 5. Beam``,
    ``## 6. Streaming``, ... come from their own scripts), all in section-number order."""
    def sections(doc: str) -> tuple[str, dict[int, str]]:
        head, numbered, current = [], {}, None
        for line in doc.splitlines(keepends=True):
            words = line.split()
            if line.startswith("## ") and len(words) > 1 and words[1].rstrip(".").isdigit():
                current = int(words[1].rstrip("."))
                numbered[current] = ""
            if current is None:
                head.append(line)
            else:
                numbered[current] += line
        return "".join(head), numbered

    head, new = sections(text)
    kept = {k: v for k, v in sections(previous)[1].items() if k not in new}
    merged = {**kept, **new}
    body = "".join(merged[k].rstrip("\n") + "\n\n" for k in sorted(merged))
    return head + body.rstrip("\n") + "\n"


def render(args, command, desc, torch_info, matmul, results, cold_results, scaling, train_ms, section_seconds,
           total_seconds, *, auto_cost=None, labels=None, whole_result=None, gemm=None) -> str:
    """The RESULTS.md text: machine, command, targets, then one section per part of the bench."""
    from bench import agreement, compare
    from tfsent.runtime import execution

    native = execution.has_native_bf16(execution.cpu_flags())
    targets = [t for r in results for t in compare.targets(r, matmul, native)]
    label_lines = []
    if labels is not None:
        label_lines, label_targets = agreement.render(labels[0], labels[1], "PhraseBank AllAgree plus, 2 epochs")
        targets += label_targets
    if whole_result:
        from bench import whole

        targets += [t for r in whole_result for t in whole.target_rows(r)]
    if auto_cost is not None:
        targets.append(table.Target(f"cold {auto_cost.rows}-row job: auto (empty cache) / {auto_cost.path} forced, "
                                    "seconds", auto_cost.cost.median, 1.10, higher_is_better=False))
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
    torch_version = (f"torch {torch_info['torch']} ({torch_info['threads']} threads, kernels "
                     f"{torch_info.get('cpu_capability', 'unknown')})" if torch_info else "not run")
    torch_fp32 = float(torch_info["matmul_fp32"]) if torch_info else None
    pipes = _pipeline_measurements(results)
    parts = ["# tfsent benchmarks", "",
             "Generated by `bench/run.py`. Every comparison ran its modes interleaved, once per round "
             f"({args.rounds} rounds): a figure is the median with its min-max, a ratio the median of the per-round "
             "ratios (see `bench/README.md`). Absolute rates move with the machine's load; ratios hold better.", ""]
    if args.quick:
        parts += ["**Smoke run (`--quick`): a few rows and 2 rounds; these numbers mean nothing. Run "
                  "`make bench` on an idle machine for the real table.**", ""]
    parts += ["## Machine", ""]
    parts += [f"- {k}: {v}" for k, v in desc.items()]
    parts += [f"- torch baselines: {torch_version} in `bench/.venv-torch`", "",
              "## Command", "", "```", command.strip(), "```", "",
              f"Run time {total_seconds / 60:.1f} min ("
              + ", ".join(f"{k} {v:.0f} s" for k, v in section_seconds.items()) + ").", "",
              "## Targets (issues 6, 18, 26 and 36)", "", table.targets_table(targets), "",
              *_ceilings(matmul["fp32"], torch_fp32, pipes.get("MiniLM-L6", []), pipes.get("BERT-base", []),
                         results, gemm),
              "## 1. Inference, interleaved rounds", "",
              "Timed: texts in, label ids out, tokenization included; loading and warm-up (tracing, XLA compilation "
              "of the job's shapes, torch's first call) before the first round. Batch 64 everywhere but the "
              "pipeline. Financial PhraseBank 50Agree sentences, repeated where a job exceeds its 4,846. The eager "
              "loop and `model.predict()` pad every row to 128, so their per-row cost does not depend on the job: "
              "they run on a slice of the main job. bf16 paths on a CPU without native bf16 (no `avx512_bf16`/"
              "`amx_bf16`) are shown but never chosen." + _capped_note(), "",
              f"TF matmul rate (best of 5 calls of 8 independent {args.matmul_size}x{args.matmul_size} products, "
              f"graph or XLA, whichever is faster): fp32 **{matmul['fp32'] / 1e9:.1f} GFLOP/s**, bf16 "
              f"**{matmul['bf16'] / 1e9:.1f} GFLOP/s**. FLOPs (`bench/flops.py`): *executed* = what tfsent ran "
              "(`packing: auto`: padded buckets with filler rows, or packed sequences with filler sequences, "
              "whichever counts fewer), *useful* = each sentence's real token count. tfsent's jobs run as "
              "`tfsent.predict` runs them, `packing: auto`.", ""]
    for r in results:
        parts += compare.render(r, matmul)
    if cold_results:
        parts += ["## 2. Cold starts, file to file", "",
                  "`python -m tfsent.predict ... strategy=cpu` on MiniLM-L6 in a fresh process; *first* starts with "
                  "empty caches, *second* runs the same command again (calibration cache of `auto` in "
                  "`$TFSENT_CACHE_DIR`; TensorFlow's persistent XLA cache where on). Wall time includes start-up, "
                  "loading, compiling and writing; *predict s* is the driver's own figure (after imports).", "",
                  table.markdown(["variant", "rows", "run", "wall s", "predict s"],
                                 [[c.variant, c.rows, c.run, round(c.seconds, 1),
                                   "" if c.predict_seconds is None else round(c.predict_seconds, 1)]
                                  for c in cold_results]), ""]
    if auto_cost is not None:
        parts += [f"`precision=auto jit_compile=auto` on a cold {auto_cost.rows}-row job, with an empty "
                  f"`$TFSENT_CACHE_DIR` every round (each run pays the one-layer probe), against the path it chose "
                  f"(**{auto_cost.path}**) forced, fresh processes, {len(auto_cost.auto.seconds)} interleaved rounds:",
                  "",
                  table.markdown(["mode", "wall s median (min-max)", "note"],
                                 [[s.name, str(s.time), s.note] for s in (auto_cost.auto, auto_cost.forced)]), "",
                  f"auto / forced, per-round median (min-max): **{auto_cost.cost}** (target <= 1.10).", ""]
    if whole_result:
        from bench import whole

        parts += ["### Whole process against ONNX Runtime (issue 36)", "",
                  "`python -m tfsent.predict` with its defaults (LiteRT fp32 on this CPU) against `bench/ort_score.py` "
                  "(ONNX Runtime's CPU provider with default options on this checkpoint's `torch.onnx` export, and on "
                  "its `quantize_dynamic` int8 copy) scoring the same PhraseBank file, fresh processes, alternated. "
                  "CPU s is the process's user + system time.", "", *[line for r in whole_result
                                                                       for line in whole.render(r)]]
    if train_ms:
        parts += ["## 3. Training", "",
                  "fit() built as `tfsent.train` builds it (`+experiment=finbert_tone strategy=cpu`, its length "
                  "buckets included), timed on its third 8-step epoch; the hand-written step loop runs the same "
                  "model and optimizer over the same batches. Rows are sequences. One timing each (not rounds).", "",
                  table.throughput_table(train_ms[:2], train_ms[0]), "",
                  "RoBERTa-small masked LM (`conf/model/roberta_small.yaml` shape), fit() with tfsent's dynamic "
                  "masking and optimizer, random token blocks:", "",
                  table.throughput_table(train_ms[2:], train_ms[2]), "",
                  table.markdown(["run", "GFLOP", "GFLOP/s", "of fp32 matmul rate"],
                                 _flop_rows(train_ms, matmul["fp32"])), ""]
    parts += ["## 4. Scaling with work", "",
              "tfsent predict (fp32, XLA, warm model) on PhraseBank sentences repeated to each size, with a BERT-tiny "
              "shape (2 layers, hidden 128, random weights): a small model leaves tfsent's own per-row work "
              "(tokenizing, bucketing, padding, re-ordering) visible, so a cost that grew with the row count would "
              "show. Peak RSS is the process's resident memory sampled during each run (it includes the models "
              "loaded earlier). One timing per size.", "",
              table.markdown(["rows", "seconds", "rows/s", "ms/row", "GFLOP/s", "peak RSS MB", "RSS before MB"],
                             [[m.rows, round(m.seconds, 1), round(m.rate, 1), round(m.ms_per_row, 3),
                               round(m.flop_rate() / 1e9, 1), round(m.peak_rss_mb), round(m.rss_before_mb)]
                              for m in scaling]), ""]
    return "\n".join(parts + label_lines)


if __name__ == "__main__":
    sys.exit(main())
