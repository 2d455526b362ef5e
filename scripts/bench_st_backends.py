#!/usr/bin/env python3
"""The crate against sentence-transformers on each of its backends (torch, ONNX, OpenVINO), f32.

sentence-transformers' `backend="onnx"` (onnxruntime, through optimum) and `backend="openvino"`
(through optimum-intel) are what its users pick for speed on a CPU. Each backend exports the
model at load (nothing is written into the model folder), then embeds or scores exactly what the
crate does, on the same machine, with every core (the backends' defaults; `--threads` sets
torch's and the crate's, and should be the machine's core count):

  embed  all-MiniLM-L6-v2 (the real model, scripts/fetch_minilm.sh) on the first 64 SciFact
         documents (`title + " " + text`, 256 tokens at most): `SentenceTransformer.encode`,
         batch size 32, against `cargo bench --bench embed_models`;
  score  a cross-encoder folder (default: bench-ms-marco-electra-base, written by
         scripts/bench_rerank_models.py --arch electra) on the first judged SciFact query against
         the first 32 documents: `CrossEncoder.predict`, batch size 32, against
         `cargo bench --bench rerank_models`.

Each backend's output is checked against the crate's first (embeddings: cosine >= 0.9999;
logits: within 1e-3), then the median of --rounds timed calls after a warm-up is reported, with
the ratio (the crate's throughput over the backend's).

sentence-transformers' ONNX and OpenVINO backends need optimum, which needs transformers 4.x:
run this from a virtualenv of its own, e.g.
  python3 -m venv .venv-backends
  .venv-backends/bin/pip install torch "transformers>=4.46,<5" "sentence-transformers[onnx,openvino]>=4.1,<6"
  RERANK_BENCH_BIN_EMBED=... RERANK_BENCH_BIN_RERANK=... .venv-backends/bin/python scripts/bench_st_backends.py
(RERANK_BENCH_BIN_EMBED / _RERANK: the bench executables `cargo bench --bench embed_models
--no-run` and `--bench rerank_models --no-run` print; without them the script runs cargo.)
"""
import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path

import numpy as np

from bench_common import (CARGO_FEATURES, ROOT, cpu_flags, median_seconds, run, scifact_documents,
                          scifact_first_judged_query)

MODELS = Path(os.environ.get("RERANK_MODELS_DIR", ROOT / "models"))
BACKENDS = ["torch", "onnx", "openvino"]


def ours(bench: str, env: dict) -> dict:
    binary = os.environ.get(f"RERANK_BENCH_BIN_{bench.split('_')[0].upper()}")
    cmd = [binary] if binary else ["cargo", "bench", *CARGO_FEATURES, "--bench", bench]
    out = run(cmd, env)
    return json.loads([l for l in out.splitlines() if l.startswith("{")][-1])


def embed(threads: int, rounds: int):
    from sentence_transformers import SentenceTransformer

    model = MODELS / "all-MiniLM-L6-v2"
    texts = [t.replace("\n", " ") for t in scifact_documents(64)]
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("\n".join(texts))
        texts_file = f.name
    env = dict(os.environ, RERANK_BENCH_EMBED_MODEL=str(model), RERANK_BENCH_TEXTS=texts_file,
               RERANK_BENCH_THREADS=str(threads), RAYON_NUM_THREADS=str(threads),
               RERANK_BENCH_REPEATS=str(rounds))
    line = ours("embed_models", env)
    os.unlink(texts_file)
    first = np.array(line["first"])
    rust = len(texts) / statistics.median(line["seconds"])
    print(f"embed all-MiniLM-L6-v2, {len(texts)} docs, cpu [{cpu_flags()}]: rerank {rust:.2f} docs/s")
    for backend in BACKENDS:
        st = SentenceTransformer(str(model), device="cpu", backend=backend)
        st.max_seq_length = 256
        got = st.encode(texts[: len(first)], convert_to_numpy=True)
        cos = min(float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b))) for a, b in zip(first, got))
        if cos < 0.9999:
            raise SystemExit(f"{backend}: embeddings differ from the crate's (cosine {cos})")
        seconds = median_seconds(lambda: st.encode(texts, batch_size=32, convert_to_numpy=True), rounds)
        peer = len(texts) / seconds
        print(f"  sentence-transformers backend={backend}: {peer:.2f} docs/s, rerank {rust / peer:.2f}x "
              f"(smallest cosine {cos:.7f})")
        del st


def score(threads: int, rounds: int, model: Path):
    import torch.nn as nn
    from sentence_transformers import CrossEncoder

    query = scifact_first_judged_query()
    pairs = [(query, d) for d in scifact_documents(32)]
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for q, d in pairs:
            f.write(json.dumps({"query": q, "document": d}) + "\n")
        pairs_file = f.name
    env = dict(os.environ, RERANK_BENCH_RERANK_MODEL=str(model), RERANK_BENCH_PAIRS=pairs_file,
               RERANK_BENCH_THREADS=str(threads), RAYON_NUM_THREADS=str(threads),
               RERANK_BENCH_REPEATS=str(rounds))
    line = ours("rerank_models", env)
    os.unlink(pairs_file)
    logits = np.array(line["logits"])
    rust = len(pairs) / statistics.median(line["seconds"])
    print(f"score {model.name}, {len(pairs)} pairs ({line['tokens']} tokens), cpu [{cpu_flags()}]: "
          f"rerank {rust:.2f} pairs/s")
    for backend in BACKENDS:
        ce = CrossEncoder(str(model), device="cpu", backend=backend)
        predict = lambda: ce.predict(pairs, batch_size=32, activation_fn=nn.Identity(),
                                     convert_to_numpy=True)
        diff = float(np.abs(predict() - logits).max())
        if diff > 1e-3:
            raise SystemExit(f"{backend}: logits differ from the crate's (largest difference {diff:.2e})")
        peer = len(pairs) / median_seconds(predict, rounds)
        print(f"  sentence-transformers backend={backend}: {peer:.2f} pairs/s, rerank {rust / peer:.2f}x "
              f"(largest logit difference {diff:.1e})")
        del ce


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--what", nargs="+", choices=["embed", "score"], default=["embed", "score"])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cross-encoder", default=str(MODELS / "bench-ms-marco-electra-base"))
    args = ap.parse_args()
    import sentence_transformers
    import torch
    import transformers

    torch.set_num_threads(args.threads)
    print(f"sentence-transformers {sentence_transformers.__version__}, transformers "
          f"{transformers.__version__}, torch {torch.__version__}")
    if "embed" in args.what:
        embed(args.threads, args.rounds)
    if "score" in args.what:
        score(args.threads, args.rounds, Path(args.cross_encoder))


if __name__ == "__main__":
    main()
