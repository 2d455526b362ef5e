#!/usr/bin/env python3
"""Write splade-minilm-l6-random: a learned sparse encoder in sentence-transformers 6's
`SparseEncoder` layout with the cost of a small SPLADE, for scripts/bench_splade_vs_st.py.

No SPLADE checkpoint can be fetched here, so the stand-in is the real all-MiniLM-L6-v2 encoder
(BERT 6 x 384, scripts/fetch_minilm.sh) as a `BertForMaskedLM` whose MLM head is seeded random
(transformers' initialisation under torch.manual_seed(0): the transform Dense 384 x 384 normal
(0, 0.02), its LayerNorm, the decoder tied to the word embeddings as in BERT, a bias normal
(0, 0.5) so that some logits are positive), then `MLMTransformer` + `SpladePooling("max",
activation_function="relu")` as naver/splade-v3 and prithivida/Splade_PP_en_v1 are saved, with
max_seq_length 256. Every token costs what it costs in a SPLADE of this shape: the encoder,
then the MLM head over the 30,522-token vocabulary for every token, then the max pooling. The
vectors mean nothing as retrieval features; both sides read the identical folder.

The encoder's tokenizer.json is given without all-MiniLM-L6-v2's baked-in truncation (128) and
padding, so max_seq_length is the only limit. The BertModel LayerNorm parameters that
transformers saves as LayerNorm.gamma/.beta are renamed to the published spelling.

Writes $RERANK_MODELS_DIR/splade-minilm-l6-random (default models/), reading
$RERANK_MODELS_DIR/all-MiniLM-L6-v2. Versions used: sentence-transformers 6.2, transformers 5,
torch 2.

Usage (in a venv with sentence-transformers >= 6):
    python scripts/make_splade_minilm.py [--force]
"""
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_colbert_minilm  # noqa: E402
from make_colbert_minilm import ENCODER_FILES, MODELS, SOURCE, encoder_folder, save  # noqa: E402

NAME = "splade-minilm-l6-random"
MAX_SEQ = 256


def make(dest: Path) -> None:
    import torch
    from sentence_transformers import SparseEncoder
    from sentence_transformers.sparse_encoder.models import MLMTransformer, SpladePooling
    from transformers import BertForMaskedLM

    src = MODELS / SOURCE
    if not (src / "model.safetensors").exists():
        raise SystemExit(f"{src}: run scripts/fetch_minilm.sh first")
    with tempfile.TemporaryDirectory() as tmp:
        files = [f for f in ENCODER_FILES if f != "model.safetensors"]
        enc = encoder_folder(src, Path(tmp) / "mlm", files)
        torch.manual_seed(0)
        mlm = BertForMaskedLM.from_pretrained(str(src))
        with torch.no_grad():
            mlm.cls.predictions.bias.normal_(0, 0.5)
        mlm.save_pretrained(str(enc))
        model = SparseEncoder(
            modules=[MLMTransformer(str(enc), max_seq_length=MAX_SEQ),
                     SpladePooling("max", activation_function="relu")],
            device="cpu", similarity_fn_name="dot")
        save(model, dest)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    make_colbert_minilm.main(__doc__, NAME, make)
