#!/usr/bin/env python3
"""Embedding throughput, Rust vs sentence-transformers, side by side in one run.

Both embed the same 256 SciFact documents (the first 256 lines of corpus.jsonl as
`title + " " + text`) with all-MiniLM-L6-v2 from the same directory and the same thread count,
on this machine, one after the other:

  - Rust: `cargo bench --bench embed` (criterion, release build), read in bencher format;
  - Python: `SentenceTransformer(model).encode(docs)` (batch_size 32, its default; it also sorts
    by length), median of --rounds timed calls after a warm-up.

Before timing it checks that both sides compute the same embeddings (the `rerank embed` CLI on
the same texts, cosine >= 0.9999 for every document), so the comparison is between equal
computations.

With --corpus it then embeds the whole SciFact corpus (5,183 documents) once on each side:
Rust as `rerank beir --retriever dense` does it (its `index_seconds`: one `embed` call over the
corpus, plus building the index), Python as one `encode` call over the same texts.

Usage (from the repository root, with torch + sentence-transformers installed, e.g. in
./.venv-bench):
  scripts/fetch_minilm.sh                   # once: models/all-MiniLM-L6-v2
  python scripts/bench_embed_vs_st.py [--threads 2] [--rounds 5] [--corpus]
"""
import argparse
import json
import os
import tempfile
import time

from bench_common import CARGO_FEATURES, ROOT, SCIFACT, criterion_seconds, median_seconds, run, scifact_documents

DOCS = 256


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_models = os.environ.get("RERANK_MODELS_DIR", "models")
    ap.add_argument("--model", default=f"{default_models}/all-MiniLM-L6-v2")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--corpus", action="store_true",
                    help="also embed the whole SciFact corpus once on each side")
    args = ap.parse_args()
    model = str((ROOT / args.model).resolve())
    docs = scifact_documents(DOCS)

    env = dict(os.environ)
    t = str(args.threads)
    env.update(RERANK_BENCH_THREADS=t, RAYON_NUM_THREADS=t)

    # 1. Same computation on both sides: embeddings from the Rust CLI vs sentence-transformers.
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(args.threads)
    st = SentenceTransformer(model, device="cpu")
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for d in docs:
            f.write(json.dumps({"text": d}) + "\n")
        texts_file = f.name
    out = run(["cargo", "run", "--quiet", "--release", *CARGO_FEATURES, "--example", "rerank", "--", "embed",
               "--model", model, "--input", texts_file, "--threads", t], env)
    os.unlink(texts_file)
    rust = np.array([json.loads(line)["embedding"] for line in out.splitlines() if line.strip()])
    py = st.encode(docs, batch_size=32, convert_to_numpy=True)
    if rust.shape != py.shape:
        raise SystemExit(f"shapes differ: rust {rust.shape}, python {py.shape}")
    cos = (rust * py).sum(1) / (np.linalg.norm(rust, axis=1) * np.linalg.norm(py, axis=1))
    print(f"min cosine(rust, sentence-transformers) over {len(docs)} documents: {cos.min():.7f}")
    if cos.min() < 0.9999:
        raise SystemExit("the two sides do not compute the same embeddings; not comparing speed")

    # 2. Rust throughput (criterion: seconds per iteration of DOCS documents).
    rust_s = criterion_seconds("embed", f"scifact_{DOCS}docs_default_t{t}", env)
    rust_dps = DOCS / rust_s

    # 3. sentence-transformers throughput.
    py_s = median_seconds(lambda: st.encode(docs, batch_size=32), args.rounds)
    py_dps = DOCS / py_s

    import sentence_transformers

    print(f"threads {args.threads}; torch {torch.__version__}, sentence-transformers "
          f"{sentence_transformers.__version__}, torch threads {torch.get_num_threads()}")
    print(f"rust                  : {rust_dps:8.1f} docs/s  ({rust_s:.2f} s per {DOCS} docs)")
    print(f"sentence-transformers : {py_dps:8.1f} docs/s  ({py_s:.2f} s per {DOCS} docs, "
          f"median of {args.rounds})")
    print(f"ratio rust / python   : {rust_dps / py_dps:.2f}")

    if args.corpus:
        corpus(model, t, st, env)


def corpus(model, threads, st, env):
    """One pass over the whole SciFact corpus on each side."""
    out = run(["cargo", "run", "--quiet", "--release", *CARGO_FEATURES, "--example", "rerank", "--", "beir",
               "--data", str(SCIFACT), "--retriever", "dense", "--model", model, "--threads", threads,
               "--json"], env)
    report = json.loads(out.strip().splitlines()[-1])
    n, rust_s = report["docs"], report["index_seconds"]
    texts = scifact_documents()
    start = time.perf_counter()
    st.encode(texts, batch_size=32)
    py_s = time.perf_counter() - start
    print(f"whole corpus ({n} docs), one pass each:")
    print(f"rust                  : {n / rust_s:8.1f} docs/s  ({rust_s:.1f} s, index_seconds of "
          f"beir --retriever dense; nDCG@10 {report['ndcg@10']:.4f})")
    print(f"sentence-transformers : {len(texts) / py_s:8.1f} docs/s  ({py_s:.1f} s)")
    print(f"ratio rust / python   : {(n / rust_s) / (len(texts) / py_s):.2f}")


if __name__ == "__main__":
    main()
