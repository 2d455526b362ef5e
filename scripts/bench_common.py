"""Pieces shared by the side-by-side benchmark scripts (bench_vs_sentence_transformers.py,
bench_embed_vs_st.py, bench_int8.py, the Qwen3 ones): the SciFact inputs, running cargo, and the
two timers.

RERANK_BENCH_ISA=avx2 measures the AVX2 code paths on a machine that has AVX-512 as well: cargo
builds without the crate's `avx512` feature (every kernel, gemm's included, on AVX2 + FMA), and
torch is held to AVX2 too (ATEN_CPU_CAPABILITY, MKL_ENABLE_INSTRUCTIONS, ONEDNN_MAX_CPU_ISA, set
here before any script imports torch). onnxruntime has no such switch: its figures stay AVX-512.
"""
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCIFACT = ROOT.parent / "shared" / "datasets" / "scifact"

BENCH_ISA = os.environ.get("RERANK_BENCH_ISA", "native")
if BENCH_ISA not in ("native", "avx2"):
    raise SystemExit(f"RERANK_BENCH_ISA={BENCH_ISA!r}: expected native or avx2")
if BENCH_ISA == "avx2":
    os.environ.update(ATEN_CPU_CAPABILITY="avx2", MKL_ENABLE_INSTRUCTIONS="AVX2", ONEDNN_MAX_CPU_ISA="AVX2")
    # Every feature but `avx512`.
    CARGO_FEATURES = ["--no-default-features", "--features", "models,sqlite,hf-hub,http,redis,milvus,pdf"]
else:
    CARGO_FEATURES = ["--features", "full"]
print(f"kernels: {'AVX2 + FMA (RERANK_BENCH_ISA=avx2; torch held to AVX2)' if BENCH_ISA == 'avx2' else 'native'}",
      file=sys.stderr)


def scifact_documents(limit=None):
    """The first `limit` SciFact documents (all with None) as `title + " " + text`, as the Rust
    benches and `Document::full_text` build them."""
    docs = []
    with open(SCIFACT / "corpus.jsonl") as f:
        for line in f:
            d = json.loads(line)
            docs.append(f"{d.get('title', '')} {d.get('text', '')}")
            if len(docs) == limit:
                break
    return docs


def one_line(text: str) -> str:
    return text.replace("\r", " ").replace("\n", " ")


def scifact_queries(limit: int) -> list:
    """The first `limit` SciFact queries' texts."""
    out = []
    with open(SCIFACT / "queries.jsonl") as f:
        for line in f:
            out.append(json.loads(line)["text"])
            if len(out) == limit:
                break
    return out


def cpu_flags() -> str:
    """The CPU flags a figure depends on, as /proc/cpuinfo lists them ("?" elsewhere)."""
    try:
        flags = next(l for l in open("/proc/cpuinfo") if l.startswith("flags")).split()
    except (OSError, StopIteration):
        return "?"
    keep = ["avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16"]
    return " ".join(f for f in keep if f in flags)


def add_encoder_args(ap):
    """The arguments of an encoder side-by-side: threads, rounds, how many SciFact documents and
    queries, and which role(s) to encode."""
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--docs", type=int, default=256)
    ap.add_argument("--queries", type=int, default=256)
    ap.add_argument("--role", choices=["document", "query", "both"], default="both")
    return ap


def role_texts(args) -> list:
    """(role, texts) for each role `args.role` names: the first `args.docs` SciFact documents
    and the first `args.queries` queries, each on one line."""
    sides = []
    if args.role in ("document", "both"):
        sides.append(("document", [one_line(t) for t in scifact_documents(args.docs)]))
    if args.role in ("query", "both"):
        sides.append(("query", [one_line(t) for t in scifact_queries(args.queries)]))
    return sides


def scifact_first_judged_query():
    """The text of the first SciFact query judged in qrels/test.tsv."""
    judged = {line.split("\t")[0] for line in (SCIFACT / "qrels" / "test.tsv").read_text().splitlines()[1:]}
    return next(
        q["text"]
        for q in map(json.loads, (SCIFACT / "queries.jsonl").read_text().splitlines())
        if q["_id"] in judged
    )


def run(cmd, env):
    """Runs `cmd` in the repository root; its stdout, or exit with its output on failure."""
    print("+", " ".join(cmd), file=sys.stderr)
    res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if res.returncode != 0:
        sys.stderr.write(res.stdout[-4000:] + res.stderr[-4000:])
        raise SystemExit(f"command failed ({res.returncode}): {' '.join(cmd)}")
    # The benches name the kernels they ran on (rerank::simd_isa): pass that line on.
    for line in res.stderr.splitlines():
        if line.startswith("kernels: "):
            print("  rerank " + line, file=sys.stderr)
    return res.stdout


def criterion_seconds(bench, name, env):
    """Seconds per iteration of criterion benchmark `name` in `benches/{bench}.rs` (release)."""
    out = run(["cargo", "bench", *CARGO_FEATURES, "--bench", bench, "--", "--output-format", "bencher", name],
              env)
    m = re.search(r"bench:\s+([\d,]+) ns/iter", out)
    if not m:
        raise SystemExit(f"no criterion result in:\n{out}")
    return int(m.group(1).replace(",", "")) / 1e9


def median_seconds(call, rounds):
    """The median time of `rounds` calls of `call()`, after one warm-up call."""
    call()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def first_and_median(call, rounds):
    """`(the first call's result, the median time of `rounds` more calls)`: the warm-up call's
    output is the reference the other side is checked against."""
    first = call()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return first, statistics.median(times)


def spearman(a, b):
    """Spearman's rank correlation of two lists without ties."""
    def ranks(v):
        r = [0] * len(v)
        for rank, i in enumerate(sorted(range(len(v)), key=v.__getitem__)):
            r[i] = rank
        return r
    ra, rb, n = ranks(a), ranks(b), len(a)
    return 1 - 6 * sum((x - y) ** 2 for x, y in zip(ra, rb)) / (n * (n * n - 1))


def text_bench(bench: str, texts: list, env: dict, bench_bin=None) -> dict:
    """Runs `benches/{bench}.rs` (release; or the executable `bench_bin`) on `texts`, written
    one per line to a temporary file named by RERANK_BENCH_TEXTS, with `env` added to this
    process's environment; returns the last JSON line it printed."""
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("\n".join(texts))
        texts_file = f.name
    env = dict(os.environ, RERANK_BENCH_TEXTS=texts_file, **env)
    cmd = [bench_bin] if bench_bin else ["cargo", "bench", *CARGO_FEATURES, "--bench", bench]
    try:
        out = run(cmd, env)
    finally:
        os.unlink(texts_file)
    return json.loads([l for l in out.splitlines() if l.startswith("{")][-1])
