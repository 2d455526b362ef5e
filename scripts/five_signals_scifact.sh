#!/usr/bin/env bash
# Runs examples/configs/five_signals.yaml (sparse + BM25 + dense recall fused by RRF, ColBERT
# reranking) over SciFact through the CLI: `rerank query --config ... --json QUESTION`, which prints
# the answer, its sources and the per-stage timings as one JSON line.
#
# SciFact is read from ../shared/datasets/scifact (or $SCIFACT) and converted to the corpus
# format in a temporary folder; nothing of it is written into the repository. The CLI is
# $RERANK_CLI, else target/release/examples/rerank, else target/debug/examples/rerank (the one
# `cargo test --features full` builds). With STORE=FILE the config keeps everything in that
# SQLite store (documents, postings, dense, sparse and token vectors): the first run computes
# them, later runs over the same file only load them.
#
#   [STORE=scifact.db] scripts/five_signals_scifact.sh ["a question"]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
scifact=${SCIFACT:-$root/../shared/datasets/scifact}
cli=${RERANK_CLI:-}
for candidate in "$root/target/release/examples/rerank" "$root/target/debug/examples/rerank"; do
    if [[ -z "$cli" && -x "$candidate" ]]; then cli=$candidate; fi
done
if [[ -z "$cli" ]]; then
    echo "no CLI: build it with cargo build --release --features full --example rerank" >&2
    exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - "$scifact/corpus.jsonl" "$work/corpus.jsonl" <<'PY'
import json, sys
with open(sys.argv[1]) as src, open(sys.argv[2], "w") as out:
    for line in src:
        d = json.loads(line)
        out.write(json.dumps({"id": d["_id"], "title": d.get("title", ""), "text": d["text"]}) + "\n")
PY
sed -e "s#^corpus: .*#corpus: $work/corpus.jsonl#" -e "s#\.\./\.\./tests/#$root/tests/#g" \
    "$root/examples/configs/five_signals.yaml" > "$work/five_signals.yaml"
if [[ -n "${STORE:-}" ]]; then
    printf 'store: { path: %s }\n' "$(realpath -m "$STORE")" >> "$work/five_signals.yaml"
fi
question=${1:-"0-dimensional biomaterials show inductive properties."}
"$cli" query --config "$work/five_signals.yaml" --json "$question"
