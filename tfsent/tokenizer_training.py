"""Train a byte-level BPE tokenizer (RoBERTa style) on the user's corpus.

The result is a folder that ``transformers.RobertaTokenizerFast.from_pretrained`` loads; it is copied beside
the prepared blocks and saved with the model, so training, evaluation and prediction share one vocabulary.
Special tokens take the first ids in RoBERTa's order: ``<s>``=0, ``<pad>``=1, ``</s>``=2, ``<unk>``=3,
``<mask>``=4. Training is deterministic: the same texts give byte-identical ``tokenizer.json``. Its
fingerprint for manifests is ``tfsent.data.features.tokenizer_fingerprint``.
"""

from __future__ import annotations

import os
import pathlib
from typing import Iterable, Iterator, Sequence

from tfsent.runtime import atomic

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
                        out_dir: str | os.PathLike, min_frequency: int = 2, model_max_length: int = 512
                        ) -> pathlib.Path:
    """Train a byte-level BPE tokenizer with RoBERTa's special tokens and save it atomically.

    Args:
        files_or_texts: ``pathlib.Path`` items are UTF-8 text files read line by line (blank lines skipped);
            ``str`` items are texts.
        vocab_size: target vocabulary size, special tokens and the 256 byte symbols included.
        out_dir: folder to write (replaced if it exists).
        min_frequency: a merge must occur at least this often.
        model_max_length: recorded in the tokenizer config.

    Returns:
        ``out_dir``, loadable by ``RobertaTokenizerFast.from_pretrained``.

    Raises:
        ValueError: a vocabulary too small for bytes + specials, a file that is not UTF-8, or no text at all.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import RobertaTokenizerFast

    if vocab_size < 256 + len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size={vocab_size} is too small: byte-level BPE needs at least "
                         f"{256 + len(SPECIAL_TOKENS)} (256 bytes + {len(SPECIAL_TOKENS)} special tokens)")
    texts = list(_texts(files_or_texts))
    if not texts:
        raise ValueError("train_bpe_tokenizer: no text to train on (empty inputs or only blank lines)")

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, show_progress=False,
                                  special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(texts, trainer=trainer, length=len(texts))
    tokenizer.post_processor = processors.RobertaProcessing(
        sep=("</s>", tokenizer.token_to_id("</s>")), cls=("<s>", tokenizer.token_to_id("<s>")),
        trim_offsets=True, add_prefix_space=False)
    fast = RobertaTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", sep_token="</s>",
                                cls_token="<s>", unk_token="<unk>", pad_token="<pad>", mask_token="<mask>",
                                model_max_length=model_max_length)

    out = pathlib.Path(out_dir)
    with atomic.directory(out, overwrite=True) as tmp:
        fast.save_pretrained(tmp)
    return out


def load_tokenizer(directory: str | os.PathLike):
    """Load a tokenizer folder (from ``train_bpe_tokenizer`` or a saved model) as ``RobertaTokenizerFast``.

    Raises:
        FileNotFoundError: the folder has no ``tokenizer.json``.
    """
    from transformers import RobertaTokenizerFast

    path = pathlib.Path(directory)
    if not (path / "tokenizer.json").is_file():
        raise FileNotFoundError(f"{path / 'tokenizer.json'} not found: not a tokenizer folder")
    return RobertaTokenizerFast.from_pretrained(str(path))
