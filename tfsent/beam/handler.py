"""Length-bucketed batches, and the ``RunInference`` model handler that scores them: a tfsent classifier or
question-answering checkpoint, loaded once per worker through tfsent's predictor of its kind, run by tfsent's engine.

Batching: every unit is keyed by its bucket (the smallest of tfsent's bucket lengths that holds it), one
``GroupByKey`` gathers each bucket, and its rows are cut into slabs of whole global batches that a ``Reshuffle``
spreads over the workers. A slab holds one bucket, so the engine (:func:`tfsent.inference.engine.predict_bucketed`)
runs it in one compiled shape and pads only its last batch with filler rows; a worker compiles one shape per
bucket it sees, a handful, and only each bucket's final slab can be partial, as in ``tfsent.predict``.

Beam 2.77's own length-bucketed batching (``ModelHandler(batch_length_fn=..., batch_bucket_boundaries=...)``) works
only on its stateful path (``max_batch_duration_secs``: a processing-time timer; ``GroupIntoBatches`` declares one
too). The DirectRunner runs no such pipeline on its portable runner: it falls back to the legacy
BundleBasedDirectRunner, which ignores ``direct_num_workers``, and there a smoke run lost every scored row at the
next ``GroupByKey`` (the writer's exact check refused the output). A plain ``GroupByKey`` runs the same way on
every runner; so ``RunInference`` gets whole slabs (``max_batch_size=1``).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Iterable, Sequence

import apache_beam as beam
import numpy as np
import tensorflow as tf
from apache_beam.ml.inference.base import ModelHandler, PredictionResult

from tfsent.beam import files
from tfsent.beam.read import Unit, unit_length
from tfsent.errors import UserError
from tfsent.inference.calibration import Settings, resolve_execution
from tfsent.inference.engine import assign_buckets, bucket_lengths, predict_bucketed
from tfsent.inference.options import PredictOptions, QAOptions
from tfsent.inference.packing import Packing
from tfsent.inference.predictor import Predictor, kind_of, load_predictor
from tfsent.inference.question_answering import windowing
from tfsent.inference.tokens import TokenRows
from tfsent.models.classifier import describe as classifier_facts
from tfsent.models.loading import CheckpointError, read_config, sequence_length
from tfsent.models.question_answering import describe as qa_facts, window
from tfsent.runtime.precision import set_policy

log = logging.getLogger(__name__)

# Global batches per slab: one predict call (one dataset, one host round trip) scores a slab.
SLAB_BATCHES = 16


@dataclasses.dataclass(frozen=True)
class ModelFacts:
    """What the readers need to know about a checkpoint before any worker loads it.

    Attributes:
        features: the token features the model reads.
        lengths: the bucket lengths, capped at the model's positions; the last is the truncation length (a QA
            model's window length).
        label_names: the model's labels, in id order (none for a QA model).
        kind: the model kind (:mod:`tfsent.models.kinds`): ``classifier`` or ``question_answering``.
        doc_stride: a QA model's tokens shared by consecutive windows of a context (``qa.doc_stride`` or its own).
    """

    features: tuple[str, ...]
    lengths: tuple[int, ...]
    label_names: tuple[str, ...]
    kind: str = "classifier"
    doc_stride: int | None = None


def describe(ckpt_path: str, buckets: Sequence[int], max_length: int | None,
             label_names: Sequence[str] | None = None, qa: QAOptions = QAOptions()) -> ModelFacts:
    """Read a checkpoint's facts from its folder (no model is built): a tfsent classifier or QA folder, or any
    transformers classifier or ``...ForQuestionAnswering`` folder.

    Raises:
        CheckpointError: a masked-LM checkpoint (evaluated with ``tfsent.predict``), or an unreadable one.
    """
    local = files.local_folder(ckpt_path, files.checkpoint_cache())
    kind = kind_of(local)
    if kind == "question_answering":
        facts = qa_facts(local)
        length, stride = windowing(*window(facts), facts.config, max_length, qa.doc_stride)
        return ModelFacts(facts.features, bucket_lengths(buckets, length), (), kind, stride)
    if kind != "classifier":
        raise CheckpointError(f"{ckpt_path}: a masked-LM checkpoint; tfsent.beam scores classifiers and "
                              "question-answering models (evaluate a masked LM with tfsent.predict)")
    facts = classifier_facts(local, label_names=label_names)
    cap = sequence_length(facts.max_seq_length, read_config(local), max_length)
    return ModelFacts(facts.features, bucket_lengths(buckets, cap), facts.label_names)


def bucket_of(unit: Unit, lengths: Sequence[int]) -> int:
    """Index of the smallest bucket length that holds the unit (:func:`tfsent.inference.engine.assign_buckets`)."""
    return int(assign_buckets(np.asarray([unit_length(unit)]), lengths)[0])


class BucketBatches(beam.PTransform):
    """Units in; lists of units of one bucket out, ``slab_rows`` at most, spread over the workers.

    Args:
        lengths: the bucket lengths (the last is the truncation length: no unit is longer).
        slab_rows: rows per slab, a multiple of the global batch.
    """

    def __init__(self, lengths: Sequence[int], slab_rows: int):
        super().__init__()
        self._lengths, self._slab = tuple(lengths), slab_rows

    def expand(self, units):
        lengths, slab = self._lengths, self._slab
        return (units
                | "BucketKey" >> beam.Map(lambda u: (bucket_of(u, lengths), u))
                | "GroupBuckets" >> beam.GroupByKey()
                | "Slabs" >> beam.FlatMap(lambda kv: _slabs(kv[1], slab))
                | "SpreadSlabs" >> beam.Reshuffle())


def _slabs(units: Iterable[Unit], size: int) -> Iterable[list[Unit]]:
    slab = []
    for unit in units:
        slab.append(unit)
        if len(slab) == size:
            yield slab
            slab = []
    if slab:
        yield slab


@dataclasses.dataclass
class LoadedModel:
    """A worker's predictor, its strategy and its packing; ``lock`` serialises ``model.predict`` between worker
    threads."""

    predictor: Predictor
    strategy: tf.distribute.Strategy
    packing: Packing | None = None
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)


class PredictorHandler(ModelHandler):
    """Scores slabs of :class:`~tfsent.beam.read.Unit` s (from :class:`BucketBatches`) with the tfsent predictor of
    the checkpoint's kind; a result's ``inference`` holds, per unit in the slab's order, a classifier's output
    columns (``tfsent.inference.classifier``: ``n_tokens``, ``label``, ``label_id``, ``prob_*``, and ``truncated``
    for rows), or, for a kind whose output rows group the engine's (a QA model's questions of windows), the
    engine's outputs of that row (a window's top-k starts and ends and its null logit), which the writer groups.

    Args:
        ckpt_path: the checkpoint folder (local, or remote: copied to each worker once).
        facts: from :func:`describe`.
        global_batch_size: rows per batch over the worker's replicas.
        strategy: the worker's strategy name (``tfsent.runtime.strategy.make_strategy``).
        precision: ``auto`` or a ``tfsent.runtime.precision`` policy (``auto``: :func:`resolve_execution`'s rule).
        jit_compile: XLA-compile the predict step; None picks per strategy, ``auto`` with ``precision``.
        packing: ``auto``, True or False (:mod:`tfsent.inference.packing`): a slab's rows share sequences.
        documents: the units are document chunks (never truncated, no ``truncated`` column).
        qa: a QA model's ``qa`` options (``n_best``: the top-k the device returns per window).
    """

    def __init__(self, ckpt_path: str, facts: ModelFacts, *, global_batch_size: int, strategy: str,
                 precision: str, jit_compile: bool | str | None, documents: bool, label_names: Sequence[str] | None = None,
                 packing: bool | str = "auto", qa: QAOptions = QAOptions()):
        super().__init__(min_batch_size=1, max_batch_size=1)  # an example is a whole slab
        self._ckpt, self._facts, self._batch = ckpt_path, facts, global_batch_size
        self._strategy, self._precision, self._jit, self._documents = strategy, precision, jit_compile, documents
        self._label_names, self._packing, self._qa = label_names, packing, qa

    def load_model(self) -> LoadedModel:
        from tfsent.runtime.memory import steady_heap
        from tfsent.runtime.quiet import hide_banners
        from tfsent.runtime.strategy import make_strategy

        # A worker process (multi_processing) logs through Beam's job service, past the CLI's filters.
        hide_banners()
        steady_heap()  # a worker scores bundle after bundle: as the driver, give back what each one freed
        strategy = make_strategy(self._strategy)
        local = files.local_folder(self._ckpt, files.checkpoint_cache())
        # auto as tfsent.predict resolves it for a run split over processes: every worker takes the rule's path, no
        # probe (workers that chose differently would score rows differently).
        resolved = resolve_execution(strategy, Settings(self._precision, self._jit, self._facts.lengths[-1]),
                                     config=read_config(local), calibrate=False)
        if resolved.how != "explicit":
            log.info(resolved.describe())
        set_policy(resolved.options.precision, strategy)  # global: set for every load, float32 included
        predictor = load_predictor(local, strategy, max_length=self._facts.lengths[-1],
                                   jit_compile=resolved.options.jit_compile, steps_per_execution=1,
                                   options=PredictOptions(label_names=self._label_names, qa=self._qa))
        labels = tuple(getattr(predictor, "label_names", ()))
        if predictor.features != self._facts.features or labels != self._facts.label_names:
            raise UserError(f"{self._ckpt}: the model reads {predictor.features} with labels {labels}, its "
                            f"metadata says {self._facts.features}, {self._facts.label_names}")
        return LoadedModel(predictor, strategy, predictor.packing(self._packing))

    def run_inference(self, batch: Sequence[list[Unit]], model: LoadedModel,
                      inference_args: dict | None = None) -> Iterable[PredictionResult]:
        return [PredictionResult(slab, self._score(slab, model)) for slab in batch]

    def _score(self, slab: list[Unit], model: LoadedModel) -> list[dict]:
        features = self._facts.features
        tokens = TokenRows.from_ragged({f: [u.tokens[f] for u in slab] for f in features},
                                       np.asarray([u.truncated for u in slab], bool))
        with model.lock:
            out = predict_bucketed(model.predictor.model, model.strategy, tokens, buckets=self._facts.lengths,
                                   global_batch_size=self._batch, pad_values=model.predictor.pad_values,
                                   packing=model.packing)
        if model.predictor.groups_rows:  # each window's own outputs: the writer picks answers per question
            columns = out
        else:
            source = {k: [u.columns[k] for u in slab] for k in ("row", "id", "doc_id", "chunk_id")
                      if k in slab[0].columns}  # what names a unit in an error
            columns = model.predictor.columns(out, tokens, with_truncated=not self._documents, source=source)
        return [{k: columns[k][i] for k in columns} for i in range(len(slab))]

    def get_metrics_namespace(self) -> str:
        return "tfsent"
