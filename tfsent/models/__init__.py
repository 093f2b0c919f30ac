"""Models: the sequence classifier and masked LM on one base, weight sources and positions, label mapping.

``load_tokenizer`` lives in ``tfsent.data.tokenize``; it is exported here too because loading a model and its
tokenizer go together.

The names below are imported on first use (PEP 562): importing a submodule that needs no TensorFlow
(``tfsent.models.kinds``, ``architectures``, ``loading``) must not import the classifier, which does; the LiteRT
scoring process never imports TensorFlow (``tfsent.inference.litert``).
"""

import importlib

_WHERE = {
    "ClassifierSpec": "tfsent.models.classifier", "SequenceClassifier": "tfsent.models.classifier",
    "build_classifier": "tfsent.models.classifier", "load_classifier": "tfsent.models.classifier",
    "LabelError": "tfsent.models.labels", "LabelMap": "tfsent.models.labels", "map_labels": "tfsent.models.labels",
    "load_tokenizer": "tfsent.data.tokenize",
    "CheckpointError": "tfsent.models.loading", "PositionError": "tfsent.models.loading",
    "check_max_positions": "tfsent.models.loading",
    "resolve_source": "tfsent.models.sources",
    "load_weights": "tfsent.models.weights",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value
    return value
