#!/usr/bin/env python3
"""Side-by-side throughput: rerank's Qwen3Reranker vs transformers, same machine, threads, run.

Scores 20 documents of ~300 tokens against one query with the Qwen3-Reranker prompt, using the random
0.6B-shaped model from scripts/make_qwen3_bench_model.py (made on first use). transformers runs twice:
  - "model card": the official Qwen3-Reranker code path (left padding, full logits, then [:, -1, [no, yes]]);
  - "last logits only": the same with logits_to_keep=1 (no full-vocabulary projection at every position),
    the fairest baseline for the Rust scorer, which projects only the last position onto W[yes] - W[no].
With --seq-cls, the same model converted to sequence classification (as
tomaarsen/Qwen3-Reranker-*-seq-cls is: the decoder and a one-row `score` head W[yes] - W[no]; a twin folder
next to the model, its weights linked, not copied) runs on three more sides: transformers'
AutoModelForSequenceClassification on the same left-padded prompts, sentence-transformers' CrossEncoder
(pairs rendered by the prompt as a chat template, what the published models' card calls), and rerank
loading the twin ("rerank seq-cls"); the speed-ups of that last over the first two are reported.
The Rust side is `cargo bench --bench qwen3` in its JSON mode (RERANK_BENCH_JSON=1), one timed call per
process (with --int8 / --bf16, one more Rust side loads the model with Precision::Int8 / Precision::Bf16),
with the same thread count (RAYON_NUM_THREADS too). The three are interleaved round by round so
that a change in machine load hits all of them; the speed-up is the median over rounds of
(transformers seconds / rust seconds). It checks that both sides saw the same token counts and close
logits, and prints seconds, tokens/s, speed-ups, the achieved GFLOP/s (2 x non-embedding parameters x
tokens, plus causal attention: the work of a forward pass over every position, the same figure for every
side), the load times, the Rust process's resident memory after loading and at its peak, and the CPU's
vector flags.

Usage:
  python scripts/bench_qwen3_vs_transformers.py --threads 2 [--model DIR] [--rounds 2] [--skip-model-card]
      [--seq-cls]
The model directory defaults to $RERANK_QWEN3_BENCH_MODEL, else $RERANK_MODELS_DIR/qwen3-0.6b-shape, else
models/qwen3-0.6b-shape. Needs torch and transformers (CPU is enough): when this Python lacks them, the
script re-runs itself in the virtualenv $RERANK_BENCH_VENV (default `$HOME/.cache/rerank/venv-bench`),
creating it with `pip install torch transformers numpy` when missing (--seq-cls needs
sentence-transformers and safetensors there too). Times include tokenization on both
sides. Timings on a shared machine are noisy: compare the ratios of one run.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench_common import CARGO_FEATURES, spearman

ROOT = Path(__file__).resolve().parent.parent
VENV = Path(os.environ.get("RERANK_BENCH_VENV", Path.home() / ".cache" / "rerank" / "venv-bench"))
RUST = "rerank"
EXTRA = ("int8", "bf16")  # the opt-in precisions, each one more Rust side "rerank <precision>"
BASELINE = "rerank (baseline)"


def ensure_python():
    """Re-runs this script in the bench virtualenv when this Python lacks torch or transformers."""
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
        return
    except ImportError:
        pass
    py = VENV / "bin" / "python"
    # A virtualenv's python is a link to the base interpreter: compare prefixes, not executables.
    if Path(sys.prefix).resolve() == VENV.resolve():
        sys.exit(f"{py} lacks torch or transformers")
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "torch", "transformers", "numpy"], check=True)
    os.execv(str(py), [str(py), *sys.argv])


def default_model():
    if os.environ.get("RERANK_QWEN3_BENCH_MODEL"):
        return Path(os.environ["RERANK_QWEN3_BENCH_MODEL"])
    if os.environ.get("RERANK_MODELS_DIR"):
        return Path(os.environ["RERANK_MODELS_DIR"]) / "qwen3-0.6b-shape"
    return ROOT / "models" / "qwen3-0.6b-shape"


def cpu_flags():
    """The vector-instruction flags of this CPU (Linux), e.g. avx2 fma."""
    try:
        words = set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        return "unknown"
    return " ".join(f for f in ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx_vnni") if f in words)


def nominal_flops(model_dir, prompt_lens):
    """2 x non-embedding parameters x tokens + causal attention (QK and PV) over every position."""
    c = json.loads((Path(model_dir) / "config.json").read_text())
    h, ffn, layers = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
    heads, d = c["num_attention_heads"], c.get("head_dim") or h // c["num_attention_heads"]
    kv = c.get("num_key_value_heads", heads)
    q_out, kv_out = heads * d, kv * d
    params = layers * (h * (q_out + 2 * kv_out) + q_out * h + 3 * h * ffn)
    tokens = sum(prompt_lens)
    attention = layers * 4 * heads * d * sum(n * (n + 1) // 2 for n in prompt_lens)
    return 2 * params * tokens + attention

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


def init_torch(threads):
    """torch on `threads` threads for its operations and one for scheduling them; returns torch."""
    import torch

    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set in this process
        pass
    return torch


class Transformers:
    """The transformers side: the model loaded once, one timed call per `run`."""

    def __init__(self, model_dir, threads):
        import transformers
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch = self.torch = init_torch(threads)
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

    def prompts(self, docs):
        """The model card's prompts for `docs`, left-padded into one batch."""
        tok = self.tok
        bodies = [f"<Instruct>: {INSTRUCTION}\n<Query>: {QUERY}\n<Document>: {d}" for d in docs]
        enc = tok(bodies, padding=False, truncation="longest_first", return_attention_mask=False,
                  max_length=MAX_LENGTH - len(self.prefix) - len(self.suffix))
        enc["input_ids"] = [self.prefix + ids + self.suffix for ids in enc["input_ids"]]
        return tok.pad(enc, padding=True, return_tensors="pt")

    def score(self, docs, last_only):
        """The model-card procedure; returns (l_yes - l_no per doc, real tokens, padded tokens)."""
        torch = self.torch
        enc = self.prompts(docs)
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


SEQ_CLS = ("transformers seq-cls", "sentence-transformers CrossEncoder seq-cls")
RUST_SEQ_CLS = "rerank seq-cls"


def seq_cls_twin(model: Path) -> Path:
    """The bench model converted to sequence classification, next to it (`<model>-seq-cls`), as two shards
    named by model.safetensors.index.json (no model.safetensors, which loaders would read alone): the
    model's model.safetensors linked as the first, `score.weight` = W[yes] - W[no] (one row) the second; config.json saying Qwen3ForSequenceClassification (one label, pad
    <|endoftext|>); tokenizer_config.json with the prompt as a chat template (the one of
    tests/fixtures/qwen_seq_cls_tiny/make.py, default instruction)."""
    import importlib.util

    from safetensors import safe_open
    from safetensors.numpy import save_file
    from transformers import AutoTokenizer

    twin = model.with_name(model.name + "-seq-cls")
    if (twin / "model.safetensors.index.json").is_file():
        return twin
    twin.mkdir(parents=True, exist_ok=True)
    tok = AutoTokenizer.from_pretrained(model)
    yes, no = tok.convert_tokens_to_ids("yes"), tok.convert_tokens_to_ids("no")
    with safe_open(str(model / "model.safetensors"), "np") as f:
        names = list(f.keys())
        embed = f.get_slice("model.embed_tokens.weight")
        head = (embed[yes:yes + 1] - embed[no:no + 1]).astype("float32")
    shards = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
    save_file({"score.weight": head}, str(twin / shards[1]))
    link = twin / shards[0]
    if not link.exists():
        link.symlink_to((model / "model.safetensors").resolve())
    weight_map = {n: shards[0] for n in names}
    weight_map["score.weight"] = shards[1]
    (twin / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    config = json.loads((model / "config.json").read_text())
    config.update(architectures=["Qwen3ForSequenceClassification"], id2label={"0": "LABEL_0"},
                  label2id={"LABEL_0": 0}, pad_token_id=tok.pad_token_id)
    (twin / "config.json").write_text(json.dumps(config, indent=2))
    for f in model.iterdir():
        if f.name.startswith("tokenizer") or f.name in ("vocab.json", "merges.txt", "special_tokens_map.json"):
            shutil.copy(f, twin / f.name)
    spec = importlib.util.spec_from_file_location(
        "qwen_seq_cls_tiny", ROOT / "tests" / "fixtures" / "qwen_seq_cls_tiny" / "make.py")
    fixture = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fixture)
    tok_config = json.loads((twin / "tokenizer_config.json").read_text())
    tok_config.update(chat_template=fixture.CHAT_TEMPLATE, padding_side="left")
    (twin / "tokenizer_config.json").write_text(json.dumps(tok_config, indent=2, ensure_ascii=False))
    return twin


class SeqCls(Transformers):
    """transformers' sequence classifier on the twin (same prompts as the model card), and
    sentence-transformers' CrossEncoder on it; each run returns seconds and l_yes - l_no per doc."""

    def __init__(self, twin, threads):
        from sentence_transformers import CrossEncoder
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        torch = self.torch = init_torch(threads)
        self.tok = AutoTokenizer.from_pretrained(twin, padding_side="left")
        self.model = AutoModelForSequenceClassification.from_pretrained(twin, dtype=torch.float32).eval()
        self.prefix = self.tok.encode(PREFIX, add_special_tokens=False)
        self.suffix = self.tok.encode(SUFFIX, add_special_tokens=False)
        self.cross_encoder = CrossEncoder(str(twin), device="cpu")

    def score(self, docs, last_only=True):
        torch = self.torch
        enc = self.prompts(docs)
        with torch.inference_mode():
            logits = self.model(**enc).logits[:, 0]
        return [float(x) for x in logits], int(enc["attention_mask"].sum()), int(enc["input_ids"].numel())

    def run_cross_encoder(self):
        import math

        docs = [document(i) for i in range(N_DOCS)]
        t = time.perf_counter()
        p = self.cross_encoder.predict([(QUERY, d) for d in docs], batch_size=N_DOCS)
        sec = time.perf_counter() - t
        return sec, [math.log(x / (1 - x)) for x in p.tolist()]


def rust_run(model_dir, threads, root=ROOT, precision="f32"):
    """One timed Rust call (a fresh process, no warm-up: nothing in it is compiled at run time) of the
    checkout in `root`, with the model's matrices in `precision` (f32, int8 or bf16)."""
    env = dict(os.environ)
    env.update({
        "RERANK_BENCH_PRECISION": precision,
        "RERANK_BENCH_JSON": "1", "RERANK_BENCH_REPEATS": "1", "RERANK_BENCH_WARMUP": "0",
        "RERANK_BENCH_THREADS": str(threads), "RAYON_NUM_THREADS": str(threads),
        "RERANK_QWEN3_BENCH_MODEL": str(Path(model_dir).resolve()),
    })
    out = subprocess.run(["cargo", "bench", *CARGO_FEATURES, "--bench", "qwen3"], cwd=root, env=env,
                         check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if not lines:
        sys.exit(f"no JSON line from the Rust bench; its output was:\n{out}")
    return json.loads(lines[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--rounds", type=int, default=2,
                    help="rounds of (transformers last-logits, transformers model card, rust), interleaved")
    ap.add_argument("--skip-model-card", action="store_true")
    for p in EXTRA:
        ap.add_argument(f"--{p}", action="store_true",
                        help=f"one more side, \"rerank {p}\" (Precision::{p.title()}), with its logits' "
                             "agreement with transformers and with rust f32 (Spearman, max difference)")
    ap.add_argument("--seq-cls", action="store_true",
                    help="also the model converted to sequence classification: transformers' classifier, "
                         "sentence-transformers' CrossEncoder and rerank on it (see the module's text)")
    ap.add_argument("--baseline-root", default=None,
                    help="another checkout of rerank (e.g. `git archive main` unpacked) run as one more side, "
                         "\"rerank (baseline)\", to compare before and after in the same run")
    args = ap.parse_args()
    args.rounds = max(1, args.rounds)
    ensure_python()
    model = Path(args.model) if args.model else default_model()
    if not (model / "model.safetensors").is_file():
        subprocess.run([sys.executable, str(ROOT / "scripts" / "make_qwen3_bench_model.py"), "--out", str(model)],
                       check=True)
    args.model = str(model)

    # Build the Rust bench(es) first, outside any timing.
    for root in [ROOT] + ([Path(args.baseline_root)] if args.baseline_root else []):
        subprocess.run(["cargo", "bench", *CARGO_FEATURES, "--bench", "qwen3", "--no-run"], cwd=root, check=True)
    hf = Transformers(args.model, args.threads)
    warm = [document(i) for i in range(2)]
    hf.score(warm, True)
    hf.score(warm, False)

    seq = None
    if args.seq_cls:
        twin = seq_cls_twin(model)
        seq = SeqCls(twin, args.threads)
        seq.score(warm)
        seq.cross_encoder.predict([(QUERY, d) for d in warm])
    variants = [("transformers (last logits only)", True)]
    if not args.skip_model_card:
        variants.append(("transformers (model card)", False))
    times = {name: [] for name, _ in variants}
    times[RUST] = []
    ratios = {name: [] for name, _ in variants}
    extra = [p for p in EXTRA if getattr(args, p)]
    extra_ratios = {}
    for p in extra:
        times[f"{RUST} {p}"] = []
        extra_ratios[f"{RUST} {p}"] = []
    logits = {}
    tokens = {}
    rust_loads, rust_rss, prompt_lens = [], [], None
    base_loads, baseline_ratios = [], []
    if args.baseline_root:
        times[BASELINE] = []
    seq_ratios = {name: [] for name in SEQ_CLS}
    if seq:
        for name in (*SEQ_CLS, RUST_SEQ_CLS):
            times[name] = []
    for r in range(args.rounds):
        for name, last_only in variants:
            sec, lg, tok, padded = hf.run(last_only)
            times[name].append(sec)
            logits[name], tokens[name] = lg, tok
        if args.baseline_root:
            base = rust_run(args.model, args.threads, Path(args.baseline_root))
            times[BASELINE].append(base["median_s"])
            logits[BASELINE], tokens[BASELINE] = base["logits"], base["prompt_tokens"]
            base_loads.append(base["load_s"])
        rust = rust_run(args.model, args.threads)
        if args.baseline_root:
            baseline_ratios.append(times[BASELINE][-1] / rust["median_s"])
        times[RUST].append(rust["median_s"])
        logits[RUST], tokens[RUST] = rust["logits"], rust["prompt_tokens"]
        rust_loads.append(rust["load_s"])
        for p in extra:
            name = f"{RUST} {p}"
            q = rust_run(args.model, args.threads, precision=p)
            times[name].append(q["median_s"])
            logits[name], tokens[name] = q["logits"], q["prompt_tokens"]
            extra_ratios[name].append(times["transformers (last logits only)"][-1] / q["median_s"])
        if seq:
            sec, lg, tok, _ = seq.run(True)
            times[SEQ_CLS[0]].append(sec)
            logits[SEQ_CLS[0]], tokens[SEQ_CLS[0]] = lg, tok
            sec, lg = seq.run_cross_encoder()
            times[SEQ_CLS[1]].append(sec)
            logits[SEQ_CLS[1]], tokens[SEQ_CLS[1]] = lg, tokens[SEQ_CLS[0]]
            q = rust_run(twin, args.threads)
            times[RUST_SEQ_CLS].append(q["median_s"])
            logits[RUST_SEQ_CLS], tokens[RUST_SEQ_CLS] = q["logits"], q["prompt_tokens"]
            for name in SEQ_CLS:
                seq_ratios[name].append(times[name][-1] / q["median_s"])
        rust_rss.append((rust.get("rss_after_load_mb"), rust.get("peak_rss_mb")))
        prompt_lens = rust.get("prompt_lens")
        for name, _ in variants:
            ratios[name].append(times[name][-1] / rust["median_s"])
        print(json.dumps({"round": r, **{k: v[-1] for k, v in times.items()}}), flush=True)

    print(json.dumps({**hf.versions, "threads": args.threads, "docs": N_DOCS, "rounds": args.rounds,
                      "padded_tokens": padded, "tokens": tokens}))
    ref = "transformers (last logits only)"
    if tokens[RUST] != tokens[ref]:
        print(f"WARNING: token counts differ: {tokens}")
    worst = max(abs(a - b) for a, b in zip(logits[RUST], logits[ref]))
    print(f"max |logit difference| rust vs transformers: {worst:.2e}")
    for p in extra:
        q, f = logits[f"{RUST} {p}"], logits[ref]
        print(f"{p}: Spearman with transformers' logits {spearman(q, f):.4f}, with rust f32's "
              f"{spearman(q, logits[RUST]):.4f}; max |logit difference| {max(abs(a - b) for a, b in zip(q, f)):.3f} "
              f"(logits span {min(f):.3f} .. {max(f):.3f})")
        print(f"{p} speed-ups per round over transformers (last logits only): "
              f"{[round(x, 3) for x in extra_ratios[f'{RUST} {p}']]}")
    if seq:
        for name in (*SEQ_CLS, RUST_SEQ_CLS):
            worst = max(abs(a - b) for a, b in zip(logits[name], logits[ref]))
            print(f"{name}: max |logit difference| with transformers (causal, last logits) {worst:.2e}")
        for name in SEQ_CLS:
            print(f"{RUST_SEQ_CLS} speed-ups per round over {name}: {[round(x, 3) for x in seq_ratios[name]]}")
    flops = nominal_flops(args.model, prompt_lens) if prompt_lens else None
    print(f"cpu flags: {cpu_flags()}; threads {args.threads}")
    print(f"{'implementation':34} {'median s':>9} {'tokens/s':>9} {'GFLOP/s':>8} {'rust speed-up (median of rounds)':>34}")
    for name, secs in times.items():
        med = statistics.median(secs)
        if name in ratios:
            speedup = statistics.median(ratios[name])
        elif name in seq_ratios and seq_ratios[name]:
            # rerank seq-cls over this side.
            speedup = statistics.median(seq_ratios[name])
        elif name in extra_ratios:
            # The other way round: the opt-in precision against transformers (last logits only).
            speedup = statistics.median(extra_ratios[name])
        else:
            speedup = statistics.median(baseline_ratios) if name == BASELINE else 1.0
        gflops = f"{flops / med / 1e9:8.1f}" if flops else f"{'-':>8}"
        print(f"{name:34} {med:9.2f} {tokens[name] / med:9.1f} {gflops} {speedup:34.2f}")
    if flops:
        print(f"nominal work: {flops / 1e9:.0f} GFLOP for {sum(prompt_lens)} tokens")
    if baseline_ratios:
        print(f"rust speed-up over the baseline checkout (median of rounds): {statistics.median(baseline_ratios):.2f}; "
              f"baseline load seconds {statistics.median(base_loads):.2f}")
    print(f"load seconds: rust {statistics.median(rust_loads):.2f} (median of {len(rust_loads)}), "
          f"transformers {hf.load_s:.2f}")
    after, peak = rust_rss[-1]
    if peak is not None:
        print(f"rust resident memory: {after:.0f} MiB after loading, {peak:.0f} MiB at the peak")


if __name__ == "__main__":
    main()
