#!/usr/bin/env python3
"""Side-by-side throughput: rerank's Qwen3Reranker (candle) vs transformers, same machine, threads, run.

Scores 20 documents of ~300 tokens against one query with the Qwen3-Reranker prompt, using the random
0.6B-shaped model from scripts/make_qwen3_bench_model.py. transformers runs twice:
  - "model card": the official Qwen3-Reranker code path (left padding, full logits, then [:, -1, [no, yes]]);
  - "last logits only": the same with logits_to_keep=1 (no full-vocabulary projection at every position),
    the fairest baseline for the Rust scorer, which projects only the last position onto W[yes] - W[no].
The Rust side is `cargo bench --bench qwen3` in its JSON mode (RERANK_BENCH_JSON=1), one timed call per
process, with the same thread count (RAYON_NUM_THREADS too). The three are interleaved round by round so
that a change in machine load hits all of them; the speed-up is the median over rounds of
(transformers seconds / rust seconds). It checks that both sides saw the same token counts and close
logits, and prints seconds, tokens/s and speed-ups.

Usage:
  python scripts/bench_qwen3_vs_transformers.py --threads 2 [--model models/qwen3-0.6b-shape]
      [--rounds 2] [--skip-model-card]
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


class Transformers:
    """The transformers side: the model loaded once, one timed call per `run`."""

    def __init__(self, model_dir, threads):
        import torch
        import transformers
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.torch = torch
        torch.set_num_threads(threads)
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:
            pass
        self.tok = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
        t = time.perf_counter()
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        self.load_s = time.perf_counter() - t
        self.yes = self.tok.convert_tokens_to_ids("yes")
        self.no = self.tok.convert_tokens_to_ids("no")
        self.prefix = self.tok.encode(PREFIX, add_special_tokens=False)
        self.suffix = self.tok.encode(SUFFIX, add_special_tokens=False)
        self.versions = {"torch": torch.__version__, "transformers": transformers.__version__,
                         "torch_threads": torch.get_num_threads()}

    def score(self, docs, last_only):
        """The model-card procedure; returns (l_yes - l_no per doc, real tokens, padded tokens)."""
        tok, torch = self.tok, self.torch
        bodies = [f"<Instruct>: {INSTRUCTION}\n<Query>: {QUERY}\n<Document>: {d}" for d in docs]
        enc = tok(bodies, padding=False, truncation="longest_first", return_attention_mask=False,
                  max_length=MAX_LENGTH - len(self.prefix) - len(self.suffix))
        enc["input_ids"] = [self.prefix + ids + self.suffix for ids in enc["input_ids"]]
        enc = tok.pad(enc, padding=True, return_tensors="pt")
        with torch.inference_mode():
            if last_only:
                logits = self.model(**enc, logits_to_keep=1).logits[:, -1, :]
            else:
                logits = self.model(**enc).logits[:, -1, :]
        diff = logits[:, self.yes] - logits[:, self.no]
        return [float(x) for x in diff], int(enc["attention_mask"].sum()), int(enc["input_ids"].numel())

    def run(self, last_only):
        docs = [document(i) for i in range(N_DOCS)]
        t = time.perf_counter()
        logits, tokens, padded = self.score(docs, last_only)
        return time.perf_counter() - t, logits, tokens, padded


def rust_run(model_dir, threads):
    """One timed Rust call (a fresh process, no warm-up: nothing in it is compiled at run time)."""
    env = dict(os.environ)
    env.update({
        "RERANK_BENCH_JSON": "1", "RERANK_BENCH_REPEATS": "1", "RERANK_BENCH_WARMUP": "0",
        "RERANK_BENCH_THREADS": str(threads), "RAYON_NUM_THREADS": str(threads),
        "RERANK_QWEN3_BENCH_MODEL": str(Path(model_dir).resolve()),
    })
    out = subprocess.run(["cargo", "bench", "--all-features", "--bench", "qwen3"], cwd=ROOT, env=env,
                         check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if not lines:
        sys.exit(f"no JSON line from the Rust bench; its output was:\n{out}")
    return json.loads(lines[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(ROOT / "models" / "qwen3-0.6b-shape"))
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--rounds", type=int, default=2,
                    help="rounds of (transformers last-logits, transformers model card, rust), interleaved")
    ap.add_argument("--skip-model-card", action="store_true")
    args = ap.parse_args()
    args.rounds = max(1, args.rounds)

    # Build the Rust bench first, outside any timing.
    subprocess.run(["cargo", "bench", "--all-features", "--bench", "qwen3", "--no-run"], cwd=ROOT, check=True)
    hf = Transformers(args.model, args.threads)
    warm = [document(i) for i in range(2)]
    hf.score(warm, True)
    hf.score(warm, False)

    variants = [("transformers (last logits only)", True)]
    if not args.skip_model_card:
        variants.append(("transformers (model card)", False))
    times = {name: [] for name, _ in variants}
    times["rerank (candle)"] = []
    ratios = {name: [] for name, _ in variants}
    logits = {}
    tokens = {}
    for r in range(args.rounds):
        for name, last_only in variants:
            sec, lg, tok, padded = hf.run(last_only)
            times[name].append(sec)
            logits[name], tokens[name] = lg, tok
        rust = rust_run(args.model, args.threads)
        times["rerank (candle)"].append(rust["median_s"])
        logits["rerank (candle)"], tokens["rerank (candle)"] = rust["logits"], rust["prompt_tokens"]
        for name, _ in variants:
            ratios[name].append(times[name][-1] / rust["median_s"])
        print(json.dumps({"round": r, **{k: v[-1] for k, v in times.items()}}), flush=True)

    print(json.dumps({**hf.versions, "threads": args.threads, "docs": N_DOCS, "rounds": args.rounds,
                      "padded_tokens": padded, "tokens": tokens}))
    ref = "transformers (last logits only)"
    if tokens["rerank (candle)"] != tokens[ref]:
        print(f"WARNING: token counts differ: {tokens}")
    worst = max(abs(a - b) for a, b in zip(logits["rerank (candle)"], logits[ref]))
    print(f"max |logit difference| rust vs transformers: {worst:.2e}")
    print(f"{'implementation':34} {'median s':>9} {'tokens/s':>9} {'rust speed-up (median of rounds)':>34}")
    for name, secs in times.items():
        med = statistics.median(secs)
        speedup = statistics.median(ratios[name]) if name in ratios else 1.0
        print(f"{name:34} {med:9.2f} {tokens[name] / med:9.1f} {speedup:34.2f}")


if __name__ == "__main__":
    main()
