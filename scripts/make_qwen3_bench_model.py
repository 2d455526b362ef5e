#!/usr/bin/env python3
"""Writes a random Qwen3ForCausalLM checkpoint with the shape of Qwen3-Reranker-0.6B, for benchmarks
(or, with --shape mxbai-rerank-base-v2, a Qwen2ForCausalLM with the shape of mxbai-rerank-base-v2, which
is Qwen2.5-0.5B-Instruct's; with --shape llama-3.2-1b, a LlamaForCausalLM with Llama-3.2-1B-Instruct's).

Shape: 28 layers, hidden 1024, 16 heads, 8 kv heads, head_dim 128, ffn 3072, vocab 151936, tied
embeddings, float32 (about 2.4 GB). mxbai-rerank-base-v2 (Qwen2-0.5B): 24 layers, hidden 896, 14 heads,
2 kv heads, head_dim 64, ffn 4864, vocab 151936, tied embeddings, q/k/v biases, no q/k norms, float32
(about 2.0 GB). Llama-3.2-1B: 16 layers, hidden 2048, 32 heads, 8 kv heads, head_dim 64, ffn 8192, vocab
128256, tied embeddings, no biases, rope_theta 5e5 with the llama3 scaling, float32 (about 4.9 GB); its
tokenizer is Qwen3's (the bench feeds raw prompts whose ids are all below 128256), so only the cost is
Llama's. Weights are seeded normal noise (std 0.02; RMSNorm weights 1 + small
noise): the model is meaningless as a ranker but costs exactly what the real one costs to run.

The safetensors file is streamed tensor by tensor, so memory stays low. The tokenizer files are copied
from --tokenizer-dir (default: ../shared/fixtures/qwen3_tiny_a/model, the official Qwen3 tokenizer).

Usage: python scripts/make_qwen3_bench_model.py [--out models/qwen3-0.6b-shape] [--seed 0]
       python scripts/make_qwen3_bench_model.py --shape mxbai-rerank-base-v2 [--out models/mxbai-base-v2-shape]
       python scripts/make_qwen3_bench_model.py --shape llama-3.2-1b [--out models/llama-3.2-1b-shape]
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

# Qwen2-0.5B, the decoder of mxbai-rerank-base-v2 (head_dim = 896 / 14 = 64, not in its config).
MXBAI_BASE_V2 = {
    "vocab_size": 151936,
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
}

# Llama-3.2-1B(-Instruct): GQA 4, head_dim 64, tied embeddings, no biases, no q/k norms.
LLAMA_3_2_1B = {
    "vocab_size": 128256,
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_hidden_layers": 16,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 64,
}

SHAPES = {"qwen3-reranker-0.6b": ("qwen3", SHAPE), "mxbai-rerank-base-v2": ("qwen2", MXBAI_BASE_V2),
          "llama-3.2-1b": ("llama", LLAMA_3_2_1B)}
DEFAULT_OUT = {"qwen3-reranker-0.6b": "models/qwen3-0.6b-shape", "mxbai-rerank-base-v2": "models/mxbai-base-v2-shape",
               "llama-3.2-1b": "models/llama-3.2-1b-shape"}


def tensors(cfg, family="qwen3"):
    """(name, shape, kind) in file order; kind is 'norm' or 'matrix' (a bias counts as one). Qwen2
    has q/k/v biases and no q/k norms; Qwen3 q/k norms and no biases; Llama neither."""
    h, v, f = cfg["hidden_size"], cfg["vocab_size"], cfg["intermediate_size"]
    hd = cfg.get("head_dim") or h // cfg["num_attention_heads"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    out = [("model.embed_tokens.weight", (v, h), "matrix")]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out += [
            (p + "input_layernorm.weight", (h,), "norm"),
            (p + "self_attn.q_proj.weight", (q, h), "matrix"),
            (p + "self_attn.k_proj.weight", (kv, h), "matrix"),
            (p + "self_attn.v_proj.weight", (kv, h), "matrix"),
            (p + "self_attn.o_proj.weight", (h, q), "matrix"),
        ]
        if family == "qwen2":
            out += [(p + f"self_attn.{x}_proj.bias", (n,), "matrix") for x, n in [("q", q), ("k", kv), ("v", kv)]]
        elif family == "qwen3":
            out += [(p + "self_attn.q_norm.weight", (hd,), "norm"), (p + "self_attn.k_norm.weight", (hd,), "norm")]
        out += [
            (p + "post_attention_layernorm.weight", (h,), "norm"),
            (p + "mlp.gate_proj.weight", (f, h), "matrix"),
            (p + "mlp.up_proj.weight", (f, h), "matrix"),
            (p + "mlp.down_proj.weight", (h, f), "matrix"),
        ]
    out.append(("model.norm.weight", (h,), "norm"))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", choices=sorted(SHAPES), default="qwen3-reranker-0.6b")
    ap.add_argument("--out", default=None, help="default: models/qwen3-0.6b-shape or models/mxbai-base-v2-shape")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tokenizer-dir", default="../shared/fixtures/qwen3_tiny_a/model")
    args = ap.parse_args()
    out = Path(args.out or DEFAULT_OUT[args.shape])
    out.mkdir(parents=True, exist_ok=True)
    family, shape = SHAPES[args.shape]

    config = {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        **shape,
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
    if family == "qwen2":
        # As mxbai-rerank-base-v2's config.json (Qwen2 has no attention_bias key: q/k/v always have biases).
        del config["attention_bias"]
        config.update({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
                       "max_position_embeddings": 32768, "max_window_layers": 24})
    if family == "llama":
        # As Llama-3.2-1B-Instruct's config.json (its RoPE scaled with rope_type llama3).
        for key in ("max_window_layers", "sliding_window", "use_sliding_window"):
            del config[key]
        config.update({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "bos_token_id": 128000,
                       "eos_token_id": [128001, 128008, 128009], "max_position_embeddings": 131072,
                       "mlp_bias": False, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
                       "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                        "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})
    (out / "config.json").write_text(json.dumps(config, indent=2))

    specs = tensors(shape, family)
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
