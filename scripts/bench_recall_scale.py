#!/usr/bin/env python3
"""BM25 at 10k / 100k / 1M documents: ours, tantivy and bm25s side by side, same run.

    python scripts/bench_recall_scale.py [--sizes 10000,100000,1000000] [--threads 2]
        [--engines rerank,tantivy,bm25s] [--analysis english|whitespace] [--cli] [--out FILE]

For every size: the synthetic collection of `scripts/make_zipf_corpus.py` (seed 14, 1,000
queries; generated into $RERANK_SCALE_DIR, default `$HOME/.cache/rerank/zipf`, when missing),
then each engine in its own process (so peak memory is its own), in the same order:

- rerank: `benches/recall_scale.rs` (`cargo bench --no-default-features --bench recall_scale`),
  `Bm25Index` with the analysis of `--analysis`, k1 1.2, b 0.75;
- tantivy: `scripts/tantivy_peer` (its own package, built in $RERANK_TANTIVY_TARGET, default
  `$CARGO_TARGET_DIR/tantivy-peer`; the same analysis, tantivy's fixed k1 1.2 / b 0.75, in
  RAM, an OR of the query terms);
- bm25s: `method="lucene"`, k1 1.2, b 0.75, whitespace tokens (bm25s has no Snowball stemmer
  of its own here: it runs only with `--analysis whitespace`), in the virtualenv
  $RERANK_BENCH_VENV (default `$HOME/.cache/rerank/venv-bench`; created with `pip install
  bm25s numpy` when missing).

`--analysis english` (the default) is the user's path: `EnglishAnalyzer` (lower-case, tokens of
two or more word characters, Lucene's English stopwords, Snowball English) on our side,
tantivy's simple tokenizer, lower-caser, English stopwords (the same 33) and Snowball English
stemmer on its side. `whitespace` splits on spaces on every side (the synthetic corpus needs no
analysis). Build seconds include reading and parsing the JSON lines on both sides (ours also
reports `load_seconds` and `index_seconds` apart). With `--cli`, `rerank beir --retriever bm25
--k1 1.2 --b 0.75 --json` (English analysis) runs too and its `index_seconds`,
`load_seconds` and peak memory are printed next to the bench's.

Each reports index build seconds, top-10 latency on one thread (p50, p99; each query's best of
$RERANK_SCALE_REPEAT passes, default 3, since a shared machine preempts), queries/s with the
1,000 queries split over `--threads` threads, and peak resident memory. The script prints
ratios (ours / peer), the share of queries whose top-10 scores equal bm25s' (to 1e-5 relative)
and our pruned top 10 against exhaustive scoring (ids and score bits). Timings on a shared
machine are noisy: compare ratios from the same run.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOME = os.path.expanduser("~")
SCALE_DIR = os.environ.get("RERANK_SCALE_DIR", os.path.join(HOME, ".cache", "rerank", "zipf"))
VENV = os.environ.get("RERANK_BENCH_VENV", os.path.join(HOME, ".cache", "rerank", "venv-bench"))


def venv_python() -> str:
    py = os.path.join(VENV, "bin", "python")
    if not os.path.exists(py):
        subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
        subprocess.run([py, "-m", "pip", "install", "-q", "bm25s", "numpy"], check=True)
    return py


def corpus(docs: int) -> str:
    out = os.path.join(SCALE_DIR, f"{docs // 1000}k")
    if not os.path.exists(os.path.join(out, "qrels", "test.tsv")):
        subprocess.run(
            [venv_python(), os.path.join(ROOT, "scripts", "make_zipf_corpus.py"), "--docs", str(docs),
             "--queries", "1000", "--out", out],
            check=True,
        )
    return out


def cargo_executable(args: list, env: dict) -> str:
    """Builds with `cargo ... --message-format=json` and returns the executable it produced."""
    res = subprocess.run(args + ["--message-format=json"], cwd=ROOT, env=env, check=True,
                         stdout=subprocess.PIPE, text=True)
    exe = None
    for line in res.stdout.splitlines():
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if msg.get("reason") == "compiler-artifact" and msg.get("executable"):
            exe = msg["executable"]
    if not exe:
        raise SystemExit(f"no executable from {' '.join(args)}")
    return exe


def bm25s_side(data: str, threads: int, out: str) -> None:
    """Runs inside the virtualenv: bm25s over whitespace tokens."""
    import resource

    import bm25s
    import numpy as np

    ids, toks = [], []
    with open(os.path.join(data, "corpus.jsonl")) as f:
        for line in f:
            d = json.loads(line)
            ids.append(d["_id"])
            toks.append((d.get("title", "") + " " + d["text"]).split())
    queries = []
    with open(os.path.join(data, "queries.jsonl")) as f:
        for line in f:
            queries.append(json.loads(line)["text"].split())
    t = time.perf_counter()
    retriever = bm25s.BM25(method="lucene", k1=1.2, b=0.75)
    retriever.index(toks, show_progress=False)
    build = time.perf_counter() - t
    del toks
    for q in queries[:50]:
        retriever.retrieve([q], k=10, show_progress=False, n_threads=1)
    repeat = max(1, int(os.environ.get("RERANK_SCALE_REPEAT", "3")))
    lat, tops = [float("inf")] * len(queries), []
    for p in range(repeat):
        for i, q in enumerate(queries):
            t = time.perf_counter()
            docs, scores = retriever.retrieve([q], k=10, show_progress=False, n_threads=1)
            lat[i] = min(lat[i], (time.perf_counter() - t) * 1e3)
            if p == 0:
                tops.append([(ids[int(d)], float(s)) for d, s in zip(docs[0], scores[0]) if s > 0])
    t = time.perf_counter()
    retriever.retrieve(queries, k=10, show_progress=False, n_threads=threads)
    qps = len(queries) / (time.perf_counter() - t)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    json.dump({"engine": "bm25s", "docs": len(ids), "threads": threads, "build_seconds": build,
               "latency_ms": lat, "qps": qps, "peak_rss_mb": peak, "top10": tops,
               "numpy": np.__version__, "bm25s": bm25s.__version__}, open(out, "w"))


def pct(xs: list, p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


def same_scores(a: list, b: list) -> bool:
    if len(a) != len(b):
        return False
    return all(abs(x[1] - y[1]) <= 1e-5 * max(abs(x[1]), abs(y[1]), 1e-9) for x, y in zip(a, b))


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--bm25s-side":
        bm25s_side(sys.argv[2], int(sys.argv[3]), sys.argv[4])
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--engines", default="rerank,tantivy,bm25s")
    ap.add_argument("--analysis", default="english", choices=["english", "whitespace"])
    ap.add_argument("--cli", action="store_true", help="also run `rerank beir --retriever bm25`")
    ap.add_argument("--out", default=None, help="write the summary JSON here")
    args = ap.parse_args()
    engines = args.engines.split(",")
    if args.analysis != "whitespace" and "bm25s" in engines:
        print("bm25s runs on whitespace tokens only: left out of --analysis english", file=sys.stderr)
        engines.remove("bm25s")
    env = dict(os.environ)
    target = env.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    ours = cargo_executable(["cargo", "bench", "--no-default-features", "--bench", "recall_scale", "--no-run"], env)
    cli = None
    if args.cli:
        cli = cargo_executable(["cargo", "build", "--release", "--no-default-features", "--features", "sqlite",
                                "--example", "rerank"], env)
    peer = None
    if "tantivy" in engines:
        env_t = dict(env, CARGO_TARGET_DIR=env.get("RERANK_TANTIVY_TARGET", os.path.join(target, "tantivy-peer")))
        peer = cargo_executable(["cargo", "build", "--release", "--manifest-path",
                                 os.path.join(ROOT, "scripts", "tantivy_peer", "Cargo.toml")], env_t)
    cpu = subprocess.run("grep -o -w 'avx2\\|avx512f\\|avx512_vnni\\|avx_vnni\\|fma' /proc/cpuinfo | sort -u",
                         shell=True, stdout=subprocess.PIPE, text=True).stdout.split()
    summary = {"threads": args.threads, "analysis": args.analysis, "cpu_flags": cpu, "nproc": os.cpu_count(),
               "sizes": []}
    for n in [int(s) for s in args.sizes.split(",")]:
        data = corpus(n)
        res = {}
        with tempfile.TemporaryDirectory() as tmp:
            for engine in engines:
                out = os.path.join(tmp, f"{engine}.json")
                if engine == "rerank":
                    cmd = [ours, "bm25", data, str(args.threads), out, args.analysis]
                elif engine == "tantivy":
                    cmd = [peer, data, str(args.threads), out, args.analysis]
                else:
                    cmd = [venv_python(), os.path.abspath(__file__), "--bm25s-side", data, str(args.threads), out]
                t = time.perf_counter()
                subprocess.run(cmd, check=True, env=env)
                r = json.load(open(out))
                r["wall_seconds"] = time.perf_counter() - t
                res[engine] = r
        row = {"docs": n, "analysis": args.analysis}
        if cli:
            env_cli = dict(env, RAYON_NUM_THREADS=str(args.threads))
            t = time.perf_counter()
            p = subprocess.run([cli, "beir", "--data", data, "--retriever", "bm25", "--k1", "1.2", "--b", "0.75",
                                "--json"], env=env_cli, check=True, stdout=subprocess.PIPE, text=True)
            c = json.loads(p.stdout.strip().splitlines()[-1])
            row["cli"] = {"load_seconds": round(c["load_seconds"], 3), "index_seconds": round(c["index_seconds"], 3),
                          "load_plus_index": round(c["load_seconds"] + c["index_seconds"], 3),
                          "peak_rss_mb": c.get("peak_rss_mb"), "wall_seconds": round(time.perf_counter() - t, 1)}
        for engine, r in res.items():
            row[engine] = {
                "build_seconds": round(r["build_seconds"], 3),
                "build_docs_per_s": round(n / r["build_seconds"]),
                "p50_ms": round(pct(r["latency_ms"], 50), 4),
                "p99_ms": round(pct(r["latency_ms"], 99), 4),
                "qps": round(r["qps"], 1),
                "peak_rss_mb": round(r["peak_rss_mb"], 1),
            }
        if "rerank" in res:
            r = res["rerank"]
            row["rerank"]["load_seconds"] = round(r["load_seconds"], 3)
            row["rerank"]["index_seconds"] = round(r["index_seconds"], 3)
            row["rerank"]["exhaustive_equal"] = f'{r["exhaustive_equal"]}/{r["exhaustive_queries"]}'
            row["rerank"]["postings_mb"] = round(r["postings_mb"], 1)
            for peer_name in ("tantivy", "bm25s"):
                if peer_name in res:
                    p = row[peer_name]
                    row[f"vs_{peer_name}"] = {
                        "p50": round(p["p50_ms"] / row["rerank"]["p50_ms"], 2),
                        "p99": round(p["p99_ms"] / row["rerank"]["p99_ms"], 2),
                        "qps": round(row["rerank"]["qps"] / p["qps"], 2),
                        "build": round(p["build_seconds"] / row["rerank"]["build_seconds"], 2),
                    }
            if "bm25s" in res:
                same = sum(same_scores(a, b) for a, b in zip(r["top10"], res["bm25s"]["top10"]))
                row["vs_bm25s"]["identical_top10_scores"] = f"{same}/{len(r['top10'])}"
        print(json.dumps(row), flush=True)
        summary["sizes"].append(row)
    if args.out:
        json.dump(summary, open(args.out, "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
