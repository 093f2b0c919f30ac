"""tfsent.beam on the DirectRunner (2 worker processes) against tfsent.predict, file to file, on one machine.

Both run as a user runs them, each round in fresh processes (``python -m tfsent.predict`` and ``python -m
tfsent.beam runner=DirectRunner`` with ``--direct_num_workers=2 --direct_running_mode=multi_processing``), on the
same CSV of Financial PhraseBank sentences and the same checkpoint (MiniLM-L6 with a random 3-label head: the cost,
not the answers). Each mode's time is what its command reports for its work (model loading, compilation and, for
Beam, starting its workers included; the interpreter's start and imports left out), timed in interleaved rounds
(bench/rounds.py); the outputs of the last round are compared row by row. Prints a markdown section for
bench/RESULTS.md:

    python bench/beam.py --rows 10000                  # the real run (needs `make install-beam`)
    python bench/beam.py --rows 200 --model tiny       # smoke run (numbers meaningless)
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import pathlib
import re
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # run as a script: make `bench` and `tfsent` importable from the checkout

from bench import table  # noqa: E402
from bench.rounds import MIN_ROUNDS, Mode, run_rounds, speedup  # noqa: E402

PHRASEBANK = REPO / "data" / "financial_phrasebank" / "Sentences_50Agree.txt"
CACHE = REPO / "bench" / ".cache"
LABELS = ["negative", "neutral", "positive"]
VERSIONS = ("apache-beam", "protobuf", "pyarrow", "numpy", "tensorflow-cpu", "transformers")
_DONE = re.compile(r"(\d+) rows in ([\d.]+) s")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=10_000, help="sentences scored per run")
    p.add_argument("--rounds", type=int, default=MIN_ROUNDS, help=f"interleaved rounds (at least {MIN_ROUNDS})")
    p.add_argument("--workers", type=int, default=2, help="DirectRunner worker processes")
    p.add_argument("--batch", type=int, default=64, help="global_batch_size of both")
    p.add_argument("--model", choices=("minilm", "tiny"), default="minilm",
                   help="minilm: MiniLM-L6 weights; tiny: a 2-layer random BERT (smoke runs)")
    p.add_argument("--out", help="also write the section to this file")
    return p.parse_args(argv)


def checkpoint(model: str) -> pathlib.Path:
    """A classifier folder for ``model`` in bench/.cache (built once)."""
    folder = CACHE / f"beam-{model}"
    if (folder / "tf_model.h5").is_file():
        return folder
    import tfsent  # noqa: F401  (legacy Keras before TensorFlow loads)
    from bench.inference import BERT_TINY
    from tfsent.models import ClassifierSpec, build_classifier, load_tokenizer

    spec = (ClassifierSpec(source="minilm_l6", label_names=LABELS) if model == "minilm"
            else ClassifierSpec(config={**BERT_TINY, "max_position_embeddings": 512}, label_names=LABELS))
    build_classifier(spec).save_pretrained(folder, tokenizer=load_tokenizer("minilm_l6"))
    return folder


def write_input(path: pathlib.Path, rows: int) -> None:
    """``rows`` PhraseBank sentences (repeated past the file's end) as a CSV with a ``text`` column."""
    import pandas as pd

    from bench.inference import read_phrasebank, repeat_to

    pd.DataFrame({"text": repeat_to(read_phrasebank(PHRASEBANK), rows)}).to_csv(path, index=False)


def _command(module: str, args: list[str], work: pathlib.Path) -> Mode:
    def run() -> float:
        done = subprocess.run([sys.executable, "-m", module, *args, "overwrite=true",
                               f"hydra.run.dir={work / 'hydra'}"], cwd=REPO, capture_output=True, text=True)
        found = _DONE.search(done.stdout)
        if done.returncode != 0 or found is None:
            raise RuntimeError(f"{module} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
        return float(found.group(2))
    return Mode(module, rows=0, run=run)


def compare(predict_csv: pathlib.Path, beam_csv: pathlib.Path) -> tuple[bool, float, bool]:
    """Whether the labels are equal, the largest probability difference, and whether row order is equal."""
    import numpy as np
    import pandas as pd

    a, b = pd.read_csv(predict_csv), pd.read_csv(beam_csv)
    probs = [c for c in a.columns if c.startswith("prob_")]
    same_order = len(a) == len(b) and (a["row"].to_numpy() == b["row"].to_numpy()).all()
    diff = float(np.abs(a[probs].to_numpy() - b[probs].to_numpy()).max()) if same_order else float("nan")
    return bool(same_order and (a["label"] == b["label"]).all()), diff, bool(same_order)


def section(args, desc: dict, series: dict, ratio, check, seconds: float) -> str:
    predict, beam = series["predict"], series["beam"]
    lines = ["## Beam (tfsent.beam, DirectRunner) against tfsent.predict", "",
             f"`python bench/beam.py --rows {args.rows}" + (f" --model {args.model}" if args.model != "minilm" else "")
             + f"` ({args.rounds} interleaved rounds, {seconds / 60:.1f} min). Model: "
             + ("MiniLM-L6, random 3-label head" if args.model == "minilm" else "2-layer random BERT (smoke run)")
             + f"; {args.rows} Financial PhraseBank sentences (50Agree, repeated), CSV in, CSV out; "
             f"global_batch_size {args.batch}, strategy cpu, float32, XLA per strategy (both).", "",
             "Machine: " + "; ".join(f"{k}: {v}" for k, v in desc.items()), "",
             "Versions: " + ", ".join(f"{n} {_version(n)}" for n in VERSIONS), "",
             table.markdown(["mode", "rows", "rows/s median (min-max)", "seconds median (min-max)"], [
                 ["tfsent.predict (1 process)", args.rows, str(predict.rate), str(predict.time)],
                 [f"tfsent.beam DirectRunner, {args.workers} worker processes", args.rows, str(beam.rate),
                  str(beam.time)]]), "",
             f"beam / predict rows/s, median of per-round ratios: **{ratio}**. Outputs of the last round: labels "
             f"{'equal' if check[0] else 'DIFFER'}, row order {'equal' if check[2] else 'DIFFERS'}, largest "
             f"probability difference {check[1]:.2g}.", "",
             "Times are what each command reports for its work: loading the model, XLA compilation per bucket and, "
             "for Beam, starting its worker processes (each loads TensorFlow and the model) are included; the "
             "interpreter's start is not. On one machine Beam competes with itself for the same cores; its use is "
             "spreading the work over many machines (Dataflow, Flink, Spark).", ""]
    return "\n".join(lines)


def _version(name: str) -> str:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return "-"


def main(argv=None) -> int:
    args = parse_args(argv)
    from bench import machine

    desc = machine.describe()  # before the rounds: its load average is the one they started under
    start = time.perf_counter()
    ckpt = checkpoint(args.model)
    with tempfile.TemporaryDirectory(prefix="tfsent-bench-beam-") as tmp:
        work = pathlib.Path(tmp)
        source = work / "sentences.csv"
        write_input(source, args.rows)
        common = [f"ckpt_path={ckpt}", f"input={source}", "strategy=cpu", f"global_batch_size={args.batch}",
                  "progress=false"]
        predict = _command("tfsent.predict", [*common, f"output={work / 'predict.csv'}"], work)
        flags = f'["--direct_num_workers={args.workers}","--direct_running_mode=multi_processing"]'
        beam = _command("tfsent.beam", [*common[:-1], f"output={work / 'beam.csv'}", f"pipeline_options={flags}"],
                        work)
        modes = [Mode("predict", args.rows, predict.run), Mode("beam", args.rows, beam.run)]
        series = run_rounds(modes, args.rounds, log=lambda line: print(line, file=sys.stderr, flush=True))
        check = compare(work / "predict.csv", work / "beam.csv")
    text = section(args, desc, series, speedup(series["beam"], series["predict"]), check,
                   time.perf_counter() - start)
    return table.publish(text, args.out)


if __name__ == "__main__":
    sys.exit(main())
