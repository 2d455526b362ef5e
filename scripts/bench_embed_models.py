#!/usr/bin/env python3
"""Embedding throughput of the new architectures, Rust vs sentence-transformers, one run.

For each architecture, a random model with the shape of the real one is written once (seeded;
meaningless as an embedder, but it costs what the real one costs to run), in the
sentence-transformers layout, under $RERANK_MODELS_DIR (default models/):

  xlmr   bench-xlmr-e5-small: XLM-RoBERTa with multilingual-e5-small's shape (12 layers, hidden
         384, 12 heads, ffn 1536), mean pooling + Normalize, e5's prompts; the tokenizer is
         all-MiniLM-L6-v2's WordPiece (scripts/fetch_minilm.sh): English text gets realistic
         token counts, varying from text to text as with the real 250k sentencepiece one (a
         tiny trained vocabulary would cut every text at the cap, and hide the padding that
         sentence-transformers computes and the packed encoder does not);
  modernbert  bench-gte-modernbert-base: ModernBERT with gte-modernbert-base's shape (22
         layers, hidden 768, 12 heads, GeGLU 1152, global attention every third layer, the
         others in a 128-token window), cls pooling + Normalize, all-MiniLM-L6-v2's tokenizer;
  nomic  bench-nomic-embed-text-v1.5: NomicBERT with nomic-embed-text-v1.5's shape (12 layers,
         hidden 768, 12 heads, SwiGLU 3072, RoPE theta 1000, post-norm, no biases), mean pooling
         + Normalize, its search_query / search_document prompts, all-MiniLM-L6-v2's tokenizer;
  gte    bench-gte-base-en-v1.5: GTE with gte-base-en-v1.5's shape (12 layers, hidden 768, 12
         heads, gated GELU 3072, RoPE theta 500,000 NTK-scaled by 2, no token types), cls pooling
         + Normalize, all-MiniLM-L6-v2's tokenizer (both in transformers 5's spelling, which
         sentence-transformers loads without remote code);
  distilbert  bench-msmarco-distilbert-base-tas-b: DistilBERT with msmarco-distilbert-base-tas-b's
         shape (6 layers, dim 768, 12 heads, ffn 3072, vocab 30522), cls pooling without
         Normalize (TAS-B ranks by dot product), all-MiniLM-L6-v2's tokenizer (the same
         uncased WordPiece vocabulary as distilbert-base-uncased's);
  gemma3  bench-embeddinggemma-300m: a bidirectional Gemma3 text model with EmbeddingGemma-300m's
         shape (24 layers, hidden 768, 3 heads sharing 1 key/value head of 256, GeGLU 1152,
         every sixth layer global, the others in a 512-token window, query_pre_attn_scalar 256),
         mean pooling, Dense 768 -> 3072 -> 768 without bias, Normalize, its search prompts;
         all-MiniLM-L6-v2's tokenizer, so the embedding matrix has 30522 rows, not 262144 (the
         crate reads the rows a batch uses; the compute is the same);
  static bench-static-retrieval-mrl-en-v1: a StaticEmbedding with static-retrieval-mrl-en-v1's
         shape (bert-base-uncased's 30522-token WordPiece, all-MiniLM-L6-v2's tokenizer file,
         1024 dimensions, no Normalize): the mean of the text's token vectors;
  qwen3  bench-qwen3-embedding-0.6b: Qwen3 with Qwen3-Embedding-0.6B's shape (28 layers, hidden
         1024, 16 heads, 8 kv heads, head_dim 128, ffn 3072, vocab 151936), lasttoken pooling +
         Normalize, the official Qwen3 tokenizer (../shared/fixtures/qwen3_tiny_a) with
         Qwen3-Embedding's appended <|endoftext|>;
  t5     bench-gtr-t5-base: a T5EncoderModel with gtr-t5-base's shape as its config.json gives it
         (d_model 768, d_kv 64, 12 heads, d_ff 3072, 12 layers, relu, relative buckets 32 up to
         distance 128, vocab 32128), mean pooling, Dense 768 -> 768 without bias (Identity),
         Normalize, max_seq_length 512 as gtr-t5-base's (the others are capped at 256); the
         tokenizer is bench_rerank_models.py's T5-style Unigram of 32,000 pieces trained on the
         SciFact corpus (t5_tokenizer; A </s>);
  jina   bench-jina-embeddings-v3: jina's rotary XLM-RoBERTa with jina-embeddings-v3's shape (24
         layers, hidden 1024, 16 heads, ffn 4096, rotary base 20000) and five rank-4 LoRA
         adapters, saved as jina publishes it (tests/fixtures/jina_v3_tiny/make.py's
         `write_checkpoint`), all-MiniLM-L6-v2's tokenizer; documents run through the
         retrieval.passage adapter with its instruction. Its sentence-transformers module is
         jina's remote code, which cannot be fetched here: the peer is transformers 5's
         `JinaEmbeddingsV3Model` (the same architecture, in the library) on the weights with that
         adapter merged, fed as sentence-transformers feeds a model (texts sorted by length,
         batches of 32 padded to their longest, mean pooling, normalization).

Both sides embed the same first N SciFact documents (`title + " " + text`) as documents, capped
at 256 tokens (max_seq_length; t5 512), with the same thread count:
  - Rust: `cargo bench --bench embed_models` (release; one process: load, one warm-up, then
    --rounds timed `embed` calls), its JSON line;
  - Python: `SentenceTransformer(dir).encode(texts, batch_size=32, prompt_name=...)`, median of
    --rounds timed calls after a warm-up.
It first checks that both compute the same embeddings (cosine >= 0.9999 on the first four),
then prints docs/s of each and the ratio, and the CPU's vector flags.

Usage (torch + sentence-transformers in this Python):
  python scripts/bench_embed_models.py [--arch xlmr qwen3 distilbert gemma3 t5 jina] [--threads 2] [--rounds 3]
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from bench_common import CARGO_FEATURES, ROOT, cpu_flags, first_and_median, run, scifact_documents

MODELS = Path(os.environ.get("RERANK_MODELS_DIR", ROOT / "models"))
# A bench executable built before (`cargo bench --bench embed_models --no-run` prints it), to
# time without rebuilding: RERANK_BENCH_BIN=target/release/deps/embed_models-HASH.
BENCH_BIN = os.environ.get("RERANK_BENCH_BIN")
MAX_SEQ = 256
DOCS = {"minilm": 64, "xlmr": 64, "qwen3": 16, "modernbert": 32, "nomic": 32, "gte": 32,
        "distilbert": 32, "gemma3": 32, "static": 2000, "t5": 32, "jina": 16}
QWEN3_QUERY = "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery:"


def make_xlmr(dest: Path):
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Normalize, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling
    from transformers import XLMRobertaConfig, XLMRobertaModel

    tok = MODELS / "all-MiniLM-L6-v2"  # scripts/fetch_minilm.sh
    with tempfile.TemporaryDirectory() as tmp:
        enc = Path(tmp) / "encoder"
        torch.manual_seed(0)
        cfg = XLMRobertaConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=12,
                               num_attention_heads=12, intermediate_size=1536,
                               max_position_embeddings=514, type_vocab_size=1, pad_token_id=1)
        cfg.architectures = ["XLMRobertaModel"]
        XLMRobertaModel(cfg, add_pooling_layer=False).eval().save_pretrained(enc)
        for f in ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"]:
            if (tok / f).exists():
                (enc / f).write_bytes((tok / f).read_bytes())
        modules = [Transformer(str(enc), max_seq_length=MAX_SEQ), Pooling(384, "mean"), Normalize()]
        st = SentenceTransformer(modules=modules, prompts={"query": "query: ", "document": "passage: "},
                                 device="cpu")
        st.save(str(dest))
        # sentence-transformers bakes truncation into tokenizer.json; ship the clean file.
        (dest / "tokenizer.json").write_bytes((tok / "tokenizer.json").read_bytes())


def make_qwen3(dest: Path):
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Normalize, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling
    from tokenizers import Tokenizer, processors
    from transformers import Qwen3Config, Qwen3Model

    tok = ROOT.parent / "shared" / "fixtures" / "qwen3_tiny_a" / "model"
    with tempfile.TemporaryDirectory() as tmp:
        enc = Path(tmp) / "encoder"
        torch.manual_seed(0)
        cfg = Qwen3Config(vocab_size=151936, hidden_size=1024, intermediate_size=3072,
                          num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                          head_dim=128, max_position_embeddings=32768, rope_theta=1000000.0,
                          tie_word_embeddings=True)
        Qwen3Model(cfg).eval().save_pretrained(enc)
        t = Tokenizer.from_file(str(tok / "tokenizer.json"))
        eot = t.token_to_id("<|endoftext|>")
        t.post_processor = processors.TemplateProcessing(
            single="$A <|endoftext|>", pair="$A <|endoftext|> $B:1 <|endoftext|>:1",
            special_tokens=[("<|endoftext|>", eot)])
        t.save(str(enc / "tokenizer.json"))
        conf = json.loads((tok / "tokenizer_config.json").read_text())
        conf["padding_side"] = "left"
        (enc / "tokenizer_config.json").write_text(json.dumps(conf))
        modules = [Transformer(str(enc), max_seq_length=MAX_SEQ), Pooling(1024, "lasttoken"), Normalize()]
        st = SentenceTransformer(modules=modules, prompts={"query": QWEN3_QUERY, "document": ""}, device="cpu")
        st.save(str(dest))
        (dest / "tokenizer.json").write_bytes((enc / "tokenizer.json").read_bytes())
        # As the published model's: sentence-transformers 6 would otherwise save a "message"
        # modality (the tokenizer has a chat template) and feed texts through the template.
        (dest / "sentence_bert_config.json").write_text(
            json.dumps({"max_seq_length": MAX_SEQ, "do_lower_case": False}))
        cfgj = json.loads((dest / "config.json").read_text())
        cfgj["architectures"] = ["Qwen3ForCausalLM"]  # as the published config says
        (dest / "config.json").write_text(json.dumps(cfgj, indent=2))


def make_modernbert(dest: Path):
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Normalize, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling
    from transformers import ModernBertConfig, ModernBertModel

    tok = MODELS / "all-MiniLM-L6-v2"  # scripts/fetch_minilm.sh
    with tempfile.TemporaryDirectory() as tmp:
        enc = Path(tmp) / "encoder"
        torch.manual_seed(0)
        cfg = ModernBertConfig(vocab_size=30522, hidden_size=768, num_hidden_layers=22,
                               num_attention_heads=12, intermediate_size=1152,
                               global_attn_every_n_layers=3, local_attention=128,
                               max_position_embeddings=8192, pad_token_id=0, cls_token_id=101,
                               sep_token_id=102, bos_token_id=101, eos_token_id=102)
        cfg.architectures = ["ModernBertModel"]
        ModernBertModel(cfg).eval().save_pretrained(enc)
        for f in ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"]:
            if (tok / f).exists():
                (enc / f).write_bytes((tok / f).read_bytes())
        modules = [Transformer(str(enc), max_seq_length=MAX_SEQ), Pooling(768, "cls"), Normalize()]
        st = SentenceTransformer(modules=modules, device="cpu")
        st.save(str(dest))
        (dest / "tokenizer.json").write_bytes((tok / "tokenizer.json").read_bytes())


def make_rotary(dest: Path, model, pooling: str, prompts: dict):
    """A sentence-transformers folder around `model` (a transformers 5 GteModel or
    NomicBertModel), with all-MiniLM-L6-v2's tokenizer."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Normalize, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    tok = MODELS / "all-MiniLM-L6-v2"  # scripts/fetch_minilm.sh
    with tempfile.TemporaryDirectory() as tmp:
        enc = Path(tmp) / "encoder"
        model.eval().save_pretrained(enc)
        for f in ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"]:
            if (tok / f).exists():
                (enc / f).write_bytes((tok / f).read_bytes())
        modules = [Transformer(str(enc), max_seq_length=MAX_SEQ), Pooling(768, pooling), Normalize()]
        SentenceTransformer(modules=modules, prompts=prompts, device="cpu").save(str(dest))
        (dest / "tokenizer.json").write_bytes((tok / "tokenizer.json").read_bytes())


def make_nomic(dest: Path):
    import torch
    from transformers import NomicBertConfig, NomicBertModel

    torch.manual_seed(0)
    cfg = NomicBertConfig(vocab_size=30528, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                          intermediate_size=3072, type_vocab_size=2, max_position_embeddings=8192,
                          rope_parameters={"rope_type": "default", "rope_theta": 1000.0})
    cfg.architectures = ["NomicBertModel"]
    make_rotary(dest, NomicBertModel(cfg), "mean",
                {"query": "search_query: ", "document": "search_document: "})


def make_gte(dest: Path):
    import torch
    from transformers import GteConfig, GteModel

    torch.manual_seed(0)
    cfg = GteConfig(vocab_size=30528, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                    intermediate_size=3072, type_vocab_size=0, max_position_embeddings=8192,
                    pad_token_id=0, rope_parameters={"rope_type": "linear", "rope_theta": 1_000_000.0,
                                                     "factor": 2.0 ** (2 / 64)})
    cfg.architectures = ["GteModel"]
    make_rotary(dest, GteModel(cfg), "cls", {})


def make_distilbert(dest: Path):
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling
    from transformers import DistilBertConfig, DistilBertModel

    tok = MODELS / "all-MiniLM-L6-v2"  # scripts/fetch_minilm.sh
    with tempfile.TemporaryDirectory() as tmp:
        enc = Path(tmp) / "encoder"
        torch.manual_seed(0)
        cfg = DistilBertConfig(vocab_size=30522, dim=768, n_layers=6, n_heads=12, hidden_dim=3072,
                               max_position_embeddings=512, activation="gelu", pad_token_id=0)
        cfg.architectures = ["DistilBertModel"]
        DistilBertModel(cfg).eval().save_pretrained(enc)
        for f in ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"]:
            if (tok / f).exists():
                (enc / f).write_bytes((tok / f).read_bytes())
        modules = [Transformer(str(enc), max_seq_length=MAX_SEQ), Pooling(768, "cls")]
        SentenceTransformer(modules=modules, device="cpu").save(str(dest))
        (dest / "tokenizer.json").write_bytes((tok / "tokenizer.json").read_bytes())


def make_gemma3(dest: Path):
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Dense, Normalize, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling
    from transformers import Gemma3TextConfig, Gemma3TextModel

    tok = MODELS / "all-MiniLM-L6-v2"  # scripts/fetch_minilm.sh
    with tempfile.TemporaryDirectory() as tmp:
        enc = Path(tmp) / "encoder"
        torch.manual_seed(0)
        cfg = Gemma3TextConfig(vocab_size=30522, hidden_size=768, num_hidden_layers=24,
                               num_attention_heads=3, num_key_value_heads=1, head_dim=256,
                               intermediate_size=1152, query_pre_attn_scalar=256,
                               sliding_window=512, max_position_embeddings=2048,
                               use_bidirectional_attention=True, pad_token_id=0,
                               rope_parameters={
                                   "full_attention": {"rope_type": "default", "rope_theta": 1e6},
                                   "sliding_attention": {"rope_type": "default",
                                                         "rope_theta": 1e4}})
        cfg.architectures = ["Gemma3TextModel"]
        Gemma3TextModel(cfg).eval().save_pretrained(enc)
        for f in ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"]:
            if (tok / f).exists():
                (enc / f).write_bytes((tok / f).read_bytes())
        modules = [Transformer(str(enc), max_seq_length=MAX_SEQ), Pooling(768, "mean"),
                   Dense(768, 3072, bias=False, activation_function=torch.nn.Identity()),
                   Dense(3072, 768, bias=False, activation_function=torch.nn.Identity()),
                   Normalize()]
        prompts = {"query": "task: search result | query: ", "document": "title: none | text: "}
        SentenceTransformer(modules=modules, prompts=prompts, device="cpu").save(str(dest))
        (dest / "tokenizer.json").write_bytes((tok / "tokenizer.json").read_bytes())


def make_static(dest: Path):
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import StaticEmbedding
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(MODELS / "all-MiniLM-L6-v2" / "tokenizer.json"))
    torch.manual_seed(0)
    static = StaticEmbedding(tok, embedding_dim=1024)
    SentenceTransformer(modules=[static], device="cpu").save(str(dest))


def make_t5(dest: Path):
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Dense, Normalize, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling
    from transformers import T5Config, T5EncoderModel

    from bench_rerank_models import t5_tokenizer

    max_seq = 512  # gtr-t5-base's
    with tempfile.TemporaryDirectory() as tmp:
        enc = Path(tmp) / "encoder"
        enc.mkdir()
        t5_tokenizer(enc, max_seq)
        clean = (enc / "tokenizer.json").read_bytes()
        torch.manual_seed(0)
        cfg = T5Config(vocab_size=32128, d_model=768, d_kv=64, d_ff=3072, num_layers=12, num_heads=12,
                       relative_attention_num_buckets=32, relative_attention_max_distance=128,
                       dropout_rate=0.1, layer_norm_epsilon=1e-6, feed_forward_proj="relu",
                       pad_token_id=0, eos_token_id=1,
                       decoder_start_token_id=0)
        cfg.architectures = ["T5EncoderModel"]
        T5EncoderModel(cfg).eval().save_pretrained(enc)
        modules = [Transformer(str(enc), max_seq_length=max_seq), Pooling(768, "mean"),
                   Dense(768, 768, bias=False, activation_function=torch.nn.Identity()), Normalize()]
        SentenceTransformer(modules=modules, device="cpu").save(str(dest))
        (dest / "tokenizer.json").write_bytes(clean)


def jina_fixture():
    """tests/fixtures/jina_v3_tiny/make.py as a module (its layout helpers)."""
    import importlib.util

    path = ROOT / "tests" / "fixtures" / "jina_v3_tiny" / "make.py"
    spec = importlib.util.spec_from_file_location("jina_v3_make", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def jina_model():
    """The seeded random JinaEmbeddingsV3Model of jina-embeddings-v3's shape, its tensors in
    jina's names and its LoRA factors (scaled down: the adapters move the vectors, not swamp
    them)."""
    import torch
    from transformers import JinaEmbeddingsV3Config, JinaEmbeddingsV3Model

    fx = jina_fixture()
    torch.manual_seed(0)
    cfg = JinaEmbeddingsV3Config(vocab_size=30522, hidden_size=1024, num_hidden_layers=24,
                                 num_attention_heads=16, intermediate_size=4096,
                                 max_position_embeddings=8194, type_vocab_size=1, pad_token_id=0,
                                 rope_parameters={"rope_type": "default", "rope_theta": 20000.0})
    model = JinaEmbeddingsV3Model(cfg).eval()
    tensors = fx.jina_tensors(model, cfg.num_hidden_layers)
    factors = {k: (0.1 * a, 0.1 * b) for k, (a, b) in
               fx.lora_factors(tensors, 4, torch.Generator().manual_seed(1)).items()}
    return fx, cfg, tensors, factors


def make_jina(dest: Path):
    import torch

    fx, cfg, tensors, factors = jina_model()
    dest.mkdir(parents=True, exist_ok=True)
    fx.write_checkpoint(dest, cfg, tensors, factors, theta=20000.0, rank=4, alpha=1,
                        dtype=torch.float32, max_seq_length=MAX_SEQ)
    tok = MODELS / "all-MiniLM-L6-v2"  # scripts/fetch_minilm.sh
    for f in ["tokenizer.json", "tokenizer_config.json"]:
        (dest / f).write_bytes((tok / f).read_bytes())


def jina_peer(texts, threads: int, rounds: int):
    """transformers' JinaEmbeddingsV3Model with the retrieval.passage adapter merged, fed as
    sentence-transformers feeds a model: `(embeddings in input order, median seconds)`."""
    import torch
    from transformers import AutoTokenizer, JinaEmbeddingsV3Model

    fx, cfg, tensors, factors = jina_model()
    weights = fx.merged(tensors, factors, "retrieval.passage", 1 / 4)
    model = JinaEmbeddingsV3Model(cfg).eval()
    model.load_state_dict(fx.to_transformers(weights, cfg.num_hidden_layers), strict=True)
    del tensors, factors, weights
    tokenizer = AutoTokenizer.from_pretrained(str(MODELS / "all-MiniLM-L6-v2"))
    prefix = fx.INSTRUCTIONS["retrieval.passage"]
    inputs = [prefix + t for t in texts]
    torch.set_num_threads(threads)

    def encode():
        order = sorted(range(len(inputs)), key=lambda i: -len(inputs[i]))
        out = [None] * len(inputs)
        for start in range(0, len(order), 32):
            batch = order[start:start + 32]
            enc = tokenizer([inputs[i] for i in batch], padding=True, truncation=True,
                            max_length=MAX_SEQ, return_tensors="pt")
            with torch.inference_mode():
                states = model(**enc).last_hidden_state
            mask = enc["attention_mask"].unsqueeze(-1).to(states.dtype)
            mean = torch.nn.functional.normalize((states * mask).sum(1) / mask.sum(1), dim=1)
            for i, row in zip(batch, mean):
                out[i] = row.numpy()
        return out

    return first_and_median(encode, rounds)


def fetched(dest: Path):
    raise SystemExit(f"{dest}: run scripts/fetch_minilm.sh first")


MAKERS = {
    "minilm": ("all-MiniLM-L6-v2", fetched),  # the BERT baseline, the real model
    "xlmr": ("bench-xlmr-e5-small", make_xlmr),
    "qwen3": ("bench-qwen3-embedding-0.6b", make_qwen3),
    "modernbert": ("bench-gte-modernbert-base", make_modernbert),
    "nomic": ("bench-nomic-embed-text-v1.5", make_nomic),
    "gte": ("bench-gte-base-en-v1.5", make_gte),
    "distilbert": ("bench-msmarco-distilbert-base-tas-b", make_distilbert),
    "gemma3": ("bench-embeddinggemma-300m", make_gemma3),
    "static": ("bench-static-retrieval-mrl-en-v1", make_static),
    "t5": ("bench-gtr-t5-base", make_t5),
    "jina": ("bench-jina-embeddings-v3", make_jina),
}


def bench(arch: str, threads: int, rounds: int):
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer

    name, make = MAKERS[arch]
    dest = MODELS / name
    if not (dest / "modules.json").exists():
        print(f"writing {dest}", file=sys.stderr)
        make(dest)
    texts = [t.replace("\n", " ") for t in scifact_documents(DOCS[arch])]
    torch.set_num_threads(threads)
    if arch == "jina":
        ref, st_seconds = jina_peer(texts, threads, rounds)
    else:
        st = SentenceTransformer(str(dest), device="cpu")
        prompt = "document" if st.prompts.get("document") else None
        encode = lambda: st.encode(texts, batch_size=32, prompt_name=prompt, convert_to_numpy=True)
        ref, st_seconds = first_and_median(encode, rounds)
        del st

    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("\n".join(texts))
        texts_file = f.name
    env = dict(os.environ, RERANK_BENCH_EMBED_MODEL=str(dest), RERANK_BENCH_TEXTS=texts_file,
               RERANK_BENCH_THREADS=str(threads), RAYON_NUM_THREADS=str(threads),
               RERANK_BENCH_REPEATS=str(rounds))
    cmd = [BENCH_BIN] if BENCH_BIN else ["cargo", "bench", *CARGO_FEATURES, "--bench", "embed_models"]
    out = run(cmd, env)
    os.unlink(texts_file)
    line = json.loads([l for l in out.splitlines() if l.startswith("{")][-1])
    ours = np.array(line["first"])
    cos = [float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b))) for a, b in zip(ours, ref[: len(ours)])]
    if min(cos) < 0.9999:
        raise SystemExit(f"{arch}: embeddings differ from sentence-transformers (cosine {cos})")
    rust_seconds = statistics.median(line["seconds"])
    n = len(texts)
    print(f"{arch} ({name}), {n} docs, {threads} threads, cpu [{cpu_flags()}]: "
          f"rerank {n / rust_seconds:.2f} docs/s, sentence-transformers {n / st_seconds:.2f} docs/s, "
          f"{st_seconds / rust_seconds:.2f}x (smallest cosine {min(cos):.7f}; load {line['load_seconds']:.1f} s)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", nargs="+", choices=sorted(MAKERS), default=["xlmr", "modernbert", "qwen3"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    for arch in args.arch:
        bench(arch, args.threads, args.rounds)


if __name__ == "__main__":
    main()
