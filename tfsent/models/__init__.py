"""Models: the sequence classifier and masked LM on one base, weight sources and positions, label mapping.

``load_tokenizer`` lives in ``tfsent.data.tokenize``; it is exported here too because loading a model and its
tokenizer go together.
"""

from tfsent.models.classifier import ClassifierSpec, SequenceClassifier, build_classifier, load_classifier
from tfsent.models.labels import LabelError, LabelMap, map_labels
from tfsent.data.tokenize import load_tokenizer
from tfsent.models.loading import CheckpointError, PositionError, check_max_positions
from tfsent.models.sources import resolve_source
from tfsent.models.weights import load_weights

__all__ = [
    "CheckpointError", "ClassifierSpec", "LabelError", "LabelMap", "PositionError", "SequenceClassifier",
    "build_classifier", "check_max_positions", "load_classifier", "load_tokenizer", "load_weights", "map_labels",
    "resolve_source",
]
