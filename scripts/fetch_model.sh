#!/usr/bin/env bash
# Fetch a model directory the crate loads (an embedder or a reranker) from the Hugging Face hub.
#
# Usage: scripts/fetch_model.sh NAME [DEST_DIR]
#   NAME      a hub repository, e.g. BAAI/bge-small-en-v1.5 (scripts/fetch_reranker.sh fetches
#             cross-encoder/ms-marco-MiniLM-L-6-v2 by default)
#   DEST_DIR  defaults to "${RERANK_MODELS_DIR:-models}/<last part of NAME>"
#   REVISION  (environment) a branch, tag or commit (default: main)
#   HF_ENDPOINT (environment) the hub's address (default: https://huggingface.co), as the
#             hub's own clients read it; HF_TOKEN (environment) is sent for gated models.
#
# Downloads config.json, tokenizer.json and the weights (model.safetensors, or the shards
# listed in model.safetensors.index.json), plus the small files that say how a model is used
# (tokenizer_config.json, special_tokens_map.json, sentence-transformers' modules.json,
# sentence_bert_config.json, config_sentence_transformers.json, and each module folder's
# config.json and model.safetensors that modules.json names: 1_Pooling, 2_Dense, ...) when the
# repository has them. Files land in a temporary sibling folder that is renamed into place
# once complete, so an interrupted fetch never leaves a half model. Idempotent: a DEST_DIR
# that already has config.json and its weights is left alone.
#
# Then: `load_embedder(DEST_DIR, ..)` / `load_reranker(DEST_DIR, ..)` in Rust, or
# `cargo run --release --example rerank -- search --corpus ... --reranker DEST_DIR "query"`.
set -euo pipefail

NAME="${1:?usage: scripts/fetch_model.sh NAME [DEST_DIR] (NAME: a hub repository such as BAAI/bge-small-en-v1.5)}"
case "$NAME" in
    */*) ;;
    *) echo "error: NAME must be a hub repository such as cross-encoder/ms-marco-MiniLM-L-6-v2" >&2; exit 2 ;;
esac
case "$NAME" in
    *..*|/*) echo "error: $NAME is not a repository name" >&2; exit 2 ;;
esac
DEST="${2:-${RERANK_MODELS_DIR:-models}/${NAME##*/}}"
ENDPOINT="${HF_ENDPOINT:-https://huggingface.co}"
REVISION="${REVISION:-main}"
BASE="${ENDPOINT%/}/$NAME/resolve/$REVISION"

if [ -f "$DEST/config.json" ] && { [ -f "$DEST/model.safetensors" ] || [ -f "$DEST/model.safetensors.index.json" ]; }; then
    echo "$NAME already present in $DEST"
    exit 0
fi

auth=()
if [ -n "${HF_TOKEN:-}" ]; then
    auth=(-H "Authorization: Bearer $HF_TOKEN")
fi

mkdir -p "$(dirname "$DEST")"
STAGE="$(mktemp -d "$(dirname "$DEST")/.fetch_model.XXXXXX")"
trap 'rm -rf "$STAGE"' EXIT

# get FILE REQUIRED: downloads FILE into the staging folder; a missing optional file is skipped.
get() {
    local file="$1" required="$2" code
    mkdir -p "$STAGE/$(dirname "$file")"
    code="$(curl -sS -L --retry 3 "${auth[@]}" -o "$STAGE/$file" -w '%{http_code}' "$BASE/$file")" || code=000
    if [ "$code" = 200 ]; then
        echo "  $file"
        return 0
    fi
    rm -f "$STAGE/$file"
    if [ "$required" = yes ]; then
        echo "error: $BASE/$file: HTTP $code (is $NAME a model repository at revision $REVISION? gated models need HF_TOKEN)" >&2
        exit 1
    fi
}

echo "fetching $NAME ($REVISION) from $ENDPOINT into $DEST"
get config.json yes
get tokenizer.json yes
for f in tokenizer_config.json special_tokens_map.json modules.json sentence_bert_config.json \
    config_sentence_transformers.json; do
    get "$f" no
done
if [ -f "$STAGE/modules.json" ]; then
    folders="$(python3 -c 'import json, sys; print("\n".join(m["path"] for m in json.load(open(sys.argv[1])) if m.get("path")))' \
        "$STAGE/modules.json")"
    for folder in $folders; do
        case "$folder" in
            /*|*..*) echo "error: module folder $folder leaves the model folder" >&2; exit 1 ;;
        esac
        get "$folder/config.json" no
        get "$folder/model.safetensors" no
    done
fi
get model.safetensors.index.json no
if [ -f "$STAGE/model.safetensors.index.json" ]; then
    shards="$(python3 -c 'import json, sys; print("\n".join(sorted(set(json.load(open(sys.argv[1]))["weight_map"].values()))))' \
        "$STAGE/model.safetensors.index.json")"
    for shard in $shards; do
        case "$shard" in
            */*|*..*) echo "error: shard name $shard leaves the model folder" >&2; exit 1 ;;
        esac
        get "$shard" yes
    done
else
    get model.safetensors yes
fi

rm -rf "$DEST"
mv "$STAGE" "$DEST"
chmod 755 "$DEST"
trap - EXIT
echo "$NAME ready in $DEST"
