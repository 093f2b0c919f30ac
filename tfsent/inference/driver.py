"""The one prediction driver: every model kind, every input kind, one fingerprint, one part loop, one writer.

``predict(ckpt, input, output, options)`` runs the same sequence for a classifier and a masked LM, for rows and for
documents, on one host or as one shard of many:

1. checks that can fail before compute: output format and path (never the input itself, never a folder, an
   existing output only with ``overwrite``), input format, a checkpoint folder with a config and weights, batch
   size against the replicas, a readable input;
2. the strategy, then the predictor its checkpoint's metadata names (``tfsent.inference.predictor``);
3. the part loop: a reader thread streams the input, cuts it into parts (``part_size`` rows; for documents, whole
   documents up to ``part_size`` chunks) and tokenizes part k+1 while the device predicts part k (a bounded
   prefetch of one part); a part whose content hash matches a finished part is skipped untokenized; each predicted
   part is written to the locked part store (``tfsent.inference.parts``);
4. the merge: parts (of every shard) are checked to cover units 0..N-1 exactly once, in order, and streamed into
   the output file(s), written atomically, while the predictor's summary sums them.

A bad row met in part k stops the run with parts 0..k-1 kept: after the input is fixed, a re-run reuses them if
their content is unchanged and predicts the rest.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import os
import pathlib
import time
from collections.abc import Callable

import tfsent
from tfsent.config import ConfigError
from tfsent.data.errors import DataError
from tfsent.inference import conversion_policy, inputs, outputs, sharded
from tfsent.inference.calibration import requested_backend, resolve_backend
from tfsent.inference.merge import merge
from tfsent.inference.plan import bucket_lengths
from tfsent.inference.options import PredictOptions, result_settings
from tfsent.inference.outputs import OutputError
from tfsent.inference.parts import PartInfo, PartStore, mark_merging, merged_into, remove_folder
from tfsent.inference.predictor import Predictor, kind_of, litert_cache, load_predictor, predictor_class
from tfsent.inference.stream import PartJob, jobs, prefetch
from tfsent.models.sources import check_checkpoint, checkpoint_files, resolve_source
from tfsent.runtime import execution, paths, progress
from tfsent.runtime.memory import steady_heap
from tfsent.runtime.workers import worker_info

log = logging.getLogger(__name__)

TPU_STEPS_PER_EXECUTION = 32


@dataclasses.dataclass(frozen=True)
class _Shard:
    index: int = 0
    count: int = 1
    merges: bool = True  # whether this process merges after predicting its slice (one process, or the chief)


def fingerprint(ckpt_path: pathlib.Path, input: pathlib.Path, fmt: str, kind: str, options: PredictOptions,
                replicas: int) -> str:
    """sha256 of every setting that changes a result (see ``PredictOptions``), the checkpoint files' identity,
    the input's path and format, the replica count and the tfsent version. The input's content is checked per
    part (``tfsent.inference.parts``)."""
    settings = {"kind": kind, **result_settings(options), "ckpt": str(ckpt_path.resolve()),
                "ckpt_files": checkpoint_files(ckpt_path), "input": str(input.resolve()), "format": fmt,
                "replicas": replicas, "version": tfsent.__version__}
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()


def _check_paths(input: pathlib.Path, output: pathlib.Path) -> None:
    paths.check_writable(output, "output")
    real_in, real_out = input.resolve(), output.resolve()
    if real_in == real_out:
        raise OutputError(f"output={output} is the input {input} (after resolving links); choose another output, "
                          "the input would be destroyed")
    if output.is_dir():
        raise OutputError(f"output={output} is a folder; name a file (.csv, .jsonl or .parquet)")
    if os.environ.get("TFSENT_CACHE_DIR"):  # where an execution calibration records its choice
        paths.check_writable(execution.cache_file().parent, "TFSENT_CACHE_DIR", derived=False)


def _check_free(output: pathlib.Path, overwrite: bool) -> None:
    # Checked once the parts folder is locked (a run that held the lock until then may have written the output).
    if output.exists():
        if not overwrite:
            raise OutputError(f"output={output} already exists; pass overwrite=true to replace it, or choose "
                              "another output")
        log.warning("replacing %s (overwrite=true)", output)


def _shard_plan(options: PredictOptions) -> tuple[_Shard, str]:
    if options.strategy == "multi_worker":
        if options.num_shards != 1:
            raise ValueError("strategy=multi_worker takes its shards from TF_CONFIG; drop num_shards/shard_index")
        info = worker_info()
        # Each worker predicts on its own devices: prediction needs no collective.
        return _Shard(info.index, info.count, merges=info.is_chief), "auto"
    # Independent processes may run at different times: none waits for the others; merge=true joins them after.
    return _Shard(options.shard_index, options.num_shards, merges=options.num_shards == 1), options.strategy


def predict(ckpt_path: str | os.PathLike, input: str | os.PathLike, output: str | os.PathLike,
            options: PredictOptions = PredictOptions(), *, strategy: tf.distribute.Strategy | None = None) -> dict:
    """Predict every row (or every chunk of every document) of ``input`` and write ``output`` atomically.

    A classifier checkpoint gives labels and probabilities; a masked-LM checkpoint is evaluated (held-out loss,
    masked accuracy, perplexity): see :mod:`tfsent.inference.classifier` and :mod:`tfsent.inference.masked_lm` for
    their columns. Rows: ``row`` (0-based input position), ``id`` (with ``id_column``) or ``example_id`` (TFRecord
    input), ``text`` (unless ``keep_text`` is false), the ``keep_columns``, ``true_label`` (with ``label_column``),
    then the predictor's columns. Documents: the document table goes to ``output`` and the chunk table to
    ``<output stem>.chunks<suffix>``, both with ``doc_id`` and the file name (``document``). With ``label_column``
    the metrics of the labelled file are written beside ``output`` (``tfsent.inference.evaluation``).

    Args:
        ckpt_path: a model folder (tfsent's, or any that transformers' ``save_pretrained`` wrote, PyTorch or TF
            weights), a packaged checkpoint name or a Hugging Face hub id (``options.revision`` pins it).
        input: a csv/jsonl/parquet/text file, a TFRecord dataset folder, or a folder of ``.txt`` documents.
        output: the output file (csv/jsonl/parquet); for documents, the document table.
        options: every other setting (see :class:`~tfsent.inference.options.PredictOptions`).
        strategy: an already built strategy (tests, benchmarks); default: ``make_strategy(options.strategy)``.

    Returns:
        Summary: ``rows``, ``seconds``, ``rows_per_second``, ``output``, ``parts``, ``parts_skipped``,
        ``buckets``, ``replicas`` and the predictor's own fields (``label_counts``; or ``masked_tokens``, ``loss``,
        ``masked_accuracy``, ``perplexity``, ``summary_output``; ``evaluation`` with ``label_column``), plus
        ``documents``, ``chunks``,
        ``chunks_output`` for documents and ``shard``, ``shards``, ``lo``, ``hi`` for a shard.

    Raises:
        CheckpointError: unreadable checkpoint. DataError: bad input (file and line named), a missing kept or
        label column, an unknown label. ConfigError: a label_map onto labels the model lacks, a label_column for
        a masked LM.
        OutputError: bad output path or format, parts or shards that do not join. LockedError: another run
        writes the same output. ValueError: bad batch size, buckets or options.
    """
    start = time.perf_counter()
    input, output = pathlib.Path(input), pathlib.Path(output)
    out_fmt = outputs.infer_format(output, options.output_format)
    fmt = inputs.infer_format(input, options.input_format)
    shard, strategy_name = _shard_plan(options)
    paths.check_readable(ckpt_path, "ckpt_path")
    paths.check_readable(input, "input")
    _check_paths(input, output)
    # A hub id becomes its cached (or downloaded) snapshot folder here, once, before anything else is built.
    ckpt_path = resolve_source(str(ckpt_path), revision=options.revision)
    if options.merge:
        _check_free(output, options.overwrite)
        return _predict_locked(ckpt_path, input, output, out_fmt, fmt, shard, strategy_name, options, strategy, None,
                               start)
    # Locked before the checkpoint is read: a second run on this output stops here, before loading anything.
    with PartStore(sharded.parts_folder(output, shard.index, shard.count)) as store:
        if shard.merges:
            if not options.overwrite and merged_into(store.dir, output):
                log.warning("%s: removed the parts of the run that wrote %s (it stopped before removing them)",
                            store.dir, output)
                remove_folder(store.dir)
            _check_free(output, options.overwrite)
        return _predict_locked(ckpt_path, input, output, out_fmt, fmt, shard, strategy_name, options, strategy,
                               store, start)


def _predict_locked(ckpt_path: pathlib.Path, input: pathlib.Path, output: pathlib.Path, out_fmt: str, fmt: str,
                    shard: _Shard, strategy_name: str, options: PredictOptions, strategy, store: PartStore | None,
                    start: float) -> dict:
    check_checkpoint(ckpt_path)
    # Before the strategy starts TensorFlow's thread pools: what a part frees goes back to the system.
    steady_heap()
    kind = kind_of(ckpt_path)
    kind_class = predictor_class(kind)
    source = kind_class.open_source(ckpt_path, input, fmt, options)
    calibrate = shard.count == 1 and not options.merge
    # Sized once, and only if a policy asks (a warm run asks nothing): a QA file is read whole to size it.
    job_bytes = functools.cache(lambda: kind_class.job_bytes(source, input))
    chosen = resolve_backend(options, kind, strategy=strategy, config=_probe_config(ckpt_path, options),
                             job_bytes=job_bytes, calibrate=calibrate)
    asked = requested_backend(options)
    options, predictor, convert_later = chosen.options, None, None
    # auto's own choice of LiteRT converts first only for a job worth the conversion; a run split over processes
    # always does (its shards must run one path).
    if options.backend == "litert" and asked == "auto" and calibrate and options.precision != "int8":
        convert_later = _deferred_conversion(ckpt_path, kind, options, job_bytes)
        if convert_later is not None:
            # Graph fp32, as the conversion policy priced it: a job too small to repay a conversion would spend
            # more on XLA's compilation of each bucket shape than it scores (1,024 rows of MiniLM-L6: 10.6 s
            # against 6.6 s in graph mode).
            options = dataclasses.replace(options, backend="tensorflow", precision="float32", jit_compile=False)
    if options.backend == "litert" and not options.merge:
        predictor = _load_litert(ckpt_path, options)
        if predictor is None:
            options = dataclasses.replace(options, backend="tensorflow", precision="float32")
    if options.backend == "litert":
        log.info(chosen.describe())
        replicas = 1
        strategy = None
    else:
        if strategy is None:
            strategy = _make_strategy(strategy_name)
        resolved = _resolve_tensorflow(strategy, options, ckpt_path, calibrate)
        if convert_later is not None:
            log.info(dataclasses.replace(resolved, how="LiteRT's conversion follows this job").describe())
        options = resolved.options
        replicas = strategy.num_replicas_in_sync
    # The fingerprint holds the path that runs, never "auto": parts of another path are predicted again.
    fp = fingerprint(ckpt_path, input, fmt, kind, options, replicas)
    if options.merge:
        return _merge_shards(source, output, out_fmt, fmt, kind, options, fp, start)
    if predictor is None:
        from tfsent.runtime.strategy import is_tpu

        spe = options.steps_per_execution or (TPU_STEPS_PER_EXECUTION if is_tpu(strategy) else 1)
        predictor = load_with_options(ckpt_path, strategy, spe, options)
    if fmt == "documents":
        predictor.check_documents(str(input))
    lengths = bucket_lengths(options.buckets, predictor.max_length)
    if fmt == "tfrecord":
        source.max_length = lengths[-1]

    folder = store.dir
    store.begin(fp, {"shard": shard.index, "shards": shard.count})
    lo, hi, total = 0, None, None
    if shard.count > 1:
        total = source.count()
        lo, hi = _slice(total, shard, kind, options.part_size)
        if lo == hi:
            log.warning("shard %d of %d has no %s to predict: %s", shard.index, shard.count, _units(source.kind),
                        _why_empty(total, shard, kind, source.kind, options.part_size))
    run = _run_parts(predictor, strategy, source, store, lengths, options, lo, hi)
    if (total if shard.count > 1 else run["rows"]) == 0:
        raise DataError(f"{input}: nothing to predict (no rows or chunks)")
    summary = {"parts": run["parts"], "parts_skipped": run["skipped"], "buckets": list(lengths),
               "replicas": replicas, "backend": options.backend, "startup": _startup(predictor, run, start)}
    if shard.count > 1:
        sharded.mark_complete(folder, lo, run["end"], total, run["parts"])
        summary.update(shard=shard.index, shards=shard.count, lo=lo, hi=run["end"], rows=run["rows"],
                       units=_units(source.kind), parts_folder=str(folder))
        if not shard.merges:
            return _finish(summary, start)
        stores = sharded.check_shards(output, shard.count, fp, wait_s=options.shard_wait_s)
        mark_merging(folder, output)
        merged = merge(stores, source, output, out_fmt, kind, fmt, options)
    else:
        mark_merging(folder, output)
        merged = merge([(folder, {"lo": 0, "hi": run["end"], "parts": run["parts"]})], source, output, out_fmt,
                        kind, fmt, options)
        remove_folder(folder)
    if shard.count > 1:
        for f, _ in stores:
            remove_folder(f)
    summary.update(merged)
    if convert_later is not None:  # the output is complete: the next job finds the model converted
        convert_later()
    if kind == "masked_lm":  # what the evaluation summary records of its setting
        summary.update(seed=options.mask_seed, checkpoint=str(ckpt_path))
    return _finish(summary, start, kind, output)


def _make_strategy(name: str):
    from tfsent.runtime.strategy import make_strategy

    return make_strategy(name)


def _resolve_tensorflow(strategy, options: PredictOptions, ckpt_path: pathlib.Path, calibrate: bool):
    from tfsent.inference.calibration import resolve_execution
    from tfsent.runtime.strategy import check_global_batch

    check_global_batch(options.global_batch_size, strategy, "global_batch_size")
    resolved = resolve_execution(strategy, options, config=_probe_config(ckpt_path, options), calibrate=calibrate)
    if resolved.how != "explicit":
        log.info(resolved.describe())
    return resolved


def _deferred_conversion(ckpt_path: pathlib.Path, kind: str, options: PredictOptions, job_bytes: Callable[[], int]):
    """When this job should score on TensorFlow rather than convert the model for LiteRT first
    (:mod:`tfsent.inference.conversion_policy`, logged): a callable that starts the conversion in the background;
    else None (converted already, or worth converting now)."""
    from tfsent.inference import background_conversion, litert
    from tfsent.models.loading import read_config

    predictor = predictor_class(kind)
    settings = predictor.litert_settings(options)
    cache = litert_cache(ckpt_path, kind, settings)
    if cache.decided("padded"):
        return None
    packs = predictor.packs and options.packing is not False
    why = conversion_policy.defer(read_config(ckpt_path), job_bytes(), litert.threads(), signatures=2 if packs else 1)
    if why is None:
        background_conversion.wait(cache.folder)  # a small job's conversion may be under way: read its files
        return None
    log.info("%s has no LiteRT model yet: %s", ckpt_path, why)
    return lambda: background_conversion.start(cache.folder, ckpt_path, kind, settings, packs)


def _load_litert(ckpt_path: pathlib.Path, options: PredictOptions) -> Predictor | None:
    """The checkpoint's predictor on LiteRT, or None (logged) where the model does not convert.

    Raises:
        ConfigError: ``precision=int8`` and the model does not convert (TensorFlow has no int8 path to fall back on).
    """
    from tfsent.inference import litert

    try:
        return load_predictor(ckpt_path, None, max_length=options.max_length, jit_compile=None,
                              steps_per_execution=1, options=options)
    except litert.Unsupported as e:
        if options.precision == "int8":
            raise ConfigError(f"precision=int8: LiteRT cannot score {ckpt_path} ({e}); use precision=float32") \
                from None
        log.warning("LiteRT cannot score %s (%s): it runs on TensorFlow", ckpt_path, e)
        return None


def _startup(predictor: Predictor, run: dict, start: float) -> dict:
    """Seconds from the process's start to its first scored batch, split: imports (before the driver started),
    tokenizer (on LiteRT with the folder's facts), model (weights, or the converted model read and checked), convert
    (a first run's conversion), and the first batch (the first part read, tokenized and its first batch scored)."""
    split = {"imports": _since_process_start() - (time.perf_counter() - start)} if _since_process_start() else {}
    split.update(getattr(predictor, "load_seconds", {}))
    if run.get("first_batch") is not None:
        split["first_batch"] = run["first_batch"]
    return {k: round(max(v, 0.0), 3) for k, v in split.items()}


def _since_process_start() -> float | None:
    """Seconds since this process started (Linux's /proc), or None."""
    try:
        ticks = int(pathlib.Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(pathlib.Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return uptime - ticks / os.sysconf("SC_CLK_TCK")


def _probe_config(ckpt_path: pathlib.Path, options: PredictOptions):
    """The checkpoint's config, read only where ``auto`` may have to probe its shape."""
    if options.precision != "auto" and options.jit_compile != "auto":
        return None
    from tfsent.models.loading import read_config

    return read_config(ckpt_path)


def load_with_options(ckpt_path: str | os.PathLike, strategy, steps_per_execution: int,
                      options: PredictOptions) -> Predictor:
    """The checkpoint's predictor under ``options.precision`` (set as the global policy first) and ``jit_compile``
    (both concrete, not ``auto``), compiled for ``strategy``."""
    from tfsent.runtime.precision import set_policy

    set_policy(options.precision, strategy)  # global: set for every load, float32 included
    return load_predictor(ckpt_path, strategy, max_length=options.max_length, jit_compile=options.jit_compile,
                          steps_per_execution=steps_per_execution, options=options)


def _slice(total: int, shard: _Shard, kind: str, part_size: int) -> tuple[int, int]:
    """Units ``[lo, hi)`` of a shard: an even share of the rows (or documents, or questions), whatever ``part_size``
    is.

    A classifier scores each row on its own and a QA model each question, so any cut gives the one-process results
    (within float noise, as batches differ). A masked LM's masks are drawn per batch, so its shards take whole parts
    of the one-process run: the same batches, the same masks.
    """
    if kind != "masked_lm":
        return sharded.shard_bounds(total, shard.count, shard.index)
    n_parts = -(-total // part_size)
    p_lo, p_hi = sharded.shard_bounds(n_parts, shard.count, shard.index)
    return min(total, p_lo * part_size), min(total, p_hi * part_size)


def _units(source_kind: str) -> str:
    return {"documents": "documents", "questions": "questions"}.get(source_kind, "rows")


def _why_empty(total: int, shard: _Shard, kind: str, source_kind: str, part_size: int) -> str:
    if kind == "masked_lm":
        return (f"the input's {total} rows make {-(-total // part_size)} part(s) of part_size={part_size}, and a "
                f"masked LM's shards take whole parts (its masks are drawn per batch); lower part_size to spread "
                f"them over {shard.count} shards")
    return f"the input has {total} {_units(source_kind)} for {shard.count} shards"


def _finish(summary: dict, start: float, kind: str | None = None, output: pathlib.Path | None = None) -> dict:
    seconds = time.perf_counter() - start
    rows = summary.get("rows", 0)
    summary.update(seconds=seconds, rows_per_second=rows / seconds if seconds > 0 else 0.0)
    if output is not None:
        summary["output"] = str(output)
    if kind is not None:
        summary["kind"] = kind
        predictor_class(kind).finish(summary, output)
    # The entry point prints the summary: logged as well, it showed twice.
    log.debug("predicted %d rows in %.1f s (%.1f rows/s)%s", rows, seconds, summary["rows_per_second"],
              f" -> {output}" if output else "")
    return summary


def _run_parts(predictor: Predictor, strategy, source, store: PartStore, lengths, options: PredictOptions,
               lo: int, hi: int | None) -> dict:
    skipped = parts = rows = 0
    end = lo
    map_fn = predictor.map_fn()
    packing = predictor.packing(options.packing)
    began, first = time.perf_counter(), []

    def on_rows(_: int) -> None:
        if not first:
            first.append(time.perf_counter() - began)
    with progress.steps(desc=f"predict ({predictor.kind})", unit="row", step="part",
                        progress=options.progress) as bar:
        for job in prefetch(jobs(predictor, source, store, lengths, options, lo, hi)):
            parts += 1
            if isinstance(job, PartInfo):
                skipped += 1
                rows += job.rows
                end = job.hi
                bar.update(job.rows)
                continue
            n = _predict_part(predictor, strategy, job, store, lengths, options, map_fn, packing, on_rows)
            rows += n
            end = job.hi
            bar.update(n)
    store.discard_from(parts)  # parts of a longer, older input
    return {"parts": parts, "skipped": skipped, "rows": rows, "end": end, "first_batch": first[0] if first else None}


def _predict_part(predictor: Predictor, strategy, job: PartJob, store: PartStore, lengths, options: PredictOptions,
                  map_fn, packing, on_rows) -> int:
    # A function of its own so that the part's outputs, columns and frame are dropped when it returns, not held
    # by the loop while the next part is predicted.
    n = len(job.tokens)
    if not n:
        out = predictor.empty_outputs()
    elif strategy is None:  # LiteRT: exact shapes (no tails to pad; a new shape compiles nothing)
        from tfsent.inference import litert

        out = litert.predict_bucketed(predictor.model, job.tokens, buckets=lengths,
                                      global_batch_size=options.global_batch_size, pad_values=predictor.pad_values,
                                      packing=packing, on_rows=on_rows)
    else:
        # A full part pads each bucket's last batch to the global batch: XLA keeps every shape it compiles (about
        # 15 MB each for BERT-tiny on a CPU), and smaller tails, a new power of two per bucket now and then, made a
        # run's memory grow with its parts (1.38x from 10k to 1M rows). Padding costs under one batch per bucket
        # per part; a short part (a small job, or the last part) still runs its tails small.
        from tfsent.inference.engine import predict_bucketed

        out = predict_bucketed(predictor.model, strategy, job.tokens, buckets=lengths,
                               global_batch_size=options.global_batch_size, pad_values=predictor.pad_values,
                               map_fn=map_fn, shrink_tails=n < options.part_size, packing=packing, on_rows=on_rows)
    frame = predictor.frame(out, job)
    store.write(PartInfo(job.index, job.lo, job.hi, len(frame), job.sha256, None if len(frame) == n else n), frame)
    return n


def _merge_shards(source, output: pathlib.Path, out_fmt: str, fmt: str, kind: str, options: PredictOptions,
                  fp: str, start: float) -> dict:
    if options.num_shards < 2:
        raise ValueError("merge=true joins the shards of a sharded run: set num_shards to their count")
    stores = sharded.check_shards(output, options.num_shards, fp)
    summary = merge(stores, source, output, out_fmt, kind, fmt, options)
    for f, _ in stores:
        remove_folder(f)
    summary.update(shards=options.num_shards, parts=sum(r["parts"] for _, r in stores))
    return _finish(summary, start, kind, output)
