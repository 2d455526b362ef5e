#!/usr/bin/env python3
"""The crate against sentence-transformers on each of its backends (torch, ONNX, OpenVINO).

sentence-transformers' `backend="onnx"` (onnxruntime, through optimum) and `backend="openvino"`
(through optimum-intel) are what its users pick for speed on a CPU. Each backend exports the
model at load (nothing is written into the model folder), then embeds or scores exactly what the
crate does, on the same machine, with every core (the backends' defaults; `--threads` sets
torch's and the crate's, and should be the machine's core count):

  embed  all-MiniLM-L6-v2 (the real model, scripts/fetch_minilm.sh) on the first 64 SciFact
         documents (`title + " " + text`, 256 tokens at most): `SentenceTransformer.encode`,
         batch size 32, against `cargo bench --bench embed_models`;
  score  a cross-encoder folder (default: bench-ms-marco-electra-base, written by
         scripts/bench_rerank_models.py --arch electra) on the first judged SciFact query against
         the first 32 documents: `CrossEncoder.predict`, batch size 32, against
         `cargo bench --bench rerank_models`.

OpenVINO runs at the precision its CPU plugin picks (`INFERENCE_PRECISION_HINT`): f32 on most
CPUs, bf16 where the CPU has AVX-512 bf16 or AMX (Sapphire Rapids, Zen 4): what a user gets by
default. So OpenVINO is timed twice: as it comes (`openvino`, its precision printed) and held
to f32 (`openvino-f32`, `ov_config={"INFERENCE_PRECISION_HINT": "f32"}`). The crate is timed in
f32 and, with --int8, in int8 (the reduced precision it offers), each ratio printed against
both.

Each f32 backend's output is checked against the crate's f32 first (embeddings: cosine >=
0.9999; logits: within 1e-3); a reduced-precision side (OpenVINO's bf16, the crate's int8) only
has its agreement printed, and fails below cosine 0.99 or beyond a logit difference of 0.1.
Then every side is timed in --rounds interleaved rounds: each round times one call of every
side (the crate's a run of its bench binary, which loads and warms the model first; the
backends' a call of the model loaded and warmed by its check), in an order that rotates from
round to round, so that a slow moment of the machine falls on every side alike. Each side's
median over the rounds is reported with its range, and the ratio of medians (the crate's
throughput over the backend's).

sentence-transformers' ONNX and OpenVINO backends need optimum, which needs transformers 4.x:
run this from a virtualenv of its own, e.g.
  python3 -m venv .venv-backends
  .venv-backends/bin/pip install torch "transformers>=4.46,<5" "sentence-transformers[onnx,openvino]>=4.1,<6"
  RERANK_BENCH_BIN_EMBED=... RERANK_BENCH_BIN_RERANK=... .venv-backends/bin/python scripts/bench_st_backends.py
(RERANK_BENCH_BIN_EMBED / _RERANK: the bench executables `cargo bench --bench embed_models
--no-run` and `--bench rerank_models --no-run` print; without them the script runs cargo.)
"""
import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from bench_common import (CARGO_FEATURES, ROOT, cpu_flags, run, scifact_documents,
                          scifact_first_judged_query)

MODELS = Path(os.environ.get("RERANK_MODELS_DIR", ROOT / "models"))
OPENVINO_F32 = {"ov_config": {"INFERENCE_PRECISION_HINT": "f32"}}
# (label, sentence-transformers backend, model_kwargs)
BACKENDS = [("torch", "torch", {}), ("onnx", "onnx", {}), ("openvino", "openvino", {}),
            ("openvino-f32", "openvino", OPENVINO_F32)]
# The least agreement a reduced-precision side may have (bf16, int8): a looser check than f32's.
REDUCED_COSINE, REDUCED_LOGITS = 0.99, 0.1


def openvino_default_precision() -> str:
    """The precision OpenVINO's CPU plugin runs a model at unless told otherwise."""
    try:
        import openvino
    except ImportError:
        return "?"
    return openvino.Core().get_property("CPU", "INFERENCE_PRECISION_HINT").get_type_name()


def precision_of(label: str) -> str:
    return openvino_default_precision() if label == "openvino" else "f32"


def ours(bench: str, env: dict) -> dict:
    binary = os.environ.get(f"RERANK_BENCH_BIN_{bench.split('_')[0].upper()}")
    cmd = [binary] if binary else ["cargo", "bench", *CARGO_FEATURES, "--bench", bench]
    out = run(cmd, env)
    return json.loads([l for l in out.splitlines() if l.startswith("{")][-1])


def crate_side(bench: str, env: dict, precision: str):
    """The crate's side at `precision`: a call that runs its bench binary once (one timed call
    after its warm-up) and gives `(seconds, the bench's JSON line)`."""
    env = dict(env, RERANK_BENCH_REPEATS="1")
    if precision != "f32":
        env["RERANK_BENCH_PRECISION"] = precision
    def call():
        line = ours(bench, env)
        return statistics.median(line["seconds"]), line
    return call


def timed(call):
    """A side that times one call of `call()`: `(seconds, its result)`."""
    def side():
        start = time.perf_counter()
        out = call()
        return time.perf_counter() - start, out
    return side


def interleaved(sides: dict, rounds: int) -> dict:
    """`{name: [seconds of each round]}` of `sides` (`{name: side}`, each side a call giving
    `(seconds, result)`), every side once a round, the order rotated each round."""
    names = list(sides)
    times = {name: [] for name in names}
    for r in range(rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            times[name].append(sides[name]()[0])
    return times


def spread(seconds: list, items: int) -> str:
    """A side's median throughput over its rounds and the range of its rounds'."""
    rates = sorted(items / s for s in seconds)
    return f"{items / statistics.median(seconds):.2f} ({rates[0]:.2f}-{rates[-1]:.2f})"


def ratios(rust: dict, peer: float) -> str:
    return ", ".join(f"rerank {p} {r / peer:.2f}x" for p, r in rust.items())


def cosines(a, b):
    return [float(x @ y / (np.linalg.norm(x) * np.linalg.norm(y))) for x, y in zip(a, b)]


def report(what: str, unit: str, items: int, crate: list, peers: list, times: dict):
    """Prints each side's median throughput (its rounds' range) and the crate's ratios."""
    rust = {p: items / statistics.median(times[f"rerank {p}"]) for p in crate}
    print(f"{what}, cpu [{cpu_flags()}], {len(next(iter(times.values())))} interleaved rounds: "
          + ", ".join(f"rerank {p} {spread(times[f'rerank {p}'], items)} {unit}/s" for p in crate))
    for label, precision, agreement in peers:
        peer = items / statistics.median(times[label])
        print(f"  sentence-transformers backend={label} ({precision}): {spread(times[label], items)} "
              f"{unit}/s, {ratios(rust, peer)} ({agreement})")


def embed(threads: int, rounds: int, int8: bool):
    from sentence_transformers import SentenceTransformer

    model = MODELS / "all-MiniLM-L6-v2"
    texts = [t.replace("\n", " ") for t in scifact_documents(64)]
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("\n".join(texts))
        texts_file = f.name
    env = dict(os.environ, RERANK_BENCH_EMBED_MODEL=str(model), RERANK_BENCH_TEXTS=texts_file,
               RERANK_BENCH_THREADS=str(threads), RAYON_NUM_THREADS=str(threads))
    crate = ["f32", "int8"] if int8 else ["f32"]
    sides = {f"rerank {p}": crate_side("embed_models", env, p) for p in crate}
    first = {p: np.array(sides[f"rerank {p}"]()[1]["first"]) for p in crate}
    if int8:
        cos = min(cosines(first["f32"], first["int8"]))
        print(f"rerank int8 against its f32: smallest cosine {cos:.7f}")
        if cos < REDUCED_COSINE:
            raise SystemExit(f"int8 embeddings differ from f32 (cosine {cos})")
    peers = []
    for label, backend, kwargs in BACKENDS:
        precision = precision_of(label)
        st = SentenceTransformer(str(model), device="cpu", backend=backend, model_kwargs=kwargs or None)
        st.max_seq_length = 256
        got = st.encode(texts[: len(first["f32"])], convert_to_numpy=True)
        cos = min(cosines(first["f32"], got))
        if cos < (0.9999 if precision == "f32" else REDUCED_COSINE):
            raise SystemExit(f"{label} ({precision}): embeddings differ from the crate's (cosine {cos})")
        st.encode(texts, batch_size=32, convert_to_numpy=True)  # warm-up at the timed size
        sides[label] = timed(lambda st=st: st.encode(texts, batch_size=32, convert_to_numpy=True))
        peers.append((label, precision, f"smallest cosine to the crate's f32 {cos:.7f}"))
    times = interleaved(sides, rounds)
    os.unlink(texts_file)
    report(f"embed all-MiniLM-L6-v2, {len(texts)} docs", "docs", len(texts), crate, peers, times)


def score(threads: int, rounds: int, model: Path, int8: bool):
    import torch.nn as nn
    from sentence_transformers import CrossEncoder

    query = scifact_first_judged_query()
    pairs = [(query, d) for d in scifact_documents(32)]
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for q, d in pairs:
            f.write(json.dumps({"query": q, "document": d}) + "\n")
        pairs_file = f.name
    env = dict(os.environ, RERANK_BENCH_RERANK_MODEL=str(model), RERANK_BENCH_PAIRS=pairs_file,
               RERANK_BENCH_THREADS=str(threads), RAYON_NUM_THREADS=str(threads))
    crate = ["f32", "int8"] if int8 else ["f32"]
    sides = {f"rerank {p}": crate_side("rerank_models", env, p) for p in crate}
    lines = {p: sides[f"rerank {p}"]()[1] for p in crate}
    logits = np.array(lines["f32"]["logits"])
    if int8:
        diff = float(np.abs(np.array(lines["int8"]["logits"]) - logits).max())
        print(f"rerank int8 against its f32: largest logit difference {diff:.1e}")
        if diff > REDUCED_LOGITS:
            raise SystemExit(f"int8 logits differ from f32 (largest difference {diff:.2e})")
    peers = []
    for label, backend, kwargs in BACKENDS:
        precision = precision_of(label)
        ce = CrossEncoder(str(model), device="cpu", backend=backend, model_kwargs=kwargs or None)
        predict = lambda ce=ce: ce.predict(pairs, batch_size=32, activation_fn=nn.Identity(),
                                           convert_to_numpy=True)
        diff = float(np.abs(predict() - logits).max())
        if diff > (1e-3 if precision == "f32" else REDUCED_LOGITS):
            raise SystemExit(f"{label} ({precision}): logits differ from the crate's (largest difference {diff:.2e})")
        sides[label] = timed(predict)
        peers.append((label, precision, f"largest logit difference to the crate's f32 {diff:.1e}"))
    times = interleaved(sides, rounds)
    os.unlink(pairs_file)
    report(f"score {model.name}, {len(pairs)} pairs ({lines['f32']['tokens']} tokens)", "pairs",
           len(pairs), crate, peers, times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--what", nargs="+", choices=["embed", "score"], default=["embed", "score"])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cross-encoder", default=str(MODELS / "bench-ms-marco-electra-base"))
    ap.add_argument("--int8", action="store_true", help="time the crate's int8 path beside its f32")
    args = ap.parse_args()
    import sentence_transformers
    import torch
    import transformers

    torch.set_num_threads(args.threads)
    print(f"sentence-transformers {sentence_transformers.__version__}, transformers "
          f"{transformers.__version__}, torch {torch.__version__}")
    if "embed" in args.what:
        embed(args.threads, args.rounds, args.int8)
    if "score" in args.what:
        score(args.threads, args.rounds, Path(args.cross_encoder), args.int8)


if __name__ == "__main__":
    main()
