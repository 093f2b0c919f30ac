"""Config plumbing: where the Hydra configs live, and DictConfig -> typed spec conversion.

Only entry modules (train, predict, prepare) read a ``DictConfig``; they turn each group into the dataclass the
library function takes, so library code is callable and testable without Hydra.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any, TypeVar

from omegaconf import DictConfig, OmegaConf

T = TypeVar("T")


class ConfigError(ValueError):
    """A config value that is missing, unknown or inconsistent; the message names the key."""


def conf_dir() -> pathlib.Path:
    """The Hydra config folder: the copy packaged in the wheel, else the repository's ``conf/``."""
    here = pathlib.Path(__file__).resolve().parent
    for candidate in (here / "conf", here.parent / "conf"):
        if (candidate / "train.yaml").is_file():
            return candidate
    raise ConfigError(f"no Hydra config folder found beside {here} (looked for conf/train.yaml)")


def to_container(node: Any) -> Any:
    """Resolve interpolations and return plain Python containers (dict/list/scalars)."""
    if isinstance(node, DictConfig) or OmegaConf.is_config(node):
        return OmegaConf.to_container(node, resolve=True)
    return node


def spec_from_config(cls: type[T], node: Any, key: str, **overrides: Any) -> T:
    """Build dataclass ``cls`` from a config node, rejecting keys the dataclass does not have.

    Args:
        cls: the dataclass type.
        node: a DictConfig / dict with (a subset of) the dataclass fields.
        key: the config key the node came from, for error messages (e.g. ``optimizer``).
        **overrides: values set by the entry point (e.g. computed total steps).

    Raises:
        ConfigError: a key that the dataclass does not know (a typo), or a required field missing.
    """
    values = dict(to_container(node) or {})
    values.update(overrides)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ConfigError(f"unknown key(s) {', '.join(f'{key}.{u}' for u in unknown)}; "
                          f"{key} accepts: {', '.join(sorted(names))}")
    try:
        return cls(**values)
    except TypeError as e:
        raise ConfigError(f"{key}: {e}") from e


def require(cfg: DictConfig, dotted: str) -> Any:
    """Read a mandatory key, failing with its full name when it is missing, null or still ``???``."""
    value = OmegaConf.select(cfg, dotted, throw_on_missing=False, default=None)
    if value is None:
        raise ConfigError(f"{dotted} is required (set it on the command line: {dotted}=...)")
    return value


@dataclasses.dataclass
class TrainerSpec:
    """``trainer`` group: how ``fit()`` runs. Batch sizes are global (all replicas together)."""

    epochs: int = 3
    global_batch_size: int = 32
    eval_batch_size: int = 64
    steps_per_execution: int = 8
    jit_compile: bool = True
    precision: str = "float32"
    shuffle_buffer: int = 10000
    steps_per_epoch: int | None = None
    length_buckets: list[int] | None = None

    def __post_init__(self) -> None:
        for key in ("epochs", "global_batch_size", "eval_batch_size", "steps_per_execution"):
            if int(getattr(self, key)) < 1:
                raise ConfigError(f"trainer.{key} must be >= 1, got {getattr(self, key)}")
        if self.steps_per_epoch is not None and self.steps_per_epoch < 1:
            raise ConfigError(f"trainer.steps_per_epoch must be >= 1 or null, got {self.steps_per_epoch}")


def strategy_name(node: Any) -> str:
    """The ``make_strategy`` string for a ``strategy`` config group (``virtual_cpu`` + replicas, tpu + address)."""
    values = dict(to_container(node) or {})
    name = values.pop("name", None)
    if not name:
        raise ConfigError("strategy.name is required (auto, tpu, mirrored, multi_worker, cpu, virtual_cpu)")
    if name == "virtual_cpu" and "replicas" in values:
        return f"virtual_cpu:{int(values.pop('replicas'))}"
    if name == "tpu" and values.get("address"):
        return f"tpu:{values.pop('address')}"
    return str(name)
