"""What differs between training tasks (classification, masked LM) behind one small interface.

``tfsent.train`` runs the same sequence for every task (strategy, checks, data, model under scope, fit,
evaluate, save); each task module supplies the steps that differ. A task module provides:
``check_config``, ``prepared_data``, ``load_and_check_manifest``, ``dataset``, ``build_model``,
``build_optimizer``, ``compile_kwargs``, ``callbacks``, ``report`` and ``save``.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from tfsent.config import ConfigError

TASKS = {"classification": "tfsent.tasks.classification", "mlm": "tfsent.tasks.mlm"}


def get(name: str) -> ModuleType:
    """The task module for a ``task`` config value.

    Raises:
        ConfigError: an unknown task name.
    """
    if name not in TASKS:
        raise ConfigError(f"task={name!r} is unknown; expected one of {', '.join(TASKS)}")
    return importlib.import_module(TASKS[name])
