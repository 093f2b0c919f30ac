"""A tiny config per architecture row (``tfsent.models.architectures``), for tests that build real transformers TF
classes: 2 layers, hidden 32, the MiniLM WordPiece vocabulary (its tokenizer works for every family here, since the
tests compare tfsent with transformers on the same token ids)."""

VOCAB = 30522  # the MiniLM tokenizer's
BASE = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37,
            max_position_embeddings=72, initializer_range=0.5, pad_token_id=0)
DEBERTA = dict(relative_attention=True, position_biased_input=False, pos_att_type=["p2c", "c2p"],
               type_vocab_size=0, max_relative_positions=-1)

# model_type -> config fields beyond BASE
TINY = {
    "bert": {},
    "roberta": {},
    "xlm-roberta": {},
    "camembert": {},
    "distilbert": dict(dim=32, n_layers=2, n_heads=2, hidden_dim=37),
    "albert": dict(embedding_size=16),
    "electra": dict(embedding_size=16),
    "deberta-v2": dict(DEBERTA, position_buckets=16, norm_rel_ebd="layer_norm", share_att_key=True),
    "deberta": DEBERTA,
    "mpnet": {},
}


def tiny_hf_config(model_type: str, labels=("Neutral", "Positive", "Negative"), head="ForSequenceClassification"):
    """A transformers config of ``model_type`` with a trained-head label map, as a published classifier has (or,
    with ``head="ForQuestionAnswering"``, as a published QA model has)."""
    from tfsent.models import architectures

    arch = architectures.get(model_type)
    config = arch.config_cls()(**{**BASE, **TINY[model_type]}, num_labels=len(labels),
                               id2label=dict(enumerate(labels)), label2id={n: i for i, n in enumerate(labels)})
    config.architectures = [arch.task_cls(head).__name__[2:]]
    return config
