"""Inference modes of one model compared in interleaved rounds (issue 18): tfsent's chosen execution path against
the HF pipeline, batched torch, the eager TF loop and padded ``model.predict()``, and every path tfsent can choose.

For each job size every mode runs once per round, in the same order, for ``rounds`` rounds (``bench.rounds``);
warm-up (tracing, XLA compilation of the job's shapes, torch's first call) happens before the first round. tfsent
runs as users run it: the checkpoint loaded by the driver's loader for each path, its rows tokenized as the driver
tokenizes them, then ``predict_bucketed``; the chosen path is what ``precision: auto`` / ``jit_compile: auto``
resolve to, through the same one-layer probe (with an empty cache, so its cost is measured).
"""

from __future__ import annotations

import dataclasses
import pathlib
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence

from bench import inference, model_alone, rounds, table
from bench.rounds import Mode, Series

PATH_ORDER = ("litert fp32", "litert int8", "xla fp32", "graph fp32", "graph bf16", "xla bf16")
ORT_MODES = (("ort fp32", "ONNX Runtime fp32", "torch.onnx export (opset 17), CPU provider, sorted batches of {b}"),
             ("ort int8", "ONNX Runtime int8", "quantize_dynamic (QInt8) of that export, sorted batches of {b}"))


@dataclasses.dataclass
class Job:
    """One job size of one model: the series of every mode timed on it, and the FLOPs of each tfsent path."""

    rows: int
    series: dict[str, Series]
    flops: dict[str, tuple[int, int]]  # mode name -> (executed, useful)
    # mode name -> (executed without packing, executed with packing, useful), for each tfsent path
    packing: dict[str, tuple[int, int, int]] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class ModelResult:
    label: str
    chosen: str  # the mode name of tfsent's chosen path
    chosen_path: str  # e.g. "xla fp32"
    how: str
    calibration_seconds: float
    jobs: list[Job]
    alone: model_alone.ModelAlone | None = None  # the chosen path's model on the largest job's full batch


def _paths():
    from bench import isa
    from tfsent.runtime import execution as ex

    return isa.runnable([ex.XLA_FP32, ex.GRAPH_FP32, ex.GRAPH_BF16, ex.XLA_BF16])


def compare_model(label: str, ckpt: pathlib.Path, strategy, sentences: Sequence[str], sizes: Sequence[int],
                  main_size: int, padded_rows: int, n_rounds: int, batch_size: int, worker=None,
                  torch_name: str | None = None, smoke: bool = False,
                  log: Callable[[str], None] | None = None, onnx_name: str | None = None) -> ModelResult:
    """Time every mode of one model for each job size.

    Args:
        label: the model's name in the tables (``MiniLM-L6``, ``BERT-base``).
        ckpt: a classifier checkpoint folder (``save_pretrained``).
        strategy: a one-CPU strategy.
        sentences: the text pool; a job of ``n`` rows takes them repeated to ``n``.
        sizes: job sizes (rows); each gets tfsent's chosen path and the torch baselines.
        main_size: the size where every path tfsent can choose, the eager loop and ``model.predict()`` run too.
        padded_rows: rows of the eager loop and ``model.predict()`` (they pad every row to 128, so their per-row
            cost does not depend on the job size; fewer rows keep the run short).
        n_rounds: interleaved rounds per job size.
        batch_size: global batch of every batched mode.
        worker: a ``bench.torch_client.TorchWorker`` with the model loaded as ``torch_name``, or None.
        onnx_name: the name the worker holds this very checkpoint's ONNX export under (``load_onnx``): ONNX
            Runtime fp32 and int8 run at every job size.
        smoke: allow fewer than 5 rounds (``--quick``).
    """
    from tfsent.inference.calibration import resolve_backend, resolve_execution
    from tfsent.inference.driver import load_with_options
    from tfsent.models.loading import read_config
    from tfsent.inference.options import PredictOptions
    from tfsent.runtime.precision import set_policy

    options = PredictOptions(strategy="cpu", global_batch_size=batch_size, buckets=inference.BUCKETS,
                             progress=False)
    predictors = {}
    for path in _paths():
        predictors[path.name] = load_with_options(ckpt, strategy, 1, dataclasses.replace(
            options, precision=path.precision, jit_compile=path.jit_compile))
    set_policy("float32", strategy)
    predictors["litert fp32"] = _litert_predictor(ckpt, options, ckpt.parent / f"litert-cache-{ckpt.name}")
    # tfsent's fastest CPU path (precision=int8), in every job beside ONNX Runtime's int8.
    predictors["litert int8"] = _litert_predictor(ckpt, dataclasses.replace(options, precision="int8"),
                                                  ckpt.parent / f"litert-cache-{ckpt.name}")
    with tempfile.TemporaryDirectory(prefix="tfsent-bench-") as tmp:
        start = time.perf_counter()
        auto = dataclasses.replace(options, precision="auto", jit_compile="auto", backend="auto")
        # precision=auto weighs TensorFlow's import against the job: the main job's text, as a file would hold it.
        job_bytes = len("\n".join(inference.repeat_to(sentences, main_size)).encode())
        resolved = resolve_backend(auto, "classifier", strategy=strategy, config=read_config(ckpt),
                                   job_bytes=lambda: job_bytes, cache=pathlib.Path(tmp) / "execution.json")
        if resolved.options.backend == "tensorflow":
            resolved = resolve_execution(strategy, resolved.options, config=read_config(ckpt),
                                         cache=pathlib.Path(tmp) / "execution.json")
        calibration_seconds = time.perf_counter() - start
    set_policy("float32", strategy)  # the policy is global: what follows builds float32 models
    chosen_path = "litert fp32" if resolved.options.backend == "litert" else \
        f"{'xla' if resolved.options.jit_compile else 'graph'} " \
        f"{'bf16' if resolved.options.precision == 'mixed_bfloat16' else 'fp32'}"
    if log:
        log(f"{label}: {resolved.describe()} in {calibration_seconds:.1f} s")
    fp32_model = predictors["xla fp32"].model
    jobs = []
    for n in sizes:
        texts = inference.repeat_to(sentences, n)
        modes: list[Mode] = []
        flops: dict[str, tuple[int, int]] = {}
        packing: dict[str, tuple[int, int, int]] = {}
        names = [p for p in PATH_ORDER if p in predictors] if n == main_size else [chosen_path, "litert int8"]
        for name in dict.fromkeys(names):
            mode, counted = inference.path_mode(predictors[name], strategy, texts, batch_size, label, name)
            modes.append(mode)
            flops[mode.name] = (counted.executed, counted.useful)
            packing[mode.name] = (counted.padded, counted.packed, counted.useful)
        if worker is not None and onnx_name is not None:
            for kind, title, note in ORT_MODES:
                modes.append(Mode(f"{title} ({label})", n, worker.timer(onnx_name, kind, texts, batch_size),
                                  note.format(b=batch_size)))
        if worker is not None:
            for kind, title, note in (("pipeline", "HF pipeline, torch", "pipeline(texts), default batch_size=1"),
                                      ("batched", "batched torch", f"batch {batch_size}, pad to longest, "
                                                                   "inference_mode")):
                modes.append(Mode(f"{title} ({label})", n, worker.timer(torch_name, kind, texts, batch_size), note))
        if n == main_size:
            few = texts[:padded_rows]
            for build in (inference.eager_mode, inference.keras_predict_mode):
                mode = build(fp32_model, predictors["xla fp32"].tokenizer, few, batch_size, label)
                modes.append(mode)
                flops[mode.name] = (inference.padded_flops(fp32_model, len(few)),) * 2
        if log:
            log(f"{label}, {n}-row job: {len(modes)} modes x {n_rounds} rounds")
        series = rounds.run_rounds(modes, n_rounds, log=log, smoke=smoke)
        jobs.append(Job(n, series, flops, packing))
    chosen = f"tfsent {chosen_path} ({label})"
    largest = max(sizes)
    if log:
        log(f"{label}: the model alone on the {largest}-row job's full batch, against the matmul rate")
    alone = model_alone.measure(predictors[chosen_path], inference.repeat_to(sentences, largest), batch_size,
                                bool(resolved.options.jit_compile), resolved.options.precision, n_rounds)
    predictors.clear()
    return ModelResult(label, chosen, chosen_path, resolved.how, calibration_seconds, jobs, alone)


def _litert_predictor(ckpt: pathlib.Path, options, folder: pathlib.Path):
    """The checkpoint's LiteRT predictor as ``tfsent.predict`` loads it, converted once into the cache ``folder`` (the
    bench's rounds time scoring, not the one conversion, which the whole-process section shows)."""
    import os

    from tfsent.inference.driver import load_predictor

    previous = os.environ.get("TFSENT_CACHE_DIR")
    os.environ["TFSENT_CACHE_DIR"] = str(folder)
    try:
        return load_predictor(ckpt, None, max_length=options.max_length, jit_compile=None, steps_per_execution=1,
                              options=dataclasses.replace(options, backend="litert"))
    finally:
        if previous is None:
            os.environ.pop("TFSENT_CACHE_DIR")
        else:
            os.environ["TFSENT_CACHE_DIR"] = previous


def _find(job: Job, prefix: str) -> Series | None:
    return next((s for name, s in job.series.items() if name.startswith(prefix)), None)


def render(result: ModelResult, matmul: dict[str, float]) -> list[str]:
    """Markdown for one model: per job size, each mode's rows/s and the chosen path's per-round ratio to it; then
    the chosen path's fraction of the matmul rate of its precision, on executed and on useful FLOPs."""
    lines = [f"### {result.label}", "",
             f"tfsent's chosen path (`precision: auto`, `jit_compile: auto`): **{result.chosen_path}** "
             f"({result.how}: the one-layer probe, no checkpoint loaded, {result.calibration_seconds:.1f} s).", ""]
    for job in result.jobs:
        chosen = job.series[result.chosen]
        rows = []
        for name, s in job.series.items():
            ratio = "1 (reference)" if name == result.chosen else str(rounds.speedup(chosen, s))
            rows.append([name + (" **(chosen)**" if name == result.chosen else ""), s.rows, str(s.rate), ratio,
                         s.note])
        lines += [f"{job.rows}-row job, {len(chosen.seconds)} interleaved rounds:", "",
                  table.markdown(["mode", "rows", "rows/s median (min-max)", "chosen path x (per-round median)",
                                  "note"], rows), ""]
    frac = []
    for job in result.jobs:
        for name, (executed, useful) in job.flops.items():
            if not name.startswith("tfsent "):
                continue
            limit = matmul["bf16" if " bf16 " in name else "fp32"]
            seconds = job.series[name].time.median
            frac.append([f"{job.rows}-row job", name + (" **(chosen)**" if name == result.chosen else ""),
                         f"{executed / seconds / 1e9:.1f}", f"{executed / seconds / limit:.0%}",
                         f"{useful / seconds / 1e9:.1f}", f"{useful / seconds / limit:.0%}",
                         f"{executed / useful:.2f}"])
    lines += [f"Each tfsent path against the matmul rate of its precision (fp32 {matmul['fp32'] / 1e9:.1f}, bf16 "
              f"{matmul['bf16'] / 1e9:.1f} GFLOP/s), median round, FLOPs as `packing: auto` ran them:", "",
              table.markdown(["job", "path", "executed GFLOP/s", "of matmul rate", "useful GFLOP/s",
                              "of matmul rate", "executed / useful FLOPs"], frac), ""]
    return lines + packing_table(result)


def packing_table(result: ModelResult) -> list[str]:
    """Executed / useful FLOPs of the chosen path per job, padded and packed (counts, not timings): what sequence
    packing saves, and which of the two ``packing: auto`` ran."""
    rows = []
    for job in result.jobs:
        if result.chosen not in job.packing:
            continue
        padded, packed, useful = job.packing[result.chosen]
        ran = "packed" if job.flops[result.chosen][0] == packed and packed != padded else "padded"
        rows.append([f"{job.rows}-row job", f"{padded / useful:.2f}", f"{packed / useful:.2f}", ran])
    if not rows:
        return []
    return ["Executed / useful FLOPs without and with sequence packing (`packing: false` / `true`; `auto` runs the "
            "cheaper), filler rows or sequences included:", "",
            table.markdown(["job", "padded rows", "packed sequences", "packing: auto ran"], rows), ""]


def padding_ceiling(result: ModelResult) -> list[str]:
    """Per job with a pipeline timing, the ratio to the pipeline tfsent would reach with no padding at all.

    The chosen path's *executed* FLOP rate is the rate this CPU runs the model's own shapes at (not the big square
    matmuls of the matmul rate); divided by the pipeline's useful FLOP rate on the same rows, it bounds what any
    bucketing could gain. The measured ratio falls short of it by the executed / useful FLOPs (bucket padding,
    filler rows)."""
    lines = []
    for job in result.jobs:
        pipe = _find(job, "HF pipeline")
        if pipe is None or result.chosen not in job.flops:
            continue
        executed, useful = job.flops[result.chosen]
        chosen = job.series[result.chosen]
        useful_per_row = useful / chosen.rows
        executed_rate = executed / chosen.time.median
        pipe_rate = useful_per_row * pipe.rows / pipe.time.median
        lines.append(f"- {result.label}, {job.rows}-row job: the chosen path runs the model's shapes at "
                     f"{executed_rate / 1e9:.1f} GFLOP/s and the pipeline its useful FLOPs at {pipe_rate / 1e9:.1f}: "
                     f"with no padding at all tfsent would be at most **{executed_rate / pipe_rate:.2f}x** the "
                     f"pipeline here; it executes {executed / useful:.2f}x the useful FLOPs, hence "
                     f"{rounds.speedup(chosen, pipe).median:.2f}x.")
    return lines


def rate_ceiling(result: ModelResult) -> list[str]:
    """The ceiling on the largest job's useful FLOP rate: the model alone on that job's full batch (as a fraction
    of the matmul rate, interleaved rounds), divided by the job's executed / useful FLOPs."""
    alone = result.alone
    job = next((j for j in result.jobs if alone is not None and j.rows == alone.rows), None)
    if job is None or result.chosen not in job.flops:
        return []
    executed, useful = job.flops[result.chosen]
    reached = useful / job.series[result.chosen].time.median
    matmul_rate = statistics.median(alone.matmul_rates)
    batch, length = alone.shape
    pipe = _find(job, "HF pipeline")
    # Even a job that ran at the model-alone rate with no tokenizer, input pipeline or call overhead, at this
    # padding, could not beat the pipeline by more than this: where it is below a target, the target is out of reach.
    versus = (f" At that rate no run of this job could be more than "
              f"**{alone.model_rate * useful / executed / (useful / pipe.time.median):.2f}x** the HF pipeline (it "
              f"was {rounds.speedup(job.series[result.chosen], pipe).median:.2f}x)." if pipe is not None else "")
    return [f"- {result.label}, {job.rows}-row job: the chosen path's model alone ({result.chosen_path}, compiled "
            f"`predict_step` on the job's full batch of {batch} {'packed sequences' if alone.packed else 'rows'} x "
            f"{length} tokens, no tokenizer or input pipeline) runs at {alone.model_rate / 1e9:.1f} GFLOP/s, "
            f"**{alone.fraction:.0%}** of the {result.chosen_path[-4:]} matmul rate timed in the same "
            f"{len(alone.model_seconds)} rounds ({matmul_rate / 1e9:.1f} GFLOP/s); with the job's executed / useful "
            f"{executed / useful:.2f}, its useful rate can be at most **{alone.fraction * useful / executed:.0%}** of "
            f"that rate. The job's useful rate was {reached / matmul_rate:.0%} of this matmul rate; on executed "
            f"FLOPs it ran at {reached * executed / useful / alone.model_rate:.0%} of the model alone.{versus}"]


def targets(result: ModelResult, matmul: dict[str, float], native_bf16: bool) -> list[table.Target]:
    """The issues' targets on this model (medians of per-round ratios, at the job size where each was timed).

    Issues 6 and 18: the chosen path >= 4x the eager loop. Issue 26: >= 2x the HF pipeline (1.5x at 32 rows) for
    MiniLM-L6; for BERT-base >= 3x at 256 rows where bf16 is native, >= 2x without; executed / useful FLOPs <= 1.3
    at 32 rows and <= 1.15 from 256; the useful FLOP rate >= 50% of the chosen precision's matmul rate at the
    largest job.
    """
    out = []
    limit = matmul["bf16" if result.chosen_path.endswith("bf16") else "fp32"]
    largest = max(job.rows for job in result.jobs)
    for job in result.jobs:
        chosen = job.series[result.chosen]
        pipeline_goal = (1.5 if job.rows < 256 else 2.0) if result.label != "BERT-base" else \
            (3.0 if native_bf16 and job.rows >= 256 else 2.0)
        for prefix, goal in (("HF pipeline", pipeline_goal), ("eager TF loop", 4.0)):
            ref = _find(job, prefix)
            if ref is not None:
                out.append(table.Target(f"tfsent / {prefix} ({result.label}, {job.rows}-row job), x",
                                        rounds.speedup(chosen, ref).median, goal))
        executed, useful = job.flops[result.chosen]
        out.append(table.Target(f"executed / useful FLOPs ({result.label}, {job.rows}-row job)", executed / useful,
                                1.3 if job.rows < 256 else 1.15, higher_is_better=False))
        if job.rows == largest:
            out.append(table.Target(f"useful FLOP rate / {result.chosen_path[-4:]} matmul rate ({result.label}, "
                                    f"{job.rows}-row job)", useful / chosen.time.median / limit, 0.5))
        out += ort_targets(result.label, job)
    return out


def ort_targets(label: str, job: Job) -> list[table.Target]:
    """Issue 36 on one job: tfsent's exact default (LiteRT fp32) at least ONNX Runtime fp32's rate, and tfsent's
    fastest path at least 1.5x it (its labels' agreement is the agreement section's target)."""
    ort = _find(job, "ONNX Runtime fp32")
    default = _find(job, "tfsent litert fp32")
    if ort is None or default is None:
        return []
    fastest = max((s for name, s in job.series.items() if name.startswith("tfsent ")),
                  key=lambda s: rounds.speedup(s, ort).median)
    return [table.Target(f"tfsent litert fp32 / ONNX Runtime fp32 ({label}, {job.rows}-row job), x",
                         rounds.speedup(default, ort).median, 1.0),
            table.Target(f"fastest tfsent path ({fastest.name.split(' (')[0][7:]}) / ONNX Runtime fp32 ({label}, "
                         f"{job.rows}-row job), x", rounds.speedup(fastest, ort).median, 1.5)]
