#!/usr/bin/env python3
"""PyTorch peer throughput for `examples/device_bench.rs`, on the GPU (or the CPU), and the random
model directories both sides load.

Three model shapes, randomly initialised by transformers with a fixed seed:

- cross-encoder: bge-reranker-base's XLMRobertaForSequenceClassification (hidden 768, 12 layers,
  12 heads, ffn 3072, vocab 250002, 514 positions, 1 label), scored through sentence-transformers'
  CrossEncoder.predict (transformers directly if that fails);
- qwen3-reranker: Qwen3-Reranker-0.6B's Qwen3ForCausalLM (hidden 1024, 28 layers, 16 heads / 8 kv
  heads, head_dim 128, ffn 3072, vocab 151669, tied embeddings), scored as the model card does:
  prefix + body + suffix token ids, left-padded, softmax over the last position's [no, yes] logits
  (the language-model head run on the last position only: `logits_to_keep=1`);
- embedder: all-MiniLM-L6-v2's BertModel (hidden 384, 6 layers, 12 heads, ffn 1536, vocab 30522)
  with mean pooling and normalisation, through SentenceTransformer.encode;
- cross-encoder-large (only when named in --kinds; "all" is the three above): bge-reranker-v2-m3's
  XLMRobertaForSequenceClassification (hidden 1024, 24 layers, 16 heads, ffn 4096, vocab 250002,
  8194 positions), the larger shape, scored as the cross-encoder;
- cross-encoder-modernbert (only when named): gte-reranker-modernbert-base's
  ModernBertForSequenceClassification (hidden 768, 22 layers, 12 heads, GeGLU ffn 1152, a global
  layer every 3rd and the others in 128-token windows, RoPE thetas 160,000 / 10,000, no biases but
  the classifier's, mean pooling, vocab 50368), scored as the cross-encoder;
- cross-encoder-deberta (only when named): mxbai-rerank-base-v1's DebertaV2ForSequenceClassification
  (DeBERTa-v3-base: hidden 768, 12 layers, 12 heads, ffn 3072, position buckets 256, shared
  relative-position projections, no absolute positions, no token types, vocab 128100), scored as the
  cross-encoder.

Each runs in every --dtypes entry (f32, f16, bf16) and prints one JSON line:
{"impl": "pytorch", "kind", "device", "dtype", "items", "batch", "tokens_per_item", "seconds",
 "items_per_s", "runs", "peer"}; seconds is the median of --runs timed passes after a warm-up pass.

The texts are examples/device_bench.rs's: --items (query i, document i) pairs (documents alone for the
embedder), document i = --doc-words words of WORDS from word 7 i on, query i = --query-words words from
word 3 i on (cyclically). The tokenizers are WordLevel over a generated vocabulary with a `Whitespace`
pre-tokenizer, so every space-separated alphanumeric word is exactly one token (a word outside the
vocabulary is one [UNK]). `tokens_per_item` in the output says what the model saw (specials and
template included). Timing: one pass to warm up over the first --warmup-items items (every item by
default, as device_bench), then --runs timed passes.

--dump-texts FILE writes that workload as JSON {"queries", "docs"}.

--save DIR writes the three random checkpoints as model directories (float32 safetensors, loadable
offline by transformers, sentence-transformers and the Rust crate):
  DIR/cross-encoder/  config.json, model.safetensors, tokenizer.json, tokenizer_config.json
  DIR/qwen3-reranker/ config.json, model.safetensors, tokenizer.json, tokenizer_config.json
  DIR/embedder/       the same plus modules.json, 1_Pooling/, 2_Normalize/, sentence_bert_config.json
Tokenizer ids follow the real models where it matters: XLM-R <s>=0 <pad>=1 </s>=2 <unk>=3
<mask>=250001 (RoBERTa post-processor `<s> q </s></s> d </s>`); BERT [PAD]=0 [UNK]=100 [CLS]=101
[SEP]=102 [MASK]=103 (`[CLS] a [SEP] b [SEP]`); ModernBERT [UNK]=50280 [CLS]=50281 [SEP]=50282
[PAD]=50283 [MASK]=50284 (`[CLS] a [SEP] b [SEP]`, token types all 0); DeBERTa-v3 [PAD]=0 [CLS]=1
[SEP]=2 [UNK]=3 [MASK]=128000 (`[CLS] a [SEP] b [SEP]`, token types 0 then 1); Qwen3 "no"=2152 "yes"=9693 <|endoftext|>=151643
(pad) <|im_start|>=151644 <|im_end|>=151645 <think>=151667 </think>=151668 as special tokens, no
post-processor. --models DIR then times those saved directories instead of fresh in-memory ones
(so both sides run the identical weights).

--tiny: tiny shapes and vocabularies and a small workload, to test the script on a CPU.
Needs torch, transformers (5.x), sentence-transformers, tokenizers, safetensors; no network.

Usage:
  python3 scripts/gpu_peer.py --save /tmp/peer_models [--tiny]
  python3 scripts/gpu_peer.py --models /tmp/peer_models --kinds all --dtypes f32,f16 \
      [--items 512] [--batch 32] [--doc-words 120] [--query-words 8] [--device cuda:0] [--runs 3]
"""
import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402

KINDS = ["cross-encoder", "embedder", "qwen3-reranker"]
# Named in --kinds only (the large one's float32 checkpoint is 2.3 GB; the other architectures are
# gpu_check.sh's rows of their own).
LARGE = ["cross-encoder-large", "cross-encoder-modernbert", "cross-encoder-deberta"]


def family(kind):
    """The kind whose runner a kind shares (every cross-encoder-* is scored as the cross-encoder)."""
    return "cross-encoder" if kind.startswith("cross-encoder") else kind
DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}

# The Qwen3-Reranker prompt (model card; the same strings as src/rerankers/qwen3/template.rs).
QWEN3_PREFIX = (
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the "
    'Instruct provided. Note that the answer can only be "yes" or "no".<|im_end|>\n<|im_start|>user\n'
)
QWEN3_SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
QWEN3_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"
QWEN3_MAX_LENGTH = 8192

# The words the texts are made of: examples/device_bench.rs's WORDS, in the same order (keep the two
# lists identical). Text `start, n` is n words from WORDS[start] on, cyclically: document i starts at
# word 7 i, query i at word 3 i, so both programs feed the very same (query i, document i) pairs.
WORDS = [
    "the", "model", "ranks", "documents", "by", "their", "relevance", "to", "a", "query", "search",
    "engines", "use", "inverted", "indexes", "and", "dense", "vectors", "for", "retrieval", "of", "passages",
    "from", "large", "collections", "rust", "is", "fast", "memory", "safe", "language", "with", "zero",
    "cost", "abstractions", "graphics", "cards", "multiply", "matrices", "in", "parallel", "attention",
    "layers", "compare", "every", "token", "other", "one", "batch", "sizes", "grow", "until", "throughput",
    "stops", "rising", "latency", "matters", "when", "users", "wait", "answers", "should", "cite", "sources",
]
# More words for the generated vocabularies (so that the ids of common words look like words).
FILL_WORDS = """
the of and to in is was for on that with as by at from his her it an are were which be this has had
not but they their one all also first new two after its who have been more other time years when
protein cell gene study patients disease cancer treatment clinical data results analysis model
""".split()

SHAPES = {
    "cross-encoder": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                          vocab_size=250002, max_position_embeddings=514),
    "qwen3-reranker": dict(hidden_size=1024, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                           head_dim=128, intermediate_size=3072, vocab_size=151669),
    "embedder": dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536,
                     vocab_size=30522, max_position_embeddings=512),
    "cross-encoder-large": dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                                intermediate_size=4096, vocab_size=250002, max_position_embeddings=8194),
    "cross-encoder-modernbert": dict(hidden_size=768, num_hidden_layers=22, num_attention_heads=12,
                                     intermediate_size=1152, vocab_size=50368, max_position_embeddings=8192),
    "cross-encoder-deberta": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                                  intermediate_size=3072, vocab_size=128100, max_position_embeddings=512),
}
TINY = {
    "cross-encoder": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                          vocab_size=1200, max_position_embeddings=514),
    "qwen3-reranker": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                           head_dim=8, intermediate_size=64, vocab_size=1200),
    "embedder": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                     vocab_size=1200, max_position_embeddings=512),
    "cross-encoder-large": dict(hidden_size=48, num_hidden_layers=3, num_attention_heads=4, intermediate_size=96,
                                vocab_size=1200, max_position_embeddings=514),
    "cross-encoder-modernbert": dict(hidden_size=32, num_hidden_layers=4, num_attention_heads=2,
                                     intermediate_size=48, vocab_size=1200, max_position_embeddings=512),
    "cross-encoder-deberta": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=64, vocab_size=1200, max_position_embeddings=512),
}


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- tokenizers


def word_level_tokenizer(size, fixed, specials):
    """A WordLevel tokenizer of exactly `size` ids: `fixed` (token -> id) where given, WORDS and the
    template's words next, then filler tokens `t<N>`; `specials` are registered as special tokens."""
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers

    extra = ["Judge", "whether", "Document", "meets", "requirements", "based", "Query", "Instruct", "provided",
             "Note", "answer", "can", "only", "or", "system", "user", "assistant", "Given", "web", "search",
             "query", "retrieve", "relevant", "passages", '"', '".', "<", ">:", ".", ",", ":"]
    vocab = dict(fixed)
    used = set(vocab.values())
    assert len(used) == len(vocab) and max(used) < size, "fixed ids collide or exceed the vocabulary"
    pool = iter([w for w in dict.fromkeys(WORDS + FILL_WORDS + extra) if w not in vocab])
    filler = 0
    for i in range(size):
        if i in used:
            continue
        tok = next(pool, None)
        while tok is None or tok in vocab:
            tok, filler = f"t{filler}", filler + 1
        vocab[tok] = i
    assert len(vocab) == size
    unk = next(t for t in specials if "unk" in t.lower())
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=unk))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    return tok


def build_tokenizer(kind, vocab_size, tiny):
    """(tokenizers.Tokenizer, tokenizer_config dict) for a model kind."""
    from tokenizers import processors

    if kind in ("cross-encoder-modernbert", "cross-encoder-deberta"):
        if kind == "cross-encoder-modernbert":
            first = 50280 if not tiny else vocab_size - 5
            fixed = dict(zip(["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"], range(first, first + 5)))
            pair = "[CLS] $A [SEP] $B [SEP]"
        else:
            fixed = {"[PAD]": 0, "[CLS]": 1, "[SEP]": 2, "[UNK]": 3, "[MASK]": 128000 if not tiny else vocab_size - 1}
            pair = "[CLS] $A [SEP] $B:1 [SEP]:1"
        tok = word_level_tokenizer(vocab_size, fixed, list(fixed))
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair=pair, special_tokens=[("[CLS]", fixed["[CLS]"]), ("[SEP]", fixed["[SEP]"])])
        cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 512, "unk_token": "[UNK]",
               "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]", "mask_token": "[MASK]",
               "padding_side": "right"}
    elif family(kind) == "cross-encoder":
        fixed = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "<mask>": vocab_size - 1}
        tok = word_level_tokenizer(vocab_size, fixed, list(fixed))
        tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
        cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 512, "bos_token": "<s>",
               "eos_token": "</s>", "sep_token": "</s>", "cls_token": "<s>", "unk_token": "<unk>",
               "pad_token": "<pad>", "mask_token": "<mask>", "padding_side": "right"}
    elif kind == "embedder":
        fixed = {"[PAD]": 0, "[UNK]": 100, "[CLS]": 101, "[SEP]": 102, "[MASK]": 103}
        tok = word_level_tokenizer(vocab_size, fixed, list(fixed))
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[("[CLS]", 101), ("[SEP]", 102)])
        cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 512, "unk_token": "[UNK]",
               "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]", "mask_token": "[MASK]",
               "padding_side": "right"}
    else:
        names = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
        if tiny:
            fixed = {n: vocab_size - len(names) + i for i, n in enumerate(names)}
            fixed.update({"no": 10, "yes": 11})
        else:
            fixed = dict(zip(names, [151643, 151644, 151645, 151667, 151668]))
            fixed.update({"no": 2152, "yes": 9693})
        fixed["<unk>"] = vocab_size - len(names) - 1  # WordLevel needs one; Qwen3's byte BPE has none
        tok = word_level_tokenizer(vocab_size, fixed, names + ["<unk>"])
        cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 131072,
               "pad_token": "<|endoftext|>", "eos_token": "<|im_end|>", "unk_token": "<unk>",
               "padding_side": "left"}
    return tok, cfg


# ---------------------------------------------------------------- models


def make_config(kind, shape, tiny):
    import transformers as tf

    if kind == "cross-encoder-modernbert":
        from model_shapes import modernbert_reranker_config

        shape = dict(shape)
        layers, v = shape.pop("num_hidden_layers"), shape["vocab_size"]
        cls, sep, pad = range(50281, 50284) if not tiny else range(v - 4, v - 1)
        return modernbert_reranker_config(layers, cls, sep, pad, **shape)
    if kind == "cross-encoder-deberta":
        return tf.DebertaV2Config(
            architectures=["DebertaV2ForSequenceClassification"], num_labels=1, hidden_act="gelu",
            type_vocab_size=0, layer_norm_eps=1e-7, relative_attention=True, max_relative_positions=-1,
            position_buckets=256, norm_rel_ebd="layer_norm", share_att_key=True, pos_att_type=["p2c", "c2p"],
            position_biased_input=False, pooler_hidden_size=shape["hidden_size"], pooler_hidden_act="gelu",
            pooler_dropout=0, pad_token_id=0, **shape)
    if family(kind) == "cross-encoder":
        return tf.XLMRobertaConfig(
            architectures=["XLMRobertaForSequenceClassification"], num_labels=1, id2label={0: "LABEL_0"},
            label2id={"LABEL_0": 0}, hidden_act="gelu", layer_norm_eps=1e-5, pad_token_id=1, bos_token_id=0,
            eos_token_id=2, type_vocab_size=1, position_embedding_type="absolute", **shape)
    if kind == "embedder":
        return tf.BertConfig(architectures=["BertModel"], hidden_act="gelu", layer_norm_eps=1e-12, pad_token_id=0,
                             type_vocab_size=2, **shape)
    # <|endoftext|> and <|im_end|>: the real ids, or where build_tokenizer puts them in a tiny vocabulary.
    v = shape["vocab_size"]
    bos, eos = (151643, 151645) if v > 151645 else (v - 5, v - 3)
    return tf.Qwen3Config(
        architectures=["Qwen3ForCausalLM"], hidden_act="silu", max_position_embeddings=40960, rms_norm_eps=1e-6,
        rope_theta=1000000.0, tie_word_embeddings=True, attention_bias=False, use_cache=False,
        use_sliding_window=False, bos_token_id=bos, eos_token_id=eos, **shape)


def model_class(kind):
    import transformers as tf

    own = {"cross-encoder-modernbert": tf.ModernBertForSequenceClassification,
           "cross-encoder-deberta": tf.DebertaV2ForSequenceClassification}
    return own.get(kind) or {"cross-encoder": tf.XLMRobertaForSequenceClassification, "embedder": tf.BertModel,
                             "qwen3-reranker": tf.Qwen3ForCausalLM}[family(kind)]


def random_model(kind, tiny, seed, init_device):
    """A transformers model of `kind`'s shape, random weights from `seed` (float32)."""
    shape = (TINY if tiny else SHAPES)[kind]
    torch.manual_seed(seed)
    with torch.device(init_device):
        model = model_class(kind)(make_config(kind, shape, tiny))
    if kind == "qwen3-reranker":
        # transformers initialises RMSNorm weights to exactly 1: perturb them so a norm bug shows.
        g = torch.Generator(device=init_device).manual_seed(seed + 1)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith("norm.weight"):
                    p.add_(0.1 * torch.randn(p.shape, generator=g, device=p.device))
    return model.eval()


def save_dir(kind, out, tiny, seed, init_device):
    """Writes kind's random checkpoint and tokenizer to `out` (a model directory)."""
    out.mkdir(parents=True, exist_ok=True)
    model = random_model(kind, tiny, seed, init_device)
    model.to("cpu").save_pretrained(out, safe_serialization=True)
    tok, tok_cfg = build_tokenizer(kind, model.config.vocab_size, tiny)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps(tok_cfg, indent=2))
    if kind == "embedder":
        modules = [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
        ]
        (out / "modules.json").write_text(json.dumps(modules, indent=2))
        (out / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 256, "do_lower_case": False}))
        (out / "1_Pooling").mkdir(exist_ok=True)
        (out / "1_Pooling" / "config.json").write_text(json.dumps({
            "word_embedding_dimension": model.config.hidden_size, "pooling_mode_cls_token": False,
            "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False,
            "pooling_mode_mean_sqrt_len_tokens": False, "pooling_mode_weightedmean_tokens": False,
            "pooling_mode_lasttoken": False, "include_prompt": True}, indent=2))
        (out / "2_Normalize").mkdir(exist_ok=True)
    n = sum(p.numel() for p in model.parameters())
    log(f"saved {kind} to {out}: {n / 1e6:.1f} M parameters, vocab {model.config.vocab_size}")
    del model


def ensure_dir(kind, root, tiny, seed, init_device):
    """The model directory for `kind`: root/kind, written first when absent."""
    d = Path(root) / kind
    if not (d / "model.safetensors").is_file():
        save_dir(kind, d, tiny, seed, init_device)
    return d


# ---------------------------------------------------------------- workloads


def text(start, n):
    return " ".join(WORDS[(start + j) % len(WORDS)] for j in range(n))


def texts(args):
    """(queries, docs): query i and document i as examples/device_bench.rs makes them."""
    queries = [text(3 * i, args.query_words) for i in range(args.items)]
    docs = [text(7 * i, args.doc_words) for i in range(args.items)]
    return queries, docs


def sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def cross_encoder_runner(d, device, dtype, args):
    queries, docs = texts(args)
    pairs = list(zip(queries, docs))
    try:
        if os.environ.get("GPU_PEER_NO_ST"):
            raise RuntimeError("GPU_PEER_NO_ST is set")
        from sentence_transformers import CrossEncoder

        ce = CrossEncoder(str(d), device=device, max_length=512)
        ce.model.to(dtype)
        ce.model.eval()

        def run(p):
            return ce.predict(p, batch_size=args.batch, show_progress_bar=False, convert_to_numpy=True)

        tokens = len(ce.tokenizer(queries[0], docs[0])["input_ids"])
        peer = "sentence-transformers CrossEncoder.predict"
    except Exception as e:  # noqa: BLE001 - fall back to transformers directly
        log(f"CrossEncoder unavailable ({type(e).__name__}: {e}); using transformers directly")
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(d))
        model = AutoModelForSequenceClassification.from_pretrained(str(d), dtype=dtype).to(device).eval()

        @torch.inference_mode()
        def run(p):
            out = []
            for i in range(0, len(p), args.batch):
                q, ds = zip(*p[i:i + args.batch])
                enc = tok(list(q), list(ds), padding=True, truncation="longest_first", max_length=512,
                          return_tensors="pt").to(device)
                out.append(torch.sigmoid(model(**enc).logits.float()[:, 0]).cpu())
            return torch.cat(out).numpy()

        tokens = len(tok(queries[0], docs[0])["input_ids"])
        peer = f"transformers {type(model).__name__}"
    return (lambda n=None: run(pairs[:n])), tokens, peer


def embedder_runner(d, device, dtype, args):
    from sentence_transformers import SentenceTransformer

    _, docs = texts(args)
    st = SentenceTransformer(str(d), device=device)
    st.to(dtype)
    st.eval()

    def run(t):
        return st.encode(t, batch_size=args.batch, show_progress_bar=False, convert_to_numpy=True,
                         normalize_embeddings=False)  # the Normalize module already normalises

    tokens = len(st.tokenizer(docs[0])["input_ids"])
    return (lambda n=None: run(docs[:n])), tokens, \
        "sentence-transformers SentenceTransformer.encode (mean pooling, Normalize)"


def qwen3_runner(d, device, dtype, args):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    queries, docs = texts(args)
    tok = AutoTokenizer.from_pretrained(str(d), padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(str(d), dtype=dtype, attn_implementation="sdpa").to(device).eval()
    yes, no = tok.convert_tokens_to_ids("yes"), tok.convert_tokens_to_ids("no")
    prefix = tok.encode(QWEN3_PREFIX, add_special_tokens=False)
    suffix = tok.encode(QWEN3_SUFFIX, add_special_tokens=False)
    bodies = [f"<Instruct>: {QWEN3_INSTRUCTION}\n<Query>: {q}\n<Document>: {doc}" for q, doc in zip(queries, docs)]

    @torch.inference_mode()
    def run(b):
        scores = []
        for i in range(0, len(b), args.batch):
            enc = tok(b[i:i + args.batch], padding=False, truncation="longest_first", return_attention_mask=False,
                      max_length=QWEN3_MAX_LENGTH - len(prefix) - len(suffix), add_special_tokens=False)
            ids = [{"input_ids": prefix + x + suffix} for x in enc["input_ids"]]
            batch = tok.pad(ids, padding=True, return_tensors="pt").to(device)
            logits = model(**batch, logits_to_keep=1).logits[:, -1, :]
            pair = torch.stack([logits[:, no], logits[:, yes]], dim=1).float()
            scores.append(torch.softmax(pair, dim=1)[:, 1].cpu())
        return torch.cat(scores).numpy()

    tokens = len(prefix) + len(tok.encode(bodies[0], add_special_tokens=False)) + len(suffix)
    return (lambda n=None: run(bodies[:n])), tokens, \
        "transformers Qwen3ForCausalLM (sdpa, left padding, logits_to_keep=1)"


RUNNERS = {"cross-encoder": cross_encoder_runner, "embedder": embedder_runner, "qwen3-reranker": qwen3_runner}


def bench(kind, dtype_name, d, device, args):
    runner = RUNNERS[family(kind)]
    full, tokens, peer = runner(d, device, DTYPES[dtype_name], args)
    # The warm-up, as device_bench does: one pass over the first --warmup-items items (all by
    # default; none with 0).
    if args.warmup_items != 0:
        full(args.warmup_items)
    sync(device)
    times, out = [], None
    for _ in range(args.runs):
        t0 = time.perf_counter()
        out = full()
        sync(device)
        times.append(time.perf_counter() - t0)
    first = [float(x) for x in (out[0][:3] if kind == "embedder" else out[:3])]
    seconds = statistics.median(times)
    row = {"impl": "pytorch", "kind": kind, "device": device, "dtype": dtype_name, "items": args.items,
           "batch": args.batch, "warmup_items": min(args.items, args.items if args.warmup_items is None
                                                    else args.warmup_items),
           "tokens_per_item": tokens, "seconds": round(seconds, 6),
           "items_per_s": round(args.items / seconds, 3), "runs": [round(t, 6) for t in times],
           "first_outputs": [round(x, 6) for x in first], "peer": peer,
           "torch": torch.__version__, "f32_matmul": torch.get_float32_matmul_precision()}
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--save", metavar="DIR", help="write the three random model directories under DIR and exit")
    ap.add_argument("--models", metavar="DIR", help="time the directories under DIR (written there first if absent)")
    ap.add_argument("--kinds", default="all",
                    help="comma list of cross-encoder,embedder,qwen3-reranker,cross-encoder-large,"
                         "cross-encoder-modernbert,cross-encoder-deberta, or all (the first three)")
    ap.add_argument("--dtypes", default="f32,f16", help="comma list of f32,f16,bf16")
    ap.add_argument("--device", default=None, help="cuda:0 (default when CUDA is there) or cpu")
    ap.add_argument("--items", type=int, default=512)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--doc-words", type=int, default=120)
    ap.add_argument("--query-words", type=int, default=8)
    ap.add_argument("--runs", type=int, default=3, help="timed passes after the warm-up; the median is reported")
    ap.add_argument("--warmup-items", type=int, default=None,
                    help="warm up on the first N items (default: all; 0: no warm-up pass), as device_bench")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tiny", action="store_true", help="tiny shapes and workload (CPU test)")
    ap.add_argument("--dump-texts", metavar="FILE", help='write {"queries": [...], "docs": [...]} and exit')
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    args = ap.parse_args()

    if args.threads:
        torch.set_num_threads(args.threads)
    device = args.device or ("cuda:0" if torch.cuda.is_available() else "cpu")
    init_device = device if device.startswith("cuda") else "cpu"
    kinds = KINDS if args.kinds == "all" else args.kinds.split(",")
    for k in kinds:
        if k not in KINDS + LARGE:
            raise SystemExit(f"unknown kind {k!r}; expected one of {KINDS + LARGE}")
    dtypes = args.dtypes.split(",")
    for t in dtypes:
        if t not in DTYPES:
            raise SystemExit(f"unknown dtype {t!r}; expected one of {list(DTYPES)}")
    if args.tiny and "--items" not in sys.argv:
        args.items, args.batch, args.doc_words, args.runs = 16, 4, 20, 1

    if args.dump_texts:
        queries, docs = texts(args)
        Path(args.dump_texts).write_text(json.dumps({"queries": queries, "docs": docs}))
        return
    if args.save:
        for k in kinds:
            save_dir(k, Path(args.save) / k, args.tiny, args.seed, init_device)
        return

    import tempfile

    root = args.models or tempfile.mkdtemp(prefix="gpu_peer_")
    for k in kinds:
        d = ensure_dir(k, root, args.tiny, args.seed, init_device)
        for t in dtypes:
            try:
                print(json.dumps(bench(k, t, d, device, args)), flush=True)
            except Exception as e:  # noqa: BLE001 - one failing (kind, dtype) must not stop the rest
                log(f"{k} {t}: FAILED: {type(e).__name__}: {e}")
                print(json.dumps({"impl": "pytorch", "kind": k, "device": device, "dtype": t,
                                  "error": f"{type(e).__name__}: {e}"}), flush=True)


if __name__ == "__main__":
    main()
