"""The packed forward pass: several rows per sequence, each seeing only itself, each classified by its own head.

A packed batch (``tfsent.inference.packing``) holds ``input_ids`` (and ``token_type_ids``) ``[B, L]``,
``segment_ids`` ``[B, L]`` (1, 2, ... per row, 0 for padding), ``position_ids`` ``[B, L]`` restarting at each row,
and ``[B, K]`` head slots: ``first_token`` (each row's first token in its sequence) and ``example_id``.

Transformers' TF main layers turn a 2-D ``attention_mask`` into ``[B, 1, 1, L]``, which cannot say "row 1 does not
see row 2". So the backbone's own sub-layers run here: its embeddings with the per-row ``position_ids``, then its
encoder with a block-diagonal mask (the additive ``[B, 1, L, L]`` the BERT-style attention adds to its scores, or the
0/1 ``[B, L, L]`` DeBERTa's encoder takes itself). Relative positions (DeBERTa, MPNet's bias) are ``i - j`` within a
row, the same as unpacked; across rows the mask removes them. Then the architecture's head runs on every slot's first
token: heads that read token 0 of a sequence get ``[B*K, 1, H]``. What differs per architecture is named in its
table row (``Architecture.packed_encoder``, ``packed_head``) and looked up in :data:`ENCODERS` and :data:`HEADS`.

The same encoders give the lean forward pass CPUs run (``lean=True``, packed or padded; LiteRT's file and
TensorFlow's CPU paths, ``TaskModel.lean_prediction``): a head reads one token per row, so the last layer's queries,
attention output and feed-forward run at those tokens only, attending to every token's keys and values (the BERT
family through its attention's own cross-attention branch; DistilBERT through its block here). The logits are
transformers' (the tests hold them within 1e-5 on every row); MiniLM-L6 computes 14% fewer FLOPs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import tensorflow as tf

from tfsent.inference.packing import FIRST_TOKEN, POSITION_IDS, SEGMENT_IDS

# A sequence-level mask value, as the HF main layers use it: (1 - mask) * -10000 is added to attention scores.
_MASKED = -10000.0


def is_packed(features: Mapping[str, tf.Tensor]) -> bool:
    """Whether a batch is packed (it carries segment ids instead of an attention mask)."""
    return SEGMENT_IDS in features


def block_mask(segment_ids: tf.Tensor) -> tf.Tensor:
    """``[B, L, L]`` bool: token ``i`` may attend to token ``j`` (same row, not padding)."""
    # expand_dims, not [:, :, None]: LiteRT's converter lowers a new-axis slice of a dynamic shape only with
    # TensorFlow's own kernels (tfsent.inference.litert_convert keeps to its builtins).
    rows, columns = tf.expand_dims(segment_ids, 2), tf.expand_dims(segment_ids, 1)
    return tf.logical_and(tf.equal(rows, columns), columns > 0)


def _additive(same: tf.Tensor, dtype) -> tf.Tensor:
    return (1.0 - tf.cast(tf.expand_dims(same, 1), dtype)) * tf.constant(_MASKED, dtype)


def _bert_encoder(backbone, inputs, same, training, heads=None):
    # BERT, the RoBERTa family, ELECTRA (whose embeddings may be projected to the hidden size first). Without
    # position ids (a padded batch) the embeddings number positions as transformers' main layer has them do.
    hidden = backbone.embeddings(input_ids=inputs["input_ids"], position_ids=inputs.get(POSITION_IDS),
                                 token_type_ids=inputs["token_type_ids"], training=training)
    project = getattr(backbone, "embeddings_project", None)
    if project is not None:
        hidden = project(hidden, training=training)
    layers = backbone.encoder.layer
    mask = _additive(same, hidden.dtype)
    if heads is None:
        return backbone.encoder(hidden_states=hidden, attention_mask=mask,
                                head_mask=[None] * len(layers), encoder_hidden_states=None, encoder_attention_mask=None,
                                past_key_values=None, use_cache=False, output_attentions=False,
                                output_hidden_states=False, return_dict=False, training=training)[0]
    # The loop transformers' TFBertEncoder runs, but the last layer only at the head tokens: their queries attend
    # to every token's keys and values through the attention's cross-attention branch (the same weights and
    # operations; keys and values come from encoder_hidden_states), then its feed-forward runs on them alone.
    for layer in layers[:-1]:
        hidden = layer(hidden_states=hidden, attention_mask=mask, head_mask=None, encoder_hidden_states=None,
                       encoder_attention_mask=None, past_key_value=None, output_attentions=False,
                       training=training)[0]
    last = layers[-1]
    attended = last.attention(input_tensor=_at(hidden, heads), attention_mask=None, head_mask=None,
                              encoder_hidden_states=hidden,
                              encoder_attention_mask=_additive(_at(same, heads), hidden.dtype),
                              past_key_value=None, output_attentions=False, training=training)[0]
    return last.bert_output(hidden_states=last.intermediate(hidden_states=attended), input_tensor=attended,
                            training=training)


def _albert_encoder(backbone, inputs, same, training):
    hidden = backbone.embeddings(input_ids=inputs["input_ids"], position_ids=inputs[POSITION_IDS],
                                 token_type_ids=inputs["token_type_ids"], training=training)
    return backbone.encoder(hidden_states=hidden, attention_mask=_additive(same, hidden.dtype),
                            head_mask=[None] * backbone.config.num_hidden_layers, output_attentions=False,
                            output_hidden_states=False, return_dict=False, training=training)[0]


def _mpnet_encoder(backbone, inputs, same, training):
    hidden = backbone.embeddings(input_ids=inputs["input_ids"], position_ids=inputs[POSITION_IDS],
                                 training=training)
    return backbone.encoder(hidden, _additive(same, hidden.dtype), [None] * backbone.config.num_hidden_layers,
                            False, False, False, training=training)[0]


def _deberta_encoder(backbone, inputs, same, training):
    # DeBERTa's encoder takes a 0/1 [B, L, L] mask as it is; its embeddings zero the padding with the 2-D mask.
    # int32, not uint8: DeBERTa-v2 sums the mask over a sequence, which can hold more than 255 tokens.
    tokens = tf.cast(inputs[SEGMENT_IDS] > 0, tf.int32)
    hidden = backbone.embeddings(input_ids=inputs["input_ids"], position_ids=inputs[POSITION_IDS],
                                 token_type_ids=inputs["token_type_ids"], mask=tokens, training=training)
    return backbone.encoder(hidden_states=hidden, attention_mask=tf.cast(same, tf.int32), output_attentions=False,
                            output_hidden_states=False, return_dict=False, training=training)[0]


def _distilbert_encoder(backbone, inputs, same, training, heads=None):
    # DistilBERT's attention reshapes its mask to [B, 1, 1, L]: its blocks run here, on their own weights, with the
    # same operations in the same order (transformers' TFMultiHeadSelfAttention and TFTransformerBlock).
    hidden = backbone.embeddings(input_ids=inputs["input_ids"], position_ids=inputs.get(POSITION_IDS),
                                 training=training)
    blocks = backbone.transformer.layer
    for block in blocks[:-1] if heads is not None else blocks:
        hidden = _distilbert_block(block, hidden, tf.expand_dims(same, 1), training)
    if heads is None:
        return hidden
    return _distilbert_block(blocks[-1], hidden, tf.expand_dims(_at(same, heads), 1), training, queries=heads)


def _distilbert_block(block, x, mask, training, queries=None):
    """One block; with ``queries`` (``[B, K]`` positions) only those tokens' outputs, attending to every token."""
    from transformers.tf_utils import stable_softmax

    attention = block.attention
    heads = attention.n_heads
    per_head = attention.dim // heads
    batch = tf.shape(x)[0]

    def split(t):
        return tf.transpose(tf.reshape(t, (batch, -1, heads, per_head)), perm=(0, 2, 1, 3))

    if queries is not None:
        x, keys = _at(x, queries), x
    else:
        keys = x
    q, k, v = split(attention.q_lin(x)), split(attention.k_lin(keys)), split(attention.v_lin(keys))
    q = tf.cast(q, tf.float32) * tf.math.rsqrt(tf.cast(per_head, tf.float32))
    scores = tf.matmul(q, tf.cast(k, q.dtype), transpose_b=True)
    scores = scores - 1e30 * (1.0 - tf.cast(mask, scores.dtype))
    weights = attention.dropout(stable_softmax(scores, axis=-1), training=training)
    context = tf.matmul(tf.cast(weights, v.dtype), v)
    context = tf.reshape(tf.transpose(context, perm=(0, 2, 1, 3)), (batch, -1, heads * per_head))
    sa_output = block.sa_layer_norm(attention.out_lin(context) + x)
    return block.output_layer_norm(block.ffn(sa_output, training=training) + sa_output)


def _at(values: tf.Tensor, positions: tf.Tensor) -> tf.Tensor:
    """``values[b, positions[b, k]]``: ``[B, K, ...]`` from ``[B, L, ...]``. A padded batch's ``[B, 1, L]`` mask
    (every query sees the same keys) has one row, which position 0 reads."""
    if values.shape[1] == 1:
        return values
    return tf.gather(values, positions, batch_dims=1)


def _pooler_head(hf, backbone, first, training):  # BERT: pooler (reads token 0) -> dropout -> classifier
    return hf.classifier(hf.dropout(backbone.pooler(hidden_states=first), training=training))


def _dense_pooler_head(hf, backbone, first, training):  # ALBERT: its pooler is a Dense on token 0
    return hf.classifier(hf.dropout(backbone.pooler(first[:, 0]), training=training))


def _sequence_head(hf, backbone, first, training):  # RoBERTa family, ELECTRA, MPNet: the head reads token 0
    return hf.classifier(first, training=training)


def _pre_classifier_head(hf, backbone, first, training):  # DistilBERT
    return hf.classifier(hf.dropout(hf.pre_classifier(first[:, 0]), training=training))


def _context_pooler_head(hf, backbone, first, training):  # DeBERTa: ContextPooler beside the backbone
    return hf.classifier(hf.dropout(hf.pooler(first, training=training), training=training))


ENCODERS: dict[str, Callable] = {"bert": _bert_encoder, "albert": _albert_encoder, "mpnet": _mpnet_encoder,
                                 "deberta": _deberta_encoder, "distilbert": _distilbert_encoder}
HEADS: dict[str, Callable] = {"pooler": _pooler_head, "dense_pooler": _dense_pooler_head,
                              "sequence": _sequence_head, "pre_classifier": _pre_classifier_head,
                              "context_pooler": _context_pooler_head}


# Encoders that can run their last layer at the head tokens only (``heads``); the others compute every token.
HEAD_TOKENS_ONLY = frozenset({"bert", "distilbert"})


def head_tokens_only(model) -> bool:
    """Whether ``model``'s architecture can compute its last layer at the head tokens only
    (:func:`packed_logits`, :func:`padded_logits`)."""
    return model.architecture.packed_encoder in HEAD_TOKENS_ONLY


def _head_logits(model, inputs, same, heads, lean: bool, training: bool) -> tf.Tensor:
    arch = model.architecture
    encode = ENCODERS[arch.packed_encoder]
    if lean and head_tokens_only(model):
        first = encode(model.backbone, inputs, same, training, heads=heads)  # [B, K, H]
    else:
        first = tf.gather(encode(model.backbone, inputs, same, training), heads, batch_dims=1)
    first = tf.reshape(first, [-1, 1, first.shape[-1]])
    logits = HEADS[arch.packed_head](model.hf_model, model.backbone, first, training)
    return tf.cast(logits, tf.float32)


def _with_token_types(model, features: Mapping[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    inputs = dict(features)
    if "token_type_ids" not in model.features or "token_type_ids" not in inputs:
        inputs["token_type_ids"] = tf.zeros_like(features["input_ids"])
    return inputs


def packed_logits(model, features: Mapping[str, tf.Tensor], training: bool = False, lean: bool = False
                  ) -> tf.Tensor:
    """Logits ``[B*K, num_labels]`` (float32) of every head slot of a packed batch, slot by slot.

    Args:
        model: a :class:`~tfsent.models.classifier.SequenceClassifier`.
        features: a packed batch (module docstring); ``token_type_ids`` where the model reads them.
        training: dropout on (never for prediction).
        lean: the last layer runs at the head slots' tokens only, where the architecture can
            (:func:`head_tokens_only`): the same numbers; only the last layer's keys and values are computed for
            every token (MiniLM-L6: 14% fewer FLOPs).
    """
    return _head_logits(model, _with_token_types(model, features), block_mask(features[SEGMENT_IDS]),
                        features[FIRST_TOKEN], lean, training)


def padded_logits(model, features: Mapping[str, tf.Tensor]) -> tf.Tensor:
    """Logits ``[B, num_labels]`` (float32) of a padded batch, the last layer computed at token 0 only (for an
    architecture of :func:`head_tokens_only`; prediction only).

    Every token's keys and values of the last layer are still computed; its queries, attention output and
    feed-forward are not, except for the token the head reads: MiniLM-L6 (6 layers) computes ~14% fewer FLOPs,
    BERT-base (12) ~7%. Transformers' forward pass returns every token's last hidden state, which a classifier
    reads one of.
    """
    mask = features["attention_mask"]
    same = tf.expand_dims(tf.cast(mask, tf.bool), 1)  # [B, 1, L]: every token sees every real token
    heads = tf.zeros_like(mask[:, :1])
    return _head_logits(model, _with_token_types(model, model.model_inputs(features)), same, heads, True, False)
