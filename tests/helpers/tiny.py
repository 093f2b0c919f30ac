"""Tiny checkpoints for inference tests: a 2-layer, hidden-32 BERT classifier with the MiniLM tokenizer."""

from __future__ import annotations

import pathlib

import tf_keras

from tfsent.models import ClassifierSpec, build_classifier, load_tokenizer

LABELS = ["negative", "neutral", "positive"]


def tiny_classifier(folder: pathlib.Path, *, positions: int = 64, layers: int = 2, labels=LABELS,
                    seed: int = 0) -> pathlib.Path:
    """Save a seeded tiny BERT classifier (vocab of MiniLM's tokenizer) into ``folder/model``; return its path."""
    tf_keras.utils.set_random_seed(seed)
    config = dict(arch="bert", vocab_size=30522, hidden_size=32, num_hidden_layers=layers, num_attention_heads=2,
                  intermediate_size=64, max_position_embeddings=positions)
    model = build_classifier(ClassifierSpec(config=config, label_names=list(labels), max_seq_length=positions))
    return model.save_pretrained(pathlib.Path(folder) / "model", tokenizer=load_tokenizer("minilm_l6"))
