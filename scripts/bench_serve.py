#!/usr/bin/env python3
"""Load and faults against `rerank serve` (and optionally infinity serving the same models).

Starts the server on loopback with 2 model threads, runs CLIENTS concurrent clients for
SECONDS on the rerank route (100 SciFact documents per request, the MiniLM-L6-shaped
cross-encoder of scripts/make_ce_minilm.py) and on the embeddings route (100 texts per
request, all-MiniLM-L6-v2), then the faults: a client that disconnects mid-request, a
slowloris client, a 100 MB body, malformed JSON, 10,000 documents in one request, the queue
overflowing. Prints one JSON object: throughput, p50/p99 latency, errors, the batch sizes
reached (from /metrics), each fault's answer, and the server's peak RSS. The server is stopped
by its process id.

With --infinity, infinity (pip install "infinity-emb[server,torch]") serves the same two model
directories on the same machine with the same threads, and the same load runs against its
/rerank and /embeddings.

--precision int8 runs both servers' models with int8 linear layers: ours with `precision: int8`
in both config sections, infinity with `--dtype int8` (on CPU, torch's dynamic quantization of
every Linear: int8 weights, activations quantized per call). The default f32 runs both in f32
(infinity with `--dtype float32`, what its default `auto` picks on CPU).

Usage (the release binary, a Python with httpx, e.g. the cohere/openai clients virtualenv):
    cargo build --release --features full --example rerank
    python scripts/bench_serve.py --bin $CARGO_TARGET_DIR/release/examples/rerank [--infinity PATH]
What int8 costs in agreement, per server (no load; each server's int8 against its own f32):
    python scripts/bench_serve.py --bin ... --infinity PATH --samples-only f32.json
    python scripts/bench_serve.py --bin ... --infinity PATH --samples-only int8.json --precision int8
    python scripts/bench_serve.py --compare int8.json f32.json
"""
import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench_common import spearman

ROOT = Path(__file__).resolve().parent.parent
MODELS = Path(os.environ.get("RERANK_MODELS_DIR", ROOT / "models"))
SCIFACT = ROOT.parent / "shared" / "datasets" / "scifact"


def scifact(n):
    docs = []
    with open(SCIFACT / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            docs.append((d.get("title", "") + " " + d["text"]).strip())
            if len(docs) == n:
                break
    query = "0-dimensional biomaterials show inductive properties."
    with open(SCIFACT / "queries.jsonl", encoding="utf-8") as f:
        for line in f:
            query = json.loads(line)["text"]
            break
    return query, docs


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def peak_rss_mb(pid):
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def stop(proc):
    """SIGTERM (the server finishes what is in flight), then kill after a minute."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()


def wait_ready(url, proc, timeout=600):
    start = time.time()
    while time.time() - start < timeout:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited with {proc.returncode}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"{url} not ready after {timeout} s")


def metric(text, name):
    """The value of the Prometheus sample `name` (labels included), or None."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return None


async def load(url, body, clients, seconds, timeout=120):
    latencies, errors, statuses = [], 0, {}
    stop = time.time() + seconds
    async with httpx.AsyncClient(timeout=timeout, limits=httpx.Limits(max_connections=clients)) as c:

        async def client():
            nonlocal errors
            while time.time() < stop:
                t = time.perf_counter()
                try:
                    r = await c.post(url, json=body)
                    statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
                    if r.status_code == 200:
                        latencies.append(time.perf_counter() - t)
                    else:
                        errors += 1
                except httpx.HTTPError:
                    errors += 1

        start = time.time()
        await asyncio.gather(*(client() for _ in range(clients)))
        took = time.time() - start
    latencies.sort()
    q = lambda p: latencies[min(len(latencies) - 1, int(p * len(latencies)))] if latencies else None
    return {
        "requests_ok": len(latencies),
        "requests_per_s": round(len(latencies) / took, 2),
        "documents_per_s": round(len(latencies) * len(body.get("documents", body.get("input", []))) / took, 1),
        "p50_ms": round(q(0.5) * 1000, 1) if latencies else None,
        "p99_ms": round(q(0.99) * 1000, 1) if latencies else None,
        "errors": errors,
        "statuses": statuses,
    }


def raw(port, data, read=True, timeout=30):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
        if not read:
            return None
        out = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
        return out.split(b"\r\n", 1)[0].decode(errors="replace")
    except OSError as e:
        return f"error: {e}"
    finally:
        s.close()


def faults(port, query, docs):
    base = f"http://127.0.0.1:{port}"
    out = {}
    body = json.dumps({"query": query, "documents": docs}).encode()
    head = (
        f"POST /v2/rerank HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    raw(port, head + body[: len(body) // 2], read=False)
    out["disconnect_mid_request"] = "closed by the client"
    slow = socket.create_connection(("127.0.0.1", port))
    slow.sendall(b"POST /v2/rerank HTTP/1.1\r\nHost: x\r\n")
    t = time.time()
    ok = httpx.post(base + "/v2/rerank", json={"query": query, "documents": docs[:5]}, timeout=60)
    out["slowloris_others_served"] = [ok.status_code, round(time.time() - t, 3)]
    slow.close()
    big = 100 << 20
    out["100MB_body"] = raw(
        port,
        f"POST /v2/rerank HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {big}\r\nConnection: close\r\n\r\n".encode() + b"[" * 65536,
    )
    r = httpx.post(base + "/v2/rerank", content=b'{"query": ', headers={"Content-Type": "application/json"})
    out["malformed_json"] = [r.status_code, r.json().get("message", "")[:80]]
    r = httpx.post(base + "/v2/rerank", json={"query": query, "documents": ["x"] * 10000}, timeout=60)
    out["10000_documents"] = [r.status_code, r.json().get("message", "")[:80]]

    async def flood():
        async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=600)) as c:
            rs = await asyncio.gather(
                *(c.post(base + "/v2/rerank", json={"query": query, "documents": docs}) for _ in range(600)),
                return_exceptions=True,
            )
        counts = {}
        for r in rs:
            k = r.status_code if isinstance(r, httpx.Response) else type(r).__name__
            counts[k] = counts.get(k, 0) + 1
        return counts

    out["queue_overflow_600_at_once"] = asyncio.run(flood())
    out["still_serving"] = httpx.post(
        base + "/v2/rerank", json={"query": query, "documents": docs[:3]}, timeout=60
    ).status_code
    return out


def sample(rerank_url, rerank_body, embed_url, embed_body):
    """One request to each route: the scores in document order and the embeddings in input order
    (what --samples-only keeps, to compare one precision's outputs with another's)."""
    r = httpx.post(rerank_url, json=rerank_body, timeout=900).json()
    scores = [None] * len(rerank_body["documents"])
    for hit in r["results"]:
        scores[hit["index"]] = hit["relevance_score"]
    e = httpx.post(embed_url, json=embed_body, timeout=900).json()
    vectors = [d["embedding"] for d in sorted(e["data"], key=lambda d: d["index"])]
    return {"rerank": scores, "embeddings": vectors}


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (sum(x * x for x in a) ** 0.5 * sum(y * y for y in b) ** 0.5)


def agreement(got, reference):
    """How one server's samples agree with its samples in another precision."""
    cos = [cosine(a, b) for a, b in zip(got["embeddings"], reference["embeddings"])]
    return {"rerank_spearman": round(spearman(got["rerank"], reference["rerank"]), 5),
            "embeddings_min_cosine": round(min(cos), 6),
            "embeddings_mean_cosine": round(sum(cos) / len(cos), 6)}


def run_rerank_serve(args, query, docs, texts):
    port = free_port()
    tmp = Path(tempfile.mkdtemp())
    config = tmp / "serve.yaml"
    config.write_text(
        "retriever: { type: bm25 }\n"
        f"reranker: {{ type: cross_encoder, model: {MODELS / 'ce-minilm-l6-random'}, precision: {args.precision} }}\n"
        f"embedder: {{ type: bert, model: {MODELS / 'all-MiniLM-L6-v2'}, precision: {args.precision} }}\n"
    )
    proc = subprocess.Popen(
        [args.bin, "serve", "--config", str(config), "--addr", f"127.0.0.1:{port}",
         "--threads", str(args.threads), "--timeout-secs", str(args.server_timeout)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        wait_ready(base + "/health", proc)
        if args.samples_only:
            return sample(base + "/v2/rerank", {"query": query, "documents": docs, "top_n": len(docs)},
                          base + "/v1/embeddings", {"input": texts, "model": "m"})
        result = {
            "rerank": asyncio.run(load(base + "/v2/rerank", {"query": query, "documents": docs}, args.clients, args.seconds, args.client_timeout)),
            "embeddings": asyncio.run(load(base + "/v1/embeddings", {"input": texts, "model": "m"}, args.clients, args.seconds, args.client_timeout)),
        }
        m = httpx.get(base + "/metrics").text
        for model in ["rerank", "embed"]:
            n = metric(m, f'rerank_batch_items_count{{model="{model}"}}')
            s = metric(m, f'rerank_batch_items_sum{{model="{model}"}}')
            r = metric(m, f'rerank_batch_requests_sum{{model="{model}"}}')
            result[f"{model}_batches"] = {
                "calls": n, "mean_items": round(s / n, 1) if n else None,
                "mean_requests": round(r / n, 2) if n else None,
            }
        if not args.no_faults:
            result["faults"] = faults(port, query, docs)
        result["peak_rss_mb"] = peak_rss_mb(proc.pid)
        return result
    finally:
        stop(proc)


def run_infinity(args, query, docs, texts):
    port = free_port()
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads),
               INFINITY_ANONYMOUS_USAGE_STATS="0")
    proc = subprocess.Popen(
        [args.infinity, "v2", "--port", str(port), "--host", "127.0.0.1",
         "--model-id", str(MODELS / "ce-minilm-l6-random"), "--model-id", str(MODELS / "all-MiniLM-L6-v2"),
         "--engine", "torch", "--device", "cpu",
         "--dtype", {"f32": "float32", "int8": "int8"}[args.precision]],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        wait_ready(base + "/health", proc)
        # infinity names a local model by the last parts of its path: ask it which is which.
        ids = {cap: m["id"] for m in httpx.get(base + "/models").json()["data"]
               for cap in m.get("capabilities", [])}
        if args.samples_only:
            return sample(base + "/rerank", {"query": query, "documents": docs, "model": ids["rerank"],
                                             "top_n": len(docs)},
                          base + "/embeddings", {"input": texts, "model": ids["embed"]})
        return {
            "rerank": asyncio.run(load(base + "/rerank", {"query": query, "documents": docs, "model": ids["rerank"]}, args.clients, args.seconds, args.client_timeout)),
            "embeddings": asyncio.run(load(base + "/embeddings", {"input": texts, "model": ids["embed"]}, args.clients, args.seconds, args.client_timeout)),
            "peak_rss_mb": peak_rss_mb(proc.pid),
        }
    finally:
        stop(proc)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", help="the rerank CLI (release build; every mode but --compare)")
    ap.add_argument("--infinity", help="the infinity_emb executable, to run the peer too")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-faults", action="store_true")
    ap.add_argument("--precision", choices=["f32", "int8"], default="f32",
                    help="both servers' linear layers (infinity: --dtype float32 or int8)")
    ap.add_argument("--client-timeout", type=int, default=120,
                    help="each client's timeout in seconds: past the time the queue takes to "
                         "drain, no request is abandoned half-scored, on either server")
    ap.add_argument("--server-timeout", type=int, default=600,
                    help="rerank serve's --timeout-secs: long enough that a full queue waits "
                         "rather than times out, as infinity's does")
    ap.add_argument("--samples-only", metavar="FILE",
                    help="no load: start each server, score and embed the 100 documents once, "
                         "write the outputs to FILE and stop")
    ap.add_argument("--compare", nargs=2, metavar=("FILE", "REFERENCE"),
                    help="no server: how the samples in FILE agree with those in REFERENCE "
                         "(e.g. int8 against f32): Spearman of the rerank scores, cosines of "
                         "the embeddings, per server")
    args = ap.parse_args()
    if args.compare:
        got, ref = (json.loads(Path(f).read_text()) for f in args.compare)
        json.dump({k: agreement(got[k], ref[k]) for k in got if k in ref}, sys.stdout, indent=1)
        print()
        return
    if not args.bin:
        ap.error("--bin is required (the rerank CLI)")
    query, docs = scifact(100)
    texts = docs
    out = {"clients": args.clients, "seconds": args.seconds, "threads": args.threads,
           "precision": args.precision,
           "rerank_serve": run_rerank_serve(args, query, docs, texts)}
    if args.infinity:
        out["infinity"] = run_infinity(args, query, docs, texts)
    if args.samples_only:
        Path(args.samples_only).write_text(json.dumps({k: v for k, v in out.items() if isinstance(v, dict)}))
        return
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
