#!/usr/bin/env python3
"""Int8 encoders: quality against f32, and throughput against our f32 path and onnxruntime's
dynamic int8 (the path fastembed and FlashRank users take), side by side in one run.

Quality (before any timing):
  - embeddings: all-MiniLM-L6-v2 on the first 64 SciFact documents through the `rerank embed`
    CLI with `--precision f32` and `--precision int8`: cosine per document (and the same for
    onnxruntime's int8 model against its f32 one);
  - cross-encoder: the MiniLM-L6-shaped cross-encoder of scripts/make_ce_minilm.py on the
    100-pair benchmark of bench_vs_sentence_transformers.py, `rerank score --raw` in f32 and
    int8: Spearman correlation of the logits and the largest difference;
  - with --scifact: `rerank beir --retriever dense` on SciFact in f32 and int8 (nDCG@10; it
    embeds 5,183 documents per run, minutes each).

Throughput, in --rounds interleaved rounds (each round runs every side once, so load from
other processes falls on all of them alike), medians reported:
  - Rust: criterion group `embed_precision` of benches/embed.rs (the same 64 documents) and
    `cross_encoder` of benches/cross_encoder.rs (`default` = f32, `int8`), release build;
  - onnxruntime: the model exported with torch.onnx, then `quantize_dynamic` twice: its
    defaults (QInt8 weights, per tensor, u8 activations; on AVX2 without VNNI its u8 x s8
    kernel saturates, and quality suffers) and with per_channel + reduce_range (onnxruntime's
    advice for that case; "int8rr"); length-sorted batches of 32, mean pooling in numpy,
    `intra_op_num_threads` = --threads; f32 ONNX too;
  - sentence-transformers `encode` (batch 32) for reference.

The f32 ceiling: the machine's f32 matrix-multiply peak measured on the spot, for the encoder's
feed-forward shape (2048 x 384 times 384 x 1536): the `gemm` crate our encoder calls
(criterion group `gemm_peak` of benches/embed.rs) and torch.matmul, both on --threads threads;
then the encoder's useful GFLOP/s (the FLOPs of the unpadded tokens: projections,
feed-forward and attention, counted from the token lengths) as a share of each.

Usage (from the repository root):
  scripts/fetch_minilm.sh; python scripts/make_ce_minilm.py
  python scripts/bench_int8.py [--threads 2] [--rounds 3] [--scifact]
Python: torch, transformers, sentence-transformers, onnx, onnxruntime, numpy (the venv of
BENCH_VENV, default ./.venv-bench, or any environment that has them).
"""
import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from bench_common import CARGO_FEATURES, ROOT, SCIFACT, criterion_seconds, run, scifact_documents, scifact_first_judged_query, spearman

EMBED_DOCS = 64
CE_DOCS = 100


def cpu_flags():
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor()
    flags = set(re.findall(r"\b(avx2|avx512f|avx512_vnni|avx_vnni|fma)\b", text))
    model = re.search(r"model name\s*:\s*(.*)", text)
    return f"{model.group(1) if model else '?'}; flags {' '.join(sorted(flags))}"


def cli(args, env):
    return run(["cargo", "run", "--quiet", "--release", *CARGO_FEATURES, "--example", "rerank", "--"] + args, env)


def cosines(a, b):
    import numpy as np
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


class OrtEmbedder:
    """all-MiniLM-L6-v2 as sentence-transformers computes it, on an onnxruntime session."""

    def __init__(self, path, tokenizer, threads):
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.session = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        self.names = {i.name for i in self.session.get_inputs()}
        self.tokenizer = tokenizer

    def embed(self, texts, batch=32):
        import numpy as np
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        out = [None] * len(texts)
        for s in range(0, len(order), batch):
            idx = order[s:s + batch]
            enc = self.tokenizer([texts[i] for i in idx], padding=True, truncation=True, max_length=256,
                                 return_tensors="np")
            feed = {k: v.astype(np.int64) for k, v in enc.items() if k in self.names}
            hidden = self.session.run(None, feed)[0]
            mask = enc["attention_mask"][..., None].astype(np.float32)
            pooled = (hidden * mask).sum(1) / np.clip(mask.sum(1), 1e-9, None)
            pooled /= np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
            for i, row in zip(idx, pooled):
                out[i] = row
        return np.stack(out)


def export_onnx(model, workdir):
    """model.onnx (f32), model.int8.onnx (quantize_dynamic defaults) and model.int8rr.onnx
    (per-channel weights, reduce_range: onnxruntime's advice for AVX2 without VNNI, where its
    u8 x s8 kernel saturates) in workdir."""
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from transformers import AutoModel, AutoTokenizer

    f32, int8, int8rr = workdir / "model.onnx", workdir / "model.int8.onnx", workdir / "model.int8rr.onnx"
    tokenizer = AutoTokenizer.from_pretrained(model)
    if not int8rr.exists():
        m = AutoModel.from_pretrained(model).eval()

        class Hidden(torch.nn.Module):
            """The last hidden state, with the three inputs by name."""

            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, input_ids, attention_mask, token_type_ids):
                return self.inner(input_ids=input_ids, attention_mask=attention_mask,
                                  token_type_ids=token_type_ids).last_hidden_state

        enc = tokenizer(["a short example", "another one"], padding=True, return_tensors="pt")
        with torch.no_grad():
            torch.onnx.export(
                Hidden(m), (enc["input_ids"], enc["attention_mask"], enc["token_type_ids"]), str(f32),
                input_names=["input_ids", "attention_mask", "token_type_ids"], output_names=["last_hidden_state"],
                dynamic_axes={k: {0: "batch", 1: "seq"} for k in
                              ["input_ids", "attention_mask", "token_type_ids", "last_hidden_state"]},
                opset_version=17, dynamo=False)
        quantize_dynamic(str(f32), str(int8), weight_type=QuantType.QInt8)
        quantize_dynamic(str(f32), str(int8rr), weight_type=QuantType.QInt8, per_channel=True, reduce_range=True)
    return tokenizer, f32, int8, int8rr


def encoder_flops(tokenizer, texts, layers=6, hidden=384, intermediate=1536, max_length=256):
    """Multiply-adds x 2 of a BERT encoder over `texts`, unpadded: per token and layer the four
    projections and the feed-forward, per sequence and layer QK^T and PV."""
    total = 0
    for ids in tokenizer(texts, truncation=True, max_length=max_length)["input_ids"]:
        n = len(ids)
        linear = n * (hidden * 3 * hidden + hidden * hidden + 2 * hidden * intermediate)
        attention = 2 * n * n * hidden
        total += 2 * layers * (linear + attention)
    return total


def torch_peak(threads, m=2048, k=384, n=1536, rounds=20):
    import torch
    torch.set_num_threads(threads)
    a, b = torch.randn(m, k), torch.randn(k, n)
    for _ in range(3):
        a @ b
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - start)
    return 2 * m * n * k / statistics.median(times) / 1e9


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_models = os.environ.get("RERANK_MODELS_DIR", "models")
    ap.add_argument("--model", default=f"{default_models}/all-MiniLM-L6-v2")
    ap.add_argument("--ce-model", default=os.path.join(default_models, "ce-minilm-l6-random"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--scifact", action="store_true", help="also SciFact dense nDCG@10 in f32 and int8")
    ap.add_argument("--workdir", default=os.environ.get("RERANK_BENCH_WORKDIR", "target/bench-int8"),
                    help="where the ONNX exports are kept between runs")
    args = ap.parse_args()
    model = str((ROOT / args.model).resolve())
    ce_model = str((ROOT / args.ce_model).resolve())
    workdir = (ROOT / args.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    t = str(args.threads)
    env = dict(os.environ)
    env.update(RERANK_BENCH_THREADS=t, RAYON_NUM_THREADS=t, OMP_NUM_THREADS=t)

    import numpy as np
    import onnxruntime
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(args.threads)
    print(f"machine: {cpu_flags()}; {os.cpu_count()} cpus; threads {args.threads}")
    print(f"torch {torch.__version__}, onnxruntime {onnxruntime.__version__}")
    docs = scifact_documents(EMBED_DOCS)

    # 1. Embedding quality: int8 vs f32, ours and onnxruntime's.
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for d in docs:
            f.write(json.dumps({"text": d}) + "\n")
        texts_file = f.name
    ours = {}
    for p in ["f32", "int8"]:
        out = cli(["embed", "--model", model, "--input", texts_file, "--threads", t, "--precision", p], env)
        ours[p] = np.array([json.loads(line)["embedding"] for line in out.splitlines() if line.strip()])
    os.unlink(texts_file)
    tokenizer, f32_onnx, int8_onnx, int8rr_onnx = export_onnx(model, workdir)
    ort_f32 = OrtEmbedder(f32_onnx, tokenizer, args.threads)
    ort_int8 = OrtEmbedder(int8_onnx, tokenizer, args.threads)
    ort_int8rr = OrtEmbedder(int8rr_onnx, tokenizer, args.threads)
    ort = {"f32": ort_f32.embed(docs), "int8": ort_int8.embed(docs), "int8rr": ort_int8rr.embed(docs)}
    st = SentenceTransformer(model, device="cpu")
    st_emb = st.encode(docs, batch_size=32)
    c_ours, c_ort = cosines(ours["int8"], ours["f32"]), cosines(ort["int8"], ort["f32"])
    c_ortrr = cosines(ort["int8rr"], ort["f32"])
    print(f"embeddings, {EMBED_DOCS} docs: cosine(ours f32, sentence-transformers) min "
          f"{cosines(ours['f32'], st_emb).min():.6f}")
    print(f"  cosine(ours int8, ours f32): min {c_ours.min():.5f} mean {c_ours.mean():.5f}")
    print(f"  cosine(ort int8, ort f32):   min {c_ort.min():.5f} mean {c_ort.mean():.5f} (quantize_dynamic defaults)")
    print(f"  cosine(ort int8rr, ort f32): min {c_ortrr.min():.5f} mean {c_ortrr.mean():.5f} "
          f"(per_channel, reduce_range)")

    # 2. Cross-encoder quality: int8 vs f32 logits over the 100-pair benchmark.
    have_ce = Path(ce_model, "model.safetensors").is_file()
    if have_ce:
        query, ce_docs = scifact_first_judged_query(), scifact_documents(CE_DOCS)
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
            for d in ce_docs:
                f.write(json.dumps({"query": query, "document": d}) + "\n")
            pairs_file = f.name
        logits = {}
        for p in ["f32", "int8"]:
            out = cli(["score", "--model", ce_model, "--input", pairs_file, "--raw", "--threads", t,
                       "--precision", p], env)
            logits[p] = np.array([json.loads(line)["logit"] for line in out.splitlines() if line.strip()])
        os.unlink(pairs_file)
        diff = np.abs(logits["int8"] - logits["f32"])
        print(f"cross-encoder, {CE_DOCS} pairs: spearman(int8, f32) {spearman(logits['int8'], logits['f32']):.4f}; "
              f"max |logit diff| {diff.max():.4f} (logit range {np.ptp(logits['f32']):.3f})")
    else:
        print(f"cross-encoder: {ce_model} absent (scripts/make_ce_minilm.py); skipped")

    # 3. Throughput, interleaved rounds.
    times = {k: [] for k in ["ours f32", "ours int8", "ort int8", "ort int8rr", "ort f32", "sentence-transformers",
                             "ce ours f32", "ce ours int8"]}
    ort_int8.embed(docs), ort_int8rr.embed(docs), ort_f32.embed(docs), st.encode(docs, batch_size=32)  # warm-up
    for r in range(args.rounds):
        times["ours int8"].append(criterion_seconds("embed", f"scifact_{EMBED_DOCS}docs_int8_t{t}", env))
        for name, call in [("ort int8", lambda: ort_int8.embed(docs)), ("ort int8rr", lambda: ort_int8rr.embed(docs)),
                           ("ort f32", lambda: ort_f32.embed(docs)),
                           ("sentence-transformers", lambda: st.encode(docs, batch_size=32))]:
            start = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - start)
        times["ours f32"].append(criterion_seconds("embed", f"scifact_{EMBED_DOCS}docs_f32_t{t}", env))
        if have_ce:
            times["ce ours int8"].append(criterion_seconds("cross_encoder", f"scifact_100docs_int8_t{t}", env))
            times["ce ours f32"].append(criterion_seconds("cross_encoder", f"scifact_100docs_default_t{t}", env))
        print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.2f}s" for k, v in times.items() if v), flush=True)
    med = {k: statistics.median(v) for k, v in times.items() if v}
    print(f"\nembedding throughput, {EMBED_DOCS} docs, median of {args.rounds} rounds:")
    for k in ["ours int8", "ours f32", "ort int8", "ort int8rr", "ort f32", "sentence-transformers"]:
        print(f"  {k:22s} {EMBED_DOCS / med[k]:8.1f} docs/s")
    print(f"  ours int8 / ours f32   {med['ours f32'] / med['ours int8']:.2f}x")
    print(f"  ours int8 / ort int8   {med['ort int8'] / med['ours int8']:.2f}x")
    print(f"  ours int8 / ort int8rr {med['ort int8rr'] / med['ours int8']:.2f}x")
    print(f"  ours f32 / ort f32     {med['ort f32'] / med['ours f32']:.2f}x")
    print(f"  ours f32 / sentence-transformers {med['sentence-transformers'] / med['ours f32']:.2f}x")
    if have_ce:
        print(f"cross-encoder, {CE_DOCS} pairs: int8 {CE_DOCS / med['ce ours int8']:.1f} pairs/s, "
              f"f32 {CE_DOCS / med['ce ours f32']:.1f} pairs/s, ratio {med['ce ours f32'] / med['ce ours int8']:.2f}x")

    # 4. The f32 ceiling.
    gemm_s = criterion_seconds("embed", f"gemm_2048x384x1536_t{t}", env)
    gemm_gflops = 2 * 2048 * 384 * 1536 / gemm_s / 1e9
    torch_gflops = torch_peak(args.threads)
    flops = encoder_flops(tokenizer, docs)
    ours_gflops = flops / med["ours f32"] / 1e9
    st_gflops = flops / med["sentence-transformers"] / 1e9
    print(f"\nf32 matmul peak (2048x384x1536, {t} threads): gemm crate {gemm_gflops:.1f} GFLOP/s, "
          f"torch {torch_gflops:.1f} GFLOP/s")
    print(f"encoder useful GFLOP/s ({flops / 1e9:.1f} GFLOP per {EMBED_DOCS} docs): ours f32 {ours_gflops:.1f} "
          f"({ours_gflops / gemm_gflops:.0%} of gemm's peak, {ours_gflops / torch_gflops:.0%} of torch's); "
          f"sentence-transformers {st_gflops:.1f} ({st_gflops / torch_gflops:.0%} of torch's)")

    # 5. SciFact dense retrieval quality (and whole-corpus embedding time).
    if args.scifact:
        for p in ["f32", "int8"]:
            out = cli(["beir", "--data", str(SCIFACT), "--retriever", "dense", "--model", model, "--threads", t,
                       "--precision", p, "--json"], env)
            report = json.loads(out.strip().splitlines()[-1])
            print(f"SciFact dense {p}: nDCG@10 {report['ndcg@10']:.4f}, {report['docs']} docs in "
                  f"{report['index_seconds']:.1f} s ({report['docs'] / report['index_seconds']:.1f} docs/s)")


if __name__ == "__main__":
    main()
