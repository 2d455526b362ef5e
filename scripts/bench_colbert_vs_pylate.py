#!/usr/bin/env python3
"""ColBERT encoding throughput, Rust (`rerank::ColbertEncoder`) vs PyLate, same machine, same
threads, same texts, same model folder; and MaxSim scoring, `rerank::embed::maxsim` vs
`pylate.scores.colbert_scores`.

The model is colbert-minilm-l6-random under $RERANK_MODELS_DIR (default models/), written by
scripts/make_colbert_minilm.py (run here when missing): the real all-MiniLM-L6-v2 encoder
(BERT 6 x 384) with a seeded random Dense 384 -> 96 in PyLate's layout, answerai-colbert-small-
v1's settings (query_length 32, document_length 300, [unused0]/[unused1] prefixes, no attention
to the [MASK] expansion).

Texts: the first --docs SciFact documents (`title + " " + text`) encoded as documents, and the
first --queries SciFact queries (queries.jsonl) encoded as queries (each padded to 32 tokens with
[MASK]), from ../shared/datasets/scifact.
  - PyLate: `ColBERT(dir).encode(texts, is_query=..., batch_size=32)` with
    torch.set_num_threads(--threads), median of --rounds timed calls after a warm-up;
  - Rust: `cargo bench --bench colbert` (release; one process per round: load, one warm-up, one
    timed `encode` call), its JSON line; RERANK_BENCH_BIN=path runs a bench executable built
    before (`cargo bench --features full --bench colbert --no-run` prints it) without cargo.
The rounds alternate (a PyLate call, then a Rust process), so that a busy machine slows both
sides alike; each side's figure is the median of its --rounds timed calls (texts/s, ratio), and
the ratio of each side's fastest call is printed too (the least disturbed pair on a busy
machine). The load average after each role goes to stderr.
Parity, checked on the first Rust run: the same number of vectors in all (PyLate's from its
warm-up call) and for each of the first four texts, and per-token cosine >= 0.9999 on those
four. Then texts/s of each side and the ratio.

MaxSim: the first judged SciFact query against the --docs document matrices, 1 query x N
documents, each side on its own vectors: Rust `maxsim` over the list of matrices, on one thread
and over the documents on --threads rayon threads (medians of the bench's rounds); PyLate `colbert_scores(q[None], D)` on the documents padded once beforehand
(the kernel alone), and with the padding (`pad_sequence` + `colbert_scores`, what
`pylate.rank.rerank` does for a query). Scores must agree within 1e-3.

Usage (torch + pylate in this Python):
  python scripts/bench_colbert_vs_pylate.py [--threads 2] [--rounds 3] [--docs 256] [--queries 256]
"""
import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("PYLATE_SCORES_BACKEND", "torch")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import (  # noqa: E402
    ROOT, add_encoder_args, cpu_flags, one_line, role_texts, scifact_first_judged_query, text_bench)
import make_colbert_minilm  # noqa: E402

MODELS = Path(os.environ.get("RERANK_MODELS_DIR", ROOT / "models"))
MODEL = MODELS / make_colbert_minilm.NAME
BENCH_BIN = os.environ.get("RERANK_BENCH_BIN")


def rust_bench(texts: list[str], role: str, threads: int, rounds: int, maxsim_query=None,
               maxsim_rounds=50) -> dict:
    env = dict(RERANK_BENCH_COLBERT_MODEL=str(MODEL), RERANK_BENCH_ROLE=role,
               RERANK_BENCH_THREADS=str(threads), RAYON_NUM_THREADS=str(threads),
               RERANK_BENCH_REPEATS=str(rounds), RERANK_BENCH_MAXSIM_REPEATS=str(maxsim_rounds))
    if maxsim_query is not None:
        env["RERANK_BENCH_MAXSIM_QUERY"] = maxsim_query
    return text_bench("colbert", texts, env, BENCH_BIN)


def parity(role: str, ours: dict, ref: list) -> float:
    """Checks vector counts and per-token cosines; returns the smallest cosine."""
    import numpy as np

    total = sum(len(r) for r in ref)
    if ours["vectors"] != total:
        raise SystemExit(f"{role}: {ours['vectors']} vectors from rerank, {total} from PyLate")
    smallest = 1.0
    for i, (a, b) in enumerate(zip(ours["first"], ref)):
        a = np.asarray(a, dtype=np.float64)
        b = np.asarray(b, dtype=np.float64)
        if a.shape != b.shape:
            raise SystemExit(f"{role} {i}: shape {a.shape} from rerank, {b.shape} from PyLate")
        cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
        smallest = min(smallest, float(cos.min()))
    if smallest < 0.9999:
        raise SystemExit(f"{role}: vectors differ from PyLate (smallest per-token cosine {smallest})")
    return smallest


def main():
    ap = add_encoder_args(argparse.ArgumentParser(description=__doc__.splitlines()[0]))
    ap.add_argument("--maxsim-rounds", type=int, default=50)
    args = ap.parse_args()

    if not (MODEL / "modules.json").exists():
        print(f"writing {MODEL}", file=sys.stderr)
        make_colbert_minilm.make(MODEL)

    import numpy as np
    import pylate
    import torch
    from pylate import models
    from pylate.scores import colbert_scores

    torch.set_num_threads(args.threads)
    model = models.ColBERT(str(MODEL), device="cpu")
    sides = role_texts(args)
    maxsim_query = one_line(scifact_first_judged_query())

    rows, maxsim = [], None
    for role, texts in sides:
        is_query = role == "query"
        encode = lambda: model.encode(texts, is_query=is_query, batch_size=32,
                                      show_progress_bar=False)
        ref = encode()  # the warm-up
        # Interleaved: each round times one PyLate call, then one Rust process (load, a
        # warm-up, one timed call), so that both sides see the same background load.
        py_times, rs_times, rs_maxsim, rs_maxsim_par, ours = [], [], [], [], None
        for r in range(args.rounds):
            t = time.perf_counter()
            encode()
            py_times.append(time.perf_counter() - t)
            run_r = rust_bench(texts, role, args.threads, 1,
                               maxsim_query if role == "document" else None, args.maxsim_rounds)
            rs_times += run_r["seconds"]
            rs_maxsim += run_r.get("maxsim_seconds", [])
            rs_maxsim_par += run_r.get("maxsim_parallel_seconds", [])
            if ours is None:  # parity before any more timing
                ours, cos = run_r, parity(role, run_r, ref)
        py_seconds = statistics.median(py_times)
        rs_seconds = statistics.median(rs_times)
        n = len(texts)
        print(f"{role}: rerank {[round(x, 3) for x in rs_times]} s, PyLate "
              f"{[round(x, 3) for x in py_times]} s, load average {os.getloadavg()[0]:.2f}",
              file=sys.stderr)
        # Where the time goes: PyLate's tokenization alone (model.tokenize, batches of 32).
        t = time.perf_counter()
        for i in range(0, n, 32):
            model.tokenize(texts[i:i + 32], is_query=is_query)
        py_tokenize = time.perf_counter() - t
        rows.append((role, n, ours["tokens"], ours["vectors"], n / rs_seconds, n / py_seconds,
                     py_seconds / rs_seconds, min(py_times) / min(rs_times), cos, rs_seconds, py_seconds,
                     ours["tokenize_seconds"], py_tokenize))

        if role == "document":
            q = torch.from_numpy(np.asarray(model.encode([maxsim_query], is_query=True,
                                                         show_progress_bar=False)[0]))
            docs = [torch.from_numpy(np.asarray(d)) for d in ref]
            padded = torch.nn.utils.rnn.pad_sequence(docs, batch_first=True, padding_value=0)

            def kernel():
                return colbert_scores(q.unsqueeze(0), padded)[0]

            def with_padding():
                p = torch.nn.utils.rnn.pad_sequence(docs, batch_first=True, padding_value=0)
                return colbert_scores(q.unsqueeze(0), p)[0]

            timed = {}
            for name, call in (("kernel", kernel), ("pad", with_padding)):
                scores = call()
                ts = []
                for _ in range(args.maxsim_rounds):
                    t = time.perf_counter()
                    call()
                    ts.append(time.perf_counter() - t)
                timed[name] = statistics.median(ts)
            diff = float(np.abs(np.asarray(ours["maxsim_scores"]) - scores.numpy()).max())
            if diff > 1e-3:
                raise SystemExit(f"MaxSim scores differ from PyLate's by {diff}")
            maxsim = (n, padded.shape[1], statistics.median(rs_maxsim),
                      statistics.median(rs_maxsim_par), timed["kernel"], timed["pad"], diff)

    print(f"\nColBERT {MODEL.name} (BERT 6 x 384, Dense 384 -> 96), f32, {args.threads} threads, "
          f"cpu [{cpu_flags()}], {platform.processor() or platform.machine()}; "
          f"pylate {pylate.__version__}, torch {torch.__version__}")
    print("| role | texts | tokens | vectors | rerank texts/s | PyLate texts/s | ratio | ratio of best rounds | min cos |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for role, n, tokens, vectors, rs, py, ratio, best, cos, *_ in rows:
        print(f"| {role} | {n} | {tokens} | {vectors} | {rs:.1f} | {py:.1f} | {ratio:.2f}x | {best:.2f}x | {cos:.7f} |")
    print("\nTime per call (median) and its tokenization alone (rerank: one text at a time, one thread;"
          " PyLate: model.tokenize in batches of 32):")
    for role, n, *_, rs_s, py_s, rs_tok, py_tok in rows:
        print(f"  {role}: rerank {rs_s:.3f} s (tokenize {rs_tok:.3f} s), "
              f"PyLate {py_s:.3f} s (tokenize {py_tok:.3f} s)")
    if maxsim:
        n, width, rs, rs_par, kern, pad, diff = maxsim
        print(f"\nMaxSim, 1 query (32 vectors) x {n} documents (padded to {width} for PyLate), "
              f"median of {args.maxsim_rounds} (ratios: PyLate's time / rerank's {args.threads} threads'):")
        print(f"  rerank maxsim per document, 1 thread            {rs * 1e3:8.3f} ms")
        print(f"  rerank maxsim per document, {args.threads} threads (rayon)  {rs_par * 1e3:8.3f} ms")
        print(f"  PyLate colbert_scores on padded docs            {kern * 1e3:8.3f} ms  ({kern / rs_par:.2f}x)")
        print(f"  PyLate pad_sequence + colbert_scores            {pad * 1e3:8.3f} ms  ({pad / rs_par:.2f}x)")
        print(f"  largest score difference {diff:.2e}")


if __name__ == "__main__":
    main()
