#!/usr/bin/env python3
"""Writes a random Qwen3ForCausalLM checkpoint with the shape of Qwen3-Reranker-0.6B, for benchmarks.

Shape: 28 layers, hidden 1024, 16 heads, 8 kv heads, head_dim 128, ffn 3072, vocab 151936, tied
embeddings, float32 (about 2.4 GB). Weights are seeded normal noise (std 0.02; RMSNorm weights 1 + small
noise): the model is meaningless as a ranker but costs exactly what the real one costs to run.

The safetensors file is streamed tensor by tensor, so memory stays low. The tokenizer files are copied
from --tokenizer-dir (default: ../shared/fixtures/qwen3_tiny_a/model, the official Qwen3 tokenizer).

Usage: python scripts/make_qwen3_bench_model.py [--out models/qwen3-0.6b-shape] [--seed 0]
Needs numpy.
"""
import argparse
import json
import shutil
import struct
from pathlib import Path

import numpy as np

SHAPE = {
    "vocab_size": 151936,
    "hidden_size": 1024,
    "intermediate_size": 3072,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
}


def tensors(cfg):
    """(name, shape, kind) in file order; kind is 'norm' or 'matrix'."""
    h, v, f = cfg["hidden_size"], cfg["vocab_size"], cfg["intermediate_size"]
    q, kv = cfg["num_attention_heads"] * cfg["head_dim"], cfg["num_key_value_heads"] * cfg["head_dim"]
    hd = cfg["head_dim"]
    out = [("model.embed_tokens.weight", (v, h), "matrix")]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out += [
            (p + "input_layernorm.weight", (h,), "norm"),
            (p + "self_attn.q_proj.weight", (q, h), "matrix"),
            (p + "self_attn.k_proj.weight", (kv, h), "matrix"),
            (p + "self_attn.v_proj.weight", (kv, h), "matrix"),
            (p + "self_attn.o_proj.weight", (h, q), "matrix"),
            (p + "self_attn.q_norm.weight", (hd,), "norm"),
            (p + "self_attn.k_norm.weight", (hd,), "norm"),
            (p + "post_attention_layernorm.weight", (h,), "norm"),
            (p + "mlp.gate_proj.weight", (f, h), "matrix"),
            (p + "mlp.up_proj.weight", (f, h), "matrix"),
            (p + "mlp.down_proj.weight", (h, f), "matrix"),
        ]
    out.append(("model.norm.weight", (h,), "norm"))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="models/qwen3-0.6b-shape")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tokenizer-dir", default="../shared/fixtures/qwen3_tiny_a/model")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    config = {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        **SHAPE,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "hidden_act": "silu",
        "initializer_range": 0.02,
        "max_position_embeddings": 40960,
        "max_window_layers": 28,
        "rms_norm_eps": 1e-6,
        "rope_scaling": None,
        "rope_theta": 1000000.0,
        "sliding_window": None,
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
        "use_cache": False,
        "use_sliding_window": False,
    }
    (out / "config.json").write_text(json.dumps(config, indent=2))

    specs = tensors(SHAPE)
    header, offset = {}, 0
    for name, shape, _ in specs:
        n = int(np.prod(shape)) * 4
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    header["__metadata__"] = {"format": "pt", "generator": "make_qwen3_bench_model.py", "seed": str(args.seed)}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    rng = np.random.default_rng(args.seed)
    with open(out / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for name, shape, kind in specs:
            if kind == "norm":
                a = 1.0 + 0.1 * rng.standard_normal(shape, dtype=np.float32)
            else:
                a = 0.02 * rng.standard_normal(shape, dtype=np.float32)
            f.write(np.ascontiguousarray(a, dtype="<f4").tobytes())
    for name in ["tokenizer.json", "tokenizer_config.json"]:
        src = Path(args.tokenizer_dir) / name
        if src.is_file():
            shutil.copyfile(src, out / name)
    print(f"{out}: {offset / 1e9:.2f} GB of float32 weights, {len(specs)} tensors")


if __name__ == "__main__":
    main()
