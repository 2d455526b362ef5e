#!/usr/bin/env bash
# Fetch BAAI/bge-m3 with its sparse and ColBERT heads, in the form the crate reads.
#
# Usage: scripts/fetch_bge_m3.sh [DEST_DIR]
#   DEST_DIR  defaults to "${RERANK_MODELS_DIR:-models}/bge-m3"
#   NAME      (environment) another repository in BGE-M3's layout (default: BAAI/bge-m3)
#   REVISION, HF_ENDPOINT, HF_TOKEN (environment) as scripts/fetch_model.sh reads them
#
# 1. scripts/fetch_model.sh fetches the encoder, its tokenizer and its sentence-transformers
#    files (the dense vector: `load_embedder(DEST_DIR, ..)`);
# 2. the two heads FlagEmbedding saves with torch.save are downloaded beside them:
#    sparse_linear.pt (the lexical weights) and colbert_linear.pt (the ColBERT vectors);
# 3. scripts/convert_bge_m3_heads.py writes sparse_linear.safetensors and
#    colbert_linear.safetensors from them (it needs python3 with torch and safetensors; without
#    them the command to run later is printed, and the crate refuses the folder with the same
#    command until it is run).
#
# Then: `SparseEncoder::from_dir(DEST_DIR)` (lexical weights, FlagEmbedding's
# `return_sparse`) and `ColbertEncoder::from_dir(DEST_DIR)` (its `return_colbert_vecs`).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
NAME="${NAME:-BAAI/bge-m3}"
case "$NAME" in
    */*) ;;
    *) echo "error: NAME must be a hub repository such as BAAI/bge-m3" >&2; exit 2 ;;
esac
case "$NAME" in
    *..*|/*) echo "error: $NAME is not a repository name" >&2; exit 2 ;;
esac
DEST="${1:-${RERANK_MODELS_DIR:-models}/${NAME##*/}}"
ENDPOINT="${HF_ENDPOINT:-https://huggingface.co}"
REVISION="${REVISION:-main}"
BASE="${ENDPOINT%/}/$NAME/resolve/$REVISION"

"$HERE/fetch_model.sh" "$NAME" "$DEST"

auth=()
if [ -n "${HF_TOKEN:-}" ]; then
    auth=(-H "Authorization: Bearer $HF_TOKEN")
fi

for head in sparse_linear colbert_linear; do
    if [ -f "$DEST/$head.pt" ] || [ -f "$DEST/$head.safetensors" ]; then
        echo "  $head already present"
        continue
    fi
    part="$DEST/.$head.pt.part"
    code="$(curl -sS -L --retry 3 "${auth[@]}" -o "$part" -w '%{http_code}' "$BASE/$head.pt")" || code=000
    if [ "$code" != 200 ]; then
        rm -f "$part"
        echo "error: $BASE/$head.pt: HTTP $code (is $NAME a BGE-M3 repository?)" >&2
        exit 1
    fi
    mv "$part" "$DEST/$head.pt"
    echo "  $head.pt"
done

command=(python3 "$HERE/convert_bge_m3_heads.py" "$DEST")
if python3 -c 'import torch, safetensors' 2>/dev/null; then
    "${command[@]}"
    echo "$NAME ready in $DEST (dense, sparse and ColBERT)"
else
    echo "$NAME fetched into $DEST; its heads still need converting (python3 with torch and"
    echo "safetensors): ${command[*]}"
fi
