"""Evaluate a trained masked LM on new text with ``python -m tfsent.predict`` (held-out loss, accuracy, perplexity).

``tfsent.predict.predict`` hands a checkpoint written by ``MaskedLM.save_pretrained`` (it holds
``tfsent_mlm.json``) to :func:`predict_masked_lm`. Each row (a line of a text file, a csv/jsonl/parquet row, or a
block of a prepared MLM dataset) is tokenized with the checkpoint's own tokenizer, bucketed by length, masked in
the input pipeline (15%, 80/10/10, special and padding tokens never, the model's masking ids) with a fixed seed,
and scored by the compiled, distributed ``predict()`` whose step reduces logits on device
(``MaskedLM.predict_step``), so memory is bounded by the batch, never ``[N, length, vocab]``.

Output columns: ``row``, ``id`` (with ``id_column``) or ``example_id`` (TFRecord input), ``n_tokens``,
``truncated``, ``num_masked``, ``num_correct``, ``loss`` (mean over the row's masked tokens), ``masked`` and
``predicted`` (the label and top-1 tokens at the first ``max_predictions`` masked positions, space-separated).
The summary (printed, returned, and written to ``<output stem>.summary.json``) holds the token-weighted loss,
masked accuracy and perplexity over every masked token of the input.

Masks are keyed by the seed and the row ids of each batch: the same input, seed, batch size, replica count and
part size give the same masks and numbers.
"""

from __future__ import annotations

import json
import logging
import math
import pathlib
import time
from collections.abc import Sequence

import numpy as np
import pandas as pd
import tensorflow as tf

import tfsent
from tfsent.runtime import atomic
from tfsent import inputs as inputs_lib
from tfsent import outputs as out_lib
from tfsent.bucketing import DEFAULT_BUCKETS, bucket_lengths, default_jit_compile, predict_bucketed, tokenize_rows
from tfsent.data.errors import DataError
from tfsent.data.masking import IGNORE_INDEX, MaskingSpec, masking_map_fn
from tfsent.models.masked_lm import SPEC_FILE, load_masked_lm
from tfsent.data.tokenize import load_tokenizer

log = logging.getLogger(__name__)

DEFAULT_SEED = 1234


def is_masked_lm(ckpt_path: str | pathlib.Path) -> bool:
    """True for a folder written by ``MaskedLM.save_pretrained``."""
    return (pathlib.Path(ckpt_path) / SPEC_FILE).is_file()


def summary_path(output: str | pathlib.Path) -> pathlib.Path:
    """``<output stem>.summary.json`` beside the output."""
    output = pathlib.Path(output)
    return output.with_name(f"{output.stem}.summary.json")


def _tokens(tokenizer, ids: np.ndarray, keep: np.ndarray) -> str:
    return " ".join(tokenizer.convert_ids_to_tokens([int(i) for i in ids[keep]]))


def predict_masked_lm(ckpt_path: str | pathlib.Path, input: str | pathlib.Path, output: str | pathlib.Path, *,
                      strategy: tf.distribute.Strategy, input_format: str, text_column: str = "text",
                      id_column: str | None = None, output_format: str | None = None, global_batch_size: int = 64,
                      buckets: Sequence[int] = DEFAULT_BUCKETS, max_length: int | None = None,
                      part_size: int = 100_000, split: str = "test", encoding: str | None = None,
                      seed: int = DEFAULT_SEED, jit_compile: bool | None = None, progress: bool = True) -> dict:
    """Score every row of ``input`` with a masked LM and write ``output`` (and its summary) atomically.

    Args: as ``tfsent.predict.predict`` (which calls this), plus ``seed``, the masking seed. ``input_format``
    is already resolved (not ``auto``); ``documents`` is refused: a masked LM scores rows, not documents.

    Returns:
        Summary: ``rows``, ``masked_tokens``, ``loss``, ``masked_accuracy``, ``perplexity``, ``seconds``,
        ``rows_per_second``, ``output``, ``summary_output``, ``parts``, ``parts_skipped``, ``buckets``,
        ``replicas``.

    Raises:
        CheckpointError: unreadable checkpoint. DataError: bad input (file and line named), or input without
        a single maskable token. OutputError: bad output path or format.
    """
    start = time.perf_counter()
    if input_format == "documents":
        raise DataError(f"{input}: a masked LM checkpoint ({ckpt_path}) scores rows, not documents; pass a text, "
                        "csv, jsonl or parquet file, or a prepared MLM dataset folder (input_format=tfrecord)")
    out_fmt = out_lib.infer_format(output, output_format)
    ckpt_path = pathlib.Path(ckpt_path)
    with strategy.scope():
        model = load_masked_lm(ckpt_path)
        model.compile(jit_compile=default_jit_compile(strategy) if jit_compile is None else jit_compile)
    tokenizer = load_tokenizer(ckpt_path)
    spec = model.spec
    limit = spec.max_seq_length if max_length is None else min(max_length, spec.max_seq_length)
    lengths = bucket_lengths(buckets, limit)
    masking = MaskingSpec(vocab_size=spec.vocab_size, mask_token_id=spec.mask_token_id,
                          special_ids=spec.special_ids())

    ids = None
    if input_format == "tfrecord":
        tok = inputs_lib.read_tfrecord(input, split, max_length=lengths[-1])
        files, ragged, ids = tok.files, {k: tok.features[k] for k in ("input_ids", "attention_mask")}, tok.example_ids
        truncated = np.zeros(len(ids), bool)
    else:
        table = inputs_lib.read_texts(input, input_format, text_column=text_column, id_column=id_column,
                                      encoding=encoding)
        files, ids = table.files, table.ids
        ragged, truncated = tokenize_rows(tokenizer, table.texts, lengths[-1], with_types=False)
    n = len(ragged["input_ids"])
    if n == 0:
        raise DataError(f"{input}: nothing to score (no rows)")

    settings = {"task": "mlm", "ckpt": str(ckpt_path.resolve()),
                "ckpt_files": out_lib.checkpoint_files(ckpt_path),
                "format": input_format, "text_column": text_column, "id_column": id_column, "buckets": lengths,
                "split": split, "seed": seed, "global_batch_size": global_batch_size,
                "replicas": strategy.num_replicas_in_sync, "version": tfsent.__version__}
    store = out_lib.PartStore(output, out_lib.fingerprint(files, settings), n, part_size)
    def predict_part(lo: int, hi: int, on_rows) -> pd.DataFrame:
        out = predict_bucketed(model, strategy, {k: v[lo:hi] for k, v in ragged.items()}, buckets=lengths,
                               global_batch_size=global_batch_size, pad_values={"input_ids": spec.pad_token_id},
                               on_rows=on_rows, map_fn=masking_map_fn(masking, seed))
        real = out["labels"] != IGNORE_INDEX
        cols = {"row": np.arange(lo, hi, dtype=np.int64)}
        if input_format == "tfrecord":
            cols["example_id"] = np.asarray(ids[lo:hi], dtype=np.int64)
        elif ids is not None:
            cols["id"] = ids[lo:hi]
        cols.update(n_tokens=[len(s) for s in ragged["input_ids"][lo:hi]], truncated=truncated[lo:hi],
                    num_masked=out["num_masked"].astype(np.int64), num_correct=out["num_correct"].astype(np.int64),
                    loss=out["loss"].astype(np.float64),
                    masked=[_tokens(tokenizer, out["labels"][i], real[i]) for i in range(hi - lo)],
                    predicted=[_tokens(tokenizer, out["top_ids"][i, :, 0], real[i]) for i in range(hi - lo)])
        return pd.DataFrame(cols)

    skipped = store.run(predict_part, progress=progress, desc="mlm eval")
    frame = store.finish("rows")
    masked = int(frame["num_masked"].sum())
    if masked == 0:
        raise DataError(f"{input}: no token was masked in {n} rows (texts too short to mask?); nothing to score")
    loss = float((frame["loss"] * frame["num_masked"]).sum() / masked)
    summary = {"rows": n, "masked_tokens": masked, "loss": loss,
               "masked_accuracy": float(frame["num_correct"].sum() / masked), "perplexity": math.exp(loss),
               "parts": store.n_parts, "parts_skipped": skipped, "buckets": list(lengths),
               "replicas": strategy.num_replicas_in_sync, "seed": seed, "checkpoint": str(ckpt_path)}
    out_lib.write_table(frame, output, out_fmt)
    summary_file = summary_path(output)
    atomic.write_text(summary_file, json.dumps(summary, indent=2) + "\n")
    store.remove()
    seconds = time.perf_counter() - start
    summary.update(output=str(output), summary_output=str(summary_file), seconds=seconds,
                   rows_per_second=n / seconds if seconds > 0 else 0.0)
    log.info("masked-LM eval of %d rows in %.1f s: loss %.4f, accuracy %.4f, perplexity %.2f -> %s",
             n, seconds, loss, summary["masked_accuracy"], summary["perplexity"], output)
    return summary
