#!/usr/bin/env bash
# Two processes of the CLI sharing one Redis cache, and one Milvus collection as the dense side:
# what a replica caches is a hit in the other, an invalidation by one is seen by the other, a
# Redis that dies mid-run costs misses only, and the cache works again after a restart.
#
#   cargo build --release --features milvus,redis --example rerank
#   scripts/scale_out_demo.sh [--milvus]      # --milvus: also recall through Milvus
#
# Needs redis-server (scripts/redis.sh install), the MiniLM model (scripts/fetch_models.sh) and,
# with --milvus, a Milvus on 127.0.0.1:19530 (scripts/milvus.sh start DIR). Prints one line per
# step.
set -euo pipefail
cd "$(dirname "$0")/.."

bin="${CARGO_TARGET_DIR:-target}/release/examples/rerank"
model="${RERANK_MODELS_DIR:-models}/all-MiniLM-L6-v2"
corpus=examples/data/handbook.jsonl
[ -x "$bin" ] || { echo "build first: cargo build --release --features milvus,redis --example rerank" >&2; exit 1; }

port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
dir="$(mktemp -d)"
trap 'bash scripts/redis.sh stop "$port" "$dir"; rm -rf "$dir"' EXIT
bash scripts/redis.sh start "$port" "$dir"
cache="redis://127.0.0.1:$port/0"

recall=(--corpus "$corpus" --embedder "$model" --retriever hybrid)
if [ "${1:-}" = "--milvus" ]; then
    recall+=(--vector-store milvus://127.0.0.1:19530/scale_out_demo)
fi
query="how many days before departure are flights booked"

search() { # $1: replica name
    "$bin" search "${recall[@]}" --cache "$cache" --json "$query" |
        jq -c --arg r "$1" '{replica: $r, cache_hit, top: .hits[0].id, source: .hits[0].source, total_ms: .timings.total_ms}'
}

echo "# replica A asks, replica B asks the same"
search A
search B
"$bin" cache stats --cache "$cache"
echo "# B invalidates the tag of the cited source; A asks again"
"$bin" cache invalidate --tag travel-policy.md --cache "$cache"
search A
echo "# Redis is killed: every query is still answered (misses)"
bash scripts/redis.sh stop "$port" "$dir"
for i in 1 2 3; do search "A$i"; done
echo "# Redis is back (empty): the first query is a miss, the next one a hit"
bash scripts/redis.sh start "$port" "$dir"
search A
search B
"$bin" cache stats --cache "$cache"
