#!/usr/bin/env bash
# Fetch every model the tests and benches use into "${RERANK_MODELS_DIR:-models}".
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/fetch_minilm.sh
