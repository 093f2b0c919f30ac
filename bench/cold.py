"""Cold starts: ``python -m tfsent.predict`` file to file in a fresh process, as a user runs it.

For each size the same command runs twice in a row, each time in a new process: the *first* run starts with empty
caches (``TFSENT_CACHE_DIR``: the execution-path calibration of ``auto``; and TensorFlow's persistent XLA cache
when ``xla_cache`` is on), the *second* finds what the first left there. Wall time includes Python and TensorFlow
start-up, loading the checkpoint, tokenizing, compiling each shape and writing the CSV.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence

from bench.rounds import Series

REPO = pathlib.Path(__file__).resolve().parents[1]


@dataclasses.dataclass
class ColdRun:
    variant: str
    rows: int
    run: str  # "first" or "second"
    seconds: float
    predict_seconds: float | None  # the driver's own figure (after imports), from its summary line


def xla_cache_env(folder: str | os.PathLike) -> dict[str, str]:
    """Environment that points TensorFlow's persistent XLA compilation cache at ``folder``.

    Deterministic cluster names: otherwise each process names its XLA clusters anew, the cache keys differ and
    a second process finds nothing (measured on TF 2.20: no entry reused without it).
    """
    flags = os.environ.get("TF_XLA_FLAGS", "")
    return {"TF_XLA_FLAGS": f"{flags} --tf_xla_persistent_cache_directory={folder} "
                            "--tf_xla_deterministic_cluster_names=true".strip()}


def cold_runs(ckpt: pathlib.Path, sentences: Sequence[str], sizes: Sequence[int],
              variants: dict[str, tuple[Sequence[str], bool]],
              log: Callable[[str], None] | None = None) -> list[ColdRun]:
    """First and second fresh-process run of each variant and size.

    Args:
        ckpt: a classifier checkpoint folder.
        sentences: the text pool (the first ``n`` are used, repeated if needed).
        sizes: sentences per run.
        variants: name -> (extra ``key=value`` overrides for ``tfsent.predict``, whether the persistent XLA cache
            is on).
    """
    out = []
    with tempfile.TemporaryDirectory(prefix="tfsent-cold-") as tmp:
        tmp = pathlib.Path(tmp)
        for n in sizes:
            texts = write_texts(tmp / f"texts-{n}.txt", sentences, n)
            for variant, (overrides, xla_cache) in variants.items():
                caches = tmp / f"caches-{variant}-{n}"
                env = xla_cache_env(caches / "xla") if xla_cache else {}
                for run in ("first", "second"):
                    start = time.perf_counter()
                    done = _predict(ckpt, texts, tmp / "out.csv", caches / "tfsent", overrides, env)
                    seconds = time.perf_counter() - start
                    settle(caches / "tfsent")  # the second run finds the conversion done, not under way
                    out.append(ColdRun(variant, n, run, seconds, _predict_seconds(done.stdout)))
                    if log:
                        log(f"cold {variant}, {n} rows, {run} run: {seconds:.1f} s")
    return out


def write_texts(path: pathlib.Path, sentences: Sequence[str], n: int) -> pathlib.Path:
    """``n`` sentences (the pool repeated), one per line."""
    from bench.inference import repeat_to

    path.write_text("\n".join(t.replace("\n", " ") for t in repeat_to(sentences, n)) + "\n", encoding="utf-8")
    return path


def _predict(ckpt: pathlib.Path, texts: pathlib.Path, output: pathlib.Path, cache_dir: pathlib.Path,
             overrides: Sequence[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python -m tfsent.predict`` file to file in a fresh process, its execution cache in ``cache_dir``.

    Raises:
        RuntimeError: the command failed (its stderr's tail attached).
    """
    full_env = {**os.environ, "TFSENT_CACHE_DIR": str(cache_dir),
                "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), **(env or {})}
    cmd = [sys.executable, "-m", "tfsent.predict", f"ckpt_path={ckpt}", f"input={texts}", f"output={output}",
           "overwrite=true", "strategy=cpu", "progress=false", *overrides]
    done = subprocess.run(cmd, capture_output=True, text=True, env=full_env, cwd=REPO)
    if done.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done


def _predict_seconds(stdout: str) -> float | None:
    # "predict: 100 rows in 12.3 s (8.1 rows/s) -> ..."
    for line in stdout.splitlines():
        if line.startswith("predict:") and " rows in " in line:
            try:
                return float(line.split(" rows in ")[1].split(" s")[0])
            except (IndexError, ValueError):
                return None
    return None


@dataclasses.dataclass
class AutoCost:
    """A cold job with ``auto`` and an empty execution cache against the same job with the chosen path forced."""

    rows: int
    path: str  # what auto chose, e.g. "graph bf16"
    auto: Series
    forced: Series

    @property
    def cost(self):
        """auto's seconds over the forced path's, per round (median, min-max): 1.10 = 10% more."""
        from bench.rounds import speedup

        return speedup(self.forced, self.auto)


def auto_cost(ckpt: pathlib.Path, sentences: Sequence[str], rows: int, n_rounds: int,
              log: Callable[[str], None] | None = None, smoke: bool = False) -> AutoCost:
    """``python -m tfsent.predict`` in fresh processes, interleaved: ``precision=auto jit_compile=auto`` with an
    empty ``TFSENT_CACHE_DIR`` each round (so each pays its probe) against the path auto chose, forced."""
    from bench.rounds import Mode, run_rounds

    with tempfile.TemporaryDirectory(prefix="tfsent-auto-") as tmp:
        tmp = pathlib.Path(tmp)
        texts = write_texts(tmp / "texts.txt", sentences, rows)
        runs = iter(range(1_000_000))

        def predict(*overrides: str) -> tuple[float, str]:
            """The process's wall seconds (a conversion it leaves in the background is waited for after the
            clock stops: it is the next job's saving, not this job's cost) and its log."""
            cache = tmp / f"cache-{next(runs)}"
            start = time.perf_counter()
            done = _predict(ckpt, texts, tmp / "out.csv", cache, overrides)
            seconds = time.perf_counter() - start
            settle(cache)
            return seconds, done.stdout + done.stderr

        auto = ("precision=auto", "jit_compile=auto")
        chosen = _chosen_path(predict(*auto)[1])  # untimed: which path to force
        precision = "mixed_bfloat16" if chosen.endswith("bf16") else "float32"
        forced = (f"precision={precision}", f"jit_compile={str(chosen.startswith('xla')).lower()}")
        if log:
            log(f"auto cost: auto chose {chosen}; forcing {' '.join(forced)}")
        modes = [Mode(f"auto, empty cache ({rows} rows)", rows, lambda: predict(*auto)[0],
                      "python -m tfsent.predict precision=auto jit_compile=auto, fresh TFSENT_CACHE_DIR"),
                 Mode(f"{chosen} forced ({rows} rows)", rows, lambda: predict(*forced)[0],
                      f"python -m tfsent.predict {' '.join(forced)}")]
        series = run_rounds(modes, n_rounds, log=log, smoke=smoke)
    return AutoCost(rows, chosen, series[modes[0].name], series[modes[1].name])


def settle(cache_dir: pathlib.Path) -> None:
    """Wait for the LiteRT conversions a run left in the background (a small job's ``backend: auto`` starts one),
    so that they do not run during the next timed process."""
    from tfsent.inference import background_conversion

    for folder in pathlib.Path(cache_dir).glob("litert/*"):
        background_conversion.wait(folder)


def _chosen_path(output: str) -> str:
    # "execution: graph bf16 (calibration); ..."
    for line in output.splitlines():
        if "execution: " in line:
            return " ".join(line.split("execution: ", 1)[1].split()[:2])
    raise RuntimeError(f"tfsent.predict logged no 'execution:' line:\n{output[-2000:]}")
