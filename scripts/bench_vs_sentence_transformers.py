#!/usr/bin/env python3
"""Cross-encoder throughput, Rust vs sentence-transformers, side by side in one run.

Both rerank the same 100 SciFact documents for one query (the first query judged in
qrels/test.tsv; documents = the first 100 corpus lines as `title + " " + text`) with the same
model directory and the same thread count, on this machine, one after the other:

  - Rust: `cargo bench --bench cross_encoder` (criterion, release build), read in bencher format;
  - Python: `CrossEncoder(model).predict(pairs)` (batch_size 32, sentence-transformers' default),
    median of --rounds timed calls after a warm-up.

Before timing it checks that both sides compute the same logits (the `rerank score` CLI on the
same pairs), so the comparison is between equal computations.

Usage (from the repository root, with torch + sentence-transformers installed, e.g. in
./.venv-bench):
  python scripts/make_ce_minilm.py            # once: models/ce-minilm-l6-random
  python scripts/bench_vs_sentence_transformers.py [--threads 2] [--rounds 10]
"""
import argparse
import json
import os
import tempfile
from pathlib import Path

from bench_common import CARGO_FEATURES, ROOT, criterion_seconds, median_seconds, run, scifact_documents, scifact_first_judged_query

DOCS = 100


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(Path(os.environ.get("RERANK_MODELS_DIR", ROOT / "models"))
                                            / "ce-minilm-l6-random"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    model = str((ROOT / args.model).resolve())
    query, docs = scifact_first_judged_query(), scifact_documents(DOCS)
    pairs = [(query, d) for d in docs]

    env = dict(os.environ)
    t = str(args.threads)
    env.update(RERANK_BENCH_THREADS=t, RAYON_NUM_THREADS=t)

    # 1. Same computation on both sides: logits from the Rust CLI vs sentence-transformers.
    import torch
    from sentence_transformers import CrossEncoder

    torch.set_num_threads(args.threads)
    ce = CrossEncoder(model, device="cpu")
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for q, d in pairs:
            f.write(json.dumps({"query": q, "document": d}) + "\n")
        pairs_file = f.name
    out = run(["cargo", "run", "--quiet", "--release", *CARGO_FEATURES, "--example", "rerank", "--", "score",
               "--model", model, "--input", pairs_file, "--raw", "--threads", t], env)
    os.unlink(pairs_file)
    rust_logits = [json.loads(line)["logit"] for line in out.splitlines() if line.strip()]
    import torch.nn as nn

    py_logits = ce.predict(pairs, activation_fn=nn.Identity(), batch_size=32)
    diff = max(abs(a - float(b)) for a, b in zip(rust_logits, py_logits))
    print(f"max |logit(rust) - logit(sentence-transformers)| over {len(pairs)} pairs: {diff:.2e}")
    if len(rust_logits) != len(pairs) or diff > 1e-3:
        raise SystemExit("the two sides do not compute the same logits; not comparing speed")

    # 2. Rust throughput (criterion: seconds per iteration of 100 pairs).
    rust_s = criterion_seconds("cross_encoder", f"scifact_100docs_default_t{t}", env)
    rust_pps = DOCS / rust_s

    # 3. sentence-transformers throughput.
    py_s = median_seconds(lambda: ce.predict(pairs, batch_size=32), args.rounds)
    py_pps = DOCS / py_s

    import sentence_transformers

    flags = sorted({f for line in open("/proc/cpuinfo") if line.startswith("flags") for f in line.split()
                    if f in ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni")})
    print(f"cpu flags: {' '.join(flags)}")
    print(f"threads {args.threads}; torch {torch.__version__}, sentence-transformers "
          f"{sentence_transformers.__version__}, torch threads {torch.get_num_threads()}")
    print(f"rust                  : {rust_pps:8.1f} pairs/s  ({rust_s * 1e3:.0f} ms per 100 pairs)")
    print(f"sentence-transformers : {py_pps:8.1f} pairs/s  ({py_s * 1e3:.0f} ms per 100 pairs, "
          f"median of {args.rounds})")
    print(f"ratio rust / python   : {rust_pps / py_pps:.2f}")


if __name__ == "__main__":
    main()
