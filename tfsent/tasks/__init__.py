"""What differs between training tasks (classification, masked LM) behind one small interface.

``tfsent.train`` runs the same sequence for every task (strategy, checks, data, model under scope, fit,
evaluate, save); each task module supplies the steps that differ. A task module provides:
``check_config``, ``prepared_data``, ``load_and_check_manifest``, ``dataset``, ``build_model``,
``build_optimizer``, ``compile_kwargs``, ``callbacks``, ``report`` and ``save``.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from tfsent.config import ConfigError, spec_from_config, to_container

TASKS = {"classification": "tfsent.tasks.classification", "mlm": "tfsent.tasks.mlm"}


def get(name: str) -> ModuleType:
    """The task module for a ``task`` config value.

    Raises:
        ConfigError: an unknown task name.
    """
    if name not in TASKS:
        raise ConfigError(f"task={name!r} is unknown; expected one of {', '.join(TASKS)}")
    return importlib.import_module(TASKS[name])


def optimizer_spec(cfg: Any, **overrides: Any):
    """The ``optimizer`` and ``schedule`` groups as one ``OptimizerSpec`` (``total_steps`` set by the caller)."""
    from tfsent.optim import OptimizerSpec

    values = {**(to_container(cfg.optimizer) or {}), **(to_container(cfg.schedule) or {})}
    values.setdefault("total_steps", 1)
    return spec_from_config(OptimizerSpec, values, "optimizer", **overrides)
