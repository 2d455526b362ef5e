"""jina-reranker-v2-base-multilingual's checkpoint layout: what its remote code (an adaptation of
flash-attention's BERT) names transformers' XLM-R tensors, and the keys its config.json adds.
Used by tests/fixtures/jina_v2_tiny/make.py and scripts/bench_rerank_models.py (`--arch jina`)
to save a transformers XLMRobertaForSequenceClassification as jina publishes theirs.
"""
import json
from pathlib import Path

import torch

# The keys jina's config.json has beside transformers' (its remote code reads them).
JINA_KEYS = {
    "auto_map": {
        "AutoConfig": "configuration_xlm_roberta.XLMRobertaFlashConfig",
        "AutoModel": "modeling_xlm_roberta.XLMRobertaModel",
        "AutoModelForSequenceClassification":
            "modeling_xlm_roberta.XLMRobertaForSequenceClassification",
    },
    "position_embedding_type": "absolute",
    "use_flash_attn": True,
    "emb_pooler": None,
    "load_trained_adapters": False,
    "lora_adaptations": None,
    "lora_alpha": 1,
    "lora_dropout_p": 0.0,
    "lora_main_params_trainable": False,
    "lora_rank": 4,
    "matryoshka_dimensions": None,
    "truncate_dim": None,
    "output_past": True,
}

# transformers' names -> jina's, per layer (relative to roberta.encoder.layer.N.).
LAYER_NAMES = {
    "attention.output.dense": "mixer.out_proj",
    "attention.output.LayerNorm": "norm1",
    "intermediate.dense": "mlp.fc1",
    "output.dense": "mlp.fc2",
    "output.LayerNorm": "norm2",
}


def to_flash(tensors: dict, layers: int) -> dict:
    """transformers' XLM-R tensors in the layout of jina's remote code."""
    out = {}
    for name, t in tensors.items():
        if name.startswith("roberta.encoder.layer."):
            continue
        if name.startswith("roberta.embeddings.LayerNorm."):
            name = "roberta.emb_ln." + name.rsplit(".", 1)[1]
        if name == "roberta.embeddings.position_ids":
            continue
        out[name] = t
    for n in range(layers):
        src = f"roberta.encoder.layer.{n}."
        dst = f"roberta.encoder.layers.{n}."
        for kind in ("weight", "bias"):
            out[f"{dst}mixer.Wqkv.{kind}"] = torch.cat(
                [tensors[f"{src}attention.self.{p}.{kind}"] for p in ("query", "key", "value")])
            for old, new in LAYER_NAMES.items():
                out[f"{dst}{new}.{kind}"] = tensors[f"{src}{old}.{kind}"]
    left = [n for n in tensors if n.startswith("roberta.encoder.layer.")
            and not any(n.endswith(f".{k}") for k in ("weight", "bias"))]
    assert not left, left
    return {k: v.contiguous() for k, v in out.items()}


def save_as_jina(plain: Path, dest: Path, dtype=torch.float32):
    """The XLMRobertaForSequenceClassification saved in `plain` (transformers' layout) written to
    `dest` as jina publishes its reranker: model.safetensors in its layout and `dtype`, and
    config.json with its keys. The tokenizer's files are the caller's to copy."""
    from safetensors.torch import load_file, save_file

    cfg = json.loads((plain / "config.json").read_text())
    tensors = load_file(str(plain / "model.safetensors"))
    flash = {k: v.to(dtype) for k, v in to_flash(tensors, cfg["num_hidden_layers"]).items()}
    dest.mkdir(parents=True, exist_ok=True)
    save_file(flash, str(dest / "model.safetensors"), metadata={"format": "pt"})
    cfg.update(JINA_KEYS)
    cfg["torch_dtype"] = "bfloat16" if dtype == torch.bfloat16 else "float32"
    cfg.pop("dtype", None)
    (dest / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
