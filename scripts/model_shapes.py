"""Configurations of published model layouts, shared by the scripts that write random models of
them (gpu_peer.py, bench_rerank_models.py). Nothing here runs at import: transformers is imported
by each function."""


def modernbert_reranker_config(layers, cls, sep, pad, **shape):
    """A transformers ModernBertConfig of gte-reranker-modernbert-base's layout (a global attention
    layer every third, local windows of 128 between, rotary bases 160,000 and 10,000, GELU, mean
    pooling, no biases but the classifier's, one label) with `layers` layers, the special ids
    `cls`, `sep`, `pad`, and the sizes in `shape` (hidden_size, vocab_size, ...)."""
    import transformers as tf

    return tf.ModernBertConfig(
        architectures=["ModernBertForSequenceClassification"], num_labels=1, local_attention=128,
        num_hidden_layers=layers,
        layer_types=["full_attention" if i % 3 == 0 else "sliding_attention" for i in range(layers)],
        rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 160000.0},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
        hidden_activation="gelu", classifier_activation="gelu", classifier_pooling="mean",
        norm_bias=False, attention_bias=False, mlp_bias=False, classifier_bias=True,
        pad_token_id=pad, cls_token_id=cls, sep_token_id=sep, bos_token_id=cls, eos_token_id=sep, **shape)
