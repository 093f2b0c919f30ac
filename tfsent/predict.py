"""Predict with a trained classifier: every input row once, in order, bucketed, distributed; document scores.

A masked-LM checkpoint is evaluated instead (held-out loss, masked accuracy, perplexity): :mod:`tfsent.mlm_predict`.

``python -m tfsent.predict ckpt_path=runs/.../model input=texts.csv output=scores.csv`` (see
``conf/predict.yaml``). The library function :func:`predict` takes typed arguments and returns a summary dict;
only :func:`main` reads the Hydra config.

Per-row handling (never a silently shorter output):

- empty or whitespace-only texts, undecodable bytes, a missing text column: a ``DataError`` naming file and
  line (from :mod:`tfsent.data.sources`); nothing is written.
- texts longer than the top bucket: truncated to it (special tokens kept), marked ``truncated=True``. Use a
  documents folder for long texts: they are chunked, not truncated.
- an empty ``.txt`` document: its row is kept with ``n_chunks == 0`` and ``label == ""``.
- an unreadable checkpoint: ``CheckpointError`` before any input is read.

Output columns (rows): ``row`` (0-based input position), ``id`` (when ``id_column`` is set) or ``example_id``
(TFRecord input), ``label``, ``label_id``, ``prob_<label>`` per label, ``n_tokens``, ``truncated``.
Documents: the document table goes to ``output``, the chunk table to ``<output stem>.chunks<suffix>``
(``doc_id, chunk_id, start, end, text, n_tokens, label, label_id, prob_<label>``).
"""

from __future__ import annotations

import dataclasses
import logging
import pathlib
import time
from collections.abc import Sequence

import hydra
import numpy as np
import pandas as pd
import tensorflow as tf
from omegaconf import DictConfig

import tfsent
from tfsent import documents as docs_lib
from tfsent import inputs as inputs_lib
from tfsent import mlm_predict
from tfsent import outputs as out_lib
from tfsent.bucketing import DEFAULT_BUCKETS, bucket_lengths, default_jit_compile, predict_bucketed, tokenize_rows
from tfsent.config import conf_dir, require, spec_from_config, strategy_name, to_container
from tfsent.data.errors import DataError
from tfsent.models import load_classifier, load_tokenizer
from tfsent.runtime.strategy import check_global_batch, make_strategy

log = logging.getLogger(__name__)


def model_max_length(model) -> int:
    """The longest sequence the classifier's position embeddings allow (RoBERTa reserves ``pad_id + 1``)."""
    config = model.hf_model.config
    reserved = (config.pad_token_id or 0) + 1 if model.arch == "roberta" else 0
    return int(config.max_position_embeddings) - reserved


def _prob_columns(probs: np.ndarray, names: Sequence[str]) -> dict[str, np.ndarray]:
    return {f"prob_{n}": probs[:, k].astype(np.float64) for k, n in enumerate(names)}


def predict(ckpt_path: str | pathlib.Path, input: str | pathlib.Path, output: str | pathlib.Path, *,
            input_format: str = "auto", text_column: str = "text", id_column: str | None = None,
            output_format: str | None = None, strategy: str | tf.distribute.Strategy = "auto",
            global_batch_size: int = 64, buckets: Sequence[int] = DEFAULT_BUCKETS, max_length: int | None = None,
            documents: docs_lib.ChunkOptions = docs_lib.ChunkOptions(), part_size: int = 100_000,
            precision: str = "float32", split: str = "test", encoding: str | None = None,
            jit_compile: bool | None = None, progress: bool = True, mask_seed: int = mlm_predict.DEFAULT_SEED
            ) -> dict:
    """Predict every row (or every chunk of every document) of ``input`` and write ``output`` atomically.

    A masked-LM checkpoint (written by ``MaskedLM.save_pretrained``) is evaluated instead: see
    :func:`tfsent.mlm_predict.predict_masked_lm` for its columns and summary.

    Args:
        ckpt_path: a classifier directory written by ``SequenceClassifier.save_pretrained`` (or a masked LM's).
        input: a csv/jsonl/parquet/text file, a TFRecord dataset folder, or a folder of ``.txt`` documents.
        output: the output file (csv/jsonl/parquet); for documents, the document table.
        input_format: one of ``auto, csv, jsonl, parquet, text, tfrecord, documents``.
        text_column: column with the text (csv/jsonl/parquet).
        id_column: optional id column copied to the output as ``id``.
        output_format: ``csv``, ``jsonl`` or ``parquet``; None infers it from ``output``'s suffix.
        strategy: a ``make_strategy`` name or a strategy (the model is built under its scope).
        global_batch_size: rows per step over all replicas (a multiple of the replicas).
        buckets: sequence lengths; each capped at the model's maximum, the largest is the truncation length.
        max_length: an optional lower cap than the model's position embeddings.
        documents: chunking and weighting of documents.
        part_size: rows (chunks) per resumable part.
        precision: ``float32``, or a policy for ``tfsent.runtime.precision.set_policy`` when that module exists.
        split: the split of a TFRecord input.
        encoding: the text encoding of the input (default utf-8).
        jit_compile: XLA-compile the predict step; None picks per strategy (see ``default_jit_compile``).
        progress: show a tqdm progress bar.
        mask_seed: masking seed of a masked-LM evaluation.

    Returns:
        Summary: ``rows``, ``seconds``, ``rows_per_second``, ``output``, ``parts``, ``parts_skipped``,
        ``label_counts``, ``buckets``, ``replicas`` (and ``documents``, ``chunks_output`` for documents).

    Raises:
        CheckpointError: unreadable checkpoint. DataError: bad input (file and line named).
        OutputError: bad output path/format. ValueError: bad batch size, buckets or options.
    """
    start = time.perf_counter()
    if isinstance(strategy, str):
        strategy = make_strategy(strategy)
    check_global_batch(global_batch_size, strategy, "global_batch_size")
    out_fmt = out_lib.infer_format(output, output_format)
    fmt = inputs_lib.infer_format(input, input_format)
    if precision != "float32":
        from tfsent.runtime.precision import set_policy  # not every build has it yet; float32 needs nothing
        set_policy(precision, strategy)
    ckpt_path = pathlib.Path(ckpt_path)
    if mlm_predict.is_masked_lm(ckpt_path):
        return mlm_predict.predict_masked_lm(
            ckpt_path, input, output, strategy=strategy, input_format=fmt, text_column=text_column,
            id_column=id_column, output_format=output_format, global_batch_size=global_batch_size, buckets=buckets,
            max_length=max_length, part_size=part_size, split=split, encoding=encoding, seed=mask_seed,
            jit_compile=jit_compile, progress=progress)
    tokenizer = load_tokenizer(ckpt_path)
    with strategy.scope():
        model = load_classifier(ckpt_path)
        model.compile(jit_compile=default_jit_compile(strategy) if jit_compile is None else jit_compile)
    limit = model_max_length(model) if max_length is None else min(max_length, model_max_length(model))
    lengths = bucket_lengths(buckets, limit)
    names = model.label_names
    pad_values = {"input_ids": tokenizer.pad_token_id or 0}

    chunks: list[docs_lib.Chunk] = []
    doc_ids: list[str] = []
    ids = None
    if fmt == "documents":
        docs, files = inputs_lib.read_documents(input, encoding or "utf-8")
        doc_ids = [d for d, _ in docs]
        texts_by_doc = dict(docs)
        chunks = docs_lib.chunk_documents(docs, tokenizer, lengths[-1], documents)
        ragged = {"input_ids": [c.input_ids for c in chunks],
                  "attention_mask": [[1] * c.n_tokens for c in chunks]}
        if model.arch == "bert":
            ragged["token_type_ids"] = [c.token_type_ids for c in chunks]
        truncated = np.zeros(len(chunks), bool)
    elif fmt == "tfrecord":
        tok = inputs_lib.read_tfrecord(input, split, max_length=lengths[-1])
        files, ragged, ids = tok.files, tok.features, tok.example_ids
        truncated = np.zeros(len(ids), bool)
    else:
        table = inputs_lib.read_texts(input, fmt, text_column=text_column, id_column=id_column, encoding=encoding)
        files, ids = table.files, table.ids
        ragged, truncated = tokenize_rows(tokenizer, table.texts, lengths[-1], with_types=model.arch == "bert")
    n = len(ragged["input_ids"])
    if n == 0:
        raise DataError(f"{input}: nothing to predict (no rows or chunks)")

    settings = {"ckpt": str(ckpt_path.resolve()), "ckpt_files": out_lib.checkpoint_files(ckpt_path), "format": fmt,
                "text_column": text_column, "id_column": id_column, "buckets": lengths, "split": split,
                "documents": dataclasses.asdict(documents) if fmt == "documents" else None,
                "precision": precision, "version": tfsent.__version__}
    store = out_lib.PartStore(output, out_lib.fingerprint(files, settings), n, part_size)
    def predict_part(lo: int, hi: int, on_rows) -> pd.DataFrame:
        out = predict_bucketed(model, strategy, {k: v[lo:hi] for k, v in ragged.items()}, buckets=lengths,
                               global_batch_size=global_batch_size, pad_values=pad_values, on_rows=on_rows)
        cols = {"row": np.arange(lo, hi, dtype=np.int64)}
        if fmt == "documents":
            part_chunks = chunks[lo:hi]
            cols.update(doc_id=[c.doc_id for c in part_chunks], chunk_id=[c.chunk_id for c in part_chunks],
                        start=[c.start for c in part_chunks], end=[c.end for c in part_chunks],
                        text=[texts_by_doc[c.doc_id][c.start:c.end] for c in part_chunks])
        elif fmt == "tfrecord":
            cols["example_id"] = np.asarray(ids[lo:hi], dtype=np.int64)
        elif ids is not None:
            cols["id"] = ids[lo:hi]
        label_id = out["label_id"].astype(np.int64)
        cols.update(n_tokens=[len(s) for s in ragged["input_ids"][lo:hi]],
                    label=[names[i] for i in label_id], label_id=label_id,
                    **_prob_columns(out["probs"], names))
        if fmt != "documents":
            cols["truncated"] = truncated[lo:hi]
        return pd.DataFrame(cols)

    skipped = store.run(predict_part, progress=progress)
    frame = store.finish("rows")
    summary = {"rows": n, "parts": store.n_parts, "parts_skipped": skipped, "buckets": list(lengths),
               "replicas": strategy.num_replicas_in_sync,
               "label_counts": {k: int(v) for k, v in frame["label"].value_counts().sort_index().items()}}
    if fmt == "documents":
        chunks_out = pathlib.Path(output).with_name(f"{pathlib.Path(output).stem}.chunks{pathlib.Path(output).suffix}")
        probs = frame[[f"prob_{k}" for k in names]].to_numpy()
        doc_table = docs_lib.aggregate_documents(doc_ids, frame["doc_id"].tolist(), frame["n_tokens"].to_numpy(),
                                                 frame["label_id"].to_numpy(), probs, names, documents.weight)
        out_lib.write_table(frame.drop(columns=["row"]), chunks_out, out_fmt)
        out_lib.write_table(pd.DataFrame(doc_table), output, out_fmt)
        summary.update(documents=len(doc_ids), chunks=n, chunks_output=str(chunks_out))
    else:
        out_lib.write_table(frame, output, out_fmt)
    store.remove()
    seconds = time.perf_counter() - start
    summary.update(output=str(output), seconds=seconds, rows_per_second=n / seconds if seconds > 0 else 0.0)
    log.info("predicted %d rows in %.1f s (%.1f rows/s) -> %s", n, seconds, summary["rows_per_second"], output)
    return summary


@hydra.main(version_base="1.3", config_path=str(conf_dir()), config_name="predict")
def main(cfg: DictConfig) -> dict:
    """``python -m tfsent.predict ckpt_path=... input=... output=...`` (see ``conf/predict.yaml``)."""
    return predict_from_config(cfg)


def predict_from_config(cfg: DictConfig) -> dict:
    """Turn a composed ``predict`` config into a :func:`predict` call and print its summary."""
    doc_opts = spec_from_config(docs_lib.ChunkOptions, cfg.get("documents"), "documents")
    summary = predict(
        require(cfg, "ckpt_path"), require(cfg, "input"), require(cfg, "output"),
        input_format=cfg.input_format, text_column=cfg.text_column, id_column=cfg.id_column,
        output_format=cfg.output_format, strategy=strategy_name(cfg.strategy),
        global_batch_size=int(cfg.global_batch_size), buckets=list(to_container(cfg.buckets)),
        max_length=cfg.max_length, documents=doc_opts, part_size=int(cfg.part_size), precision=cfg.precision,
        split=cfg.split, encoding=cfg.encoding, progress=bool(cfg.progress), mask_seed=int(cfg.mask_seed))
    done = f"predict: {summary['rows']} rows in {summary['seconds']:.1f} s ({summary['rows_per_second']:.1f} rows/s)"
    if "label_counts" in summary:
        print(f"{done} -> {summary['output']}; labels {summary['label_counts']}")
    else:
        print(f"{done} -> {summary['output']}; masked tokens {summary['masked_tokens']}, loss {summary['loss']:.4f}, "
              f"masked accuracy {summary['masked_accuracy']:.4f}, perplexity {summary['perplexity']:.2f} "
              f"({summary['summary_output']})")
    return summary


if __name__ == "__main__":
    main()
