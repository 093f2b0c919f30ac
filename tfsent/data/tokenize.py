"""Tokenizers: load one from any source, fingerprint it for manifests, train a byte-level BPE on a corpus.

- :func:`load_tokenizer`: the fast (Rust) tokenizer of a packaged checkpoint name, a local folder (a checkpoint,
  a saved model or a trained BPE) or a Hugging Face hub id, from local files; every failure is a
  ``CheckpointError`` naming the folder.
- :func:`tokenizer_fingerprint` / :func:`tokenizer_info`: what a manifest records, so that a reader can check the
  data was tokenized by the model's own tokenizer.
- :func:`save_tokenizer`: every folder tfsent writes a tokenizer to (a model, an export, a prepared corpus) gets
  it this way: ``tokenizer.json`` without the fixed padding and truncation transformers leaves in the backend after
  an encoding call, as the hub's tokenizers are stored (the ``tokenizers`` library would apply them to every text).
- :func:`train_bpe_tokenizer`: RoBERTa-style byte-level BPE for masked-LM pretraining. The result is a folder that
  :func:`load_tokenizer` loads; it is copied beside the prepared blocks and saved with the model, so training,
  evaluation and prediction share one vocabulary. Special tokens take the first ids in RoBERTa's order:
  ``<s>``=0, ``<pad>``=1, ``</s>``=2, ``<unk>``=3, ``<mask>``=4. Training is deterministic: the same texts give
  byte-identical ``tokenizer.json``.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
from typing import Any, Iterable, Iterator, Sequence

from tfsent.data.errors import DataError
from tfsent.runtime import atomic

# Files that make a folder a tokenizer: a fast tokenizer's definition, BERT's / RoBERTa's vocabularies, or a
# SentencePiece model (ALBERT, XLM-R, CamemBERT, DeBERTa-v3), which transformers converts to a fast tokenizer.
TOKENIZER_DEFINITIONS = ("tokenizer.json", "vocab.txt", "vocab.json", "spiece.model", "spm.model",
                         "sentencepiece.bpe.model")

SPECIAL_TOKENS = ("<s>", "<pad>", "</s>", "<unk>", "<mask>")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def _texts(files_or_texts: Iterable[str | os.PathLike]) -> Iterator[str]:
    for item in files_or_texts:
        if isinstance(item, os.PathLike):
            path = pathlib.Path(item)
            try:
                with path.open(encoding="utf-8") as f:
                    for line in f:
                        if line.strip():
                            yield line.rstrip("\r\n")
            except UnicodeDecodeError as e:
                raise ValueError(f"{path}: not UTF-8 ({e}); convert it or pass its decoded text") from e
        elif isinstance(item, str):
            yield item
        else:
            raise TypeError(f"train_bpe_tokenizer: expected a str (text) or a path, got {type(item).__name__}")


def train_bpe_tokenizer(files_or_texts: Sequence[str | os.PathLike], vocab_size: int,
                        out_dir: str | os.PathLike, min_frequency: int = 2, model_max_length: int = 512,
                        progress: bool = False) -> pathlib.Path:
    """Train a byte-level BPE tokenizer with RoBERTa's special tokens and save it atomically.

    Args:
        files_or_texts: ``pathlib.Path`` items are UTF-8 text files read line by line (blank lines skipped);
            ``str`` items are texts.
        vocab_size: target vocabulary size, special tokens and the 256 byte symbols included.
        out_dir: folder to write; an existing one is refused (``FileExistsError``).
        min_frequency: a merge must occur at least this often.
        model_max_length: recorded in the tokenizer config.
        progress: the trainer's own progress bar, on a terminal (``tfsent.runtime.progress.bar_enabled``).

    Returns:
        ``out_dir``, loadable by ``RobertaTokenizerFast.from_pretrained``.

    Raises:
        ValueError: a vocabulary too small for bytes + specials, a file that is not UTF-8, or no text at all.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import RobertaTokenizerFast

    from tfsent.runtime.progress import bar_enabled, native_bar

    if vocab_size < 256 + len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size={vocab_size} is too small: byte-level BPE needs at least "
                         f"{256 + len(SPECIAL_TOKENS)} (256 bytes + {len(SPECIAL_TOKENS)} special tokens)")
    texts = list(_texts(files_or_texts))
    if not texts:
        raise ValueError("train_bpe_tokenizer: no text to train on (empty inputs or only blank lines)")

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    show = bar_enabled(progress)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, show_progress=show,
                                  special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    with native_bar(show):
        tokenizer.train_from_iterator(texts, trainer=trainer, length=len(texts))
    tokenizer.post_processor = processors.RobertaProcessing(
        sep=("</s>", tokenizer.token_to_id("</s>")), cls=("<s>", tokenizer.token_to_id("<s>")),
        trim_offsets=True, add_prefix_space=False)
    fast = RobertaTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", sep_token="</s>",
                                cls_token="<s>", unk_token="<unk>", pad_token="<pad>", mask_token="<mask>",
                                model_max_length=model_max_length)

    out = pathlib.Path(out_dir)
    with atomic.directory(out) as tmp:
        save_tokenizer(fast, tmp)
    return out


def save_tokenizer(tokenizer: Any, directory: str | os.PathLike) -> None:
    """``tokenizer.save_pretrained(directory)`` with no padding or truncation stored in ``tokenizer.json``.

    transformers switches the backend's padding and truncation on for a call that asks for them and leaves them
    on; ``save_pretrained`` then stores them, and a checkpoint's own ``tokenizer.json`` may carry them too. The
    ``tokenizers`` library (and a serving stack built on it) applies what the file stores to every text: each
    one padded to the fixed length. Hub tokenizers store neither; the lengths are the caller's per-call choice.

    Args:
        tokenizer: a fast Hugging Face tokenizer.
        directory: the folder to write (the caller's temporary folder: tfsent writes folders atomically).
    """
    from tokenizers import Tokenizer

    tokenizer.save_pretrained(str(directory))
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return  # a slow tokenizer has no tokenizer.json
    # A copy: the tokenizer itself may be encoding in another thread with its per-call state.
    clean = Tokenizer.from_str(backend.to_str())
    clean.no_padding()
    clean.no_truncation()
    clean.save(str(pathlib.Path(directory) / "tokenizer.json"))


def load_tokenizer(source: str | os.PathLike, *, revision: str | None = None):
    """Load the fast (Rust) tokenizer of a source from local files.

    Args:
        source: anything ``tfsent.models.sources.resolve_source`` accepts (a packaged name, a local folder, a
            hub id).
        revision: a hub id's branch, tag or commit.

    Returns:
        A ``PreTrainedTokenizerFast``.

    Raises:
        CheckpointError: the tokenizer files are missing or unreadable, or only a slow tokenizer is available.
    """
    from transformers import AutoTokenizer

    from tfsent.models.loading import CheckpointError
    from tfsent.models.sources import resolve_source

    directory = resolve_source(str(source), revision=revision)
    if not any((directory / name).is_file() for name in TOKENIZER_DEFINITIONS):
        raise CheckpointError(f"{directory}: cannot load a tokenizer: none of {', '.join(TOKENIZER_DEFINITIONS)} "
                              "is here")
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(directory), use_fast=True, local_files_only=True,
                                                  trust_remote_code=False)
    except (OSError, ValueError, KeyError, TypeError, ImportError) as e:
        raise CheckpointError(f"{directory}: cannot load a tokenizer ({type(e).__name__}: {e})") from e
    if not tokenizer.is_fast:
        raise CheckpointError(f"{directory}: only a slow (Python) tokenizer could be built; tfsent needs a fast "
                              "one (add tokenizer.json)")
    return tokenizer


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """SHA-256 of a fast tokenizer's full definition (vocab, normalizer, special tokens).

    It hashes the serialized ``tokenizer.json`` (without the per-call truncation/padding state) rather than
    files on disk, so the same tokenizer loaded from another folder, machine or cache gives the same
    fingerprint, before and after it has encoded anything.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise DataError(f"{type(tokenizer).__name__} is not a Hugging Face *fast* tokenizer (no backend_tokenizer)")
    definition = json.loads(backend.to_str())
    # Truncation and padding are per-call state that transformers writes into the backend; not identity.
    definition.pop("truncation", None)
    definition.pop("padding", None)
    digest = hashlib.sha256(json.dumps(definition, sort_keys=True, ensure_ascii=False).encode("utf-8"))
    digest.update(repr(sorted(tokenizer.model_input_names)).encode("utf-8"))
    return digest.hexdigest()


def tokenizer_info(tokenizer: Any, name: str) -> dict[str, Any]:
    """The manifest's ``tokenizer`` entry: name, vocab size (with added tokens) and fingerprint."""
    return {"name": name, "vocab_size": len(tokenizer), "fingerprint": tokenizer_fingerprint(tokenizer)}
