"""tfsent: transformer text models on TensorFlow distribution strategies (TPU first)."""

import os as _os

# Hugging Face TF classes are Keras 2 models; make TensorFlow hand out tf-keras, not Keras 3, everywhere.
_os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
# Hide TensorFlow's C++ INFO/WARNING lines unless the user chose a level (tfsent.runtime.quiet then leaves stderr
# alone); the marker tells child processes, which inherit the variable, that tfsent chose it, not the user.
if "TF_CPP_MIN_LOG_LEVEL" not in _os.environ:
    _os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    _os.environ["TFSENT_DEFAULT_LOG_LEVEL"] = "1"
# Nothing in tfsent may reach a model hub unless the user asks for a hub id explicitly.
_os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

__version__ = "0.1.0"
