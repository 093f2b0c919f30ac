"""A checkpoint's fast tokenizer as transformers set it up, stored as one ``tokenizer.json``, so that a warm LiteRT run
tokenizes without importing transformers (about 1.5 s of a 3 s start: its import, ``AutoTokenizer`` and
``AutoConfig``).

transformers builds the Rust tokenizer from a folder's files (converting a SentencePiece model, adding the tokens of
``tokenizer_config.json``, setting the prefix space) and, for each call, sets the backend's truncation and padding
and encodes the batch. :func:`definition` serializes the backend it built; :class:`StoredTokenizer` reads it back with
the ``tokenizers`` library alone and encodes a text's first window with the settings transformers' call sets
(longest-first truncation at ``max_length`` on the tokenizer's truncation side, stride 0, no padding, special tokens
added and not split): the same ids, masks and type ids as ``tokenizer(texts, truncation=True, max_length=...,
return_overflowing_tokens=True)``, row for row (``tests/inference/test_stored_tokenizer.py``: the nine fixture
folders transformers wrote, every tokenizer family tfsent's architectures use).

Anything else asked of it (a document's chunking, a masked LM's tokens) is asked of transformers' tokenizer, loaded
then.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

#: What transformers' call returns per feature, read from a ``tokenizers.Encoding``.
_ENCODING_FIELDS = {"input_ids": "ids", "attention_mask": "attention_mask", "token_type_ids": "type_ids"}


def definition(tokenizer: Any) -> dict:
    """What :class:`StoredTokenizer` needs of a transformers fast tokenizer: its backend serialized without the
    per-call truncation and padding, its sha256, the pad id, the truncation side and the ``tokenizers`` version that
    wrote it (:func:`readable`)."""
    import tokenizers
    from tokenizers import Tokenizer

    # A copy: the tokenizer keeps the truncation and padding of its last call in its backend.
    clean = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
    clean.no_padding()
    clean.no_truncation()
    text = clean.to_str()
    return {"json": text, "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
            "pad_token_id": tokenizer.pad_token_id, "truncation_side": tokenizer.truncation_side,
            "tokenizers": tokenizers.__version__}


def readable(stored: dict) -> bool:
    """Whether a :func:`definition` was written by the installed ``tokenizers`` (the cache key holds transformers'
    version, not this one; another version may encode differently, so its definition is made again)."""
    import tokenizers

    return stored.get("tokenizers") == tokenizers.__version__


class StoredTokenizer:
    """A stored backend (:func:`definition`) that encodes first windows as transformers does.

    Args:
        json_text: the backend's ``tokenizer.json``.
        pad_token_id: the tokenizer's pad id (None where it has none).
        truncation_side: ``right`` or ``left``.
        load: loads transformers' tokenizer, for anything but first windows.
    """

    def __init__(self, json_text: str, pad_token_id: int | None, truncation_side: str,
                 load: Callable[[], Any]):
        from tokenizers import Tokenizer

        self._backend = Tokenizer.from_str(json_text)
        self._backend.no_padding()
        self._backend.encode_special_tokens = False  # transformers' split_special_tokens=False
        self.pad_token_id = pad_token_id
        self._side = truncation_side
        self._load = load
        self._length = None

    def first_windows(self, texts: Sequence[str], max_length: int,
                      features: Sequence[str]) -> tuple[dict[str, list[list[int]]], np.ndarray]:
        """Each text's first window of at most ``max_length`` tokens (special tokens included), per feature, and
        whether the text was cut."""
        if self._length != max_length:
            self._backend.enable_truncation(max_length, stride=0, strategy="longest_first", direction=self._side)
            self._length = max_length
        encodings = self._backend.encode_batch(list(texts), add_special_tokens=True, is_pretokenized=False)
        ragged = {k: [getattr(e, _ENCODING_FIELDS[k]) for e in encodings] for k in features}
        return ragged, np.fromiter((len(e.overflowing) > 0 for e in encodings), bool, len(encodings))

    def transformers(self) -> Any:
        """transformers' tokenizer of the same folder, loaded on first use."""
        if "_full" not in self.__dict__:
            self._full = self._load()
        return self._full

    def __call__(self, *args, **kwargs):
        return self.transformers()(*args, **kwargs)

    def __len__(self) -> int:
        return len(self.transformers())

    def __getattr__(self, name: str):
        # Only attributes this class lacks land here: the rest of transformers' tokenizer.
        if name.startswith("__") or name in ("_backend", "_load", "_full"):
            raise AttributeError(name)
        return getattr(self.transformers(), name)
