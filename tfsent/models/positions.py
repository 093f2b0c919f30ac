"""Check that a model has enough position embeddings for the sequence length, before anything runs.

RoBERTa-family models number positions from ``pad_token_id + 1`` (padding gets position ``pad_token_id``), so
a sequence of ``L`` tokens uses positions up to ``L + pad_token_id`` and needs
``max_position_embeddings >= L + pad_token_id + 1`` (``roberta-base``: 514 for 512 tokens). BERT numbers from 0
and needs ``>= L``. Getting this wrong does not fail loudly everywhere: on CPU the embedding lookup raises deep
inside the graph, on TPU/GPU an out-of-range gather silently returns zeros.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# model_type values whose position ids start after the padding index (create_position_ids_from_input_ids).
OFFSET_POSITION_MODELS = frozenset({
    "roberta", "xlm-roberta", "xlm-roberta-xl", "camembert", "roberta-prelayernorm", "longformer", "data2vec-text",
})


class PositionError(ValueError):
    """``max_position_embeddings`` is too small for the requested ``max_seq_length``."""


def _get(config: Any, key: str, default: Any = None) -> Any:
    if isinstance(config, Mapping):
        return config.get(key, default)
    return getattr(config, key, default)


def required_positions(config: Any, max_seq_length: int) -> int:
    """Return the smallest ``max_position_embeddings`` that fits ``max_seq_length`` tokens for this config.

    Args:
        config: a transformers config, or a mapping with ``model_type`` and ``pad_token_id``.
        max_seq_length: tokens per sequence, special tokens included.
    """
    if _get(config, "model_type") in OFFSET_POSITION_MODELS:
        return max_seq_length + int(_get(config, "pad_token_id", 1)) + 1
    return max_seq_length


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
    if model_type in OFFSET_POSITION_MODELS:
        pad = int(_get(config, "pad_token_id", 1))
        why = (f"{model_type} position ids start at pad_token_id + 1 = {pad + 1}, so {max_seq_length} tokens use "
               f"positions up to {max_seq_length + pad}; set max_position_embeddings >= {need} "
               f"(max_seq_length + pad_token_id + 1) for a new model, or lower max_seq_length to "
               f"{max(have - pad - 1, 0)}")
    else:
        why = (f"set max_position_embeddings >= {need} for a new model, or lower max_seq_length to {have}")
    raise PositionError(f"max_position_embeddings={have} is too small for max_seq_length={max_seq_length}: {why}")
