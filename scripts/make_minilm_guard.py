"""Writes tests/data/minilm_guard.json: all-MiniLM-L6-v2 sentence embeddings, computed by
sentence-transformers (mean pooling, L2-normalized, float32), of query pairs that embed alike
but mean different things. tests/it/cache.rs checks the semantic cache's guard against them.

Usage (from the repository root, with sentence-transformers installed, e.g. in a virtualenv:
`python3 -m venv .venv-bench && .venv-bench/bin/pip install sentence-transformers`):
  scripts/fetch_models.sh                     # once: the model into $RERANK_MODELS_DIR or models/
  python scripts/make_minilm_guard.py [MODEL_DIR]
"""
import json
import os
import sys
from pathlib import Path

from sentence_transformers import SentenceTransformer

ROOT = Path(__file__).resolve().parent.parent
TEXTS = [
    "flights that allow pets",
    "flights that do not allow pets",
    "flights from Boston to Denver",
    "flights from Denver to Boston",
]


def main():
    default = Path(os.environ.get("RERANK_MODELS_DIR", ROOT / "models")) / "all-MiniLM-L6-v2"
    model_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else default
    model = SentenceTransformer(str(model_dir), device="cpu")
    embeddings = model.encode(TEXTS, normalize_embeddings=True, convert_to_numpy=True)
    cases = [
        {"text": t, "embedding": [float(x) for x in e.astype("float32")]}
        for t, e in zip(TEXTS, embeddings)
    ]
    out = {
        "description": (
            "all-MiniLM-L6-v2 sentence embeddings (mean pooling, L2-normalized, float32) of query "
            "pairs that embed alike but mean different things; used by tests/it/cache.rs for the "
            "semantic cache guard. Computed by sentence-transformers "
            f"{__import__('sentence_transformers').__version__} with scripts/make_minilm_guard.py."
        ),
        "model": "sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0)",
        "cases": cases,
    }
    path = ROOT / "tests" / "data" / "minilm_guard.json"
    path.write_text(json.dumps(out) + "\n")
    print(f"wrote {path.relative_to(ROOT)}: {len(cases)} embeddings of dimension {len(cases[0]['embedding'])}")


if __name__ == "__main__":
    main()
