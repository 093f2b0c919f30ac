"""A checkpoint's ``config.json`` and how many positions it embeds; :class:`CheckpointError`, the error of every
checkpoint problem.

Where a checkpoint comes from is :mod:`tfsent.models.sources`; its weights, :mod:`tfsent.models.weights`.

``config.json`` is read without running anything from the checkpoint: a config that names remote code
(``auto_map``) is refused, since tfsent never imports code that a checkpoint ships.

Positions: RoBERTa-style models number positions from ``pad_token_id + 1`` (padding gets position
``pad_token_id``), so a sequence of ``L`` tokens uses positions up to ``L + pad_token_id`` and needs
``max_position_embeddings >= L + pad_token_id + 1`` (``roberta-base``: 514 for 512 tokens). BERT numbers from 0
and needs ``>= L``. Which rule applies is the architecture's (:mod:`tfsent.models.architectures`). Getting this
wrong does not fail loudly everywhere: on CPU the embedding lookup raises deep inside the graph, on TPU/GPU an
out-of-range gather silently returns zeros, hence :func:`check_max_positions`.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tfsent.errors import UserError
from tfsent.models import architectures

if TYPE_CHECKING:
    from transformers import PretrainedConfig

CONFIG_FILE = "config.json"
# The sizes a model is built from, by the names of every supported architecture (DistilBERT's dim, n_layers ...).
_SIZES = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
          "max_position_embeddings", "embedding_size", "num_hidden_groups", "dim", "n_layers", "n_heads", "hidden_dim")


class CheckpointError(UserError):
    """A source that cannot be found, downloaded or read; the message names the source or file."""


def read_config(directory: pathlib.Path | str) -> PretrainedConfig:
    """Read ``config.json`` from a checkpoint directory.

    Raises:
        CheckpointError: the file is missing, is not a valid transformers config, or asks for remote code.
    """
    path = pathlib.Path(directory) / CONFIG_FILE
    if not path.is_file():
        raise CheckpointError(f"{path}: missing; a checkpoint directory needs {CONFIG_FILE}")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as e:  # RecursionError: arrays nested thousands deep
        raise CheckpointError(f"{path}: not a readable transformers config ({type(e).__name__}: "
                              f"{str(e).strip()[:200]})") from e
    if not isinstance(raw, dict):
        raise CheckpointError(f"{path}: a JSON {type(raw).__name__}, not a transformers config")
    for key in _SIZES:
        value = raw.get(key)
        if key in raw and (type(value) is not int or not 0 < value < 2 ** 31):
            # transformers takes any JSON value here, and building the model fails deep inside its code.
            raise CheckpointError(f"{path}: {key}={str(value)[:40]!r} is not a size (a positive integer)")
    if raw.get("auto_map"):
        raise CheckpointError(f"{path}: asks for remote code (auto_map: {sorted(raw['auto_map'])}); tfsent never "
                              "runs code shipped with a checkpoint")
    from transformers import AutoConfig  # ~1 s, so only where a config is read

    try:
        return AutoConfig.from_pretrained(str(path.parent), local_files_only=True, trust_remote_code=False)
    except Exception as e:  # noqa: BLE001  (a checkpoint is untrusted input: whatever it makes transformers raise)
        raise CheckpointError(f"{path}: not a readable transformers config ({type(e).__name__}: "
                              f"{(str(e).strip().splitlines() or [''])[0][:200]})") from e


class PositionError(UserError):
    """``max_position_embeddings`` is too small for the requested ``max_seq_length``."""


def _get(config: Any, key: str, default: Any = None) -> Any:
    if isinstance(config, Mapping):
        return config.get(key, default)
    return getattr(config, key, default)


def _reserved_positions(config: Any) -> int:
    return architectures.of_config(config).reserved_positions(config)


def required_positions(config: Any, max_seq_length: int) -> int:
    """Return the smallest ``max_position_embeddings`` that fits ``max_seq_length`` tokens for this config.

    Args:
        config: a transformers config, or a mapping with ``model_type`` and ``pad_token_id``.
        max_seq_length: tokens per sequence, special tokens included.
    """
    return max_seq_length + _reserved_positions(config)


def model_max_length(config: Any) -> int:
    """The longest sequence (special tokens included) a config's position embeddings allow.

    Args:
        config: a transformers config, or a mapping with ``model_type``, ``max_position_embeddings`` and
            ``pad_token_id``.
    """
    return int(_get(config, "max_position_embeddings")) - _reserved_positions(config)


def sequence_length(own: int, config: Any, max_length: int | None = None) -> int:
    """The length a classifier runs at (truncation, document chunks, the largest bucket, an export's
    ``max_length``): its own, or the user's ``max_length`` up to what the position embeddings allow.

    Args:
        own: the model's own length (``CheckpointFacts.max_seq_length``: a tfsent model's trained length; for
            others, their tokenizer's or config's limit).
        config: its config (for the position embeddings).
        max_length: the user's choice; None keeps ``own``.
    """
    return int(own) if max_length is None else min(int(max_length), model_max_length(config))


def tokenizer_max_length(directory: pathlib.Path | str) -> int | None:
    """The ``model_max_length`` a checkpoint's ``tokenizer_config.json`` declares, or None (no file, no value, or
    transformers' "no limit" placeholder, a number far past any position table)."""
    try:
        value = json.loads((pathlib.Path(directory) / "tokenizer_config.json").read_text(encoding="utf-8")
                           ).get("model_max_length")
    except (OSError, ValueError, AttributeError):
        return None
    return int(value) if isinstance(value, (int, float)) and 2 <= value < 1_000_000 else None


def check_max_positions(config: Any, max_seq_length: int) -> None:
    """Fail clearly when the model cannot embed positions for ``max_seq_length`` tokens.

    Args:
        config: a transformers config (or mapping) with ``model_type``, ``max_position_embeddings`` and, for
            RoBERTa-family models, ``pad_token_id``.
        max_seq_length: tokens per sequence, special tokens included.

    Raises:
        PositionError: the config has too few positions; the message gives both numbers and the fix.
    """
    if max_seq_length < 1:
        raise PositionError(f"max_seq_length must be positive, got {max_seq_length}")
    have = int(_get(config, "max_position_embeddings"))
    need = required_positions(config, max_seq_length)
    if have >= need:
        return
    model_type = _get(config, "model_type")
    if _reserved_positions(config):
        pad = int(_get(config, "pad_token_id", 1))
        why = (f"{model_type} position ids start at pad_token_id + 1 = {pad + 1}, so {max_seq_length} tokens use "
               f"positions up to {max_seq_length + pad}; set max_position_embeddings >= {need} "
               f"(max_seq_length + pad_token_id + 1) for a new model, or lower max_seq_length to "
               f"{max(have - pad - 1, 0)}")
    else:
        why = (f"set max_position_embeddings >= {need} for a new model, or lower max_seq_length to {have}")
    raise PositionError(f"max_position_embeddings={have} is too small for max_seq_length={max_seq_length}: {why}")
