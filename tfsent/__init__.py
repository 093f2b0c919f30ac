"""tfsent: transformer text models on TensorFlow distribution strategies (TPU first)."""

import os as _os

# Hugging Face TF classes are Keras 2 models; make TensorFlow hand out tf-keras, not Keras 3, everywhere.
_os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
_os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Nothing in tfsent may reach a model hub unless the user asks for a hub id explicitly.
_os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

__version__ = "0.1.0"
