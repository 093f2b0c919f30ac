"""The tiny random classifier the tests share: 2 layers, hidden 32, the MiniLM vocabulary (its tokenizer works)."""

import pathlib

import tf_keras

from tfsent.models import ClassifierSpec, SequenceClassifier, build_classifier, load_tokenizer

LABELS = ["negative", "neutral", "positive"]


def tiny_config(max_position_embeddings: int = 128, **overrides) -> dict:
    """A random-init BERT config for ``ClassifierSpec.config`` (``overrides`` replace fields)."""
    config = dict(arch="bert", vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                  intermediate_size=64, max_position_embeddings=max_position_embeddings)
    config.update(overrides)
    return config


def tiny_classifier(max_seq_length: int = 128, labels=LABELS, seed: int = 0, **overrides) -> SequenceClassifier:
    """A seeded random tiny classifier whose positions fit ``max_seq_length`` tokens."""
    tf_keras.utils.set_random_seed(seed)
    config = tiny_config(max_position_embeddings=max_seq_length, **overrides)
    return build_classifier(ClassifierSpec(config=config, label_names=list(labels), max_seq_length=max_seq_length))


def tiny_checkpoint(directory: pathlib.Path, max_seq_length: int = 128, labels=LABELS, seed: int = 0,
                    tokenizer=None, **overrides) -> pathlib.Path:
    """``save_pretrained`` of :func:`tiny_classifier` with the MiniLM tokenizer: a checkpoint predict can load."""
    model = tiny_classifier(max_seq_length, labels, seed, **overrides)
    return model.save_pretrained(directory, tokenizer=tokenizer or load_tokenizer("minilm_l6"))


def overflowing_checkpoint(directory: pathlib.Path, word: str = "fell") -> pathlib.Path:
    """A tiny checkpoint (one layer, 64 positions) whose finite embedding of ``word`` overflows: every row holding
    it scores NaN (its neighbours too where rows are packed into one sequence)."""
    tokenizer = load_tokenizer("minilm_l6")
    model = tiny_classifier(64, num_hidden_layers=1)
    embeddings = model.hf_model.bert.embeddings.weight
    values = embeddings.numpy()
    values[tokenizer.convert_tokens_to_ids(word)] = 3e38
    embeddings.assign(values)
    return model.save_pretrained(directory, tokenizer=tokenizer)
