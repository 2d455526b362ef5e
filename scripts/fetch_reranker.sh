#!/usr/bin/env bash
# Fetch a reranker from the Hugging Face hub: scripts/fetch_model.sh with a default model.
#
# Usage: scripts/fetch_reranker.sh [NAME] [DEST_DIR]
#   NAME      a hub repository (default: cross-encoder/ms-marco-MiniLM-L-6-v2)
# Everything else (DEST_DIR, REVISION, HF_ENDPOINT, HF_TOKEN) is as in scripts/fetch_model.sh.
set -euo pipefail
exec "$(dirname "$0")/fetch_model.sh" "${1:-cross-encoder/ms-marco-MiniLM-L-6-v2}" "${@:2}"
