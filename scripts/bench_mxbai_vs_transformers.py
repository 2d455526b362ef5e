#!/usr/bin/env python3
"""Side-by-side throughput: rerank's MxbaiReranker vs mixedbread's `mxbai-rerank` package
(transformers), same machine, threads, run.

Scores the 20 documents of ~300 tokens of scripts/bench_qwen3_vs_transformers.py against its query,
with the random mxbai-rerank-base-v2-shaped model (Qwen2-0.5B: 24 layers, hidden 896, 14/2 heads, ffn
4864, vocab 151936) of `scripts/make_qwen3_bench_model.py --shape mxbai-rerank-base-v2` (made on first
use). The Python side runs twice, both on the package's own prompts (`prepare_inputs`: left padding to a
multiple of 8):
  - "package predict": `MxbaiRerankV2.predict`, as the package scores (full logits at every position,
    then [:, -1, ["1", "0"]]);
  - "last logits only": the same model call with logits_to_keep=1 (no full-vocabulary projection at
    every position), the fairest baseline for the Rust scorer, which projects only the last position
    onto W["1"] - W["0"].
The Rust side is `RERANK_BENCH_RERANKER=mxbai cargo bench --bench qwen3` in its JSON mode, one timed
call per process, with the same thread count (RAYON_NUM_THREADS too); --int8 / --bf16 add a side with
Precision::Int8 / Precision::Bf16. Sides are interleaved round by round; the speed-up is the median over
rounds of (Python seconds / Rust seconds). Times include tokenization on both sides.

Usage:
  python scripts/bench_mxbai_vs_transformers.py --threads 2 [--model DIR] [--rounds 3] [--int8] [--bf16]
The model directory defaults to $RERANK_MODELS_DIR/mxbai-base-v2-shape, else models/mxbai-base-v2-shape.
Needs torch and `mxbai-rerank` 0.1.6 with transformers 4 (the package calls
`tokenizer.prepare_for_model`, which transformers 5 removed): `pip install mxbai-rerank "transformers<5"`.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench_qwen3_vs_transformers import (
    N_DOCS, QUERY, ROOT, cpu_flags, document, init_torch, nominal_flops, rust_run,
)
from bench_common import CARGO_FEATURES, spearman

RUST = "rerank"
PACKAGE = "package predict"
LAST = "last logits only"
EXTRA = ("int8", "bf16")


def default_model():
    if os.environ.get("RERANK_MODELS_DIR"):
        return Path(os.environ["RERANK_MODELS_DIR"]) / "mxbai-base-v2-shape"
    return ROOT / "models" / "mxbai-base-v2-shape"


class Package:
    """The mxbai-rerank side: the model loaded once, one timed call per `run`."""

    def __init__(self, model_dir, threads):
        torch = self.torch = init_torch(threads)
        import transformers
        from mxbai_rerank import MxbaiRerankV2

        t = time.perf_counter()
        self.r = MxbaiRerankV2(str(model_dir), device="cpu", torch_dtype=torch.float32)
        self.load_s = time.perf_counter() - t
        self.versions = {"torch": torch.__version__, "transformers": transformers.__version__,
                         "torch_threads": torch.get_num_threads()}

    def score(self, docs, last_only):
        """Returns (l_1 - l_0 per doc, real tokens, padded tokens)."""
        r, torch = self.r, self.torch
        queries = [QUERY] * len(docs)
        inputs = r.prepare_inputs(queries, docs)
        tokens, padded = int(inputs["attention_mask"].sum()), int(inputs["input_ids"].numel())
        if last_only:
            with torch.inference_mode():
                logits = r.model(**inputs, logits_to_keep=1).logits[:, -1, :]
            out = logits[:, r.yes_loc] - logits[:, r.no_loc]
        else:
            out = r.predict(queries, docs)  # tokenizes again: the package's own call, end to end
        return [float(x) for x in out], tokens, padded

    def run(self, last_only):
        docs = [document(i) for i in range(N_DOCS)]
        t = time.perf_counter()
        logits, tokens, padded = self.score(docs, last_only)
        return time.perf_counter() - t, logits, tokens, padded


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--skip-package-predict", action="store_true")
    for p in EXTRA:
        ap.add_argument(f"--{p}", action="store_true", help=f"one more side, \"rerank {p}\"")
    args = ap.parse_args()
    model = Path(args.model) if args.model else default_model()
    if not (model / "model.safetensors").is_file():
        subprocess.run([sys.executable, str(ROOT / "scripts" / "make_qwen3_bench_model.py"),
                        "--shape", "mxbai-rerank-base-v2", "--out", str(model)], check=True)
    os.environ["RERANK_BENCH_RERANKER"] = "mxbai"
    subprocess.run(["cargo", "bench", *CARGO_FEATURES, "--bench", "qwen3", "--no-run"], cwd=ROOT, check=True)
    py = Package(model, args.threads)
    warm = [document(i) for i in range(2)]
    py.score(warm, True)

    variants = [(LAST, True)] + ([] if args.skip_package_predict else [(PACKAGE, False)])
    extra = [p for p in EXTRA if getattr(args, p)]
    times = {name: [] for name, _ in variants}
    times[RUST] = []
    for p in extra:
        times[f"{RUST} {p}"] = []
    ratios = {name: [] for name in times}
    logits, tokens, prompt_lens, rust_loads = {}, {}, None, []
    for r in range(max(1, args.rounds)):
        for name, last_only in variants:
            sec, lg, tok, padded = py.run(last_only)
            times[name].append(sec)
            logits[name], tokens[name] = lg, tok
        rust = rust_run(model, args.threads)
        times[RUST].append(rust["median_s"])
        logits[RUST], tokens[RUST] = rust["logits"], rust["prompt_tokens"]
        rust_loads.append(rust["load_s"])
        prompt_lens = rust.get("prompt_lens")
        for p in extra:
            q = rust_run(model, args.threads, precision=p)
            times[f"{RUST} {p}"].append(q["median_s"])
            logits[f"{RUST} {p}"], tokens[f"{RUST} {p}"] = q["logits"], q["prompt_tokens"]
        for name in variants:
            ratios[name[0]].append(times[name[0]][-1] / rust["median_s"])
        for p in extra:
            ratios[f"{RUST} {p}"].append(times[LAST][-1] / times[f"{RUST} {p}"][-1])
        print(json.dumps({"round": r, **{k: v[-1] for k, v in times.items()}}), flush=True)

    print(json.dumps({**py.versions, "threads": args.threads, "docs": N_DOCS, "padded_tokens": padded,
                      "tokens": tokens}))
    if tokens[RUST] != tokens[LAST]:
        print(f"WARNING: token counts differ: {tokens}")
    worst = max(abs(a - b) for a, b in zip(logits[RUST], logits[LAST]))
    print(f"max |logit difference| rust vs package: {worst:.2e}")
    for p in extra:
        q, f = logits[f"{RUST} {p}"], logits[LAST]
        print(f"{p}: Spearman with the package's logits {spearman(q, f):.4f}; max |logit difference| "
              f"{max(abs(a - b) for a, b in zip(q, f)):.3f} (logits span {min(f):.3f} .. {max(f):.3f})")
    flops = nominal_flops(model, prompt_lens) if prompt_lens else None
    print(f"cpu flags: {cpu_flags()}; threads {args.threads}")
    print(f"{'implementation':22} {'median s':>9} {'tokens/s':>9} {'GFLOP/s':>8} "
          f"{'rust speed-up (median of rounds)':>34}")
    for name, secs in times.items():
        med = statistics.median(secs)
        speedup = statistics.median(ratios[name]) if ratios[name] else 1.0
        gflops = f"{flops / med / 1e9:8.1f}" if flops else f"{'-':>8}"
        print(f"{name:22} {med:9.2f} {tokens[name] / med:9.1f} {gflops} {speedup:34.2f}")
    print(f"load seconds: rust {statistics.median(rust_loads):.2f}, package {py.load_s:.2f}")


if __name__ == "__main__":
    main()
