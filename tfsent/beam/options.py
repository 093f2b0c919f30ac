"""Every setting of a Beam scoring run, typed (``conf/beam.yaml`` holds the defaults and says what each does)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from tfsent.inference.documents import ChunkOptions
from tfsent.inference.engine import DEFAULT_BUCKETS
from tfsent.inference.options import PredictOptions, QAOptions, check_settings


@dataclasses.dataclass(frozen=True)
class BeamOptions:
    """How to read the input, score it on Beam's workers and write the output.

    The keys shared with ``conf/predict.yaml`` mean the same there and here; ``runner`` and ``pipeline_options``
    go to Beam's ``PipelineOptions`` (``--project=...``, ``--direct_num_workers=2``, ...).
    """

    input_format: str = "auto"
    text_column: str = "text"
    id_column: str | None = None
    keep_columns: tuple[str, ...] = ()
    keep_text: bool = True
    encoding: str | None = None
    output_format: str | None = None
    global_batch_size: int = 64
    buckets: tuple[int, ...] = DEFAULT_BUCKETS
    max_length: int | None = None
    documents: ChunkOptions = ChunkOptions()
    qa: QAOptions = QAOptions()
    precision: str = "float32"
    jit_compile: bool | str | None = None
    packing: bool | str = "auto"
    strategy: str = "auto"
    overwrite: bool = False
    runner: str = "DirectRunner"
    pipeline_options: tuple[str, ...] | Mapping[str, str] = ()
    block_size: int = 50_000
    revision: str | None = None
    label_names: tuple[str, ...] | None = None

    def __post_init__(self):
        object.__setattr__(self, "buckets", tuple(int(b) for b in self.buckets))
        object.__setattr__(self, "keep_columns", tuple(str(c) for c in self.keep_columns))
        if isinstance(self.documents, Mapping):
            object.__setattr__(self, "documents", ChunkOptions(**self.documents))
        if isinstance(self.qa, Mapping):
            object.__setattr__(self, "qa", QAOptions(**self.qa))
        if isinstance(self.pipeline_options, Mapping):
            flags = tuple(f"--{k}={v}" for k, v in self.pipeline_options.items())
            object.__setattr__(self, "pipeline_options", flags)
        else:
            object.__setattr__(self, "pipeline_options", tuple(str(f) for f in self.pipeline_options))
        check_settings(self.precision, self.jit_compile)
        if self.global_batch_size < 1:
            raise ValueError(f"global_batch_size must be >= 1, got {self.global_batch_size}")
        if self.packing not in (True, False, "auto"):
            raise ValueError(f"packing={self.packing!r} must be true, false or auto")
        if self.block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {self.block_size}")
        bad = [f for f in self.pipeline_options if not f.startswith("--")]
        if bad:
            raise ValueError(f"pipeline_options: {bad[0]!r} is not a Beam flag; write it as --name=value")

    def predict_options(self) -> PredictOptions:
        """The settings shared with ``tfsent.predict`` as its options: a model kind's predictor opens the input and
        refuses what its kind does not take with them, as in ``tfsent.predict``."""
        shared = {f.name for f in dataclasses.fields(PredictOptions)}
        return PredictOptions(**{f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name in shared})
