#!/usr/bin/env python3
"""Cross-encoder throughput of the new architectures, Rust vs sentence-transformers, one run.

For each architecture, a random model with the shape of the real one is written once (seeded;
meaningless as a reranker, but it costs what the real one costs to run) under
$RERANK_MODELS_DIR (default models/):

  deberta  bench-mxbai-rerank-base: DebertaV2ForSequenceClassification with
           mxbai-rerank-base-v1's shape (DeBERTa-v3-base: hidden 768, 12 layers, 12 heads,
           intermediate 3072, position_buckets 256, max_position_embeddings 512, shared
           position projections, layer-normed relative embeddings, no absolute positions, no
           token types, vocab_size 128100) and num_labels 1. The tokenizer is a
           DebertaV2Tokenizer over a 32k-piece Unigram vocabulary trained here on the SciFact
           corpus with `tokenizers` (the real one has 128k pieces; an in-domain vocabulary
           gives English text realistic token counts, varying from pair to pair).

  modernbert  bench-gte-reranker-modernbert-base: ModernBertForSequenceClassification with
           gte-reranker-modernbert-base's shape (ModernBERT-base: hidden 768, 22 layers, 12 heads,
           intermediate 1152, a global layer every 3rd with the others in 128-token windows,
           RoPE thetas 160,000 / 10,000, no biases but the classifier's, vocabulary 50,368 rows,
           mean classifier pooling) and num_labels 1. The tokenizer is a byte-level BPE of
           50,280 pieces trained here on the SciFact corpus, ModernBERT's specials after it.

  gte      bench-gte-multilingual-reranker-base: GteForSequenceClassification (transformers 5's
           spelling of the hub's NewForSequenceClassification) with
           gte-multilingual-reranker-base's shape (hidden 768, 12 layers, 12 heads, intermediate
           3072, a gated GELU MLP, RoPE theta 20,000 NTK-scaled by 8, post-norm, token type
           embeddings of one row, vocab_size 250,048) and num_labels 1. The tokenizer is a
           Unigram of 32,000 pieces trained here on the SciFact corpus in XLM-R's layout
           (<s> A </s></s> B </s>).

  jina     bench-jina-reranker-v2-base-multilingual: jina-reranker-v2-base-multilingual's shape
           (XLM-RoBERTa base: hidden 768, 12 layers, 12 heads, intermediate 3072, 1026
           positions, one token type, vocab_size 250,002) in the flash-attention layout of its
           remote code, as jina publishes it (scripts/jina_layout.py), with the gte tokenizer's
           recipe and jina's 1024 tokens. sentence-transformers runs the same weights in
           transformers' layout (the folder's "-transformers" twin): jina's own code computes
           the same function (tests/fixtures/jina_v2_tiny checks it) but needs transformers 4.x.

  electra  bench-ms-marco-electra-base: ElectraForSequenceClassification with
           cross-encoder/ms-marco-electra-base's shape (ELECTRA-base: hidden 768 = embedding
           size, 12 layers, 12 heads, intermediate 3072, two token types, vocab_size 30,522)
           and num_labels 1. The tokenizer is a lower-cased WordPiece of 30,522 pieces trained
           here on the SciFact corpus in BERT's layout ([CLS] A [SEP] B [SEP]).

  monot5   bench-monot5-base-msmarco: T5ForConditionalGeneration with castorini/monot5-base-msmarco's
           shape (T5 v1.0 base: d_model 768, d_kv 64, 12 heads, d_ff 3072, 12 encoder and 12
           decoder layers, relu, relative buckets 32 up to distance 128, vocab_size 32,128,
           tie_word_embeddings true as the published config: the lm_head is the shared embedding
           and the decoder output is scaled by d_model ** -0.5). The tokenizer (t5_tokenizer) is a
           Unigram of 32,000 pieces trained here on the SciFact corpus in T5's layout (A </s>;
           <pad>=0 </s>=1 <unk>=2), "▁true" and "▁false" single pieces. Not a cross-encoder: the
           Rust side loads it with `load_reranker` (MonoT5Reranker) and times
           `Reranker::raw_score_pairs` (l_true - l_false per pair); the peer is what pygaggle's
           MonoT5 computes (below).

Both sides score the same pairs: the first SciFact query judged in qrels/test.tsv against the
first N corpus documents (`title + " " + text`), cut to the model's length (512 tokens; jina
1024), with the same thread count:
  - Rust: `cargo bench --bench rerank_models` (release; one process: load, one warm-up, then
    --rounds timed `CrossEncoder::logits` calls; monot5: `Reranker::raw_score_pairs`), its JSON
    line;
  - Python: `CrossEncoder(dir).predict(pairs, batch_size=32)`, median of --rounds timed calls
    after a warm-up. For monot5, pygaggle's MonoT5 on a CPU in transformers: the prompts
    "Query: {q} Document: {d} Relevant:" in batches of 32 (pygaggle's own default is 8:
    MonoT5.get_tokenizer's batch_size), each `tokenizer(prompts, padding=True, truncation=True,
    max_length=512, return_tensors="pt")` then, under torch.inference_mode(),
    `model(input_ids, attention_mask, decoder_input_ids=[[decoder_start_token_id]] * batch)`
    (pygaggle's greedy_decode for one step), its logits[:, 0, [false_id, true_id]]; the score
    compared is l_true - l_false (pygaggle ranks by log_softmax of the two: the same order).
It first checks that both compute the same logits (largest difference <= 1e-3), then prints
pairs/s of each, the ratio, and the CPU's vector flags.

Usage (torch + sentence-transformers in this Python; from the repository root):
  python scripts/bench_rerank_models.py [--arch deberta modernbert gte jina electra monot5] [--threads 2] [--rounds 3] [--docs 32]
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from bench_common import (CARGO_FEATURES, ROOT, cpu_flags, first_and_median, run, scifact_documents,
                          scifact_first_judged_query)
from model_shapes import modernbert_reranker_config

MODELS = Path(os.environ.get("RERANK_MODELS_DIR", ROOT / "models"))
# A bench executable built before (`cargo bench --bench rerank_models --no-run` prints it), to
# time without rebuilding: RERANK_BENCH_BIN=target/release/deps/rerank_models-HASH.
BENCH_BIN = os.environ.get("RERANK_BENCH_BIN")


def deberta_tokenizer(dest: Path):
    """A DebertaV2Tokenizer (tokenizer.json in the layout transformers 4.x's converter wrote)
    over a Unigram vocabulary trained on the SciFact corpus: [PAD]=0 [CLS]=1 [SEP]=2 [UNK]=3,
    [MASK] added after it."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors, trainers
    from tokenizers.models import Unigram

    tok = Tokenizer(Unigram())
    tok.normalizer = normalizers.Sequence([normalizers.Strip(), normalizers.Replace(Regex(" {2,}"), " ")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    trainer = trainers.UnigramTrainer(vocab_size=32000, special_tokens=["[PAD]", "[CLS]", "[SEP]", "[UNK]"],
                                      unk_token="[UNK]")
    tok.train_from_iterator(scifact_documents(), trainer)
    tok.add_special_tokens([AddedToken("[MASK]", special=True, normalized=False)])
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", 1), ("[SEP]", 2)])
    tok.save(str(dest / "tokenizer.json"))
    (dest / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "DebertaV2Tokenizer", "do_lower_case": False, "split_by_punct": False,
        "vocab_type": "spm", "model_max_length": 512, "bos_token": "[CLS]", "eos_token": "[SEP]",
        "unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
        "mask_token": "[MASK]"}, indent=1))


def make_deberta(dest: Path):
    import torch
    from transformers import DebertaV2Config, DebertaV2ForSequenceClassification

    torch.manual_seed(0)
    cfg = DebertaV2Config(vocab_size=128100, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                          intermediate_size=3072, hidden_act="gelu", max_position_embeddings=512,
                          type_vocab_size=0, layer_norm_eps=1e-7, relative_attention=True,
                          max_relative_positions=-1, position_buckets=256, norm_rel_ebd="layer_norm",
                          share_att_key=True, pos_att_type=["p2c", "c2p"], position_biased_input=False,
                          pooler_hidden_size=768, pooler_hidden_act="gelu", pooler_dropout=0,
                          pad_token_id=0, num_labels=1)
    cfg.architectures = ["DebertaV2ForSequenceClassification"]
    DebertaV2ForSequenceClassification(cfg).eval().save_pretrained(dest, safe_serialization=True)
    deberta_tokenizer(dest)


def modernbert_tokenizer(dest: Path) -> dict:
    """A byte-level BPE tokenizer in ModernBERT's layout ([CLS] A [SEP] B [SEP], token types
    all 0) over 50,280 pieces trained on the SciFact corpus; returns the special tokens' ids."""
    from tokenizers import AddedToken, Tokenizer, decoders, pre_tokenizers, processors, trainers
    from tokenizers.models import BPE

    tok = Tokenizer(BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=50280, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(scifact_documents(), trainer)
    specials = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    ids = {t: tok.token_to_id(t) for t in specials}
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:0 [SEP]:0",
        special_tokens=[("[CLS]", ids["[CLS]"]), ("[SEP]", ids["[SEP]"])])
    tok.save(str(dest / "tokenizer.json"))
    names = {"unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]",
             "mask_token": "[MASK]"}
    (dest / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 8192, "clean_up_tokenization_spaces": True,
        "model_input_names": ["input_ids", "attention_mask"], **names}, indent=1))
    (dest / "special_tokens_map.json").write_text(json.dumps(names, indent=1))
    return ids


def make_modernbert(dest: Path):
    import torch
    from transformers import ModernBertForSequenceClassification

    ids = modernbert_tokenizer(dest)
    torch.manual_seed(0)
    layers = 22
    cfg = modernbert_reranker_config(
        layers, ids["[CLS]"], ids["[SEP]"], ids["[PAD]"], vocab_size=50368, hidden_size=768,
        intermediate_size=1152, num_attention_heads=12, max_position_embeddings=8192)
    ModernBertForSequenceClassification(cfg).eval().save_pretrained(dest, safe_serialization=True)


def xlmr_tokenizer(dest: Path, max_length: int):
    """A Unigram of 32,000 pieces trained on the SciFact corpus in XLM-R's layout
    (<s> A </s></s> B </s>; <s>=0 <pad>=1 </s>=2 <unk>=3, <mask> after them)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors, trainers
    from tokenizers.models import Unigram

    specials = ["<s>", "<pad>", "</s>", "<unk>"]
    tok = Tokenizer(Unigram())
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    trainer = trainers.UnigramTrainer(vocab_size=32000, special_tokens=specials, unk_token="<unk>")
    tok.train_from_iterator(scifact_documents(), trainer)
    tok.add_special_tokens([AddedToken("<mask>", special=True, normalized=False)])
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", 0), ("</s>", 2)])
    tok.save(str(dest / "tokenizer.json"))
    names = {"bos_token": "<s>", "eos_token": "</s>", "sep_token": "</s>", "cls_token": "<s>",
             "unk_token": "<unk>", "pad_token": "<pad>", "mask_token": "<mask>"}
    (dest / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": max_length,
        "model_input_names": ["input_ids", "attention_mask"], **names}, indent=1))
    (dest / "special_tokens_map.json").write_text(json.dumps(names, indent=1))


def make_gte(dest: Path):
    import torch
    from transformers import GteConfig, GteForSequenceClassification

    xlmr_tokenizer(dest, 512)
    torch.manual_seed(0)
    head_dim = 64
    cfg = GteConfig(vocab_size=250048, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                    intermediate_size=3072, hidden_act="gelu", max_position_embeddings=8192,
                    type_vocab_size=1, layer_norm_eps=1e-12, pad_token_id=1, num_labels=1,
                    rope_parameters={"rope_type": "linear", "rope_theta": 160000.0,
                                     "factor": 8.0 ** (2 / head_dim)})
    cfg.architectures = ["GteForSequenceClassification"]
    GteForSequenceClassification(cfg).eval().save_pretrained(dest, safe_serialization=True)


def make_jina(dest: Path):
    """jina-reranker-v2-base-multilingual's shape in its layout (scripts/jina_layout.py), f32;
    beside it, `dest` + "-transformers", the same weights in transformers' layout: the peer's
    model (jina's own code computes the same function, tests/fixtures/jina_v2_tiny, but needs
    transformers 4.x and runs eager attention on a CPU)."""
    import shutil

    import torch
    from transformers import XLMRobertaConfig, XLMRobertaForSequenceClassification

    from jina_layout import save_as_jina

    twin = peer_dir(dest, "jina")
    twin.mkdir(parents=True, exist_ok=True)
    xlmr_tokenizer(twin, 1024)
    torch.manual_seed(0)
    cfg = XLMRobertaConfig(vocab_size=250002, hidden_size=768, num_hidden_layers=12,
                           num_attention_heads=12, intermediate_size=3072, hidden_act="gelu",
                           max_position_embeddings=1026, type_vocab_size=1, layer_norm_eps=1e-5,
                           pad_token_id=1, bos_token_id=0, eos_token_id=2, num_labels=1)
    cfg.architectures = ["XLMRobertaForSequenceClassification"]
    XLMRobertaForSequenceClassification(cfg).eval().save_pretrained(twin, safe_serialization=True)
    save_as_jina(twin, dest)
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(twin / f, dest / f)


def wordpiece_tokenizer(dest: Path, max_length: int):
    """A lower-cased WordPiece of 30,522 pieces trained on the SciFact corpus in BERT's layout
    ([PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4; [CLS] A [SEP] B [SEP], token types 0 then 1)."""
    from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, processors, trainers
    from tokenizers.models import WordPiece

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=30522, special_tokens=specials)
    tok.train_from_iterator(scifact_documents(), trainer)
    tok.decoder = decoders.WordPiece()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tok.save(str(dest / "tokenizer.json"))
    names = {"cls_token": "[CLS]", "sep_token": "[SEP]", "unk_token": "[UNK]",
             "pad_token": "[PAD]", "mask_token": "[MASK]"}
    (dest / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "ElectraTokenizer", "do_lower_case": True,
        "model_max_length": max_length, **names}, indent=1))
    (dest / "special_tokens_map.json").write_text(json.dumps(names, indent=1))


def make_electra(dest: Path):
    import torch
    from transformers import ElectraConfig, ElectraForSequenceClassification

    wordpiece_tokenizer(dest, 512)
    torch.manual_seed(0)
    cfg = ElectraConfig(vocab_size=30522, embedding_size=768, hidden_size=768, num_hidden_layers=12,
                        num_attention_heads=12, intermediate_size=3072, hidden_act="gelu",
                        max_position_embeddings=512, type_vocab_size=2, layer_norm_eps=1e-12,
                        pad_token_id=0, num_labels=1)
    cfg.architectures = ["ElectraForSequenceClassification"]
    ElectraForSequenceClassification(cfg).eval().save_pretrained(dest, safe_serialization=True)


T5_ANSWERS = ("▁true", "▁false")


def t5_tokenizer(dest: Path, max_length: int):
    """A Unigram of 32,000 pieces trained on the SciFact corpus in T5's layout (<pad>=0 </s>=1
    <unk>=2; A </s>, pair A </s> B </s>; NFKC, runs of spaces folded, Metaspace), with
    monoT5's answers "▁true" and "▁false" single pieces: the corpus is fed with the two words
    many times over, so that the trainer keeps them (asserted). Shared with
    bench_embed_models.py's GTR model."""
    from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors, trainers
    from tokenizers.models import Unigram

    specials = ["<pad>", "</s>", "<unk>"]
    tok = Tokenizer(Unigram())
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    trainer = trainers.UnigramTrainer(vocab_size=32000, special_tokens=specials, unk_token="<unk>")
    answers = " ".join(t.lstrip("▁") for t in T5_ANSWERS)
    tok.train_from_iterator(scifact_documents() + [answers] * 1000, trainer)
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    tok.post_processor = processors.TemplateProcessing(
        single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", 1)])
    assert [tok.token_to_id(t) for t in specials] == [0, 1, 2], "specials first"
    for t in T5_ANSWERS:
        assert tok.token_to_id(t) is not None, f"{t} is not a piece"
        assert tok.encode(t.lstrip("▁")).tokens == [t, "</s>"], f"{t} is not one token"
    tok.save(str(dest / "tokenizer.json"))
    names = {"eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}
    (dest / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": max_length,
        "model_input_names": ["input_ids", "attention_mask"], **names}, indent=1))
    (dest / "special_tokens_map.json").write_text(json.dumps(names, indent=1))


def make_monot5(dest: Path):
    import torch
    from transformers import T5Config, T5ForConditionalGeneration

    t5_tokenizer(dest, 512)
    torch.manual_seed(0)
    cfg = T5Config(vocab_size=32128, d_model=768, d_kv=64, d_ff=3072, num_layers=12,
                   num_decoder_layers=12, num_heads=12, relative_attention_num_buckets=32,
                   relative_attention_max_distance=128, dropout_rate=0.1, layer_norm_epsilon=1e-6,
                   feed_forward_proj="relu", tie_word_embeddings=True, pad_token_id=0,
                   eos_token_id=1, decoder_start_token_id=0)
    cfg.architectures = ["T5ForConditionalGeneration"]
    T5ForConditionalGeneration(cfg).eval().save_pretrained(dest, safe_serialization=True)


def peer_dir(dest: Path, arch: str) -> Path:
    """The folder sentence-transformers loads: the model's own, or its transformers-layout twin."""
    return dest.with_name(dest.name + "-transformers") if arch == "jina" else dest


MAKERS = {
    "deberta": ("bench-mxbai-rerank-base", make_deberta),
    "modernbert": ("bench-gte-reranker-modernbert-base", make_modernbert),
    "gte": ("bench-gte-multilingual-reranker-base", make_gte),
    "jina": ("bench-jina-reranker-v2-base-multilingual", make_jina),
    "electra": ("bench-ms-marco-electra-base", make_electra),
    "monot5": ("bench-monot5-base-msmarco", make_monot5),
}
# The archs that are not sequence classifiers: loaded with load_reranker on the Rust side.
GENERATIVE = {"monot5"}
BATCH_SIZE = 32


def cross_encoder_peer(dest: Path, pairs):
    """sentence-transformers' CrossEncoder.predict on `pairs`: a callable, its label."""
    import torch.nn as nn
    from sentence_transformers import CrossEncoder

    ce = CrossEncoder(str(dest), device="cpu")
    predict = lambda: ce.predict(pairs, batch_size=BATCH_SIZE, activation_fn=nn.Identity(), convert_to_numpy=True)
    return predict, "sentence-transformers"


def monot5_peer(dest: Path, pairs):
    """pygaggle's MonoT5 on a CPU, one decoder step, in batches of BATCH_SIZE: a callable
    returning l_true - l_false per pair, its label."""
    import torch
    from transformers import AutoTokenizer, T5ForConditionalGeneration

    tok = AutoTokenizer.from_pretrained(str(dest))
    model = T5ForConditionalGeneration.from_pretrained(str(dest)).eval()
    true_id, false_id = (tok.convert_tokens_to_ids(t) for t in T5_ANSWERS)
    start = model.config.decoder_start_token_id
    prompts = [f"Query: {q} Document: {d} Relevant:" for q, d in pairs]

    def predict():
        out = []
        with torch.inference_mode():
            for i in range(0, len(prompts), BATCH_SIZE):
                enc = tok(prompts[i:i + BATCH_SIZE], padding=True, truncation=True, max_length=512,
                          return_tensors="pt")
                dec = torch.full((enc["input_ids"].shape[0], 1), start, dtype=torch.long)
                logits = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"],
                               decoder_input_ids=dec).logits[:, 0, [false_id, true_id]]
                out.append(logits[:, 1] - logits[:, 0])
        return torch.cat(out).numpy()

    return predict, "transformers (pygaggle's MonoT5)"


def bench(arch: str, threads: int, rounds: int, docs: int):
    import torch

    name, make = MAKERS[arch]
    dest = MODELS / name
    if not (dest / "model.safetensors").exists():
        print(f"writing {dest}", file=sys.stderr)
        dest.mkdir(parents=True, exist_ok=True)
        make(dest)
    query = scifact_first_judged_query()
    pairs = [(query, d) for d in scifact_documents(docs)]
    torch.set_num_threads(threads)
    peer = monot5_peer if arch in GENERATIVE else cross_encoder_peer
    predict, peer_name = peer(peer_dir(dest, arch), pairs)
    ref, st_seconds = first_and_median(predict, rounds)
    del predict

    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for q, d in pairs:
            f.write(json.dumps({"query": q, "document": d}) + "\n")
        pairs_file = f.name
    env = dict(os.environ, RERANK_BENCH_RERANK_MODEL=str(dest), RERANK_BENCH_PAIRS=pairs_file,
               RERANK_BENCH_THREADS=str(threads), RAYON_NUM_THREADS=str(threads),
               RERANK_BENCH_REPEATS=str(rounds),
               RERANK_BENCH_LOADER="load_reranker" if arch in GENERATIVE else "cross_encoder")
    cmd = [BENCH_BIN] if BENCH_BIN else ["cargo", "bench", *CARGO_FEATURES, "--bench", "rerank_models"]
    out = run(cmd, env)
    os.unlink(pairs_file)
    line = json.loads([l for l in out.splitlines() if l.startswith("{")][-1])
    diff = max(abs(a - float(b)) for a, b in zip(line["logits"], ref))
    if len(line["logits"]) != len(pairs) or diff > 1e-3:
        raise SystemExit(f"{arch}: logits differ from {peer_name} (largest difference {diff:.2e})")
    rust_seconds = statistics.median(line["seconds"])
    n = len(pairs)
    print(f"{arch} ({name}), {n} pairs ({line['tokens']} tokens), {threads} threads, cpu [{cpu_flags()}]: "
          f"rerank {n / rust_seconds:.2f} pairs/s, {peer_name} {n / st_seconds:.2f} pairs/s at batch {BATCH_SIZE}, "
          f"{st_seconds / rust_seconds:.2f}x (largest logit difference {diff:.1e}; torch {torch.__version__}, "
          f"load {line['load_seconds']:.1f} s)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", nargs="+", choices=sorted(MAKERS), default=["deberta"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--docs", type=int, default=32)
    args = ap.parse_args()
    for arch in args.arch:
        bench(arch, args.threads, args.rounds, args.docs)


if __name__ == "__main__":
    main()
