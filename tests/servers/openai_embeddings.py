#!/usr/bin/env python3
"""A loopback server of the OpenAI embeddings API (POST /v1/embeddings), written from its
published schema with the Python standard library only, for tests/it/openai_embed.rs.

The vectors come from the `rerank embed` command (given as --embed-cmd, run once per request
with the texts as JSONL on stdin), so the server can be checked against the in-process model.
Faults for the client's retry logic, by flag:
  --fail-first N     answer the first N requests with 429 and `Retry-After: 0`
  --api-key KEY      require `Authorization: Bearer KEY` (else 401)
  --shuffle          return `data` in reverse order (clients must use `index`)
It prints `ready PORT` on stdout once listening (port 0 picks a free one), logs each request's
input count to stderr, and exits on SIGTERM.

Usage: openai_embeddings.py --embed-cmd "rerank embed --model DIR --input -" [--port 0] [...]
"""
import argparse
import json
import shlex
import subprocess
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--embed-cmd", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--fail-first", type=int, default=0)
    ap.add_argument("--api-key")
    ap.add_argument("--shuffle", action="store_true")
    args = ap.parse_args()
    state = {"requests": 0}

    class Handler(BaseHTTPRequestHandler):
        def reply(self, status, body, headers=()):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in headers:
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def error(self, status, message, kind, headers=()):
            self.reply(status, {"error": {"message": message, "type": kind}}, headers)

        def do_POST(self):
            if self.path.rstrip("/") != "/v1/embeddings":
                return self.error(404, f"no route {self.path}", "invalid_request_error")
            state["requests"] += 1
            if args.api_key and self.headers.get("Authorization") != f"Bearer {args.api_key}":
                return self.error(401, "Incorrect API key provided", "invalid_request_error")
            if state["requests"] <= args.fail_first:
                return self.error(429, "Rate limit reached", "rate_limit_error", [("Retry-After", "0")])
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            except ValueError:
                return self.error(400, "the body is not JSON", "invalid_request_error")
            inputs = body.get("input")
            if isinstance(inputs, str):
                inputs = [inputs]
            if not isinstance(inputs, list) or not all(isinstance(t, str) for t in inputs) or not inputs:
                return self.error(400, "input must be a string or a list of strings", "invalid_request_error")
            if body.get("encoding_format", "float") != "float":
                return self.error(400, "only encoding_format float", "invalid_request_error")
            lines = "".join(json.dumps({"text": t}) + "\n" for t in inputs)
            out = subprocess.run(shlex.split(args.embed_cmd), input=lines, capture_output=True, text=True)
            if out.returncode != 0:
                return self.error(500, out.stderr[-500:], "server_error")
            vectors = [json.loads(l)["embedding"] for l in out.stdout.splitlines() if l.strip()]
            dims = body.get("dimensions")
            if dims is not None:
                vectors = [v[:dims] for v in vectors]
            data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
            if args.shuffle:
                data.reverse()
            tokens = sum(len(t.split()) for t in inputs)
            print(f"request {state['requests']}: {len(inputs)} inputs", file=sys.stderr, flush=True)
            self.reply(200, {"object": "list", "data": data, "model": body.get("model", ""),
                             "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

        def log_message(self, *a):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(f"ready {server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
