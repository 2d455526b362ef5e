#!/usr/bin/env python3
"""Write colbert-minilm-l6-random: a ColBERT model in PyLate's layout with the cost of a small
published one, for scripts/bench_colbert_vs_pylate.py.

answerai-colbert-small-v1 (a BERT 12 x 384 with a Dense 384 -> 96) cannot be fetched here, so
the stand-in is the real all-MiniLM-L6-v2 encoder (BERT 6 x 384, scripts/fetch_minilm.sh) with
a seeded random Dense 384 -> 96 without bias (normal(0, 0.05)), and answerai-colbert-small-v1's
settings: query_prefix "[unused0]", document_prefix "[unused1]" (ids 1 and 2 of the
vocabulary), query_length 32, document_length 300, attend_to_expansion_tokens false,
do_query_expansion true, PyLate's default skiplist (string.punctuation). The vectors mean
nothing as retrieval features, but every token costs what it costs in a real ColBERT of this
shape, and PyLate and the crate read the identical folder.

PyLate builds and saves the folder (`models.ColBERT(encoder).save(dest)`); then, as in
tests/fixtures/colbert_tiny/make.py, the BertModel LayerNorm parameters that transformers 5.3
saves as LayerNorm.gamma/.beta are renamed to the published spelling LayerNorm.weight/.bias
(PyLate reads either), and README.md is dropped. The encoder's tokenizer.json is given without
all-MiniLM-L6-v2's baked-in truncation (128) and padding, so PyLate's query and document lengths
are the only limits.

Writes $RERANK_MODELS_DIR/colbert-minilm-l6-random (default models/), reading
$RERANK_MODELS_DIR/all-MiniLM-L6-v2. Versions used: pylate 1.6.0, transformers 5.3.0,
torch 2.11.0.

Usage (in a venv with `pip install pylate`):
    python scripts/make_colbert_minilm.py [--force]
"""
import argparse
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = Path(os.environ.get("RERANK_MODELS_DIR", ROOT / "models"))
NAME = "colbert-minilm-l6-random"
SOURCE = "all-MiniLM-L6-v2"
ENCODER_FILES = ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                 "special_tokens_map.json", "vocab.txt"]


def standard_names(path: Path) -> None:
    """LayerNorm.gamma/.beta (transformers 5.3's spelling on save) -> LayerNorm.weight/.bias."""
    from safetensors.torch import load_file, save_file

    w = load_file(str(path))
    renamed = {re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight",
                      re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", k)): v.contiguous()
               for k, v in w.items()}
    save_file(renamed, str(path), metadata={"format": "pt"})


def make(dest: Path) -> None:
    import torch
    from pylate import models

    src = MODELS / SOURCE
    if not (src / "model.safetensors").exists():
        raise SystemExit(f"{src}: run scripts/fetch_minilm.sh first")
    with tempfile.TemporaryDirectory() as tmp:
        # The bare BertModel folder (no modules.json): PyLate adds its own Dense.
        enc = encoder_folder(src, Path(tmp) / "encoder", ENCODER_FILES)

        model = models.ColBERT(str(enc), device="cpu", embedding_size=96, bias=False,
                               query_prefix="[unused0]", document_prefix="[unused1]",
                               query_length=32, document_length=300,
                               attend_to_expansion_tokens=False, do_query_expansion=True)
        torch.manual_seed(0)
        with torch.no_grad():
            model[1].linear.weight.normal_(0, 0.05)
        save(model, dest)


def encoder_folder(src: Path, enc: Path, files) -> Path:
    """Copies `files` of the encoder in `src` into a new folder `enc`, its tokenizer.json
    without the baked-in truncation and padding; returns `enc`."""
    enc.mkdir()
    for f in files:
        if (src / f).exists():
            shutil.copyfile(src / f, enc / f)
    tok = json.loads((enc / "tokenizer.json").read_text())
    tok["truncation"] = None
    tok["padding"] = None
    (enc / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False))
    return enc


def save(model, dest: Path) -> None:
    """Saves a sentence-transformers-style model to `dest` (replacing it) without its README,
    with the published LayerNorm names."""
    if dest.exists():
        shutil.rmtree(dest)
    model.save(str(dest))
    (dest / "README.md").unlink(missing_ok=True)
    standard_names(dest / "model.safetensors")
    names = json.loads((dest / "modules.json").read_text())
    print(f"wrote {dest}: modules {[m['type'] for m in names]}", file=sys.stderr)


def main(doc: str = __doc__, name: str = NAME, write=None) -> None:
    """The command line of a stand-in model script: writes $RERANK_MODELS_DIR/`name` with
    `write` (default this script's `make`) unless it exists and --force is not given."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--force", action="store_true", help="rewrite the folder if it exists")
    args = ap.parse_args()
    dest = MODELS / name
    if (dest / "modules.json").exists() and not args.force:
        print(f"{dest} exists (--force rewrites it)", file=sys.stderr)
        return
    (write or make)(dest)


if __name__ == "__main__":
    main()
