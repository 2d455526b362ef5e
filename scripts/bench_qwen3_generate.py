#!/usr/bin/env python3
"""Side-by-side generation: rerank's LocalChat (`rerank generate`) vs transformers, same machine, threads, run.

The random 0.6B-shaped model of scripts/make_qwen3_bench_model.py (made on first use; --model takes any
directory it writes, e.g. --shape llama-3.2-1b or mxbai-rerank-base-v2, Qwen2.5-0.5B's shape), a raw prompt of
--prompt-tokens tokens (default 170, cut from SciFact text), --new-tokens greedy tokens (default 64, end of
turn ignored), --threads threads on both sides. Each round runs, in turn:
  - transformers: the model loaded once and warmed up by one untimed call; prefill = one forward pass over the prompt with a KV cache
    (logits of the last position only), decode = the greedy loop one token at a time through the cache
    (what `generate` does, without its bookkeeping): tokens/s = steps / seconds;
  - rerank, f32 and bf16 weights: one `rerank generate --json` process each, which measures its own load,
    prefill and decode (`load_seconds`, `prefill_seconds`, `decode_tokens_per_second`); the wall time of the
    process is reported beside them.
It checks that the f32 ids equal transformers' ids, reports how many of the bf16 ids agree with f32 (the
longest common prefix), and prints a JSON summary: per side the medians over rounds, the speed-ups
(transformers time / ours) and the CPU's vector flags.

With --fixture-agreement it also runs the four prompts of ../shared/fixtures/qwen3_tiny_a/greedy.json
(24 greedy tokens each) through `rerank generate` in f32 and bf16 and reports the agreement of the ids with
the reference.

Usage:
  cargo build --release --example rerank
  python scripts/bench_qwen3_generate.py --threads 2 [--rounds 3] [--model DIR] [--fixture-agreement]
Python side: torch and transformers (the script re-runs itself in $RERANK_BENCH_VENV, see
bench_qwen3_vs_transformers.py).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_qwen3_vs_transformers import ROOT, cpu_flags, default_model, ensure_python, init_torch  # noqa: E402

FIXTURE = ROOT.parent / "shared" / "fixtures" / "qwen3_tiny_a"
SCIFACT = ROOT.parent / "shared" / "datasets" / "scifact" / "corpus.jsonl"


def rerank_binary():
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    exe = target / "release" / "examples" / "rerank"
    if not exe.exists():
        sys.exit(f"{exe} is missing: cargo build --release --example rerank")
    return exe


def prompt_text(tok, n_tokens):
    """Raw text that tokenizes to exactly `n_tokens` tokens: SciFact prose cut at a token boundary."""
    words = []
    with open(SCIFACT) as f:
        for line in f:
            words.append(json.loads(line)["text"])
            if len(" ".join(words)) > 8 * n_tokens:
                break
    ids = tok.encode(" ".join(words), add_special_tokens=False)[:n_tokens]
    text = tok.decode(ids)
    if tok.encode(text, add_special_tokens=False) != ids:
        sys.exit("the cut prompt does not tokenize back to itself")
    return text


def run_ours(exe, model, prompt, new_tokens, threads, precision):
    cmd = [str(exe), "generate", "--model", str(model), "--raw-prompt", "--prompt", prompt,
           "--max-new-tokens", str(new_tokens), "--greedy", "--ignore-eos", "--threads", str(threads),
           "--precision", precision, "--json"]
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads))
    t = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t
    if res.returncode != 0:
        sys.exit(f"rerank generate failed: {res.stderr[-2000:]}")
    out = json.loads(res.stdout)
    out["wall_seconds"] = wall
    return out


class Transformers:
    def __init__(self, model_dir, threads):
        import transformers
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch = self.torch = init_torch(threads)
        self.tok = AutoTokenizer.from_pretrained(model_dir)
        t = time.perf_counter()
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        self.load_s = time.perf_counter() - t
        self.versions = {"torch": torch.__version__, "transformers": transformers.__version__,
                         "torch_threads": torch.get_num_threads()}

    def generate(self, prompt, new_tokens):
        torch = self.torch
        ids = torch.tensor([self.tok.encode(prompt, add_special_tokens=False)])
        out_ids = []
        with torch.inference_mode():
            t = time.perf_counter()
            out = self.model(ids, use_cache=True, logits_to_keep=1)
            nxt = out.logits[:, -1].argmax(-1)
            prefill = time.perf_counter() - t
            out_ids.append(int(nxt))
            past = out.past_key_values
            t = time.perf_counter()
            for _ in range(new_tokens - 1):
                out = self.model(nxt[:, None], past_key_values=past, use_cache=True)
                past = out.past_key_values
                nxt = out.logits[:, -1].argmax(-1)
                out_ids.append(int(nxt))
            decode = time.perf_counter() - t
        return {"ids": out_ids, "prompt_tokens": ids.shape[1], "prefill_seconds": prefill,
                "decode_seconds": decode, "decode_tokens_per_second": (new_tokens - 1) / decode}


def common_prefix(a, b):
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def fixture_agreement(exe, threads):
    cases = json.loads((FIXTURE / "greedy.json").read_text())["cases"]
    model = FIXTURE / "model"
    rows = []
    for c in cases:
        want = c["greedy_new_ids"]
        got = {p: run_ours(exe, model, c["prompt"], len(want), threads, p)["ids"] for p in ("f32", "bf16")}
        rows.append({
            "prompt_tokens": len(c["prompt_ids"]),
            "f32_equal_reference": got["f32"] == want,
            "bf16_equal_f32_prefix": common_prefix(got["bf16"], got["f32"]),
            "bf16_equal_positions": sum(x == y for x, y in zip(got["bf16"], got["f32"])),
            "tokens": len(want),
        })
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--prompt-tokens", type=int, default=170)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--fixture-agreement", action="store_true")
    args = ap.parse_args()
    ensure_python()
    model = args.model or default_model()
    if not (model / "model.safetensors").exists():
        subprocess.run([sys.executable, str(ROOT / "scripts" / "make_qwen3_bench_model.py"), "--out", str(model)],
                       check=True)
    exe = rerank_binary()
    hf = Transformers(model, args.threads)
    prompt = prompt_text(hf.tok, args.prompt_tokens)
    sides = {"transformers": [], "rerank_f32": [], "rerank_bf16": []}
    # One untimed call first: torch's first forward pass sets up its kernels (seconds), which
    # the timed rounds should not charge to it.
    hf.generate(prompt, 2)
    for r in range(args.rounds):
        sides["transformers"].append(hf.generate(prompt, args.new_tokens))
        sides["rerank_f32"].append(run_ours(exe, model, prompt, args.new_tokens, args.threads, "f32"))
        sides["rerank_bf16"].append(run_ours(exe, model, prompt, args.new_tokens, args.threads, "bf16"))
        print(f"round {r + 1}: " + ", ".join(
            f"{k} prefill {v[-1]['prefill_seconds']:.2f} s decode {v[-1]['decode_tokens_per_second']:.2f} tok/s"
            for k, v in sides.items()), file=sys.stderr)
    ref = sides["transformers"][0]["ids"]
    summary = {"cpu_flags": cpu_flags(), "threads": args.threads, "rounds": args.rounds,
               "prompt_tokens": sides["transformers"][0]["prompt_tokens"], "new_tokens": args.new_tokens,
               "versions": hf.versions, "transformers_load_seconds": hf.load_s}
    for name, runs in sides.items():
        med = lambda key: statistics.median(x[key] for x in runs)  # noqa: E731
        s = {"prefill_seconds": med("prefill_seconds"),
             "decode_tokens_per_second": med("decode_tokens_per_second")}
        if name != "transformers":
            s["load_seconds"] = med("load_seconds")
            s["wall_seconds"] = med("wall_seconds")
            s["ids_equal_transformers"] = [x["ids"] == ref for x in runs]
            s["ids_common_prefix_with_transformers"] = common_prefix(runs[0]["ids"], ref)
            s["decode_speedup"] = [round(x["decode_tokens_per_second"] / t["decode_tokens_per_second"], 3)
                                   for x, t in zip(runs, sides["transformers"])]
            s["prefill_speedup"] = [round(t["prefill_seconds"] / x["prefill_seconds"], 3)
                                    for x, t in zip(runs, sides["transformers"])]
            t_med = statistics.median(t["prefill_seconds"] for t in sides["transformers"])
            s["prefill_speedup_of_medians"] = round(t_med / s["prefill_seconds"], 3)
        summary[name] = s
    if args.fixture_agreement:
        summary["fixture_agreement"] = fixture_agreement(exe, args.threads)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
