"""Streaming prediction at scale: per-row cost and peak memory from 10k to 1M rows, seconds to the first part,
documents (chunks/s), and two processes with ``num_shards=2`` against one.

Every measurement runs ``tfsent.inference.driver.predict`` (what ``python -m tfsent.predict`` calls) in a fresh
child process, so each peak RSS is that run's own (``ru_maxrss``) and nothing stays warm between sizes. Inputs are
Financial PhraseBank sentences made unique with their row number. Ratios between rows of one run are the result;
absolute times move with the machine's load: run it on an otherwise idle machine.

    .venv/bin/python bench/streaming.py                      # 10k, 100k, 1M rows; MiniLM-L6 and BERT-tiny
    .venv/bin/python bench/streaming.py --quick --out /tmp/s.md   # smoke run (numbers meaningless)

Targets (issue 12): per-row cost at 1M / at 100k <= 1.1; peak RSS at 1M within 10% of the peak at 10k.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
PHRASEBANK = REPO / "data" / "financial_phrasebank" / "Sentences_50Agree.txt"
TRANSCRIPTS = REPO.parent / "shared" / "data" / "transcripts" / "ectsum" / "test"
MODELS = ("minilm", "bert_tiny")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="10000,100000,1000000", help="rows per scaling run, comma-separated")
    p.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, from {', '.join(MODELS)}")
    # Memory is bounded by the part (plus the one tokenized ahead): with parts of 10k rows the 10k-row run already
    # holds a whole part, so the peaks at 10k and 1M compare like for like.
    p.add_argument("--part-size", type=int, default=10_000)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--shard-rows", type=int, default=100_000, help="rows of the 2-vs-1 process comparison")
    p.add_argument("--transcripts", default=str(TRANSCRIPTS), help="a folder of .txt documents ('' to skip)")
    p.add_argument("--quick", action="store_true", help="smoke run: 300/600 rows, tiny parts")
    p.add_argument("--out", default=str(REPO / "bench" / "STREAMING.md"))
    p.add_argument("--child", help=argparse.SUPPRESS)  # JSON job for a child process
    args = p.parse_args(argv)
    if args.quick:
        args.sizes, args.part_size, args.shard_rows = "300,600", 128, 300
    return args


def unique_sentences(sentences: list[str], n: int) -> list[str]:
    """``n`` distinct texts: PhraseBank sentences in turn, each ended with its row number."""
    return [f"{sentences[i % len(sentences)]} ({i})" for i in range(n)]


# ---- children ------------------------------------------------------------------------------------------------

def _child(job: dict) -> dict:
    import resource
    import threading

    import tfsent  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)

    if job["what"] == "save":
        from bench.inference import build_model
        from tfsent.models import load_tokenizer
        from tfsent.runtime.strategy import make_strategy

        build_model(make_strategy("cpu"), job["model"]).save_pretrained(job["ckpt"],
                                                                       tokenizer=load_tokenizer("minilm_l6"))
        return {}
    from tfsent.inference.driver import predict
    from tfsent.inference.options import PredictOptions
    from tfsent.inference.sharded import parts_folder

    options = PredictOptions(**job["options"])
    first = parts_folder(job["output"], options.shard_index, options.num_shards) / "rows-00000.parquet"
    start = time.perf_counter()
    seen: dict[str, float] = {}

    def watch():
        while "first" not in seen and not seen.get("done"):
            if first.exists():
                seen["first"] = time.perf_counter() - start
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    summary = predict(job["ckpt"], job["input"], job["output"], options)
    seen["done"] = True
    watcher.join()
    return {"seconds": time.perf_counter() - start, "first_part_s": seen.get("first"), "rows": summary.get("rows"),
            "chunks": summary.get("chunks"), "documents": summary.get("documents"),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def run_child(job: dict) -> dict:
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "TF_CPP_MIN_LOG_LEVEL": "2"}
    out = subprocess.run([sys.executable, __file__, "--child", json.dumps(job)], env=env, cwd=REPO,
                         capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"child {job['what']} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def start_child(job: dict) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.Popen([sys.executable, __file__, "--child", json.dumps(job)], env=env, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


# ---- the run -------------------------------------------------------------------------------------------------

def _options(args, **extra) -> dict:
    return {"strategy": "cpu", "global_batch_size": args.batch, "part_size": args.part_size, "progress": False,
            **extra}


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.child:
        print(json.dumps(_child(json.loads(args.child))))
        return 0
    from tfsent.data.sources import read_records

    sentences = [r.text for r in read_records(PHRASEBANK, "phrasebank")]
    sizes = [int(s) for s in args.sizes.split(",")]
    models = args.models.split(",")
    lines = ["# Streaming prediction (bench/streaming.py)", "",
             f"Command: `python bench/streaming.py {' '.join(argv if argv is not None else sys.argv[1:])}`; "
             f"batch {args.batch}, part_size {args.part_size}, strategy cpu, one fresh process per row.", ""]
    with tempfile.TemporaryDirectory(prefix="tfsent-streaming-") as tmp:
        tmp = pathlib.Path(tmp)
        for model in models:
            run_child({"what": "save", "model": model, "ckpt": str(tmp / model)})
        lines += ["## Scaling", "", "| model | rows | seconds | us/row | first part s | peak RSS MB |",
                  "|---|---:|---:|---:|---:|---:|"]
        for model in models:
            per_row, peaks = {}, {}
            for n in sizes:
                src = tmp / f"in-{n}.txt"
                if not src.exists():
                    src.write_text("\n".join(unique_sentences(sentences, n)) + "\n", encoding="utf-8")
                r = run_child({"what": "predict", "ckpt": str(tmp / model), "input": str(src),
                               "output": str(tmp / f"out-{model}-{n}.csv"), "options": _options(args)})
                per_row[n], peaks[n] = r["seconds"] / n, r["peak_rss_mb"]
                lines.append(f"| {model} | {n} | {r['seconds']:.1f} | {per_row[n] * 1e6:.0f} | "
                             f"{r['first_part_s'] or float('nan'):.1f} | {r['peak_rss_mb']:.0f} |")
                print(lines[-1], flush=True)
            lo, hi = sizes[0], sizes[-1]
            mid = sizes[-2] if len(sizes) > 1 else lo
            lines.append(f"| {model} | ratios | per-row {hi}/{mid}: {per_row[hi] / per_row[mid]:.2f} (<= 1.1) | | | "
                         f"peak {hi}/{lo}: {peaks[hi] / peaks[lo]:.2f} (<= 1.1) |")
        if args.transcripts and pathlib.Path(args.transcripts).is_dir():
            r = run_child({"what": "predict", "ckpt": str(tmp / models[0]), "input": args.transcripts,
                           "output": str(tmp / "docs.csv"),
                           "options": _options(args, input_format="documents", max_length=128)})
            lines += ["", "## Documents", "", f"{args.transcripts}: {r['documents']} documents, {r['chunks']} chunks "
                      f"in {r['seconds']:.1f} s = {r['chunks'] / r['seconds']:.1f} chunks/s ({models[0]}, 128-token "
                      f"chunks, model loading included); peak RSS {r['peak_rss_mb']:.0f} MB"]
            print(lines[-1], flush=True)
        n = args.shard_rows
        src = tmp / f"shard-{n}.txt"
        src.write_text("\n".join(unique_sentences(sentences, n)) + "\n", encoding="utf-8")
        one = run_child({"what": "predict", "ckpt": str(tmp / models[0]), "input": str(src),
                         "output": str(tmp / "one.csv"), "options": _options(args)})
        start = time.perf_counter()
        procs = [start_child({"what": "predict", "ckpt": str(tmp / models[0]), "input": str(src),
                              "output": str(tmp / "two.csv"), "options": _options(args, num_shards=2,
                                                                                  shard_index=i)})
                 for i in range(2)]
        for p in procs:
            _, err = p.communicate()
            if p.returncode:
                raise RuntimeError(f"shard failed:\n{err[-3000:]}")
        run_child({"what": "predict", "ckpt": str(tmp / models[0]), "input": str(src), "output": str(tmp / "two.csv"),
                   "options": _options(args, num_shards=2, merge=True)})
        two = time.perf_counter() - start
        same = (tmp / "one.csv").read_bytes() == (tmp / "two.csv").read_bytes()
        lines += ["", "## Two processes (num_shards=2, then merge=true) vs one", "",
                  f"{n} rows, {models[0]}: one process {one['seconds']:.1f} s, two shards + merge {two:.1f} s "
                  f"(wall, process start and model loading included): {one['seconds'] / two:.2f}x; outputs "
                  f"{'byte-identical' if same else 'DIFFER'}"]
        print(lines[-1], flush=True)
    pathlib.Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
