"""Where a ``tfsent.predict`` file-to-file run spends its wall time, start-up included (issue 36).

``python bench/phases.py MODEL_DIR texts.txt [--runs 2] [key=value ...]``: in a fresh process, times the imports
(``tfsent``, TensorFlow, transformers), then calls :func:`tfsent.inference.driver.predict` ``--runs`` times on the
same file under ``cProfile``, and prints for each call the cumulative seconds of the stages that matter: strategy,
checkpoint load (weights, tokenizer), tokenization, the engine (``predict_bucketed``: planning, packing, the
per-bucket ``model.predict`` calls with their tracing and XLA compilation on the first call), re-ordering and the
output write. The second call's ``model.predict`` is the steady state; the first's excess over it is tracing and
compilation. Extra ``key=value`` arguments set :class:`PredictOptions` fields (``precision=mixed_bfloat16``).
"""

import time

START = time.perf_counter()

import argparse  # noqa: E402
import cProfile  # noqa: E402
import os  # noqa: E402
import pathlib  # noqa: E402
import pstats  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

# (label, function name as pstats names it: (file suffix, function)).
STAGES = [
    ("driver.predict (whole call)", ("inference/driver.py", "predict")),
    ("strategy", ("runtime/strategy.py", "make_strategy")),
    ("load checkpoint (model, weights, tokenizer)", ("inference/driver.py", "load_with_options")),
    ("  weights", ("models/weights.py", "load_weights")),
    ("  tokenizer load", ("models/loading.py", "load_tokenizer")),
    ("tokenize", ("inference/tokens.py", "tokenize_texts")),
    ("engine: predict_bucketed", ("inference/engine.py", "predict_bucketed")),
    ("  plan + packing", ("inference/engine.py", "choose_units")),
    ("  batch arrays", ("inference/packing.py", "batch")),
    ("  model.predict (Keras loop + model)", ("keras/src/engine/training.py", "predict")),
    ("    tracing (tf.function)", ("polymorphic_function/polymorphic_function.py", "_initialize")),
    ("  dataset building", ("inference/engine.py", "fn")),
    ("  reorder", ("inference/engine.py", "reorder")),
    ("merge + write output", ("inference/driver.py", "merge")),
]


def _stage_times(profile: cProfile.Profile) -> dict[str, float]:
    stats = pstats.Stats(profile).stats
    out = {}
    for label, (suffix, func) in STAGES:
        total = 0.0
        for (file, _line, name), (_cc, _nc, _tt, ct, callers) in stats.items():
            if name == func and file.endswith(suffix):
                # Recursive entries count once: only calls from outside the function itself.
                total = max(total, ct)
        out[label] = total
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model_dir")
    p.add_argument("texts")
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("options", nargs="*", help="PredictOptions fields, key=value")
    args = p.parse_args(argv)

    t0 = time.perf_counter()
    import tfsent  # noqa: F401
    t1 = time.perf_counter()
    import tensorflow as tf  # noqa: F401
    t2 = time.perf_counter()
    import transformers  # noqa: F401
    from tfsent.inference import driver
    from tfsent.inference.options import PredictOptions
    t3 = time.perf_counter()
    print(f"process start -> first line of this script: {_since_exec() - (time.perf_counter() - START):.2f} s "
          "(interpreter, site-packages)")
    print(f"imports: tfsent {t1 - t0:.2f} s, tensorflow {t2 - t1:.2f} s, transformers + tfsent.inference "
          f"{t3 - t2:.2f} s")

    fields = {f.name: f.type for f in PredictOptions.__dataclass_fields__.values()}
    extra = {}
    for kv in args.options:
        key, value = kv.split("=", 1)
        extra[key] = {"true": True, "false": False, "null": None}.get(value, value)
        if key not in fields:
            raise SystemExit(f"error: unknown option {key}")
    options = PredictOptions(strategy="cpu", progress=False, overwrite=True, **extra)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("TFSENT_CACHE_DIR", str(pathlib.Path(tmp) / "cache"))
        for run in range(args.runs):
            prof = cProfile.Profile()
            start = time.perf_counter()
            prof.enable()
            summary = driver.predict(args.model_dir, args.texts, pathlib.Path(tmp) / "out.csv", options)
            prof.disable()
            wall = time.perf_counter() - start
            print(f"\n## call {run + 1}: {summary['rows']} rows in {wall:.2f} s "
                  f"({summary['rows'] / wall:.0f} rows/s); since process start {_since_exec():.2f} s")
            for label, seconds in _stage_times(prof).items():
                print(f"  {label:48s} {seconds:7.2f} s")
    return 0


def _since_exec() -> float:
    """Seconds since this process started (its start time in /proc, in clock ticks since boot)."""
    start_ticks = int(pathlib.Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
    uptime = float(pathlib.Path("/proc/uptime").read_text().split()[0])
    return uptime - start_ticks / os.sysconf("SC_CLK_TCK")


if __name__ == "__main__":
    sys.exit(main())
