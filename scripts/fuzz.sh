#!/usr/bin/env bash
# Runs the property tests of tests/it/fuzz.rs (two-phase parser, PII detector, classifier,
# analyzer, config parser, model config.json files, JSONL corpora, fusion, protected ordering,
# metrics) with many generated cases.
# Not part of CI (CI runs the same properties with 256 cases each).
#
#   scripts/fuzz.sh [CASES]        # default 1000000 cases per property
set -euo pipefail
cd "$(dirname "$0")/.."
cases="${1:-1000000}"
echo "== ${cases} cases per property (release build)"
start=$(date +%s)
RERANK_FUZZ_CASES="$cases" cargo test --release --features full --test it fuzz:: -- --test-threads=2
echo "== done in $(( $(date +%s) - start )) s"
