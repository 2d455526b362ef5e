#!/usr/bin/env python3
"""Side-by-side throughput: rerank's Qwen3Reranker (candle) vs transformers, same machine, threads, run.

Scores 20 documents of ~300 tokens against one query with the Qwen3-Reranker prompt, using the random
0.6B-shaped model from scripts/make_qwen3_bench_model.py. transformers runs twice:
  - "model card": the official Qwen3-Reranker code path (left padding, full logits, then [:, -1, [no, yes]]);
  - "last logits only": the same with logits_to_keep=1 (no full-vocabulary projection at every position),
    the fairest baseline for the Rust scorer, which projects only the last position onto W[yes] - W[no].
Then it runs `cargo bench --bench qwen3` in its JSON mode (RERANK_BENCH_JSON=1) with the same thread
count, checks that both sides saw the same token counts and close logits, and prints tokens/s and ratios.

Usage:
  python scripts/bench_qwen3_vs_transformers.py --threads 2 [--model models/qwen3-0.6b-shape]
      [--repeats 3] [--skip-rust]
Needs torch and transformers (CPU is enough). Times include tokenization on both sides.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The same recipe as benches/qwen3.rs.
WORDS = ("the server process memory leak grows slowly over days until the kernel kills it because "
         "allocations in a cache are never released and references keep objects alive while background "
         "threads retain buffers connection pools hold sockets logs show garbage collection pauses heap "
         "profiles reveal fragmentation after deployments restart workers periodically").split()
QUERY = "What causes memory leaks in long-running server processes?"
INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"
N_DOCS, N_WORDS = 20, 300
PREFIX = ("<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the "
          "Instruct provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n")
SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
MAX_LENGTH = 8192


def document(i):
    n = len(WORDS)
    return " ".join(WORDS[(i * 7 + j * 13 + (j * j) % 5) % n] for j in range(N_WORDS)) + "."


def transformers_side(model_dir, threads, repeats):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    tok = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
    t = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    load_s = time.perf_counter() - t
    yes, no = tok.convert_tokens_to_ids("yes"), tok.convert_tokens_to_ids("no")
    prefix = tok.encode(PREFIX, add_special_tokens=False)
    suffix = tok.encode(SUFFIX, add_special_tokens=False)
    docs = [document(i) for i in range(N_DOCS)]

    def score(last_only):
        bodies = [f"<Instruct>: {INSTRUCTION}\n<Query>: {QUERY}\n<Document>: {d}" for d in docs]
        enc = tok(bodies, padding=False, truncation="longest_first", return_attention_mask=False,
                  max_length=MAX_LENGTH - len(prefix) - len(suffix))
        enc["input_ids"] = [prefix + ids + suffix for ids in enc["input_ids"]]
        enc = tok.pad(enc, padding=True, return_tensors="pt")
        with torch.inference_mode():
            if last_only:
                logits = model(**enc, logits_to_keep=1).logits[:, -1, :]
            else:
                logits = model(**enc).logits[:, -1, :]
        diff = logits[:, yes] - logits[:, no]
        return diff, int(enc["attention_mask"].sum()), int(enc["input_ids"].numel())

    results = {}
    for name, last_only in [("model card", False), ("last logits only", True)]:
        diff, tokens, padded = score(last_only)  # warm-up
        seconds = []
        for _ in range(repeats):
            t = time.perf_counter()
            score(last_only)
            seconds.append(time.perf_counter() - t)
        median = statistics.median(seconds)
        results[name] = {
            "impl": f"transformers ({name})", "threads": threads, "docs": N_DOCS, "prompt_tokens": tokens,
            "padded_tokens": padded, "load_s": load_s, "seconds": seconds, "median_s": median,
            "tokens_per_s": tokens / median, "logits": [float(x) for x in diff],
        }
    import transformers
    versions = {"torch": torch.__version__, "transformers": transformers.__version__,
                "torch_threads": torch.get_num_threads()}
    return results, versions


def rust_side(model_dir, threads, repeats):
    env = dict(os.environ)
    env.update({
        "RERANK_BENCH_JSON": "1", "RERANK_BENCH_REPEATS": str(repeats), "RERANK_BENCH_THREADS": str(threads),
        "RAYON_NUM_THREADS": str(threads), "RERANK_QWEN3_BENCH_MODEL": str(Path(model_dir).resolve()),
    })
    out = subprocess.run(["cargo", "bench", "--all-features", "--bench", "qwen3"], cwd=ROOT, env=env,
                         check=True, stdout=subprocess.PIPE, text=True).stdout
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if not lines:
        sys.exit(f"no JSON line from the Rust bench; its output was:\n{out}")
    return json.loads(lines[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(ROOT / "models" / "qwen3-0.6b-shape"))
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip-rust", action="store_true")
    args = ap.parse_args()

    py, versions = transformers_side(args.model, args.threads, args.repeats)
    rows = list(py.values())
    if not args.skip_rust:
        rust = rust_side(args.model, args.threads, args.repeats)
        rows.append(rust)
    for r in rows:
        print(json.dumps({k: v for k, v in r.items() if k != "logits"}))
    print(json.dumps(versions))
    if not args.skip_rust:
        ref = py["last logits only"]
        if rust["prompt_tokens"] != ref["prompt_tokens"]:
            print(f"WARNING: token counts differ: rust {rust['prompt_tokens']} vs python {ref['prompt_tokens']}")
        worst = max(abs(a - b) for a, b in zip(rust["logits"], ref["logits"]))
        print(f"max |logit difference| rust vs transformers: {worst:.2e}")
        print(f"{'implementation':40} {'median s':>9} {'tokens/s':>10} {'rust / this':>12}")
        for r in rows:
            ratio = rust["tokens_per_s"] / r["tokens_per_s"]
            print(f"{r['impl']:40} {r['median_s']:9.2f} {r['tokens_per_s']:10.1f} {ratio:12.2f}")


if __name__ == "__main__":
    main()
