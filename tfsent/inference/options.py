"""Every setting of a prediction run, typed, each marked as changing results or not.

``tfsent.predict`` (the entry module) builds :class:`PredictOptions` from the config; the driver takes it. A field's
``metadata["result"]`` says whether it can change a row's result: those go into the resume fingerprint (a finished
part is reused only when all of them are equal), the others (where output goes, how progress shows, how many host
calls) are marked result-neutral. ``tests/inference/test_options.py`` fails when a setting is added without a mark.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from tfsent.config import ConfigError
from tfsent.inference.documents import ChunkOptions
from tfsent.inference.plan import DEFAULT_BUCKETS
from tfsent.runtime.execution import POLICIES as PRECISIONS

# What runs the model: TensorFlow (XLA or graph mode, any device) or LiteRT (a CPU's, no TensorFlow in the process).
BACKENDS = ("auto", "tensorflow", "litert")
# Evaluation masks a held-out text with this seed unless told otherwise, so two evaluations of one model on one
# text score the same masked tokens (``mask_seed``).
EVAL_MASK_SEED = 1234

# Columns the driver and the predictors write: a kept input column may not take one of these names.
OUTPUT_COLUMNS = ("row", "id", "example_id", "text", "true_label", "document", "n_tokens", "label", "label_id",
                  "truncated", "num_masked", "num_correct", "loss", "masked", "predicted")


@dataclasses.dataclass(frozen=True)
class QAOptions:
    """``qa``: how a question-answering model reads its input and picks answers (see ``conf/predict.yaml``).

    Attributes:
        question_column, context_column, answers_column: a table's columns (``answers`` optional).
        doc_stride: tokens shared by consecutive windows of a long context; None: the model's (a tfsent QA
            model's training value, else ``min(128, window // 2)``).
        n_best: top start and end positions per window the device returns, and candidates kept per question.
        max_answer_length: the longest answer in tokens.
        no_answer: whether "no answer" competes (SQuAD v2.0); None: yes for a SQuAD v2.0 file, else no.
        null_threshold: "no answer" wins when its logit exceeds the best span's by more than this.
        alternatives: runner-up answers written beside the best one.
        questions: documents mode: the questions asked of every document, a list or a text file of one question
            per line.
    """

    question_column: str = "question"
    context_column: str = "context"
    answers_column: str = "answers"
    doc_stride: int | None = None
    n_best: int = 20
    max_answer_length: int = 30
    no_answer: bool | None = None
    null_threshold: float = 0.0
    alternatives: int = 3
    questions: list[str] | str | None = None

    def __post_init__(self):
        if isinstance(self.questions, list):
            object.__setattr__(self, "questions", tuple(str(q) for q in self.questions))
        for key in ("n_best", "max_answer_length"):
            if int(getattr(self, key)) < 1:
                raise ConfigError(f"qa.{key} must be >= 1, got {getattr(self, key)}")
        if self.alternatives < 0:
            raise ConfigError(f"qa.alternatives must be >= 0, got {self.alternatives}")
        if self.doc_stride is not None and self.doc_stride < 0:
            raise ConfigError(f"qa.doc_stride must be >= 0 or null, got {self.doc_stride}")


def _result(default, **kwargs):
    return dataclasses.field(default=default, metadata={"result": True}, **kwargs)


def _neutral(default, why: str, **kwargs):
    return dataclasses.field(default=default, metadata={"result": False, "why": why}, **kwargs)


# tfsent.predict's own precision: LiteRT's dynamic int8 files (tfsent.inference.litert.quantize), on a CPU.
INT8 = "int8"


def check_settings(precision: str, jit_compile: bool | str | None, extra: tuple[str, ...] = ()) -> None:
    """Refuse a ``precision`` or ``jit_compile`` value no inference job takes (predict, Beam, export).

    Args:
        extra: precisions this job takes beyond TensorFlow's policies (predict: ``int8``).

    Raises:
        ConfigError: naming the key and the values it takes.
    """
    if precision not in PRECISIONS + extra:
        raise ConfigError(f"precision={precision!r} is unknown; expected one of {', '.join(PRECISIONS + extra)}")
    if jit_compile not in (True, False, None, "auto"):
        raise ConfigError(f"jit_compile={jit_compile!r} must be true, false, null or auto")


@dataclasses.dataclass(frozen=True)
class PredictOptions:
    """How to read the input, run the model and write the output (see ``conf/predict.yaml`` for each key)."""

    input_format: str = _result("auto")
    text_column: str = _result("text")
    id_column: str | None = _result(None)
    split: str = _result("test")
    encoding: str | None = _result(None)
    global_batch_size: int = _result(64)
    buckets: tuple[int, ...] = _result(DEFAULT_BUCKETS)
    max_length: int | None = _result(None)
    documents: ChunkOptions = _result(ChunkOptions())
    qa: QAOptions = _result(QAOptions())
    part_size: int = _result(100_000)
    # "auto" (either) is made concrete per machine by tfsent.inference.calibration before the fingerprint is taken.
    precision: str = _result("float32")
    # auto: LiteRT on a CPU where it can score the job (tfsent.inference.calibration.resolve_backend), else
    # TensorFlow; made concrete before the fingerprint is taken, like precision and jit_compile.
    backend: str = _result("auto")
    jit_compile: bool | str | None = _result(None)
    # Packed probabilities equal padded ones within 1e-5, not bit for bit (like jit_compile): a resumed run reuses
    # only parts computed the same way, so its output never depends on which parts an earlier run finished.
    packing: bool | str = _result("auto")
    mask_seed: int = _result(EVAL_MASK_SEED)
    # The kept columns and the gold labels are stored in every part, so they must match for a part to be reused.
    keep_columns: tuple[str, ...] = _result(())
    keep_text: bool = _result(True)
    label_column: str | None = _result(None)
    label_map: dict | None = _result(None)
    # Which weights: a hub id's revision (the resolved folder's files are fingerprinted too) and output names.
    revision: str | None = _result(None)
    label_names: tuple[str, ...] | None = _result(None)
    output_format: str | None = _neutral(None, "the final file's format; parts are always Parquet")
    strategy: str = _neutral("auto", "its replica count is fingerprinted; the name alone changes nothing")
    steps_per_execution: int | None = _neutral(None, "host calls per step group; the same steps run")
    num_shards: int = _neutral(1, "a shard's place is checked by its own folder name and manifest")
    shard_index: int = _neutral(0, "a shard's place is checked by its own folder name and manifest")
    merge: bool = _neutral(False, "only merges finished shards")
    overwrite: bool = _neutral(False, "whether an existing output may be replaced")
    progress: bool = _neutral(True, "a progress bar")
    shard_wait_s: float = _neutral(3600.0, "how long the chief waits for the other shards")

    def __post_init__(self):
        object.__setattr__(self, "buckets", tuple(int(b) for b in self.buckets))
        object.__setattr__(self, "keep_columns", tuple(str(c) for c in self.keep_columns))
        if self.label_names is not None:
            object.__setattr__(self, "label_names", tuple(str(n) for n in self.label_names))
        if self.label_map is not None:
            # Hydra reads `{0: negative}` with int keys; a file's label values are compared as text.
            object.__setattr__(self, "label_map", {str(k): str(v) for k, v in dict(self.label_map).items()})
        taken = set(OUTPUT_COLUMNS) - {"text"}
        if self.keep_text and self.text_column != "text":
            taken.add("text")  # kept `text` would be another column than the text the output keeps
        clash = [c for c in self.keep_columns if c in taken or c.startswith("prob_")]
        if clash:
            raise ConfigError(f"keep_columns={list(self.keep_columns)}: {clash[0]!r} is a column the output "
                              "already has; rename it in the input (the text itself is kept as `text` unless "
                              "keep_text=false)")
        if len(set(self.keep_columns)) != len(self.keep_columns):
            raise ConfigError(f"keep_columns={list(self.keep_columns)} names a column twice")

        if isinstance(self.documents, Mapping):
            object.__setattr__(self, "documents", ChunkOptions(**self.documents))
        if isinstance(self.qa, Mapping):
            object.__setattr__(self, "qa", QAOptions(**self.qa))
        check_settings(self.precision, self.jit_compile, extra=(INT8,))
        if self.backend not in BACKENDS:
            raise ConfigError(f"backend={self.backend!r} is unknown; expected one of {', '.join(BACKENDS)}")
        if self.packing not in (True, False, "auto"):
            raise ValueError(f"packing={self.packing!r} must be true, false or auto")
        if self.part_size < 1:
            raise ValueError(f"part_size must be >= 1, got {self.part_size}")
        if self.steps_per_execution is not None and self.steps_per_execution < 1:
            raise ValueError(f"steps_per_execution must be >= 1 or null, got {self.steps_per_execution}")
        if self.num_shards < 1 or not 0 <= self.shard_index < self.num_shards:
            raise ValueError(f"shard_index={self.shard_index} must lie in 0..num_shards-1 (num_shards="
                             f"{self.num_shards})")


def result_settings(options: PredictOptions) -> dict:
    """The result-changing settings of ``options``, as plain values for a fingerprint."""
    return {f.name: _plain(getattr(options, f.name)) for f in dataclasses.fields(options) if f.metadata["result"]}


def _plain(value):
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)
    if isinstance(value, tuple):
        return list(value)
    return value
