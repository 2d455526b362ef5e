#!/usr/bin/env python3
"""Learned sparse encoding throughput, Rust (`rerank::SparseEncoder`) vs sentence-transformers'
`SparseEncoder`, same machine, same threads, same texts, same model folder.

The model is splade-minilm-l6-random under $RERANK_MODELS_DIR (default models/), written by
scripts/make_splade_minilm.py (run here when missing): the real all-MiniLM-L6-v2 encoder with
a seeded random MLM head over the 30,522-token vocabulary, SpladePooling max + relu (naver/
splade-v3's layout), max_seq_length 256.

Texts: the first --docs SciFact documents (`title + " " + text`) encoded as documents and the
first --queries SciFact queries encoded as queries, from ../shared/datasets/scifact.
  - sentence-transformers: `model.encode_document(texts, batch_size=32)` (and
    `encode_query`), its default sparse tensor output, torch.set_num_threads(--threads);
  - Rust: `cargo bench --bench sparse` (release; one process per round: load, one warm-up,
    one timed `encode` call), its JSON line; RERANK_BENCH_BIN=path runs a bench executable
    built before (`cargo bench --features full --bench sparse --no-run` prints it).
The rounds alternate (a Python call, then a Rust process), so that a busy machine slows both
sides alike; each side's figure is the median of its --rounds timed calls, and the ratio of
each side's fastest call is printed too.
Parity, checked on the first Rust run: for the first four texts, the same non-zero ids and
values within 1e-4 (relative above 1) of sentence-transformers' dense output.

Usage (torch + sentence-transformers >= 6 in this Python):
  python scripts/bench_splade_vs_st.py [--threads 2] [--rounds 3] [--docs 256] [--queries 256]
"""
import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import add_encoder_args, cpu_flags, role_texts, text_bench  # noqa: E402
import make_splade_minilm  # noqa: E402

MODEL = make_splade_minilm.MODELS / make_splade_minilm.NAME
BENCH_BIN = os.environ.get("RERANK_BENCH_BIN")


def rust_bench(texts: list[str], role: str, threads: int) -> dict:
    env = dict(RERANK_BENCH_SPARSE_MODEL=str(MODEL), RERANK_BENCH_ROLE=role,
               RERANK_BENCH_THREADS=str(threads), RAYON_NUM_THREADS=str(threads),
               RERANK_BENCH_REPEATS="1")
    return text_bench("sparse", texts, env, BENCH_BIN)


def parity(role: str, ours: dict, dense) -> float:
    """Checks the first vectors' ids and values; returns the largest value error."""
    import numpy as np

    largest = 0.0
    for i, (got, want) in enumerate(zip(ours["first"], dense)):
        want = np.asarray(want, dtype=np.float64)
        ids = np.nonzero(want)[0]
        if list(ids) != got["indices"]:
            raise SystemExit(f"{role} {i}: ids differ ({len(got['indices'])} from rerank, "
                             f"{len(ids)} from sentence-transformers)")
        err = np.abs(np.asarray(got["values"]) - want[ids]) / np.maximum(np.abs(want[ids]), 1.0)
        largest = max(largest, float(err.max(initial=0.0)))
    if largest > 1e-4:
        raise SystemExit(f"{role}: values differ from sentence-transformers by {largest}")
    return largest


def main():
    args = add_encoder_args(argparse.ArgumentParser(description=__doc__.splitlines()[0])).parse_args()

    if not (MODEL / "modules.json").exists():
        print(f"writing {MODEL}", file=sys.stderr)
        make_splade_minilm.make(MODEL)

    import sentence_transformers
    import torch
    from sentence_transformers import SparseEncoder

    torch.set_num_threads(args.threads)
    model = SparseEncoder(str(MODEL), device="cpu")
    sides = role_texts(args)

    rows = []
    for role, texts in sides:
        encode = model.encode_document if role == "document" else model.encode_query
        dense = encode(texts[:4], convert_to_tensor=True, convert_to_sparse_tensor=False)
        encode(texts, batch_size=32)  # warm-up
        py, rs, checked = [], [], None
        for _ in range(args.rounds):
            t = time.perf_counter()
            encode(texts, batch_size=32)
            py.append(time.perf_counter() - t)
            ours = rust_bench(texts, role, args.threads)
            rs.append(ours["seconds"][0])
            if checked is None:
                checked = parity(role, ours, dense.tolist())
            print(f"  {role}: sentence-transformers {py[-1]:.3f} s, rerank {rs[-1]:.3f} s; "
                  f"load average {os.getloadavg()[0]:.2f}", file=sys.stderr)
        n = len(texts)
        rows.append({
            "role": role, "texts": n, "tokens": ours["tokens"],
            "mean_nonzero": ours["mean_nonzero"],
            "st_texts_per_s": n / statistics.median(py),
            "rerank_texts_per_s": n / statistics.median(rs),
            "ratio_median": statistics.median(py) / statistics.median(rs),
            "ratio_best": min(py) / min(rs),
            "largest_value_error": checked,
        })
    print(json.dumps({
        "machine": platform.processor() or platform.machine(), "cpu_flags": cpu_flags(),
        "threads": args.threads, "torch": torch.__version__,
        "sentence_transformers": sentence_transformers.__version__, "rows": rows,
    }, indent=1))
    for r in rows:
        print(f"{r['role']:>8}: {r['texts']} texts, {r['tokens']} tokens; sentence-transformers "
              f"{r['st_texts_per_s']:.1f}/s, rerank {r['rerank_texts_per_s']:.1f}/s: "
              f"{r['ratio_median']:.2f}x (best {r['ratio_best']:.2f}x)")


if __name__ == "__main__":
    main()
