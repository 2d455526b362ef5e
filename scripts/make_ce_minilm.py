#!/usr/bin/env python3
"""Build a MiniLM-L6-shaped cross-encoder for benchmarks.

The real all-MiniLM-L6-v2 encoder (from ./models/all-MiniLM-L6-v2, see scripts/fetch_minilm.sh)
plus a seeded random pooler and one-label classifier, saved as a transformers
`BertForSequenceClassification` directory. It computes what ms-marco-MiniLM-L-6-v2 computes
(same shapes), but its scores mean nothing: use it for throughput only.

Usage: python scripts/make_ce_minilm.py [--src $RERANK_MODELS_DIR/all-MiniLM-L6-v2]
                                        [--out $RERANK_MODELS_DIR/ce-minilm-l6-random] [--seed 42]
($RERANK_MODELS_DIR defaults to ./models.)
Needs numpy and safetensors.
"""
import argparse
import json
import os
import shutil
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

COPIED = ["tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    models = os.environ.get("RERANK_MODELS_DIR", "models")
    ap.add_argument("--src", default=os.path.join(models, "all-MiniLM-L6-v2"))
    ap.add_argument("--out", default=os.path.join(models, "ce-minilm-l6-random"))
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args()
    src, out = Path(args.src), Path(args.out)
    if not (src / "model.safetensors").is_file():
        raise SystemExit(f"{src}/model.safetensors not found: run scripts/fetch_minilm.sh first")

    weights = load_file(str(src / "model.safetensors"))
    cfg = json.loads((src / "config.json").read_text())
    hidden = cfg["hidden_size"]
    rng = np.random.default_rng(args.seed)
    tensors = {}
    for name, value in weights.items():
        if name.startswith("pooler.") or name.endswith("position_ids"):
            continue  # the pooler is replaced below; position_ids is a buffer, not a weight
        key = name if name.startswith("bert.") else "bert." + name
        tensors[key] = np.ascontiguousarray(value.astype(np.float32))
    std = cfg.get("initializer_range", 0.02)
    tensors["bert.pooler.dense.weight"] = rng.normal(0, std, (hidden, hidden)).astype(np.float32)
    tensors["bert.pooler.dense.bias"] = rng.normal(0, std, (hidden,)).astype(np.float32)
    tensors["classifier.weight"] = rng.normal(0, std, (1, hidden)).astype(np.float32)
    tensors["classifier.bias"] = rng.normal(0, std, (1,)).astype(np.float32)

    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    cfg.pop("_name_or_path", None)
    cfg["architectures"] = ["BertForSequenceClassification"]
    cfg["id2label"] = {"0": "LABEL_0"}
    cfg["label2id"] = {"LABEL_0": 0}
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    for name in COPIED:
        if (src / name).is_file():
            shutil.copyfile(src / name, out / name)
    print(f"wrote {out} ({len(tensors)} tensors, seed {args.seed})")


if __name__ == "__main__":
    main()
