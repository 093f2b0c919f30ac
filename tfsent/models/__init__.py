"""Models: the sequence classifier, weight/tokenizer sources, label mapping and position checks."""

from tfsent.models.classifier import ClassifierSpec, SequenceClassifier, build_classifier, load_classifier
from tfsent.models.labels import LabelError, LabelMap, map_labels
from tfsent.models.loading import (CheckpointError, PositionError, check_max_positions, load_tokenizer, load_weights,
                                   resolve_source)

__all__ = [
    "CheckpointError", "ClassifierSpec", "LabelError", "LabelMap", "PositionError", "SequenceClassifier",
    "build_classifier", "check_max_positions", "load_classifier", "load_tokenizer", "load_weights", "map_labels",
    "resolve_source",
]
