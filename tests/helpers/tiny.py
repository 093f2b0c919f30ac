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
