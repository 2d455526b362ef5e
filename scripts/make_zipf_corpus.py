#!/usr/bin/env python3
"""A seeded synthetic collection in BEIR layout, for recall at scale.

    python scripts/make_zipf_corpus.py --docs 1000000 --queries 1000 --out DIR [--seed 14]

Writes DIR/corpus.jsonl, DIR/queries.jsonl and DIR/qrels/test.tsv:

- a vocabulary of `--vocab` pseudo-words (lower-case letters: the rank of a word in bijective
  base 26, so frequent words are short; words under three letters get a suffix), drawn with Zipf's law (`p(rank) ~ 1 / rank^s`);
- document lengths from a log-normal around `--mean-len` tokens (median ~ 0.85 x mean, a long
  right tail, at least 3 tokens), like abstracts;
- every query is drawn from one document: 2 to 5 distinct words of it, skipping the
  `--stop-ranks` most frequent words (stopword-like), in random order; the document it was drawn
  from is its one relevant document (qrels score 1).

Tokens are separated by single spaces and need no analysis (no case, no punctuation, no
stemming), so a whitespace tokenizer gives every engine the same terms. Same arguments, same
files (numpy's PCG64 seeded with `--seed`). Needs numpy only. Generated corpora are scratch
data: write them outside the repository (e.g. under $RERANK_SCALE_DIR).
"""

import argparse
import json
import os
import sys

import numpy as np


def words(n: int) -> list:
    """`n` distinct pseudo-words; short ones for low ranks."""
    letters = "etaoinshrdlucmfwypvbgkjqxz"
    out = []
    for i in range(n):
        x = i + 1
        w = []
        while x > 0:
            x, r = divmod(x - 1, 26)
            w.append(letters[r])
        out.append("".join(w))
    # pad words of one or two letters so no engine drops them as too short
    return [w if len(w) >= 3 else w + "x" * (3 - len(w)) + str(i % 10) for i, w in enumerate(out)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=14)
    ap.add_argument("--vocab", type=int, default=500_000)
    ap.add_argument("--zipf", type=float, default=1.07, help="Zipf exponent s")
    ap.add_argument("--mean-len", type=float, default=65.0)
    ap.add_argument("--stop-ranks", type=int, default=100)
    args = ap.parse_args()
    if args.docs < 1 or args.queries < 0 or args.vocab < args.stop_ranks + 10:
        ap.error("need --docs >= 1, --queries >= 0, --vocab > --stop-ranks + 10")

    rng = np.random.Generator(np.random.PCG64(args.seed))
    vocab = np.array(words(args.vocab), dtype=object)
    p = 1.0 / np.arange(1, args.vocab + 1, dtype=np.float64) ** args.zipf
    cdf = np.cumsum(p)
    cdf /= cdf[-1]

    sigma = 0.55
    mu = np.log(args.mean_len) - sigma * sigma / 2
    lengths = np.maximum(3, np.round(rng.lognormal(mu, sigma, args.docs))).astype(np.int64)

    os.makedirs(os.path.join(args.out, "qrels"), exist_ok=True)
    query_docs = np.sort(rng.choice(args.docs, size=min(args.queries, args.docs), replace=False))
    query_set = {int(d): i for i, d in enumerate(query_docs)}
    queries = [None] * len(query_docs)

    chunk = 50_000
    with open(os.path.join(args.out, "corpus.jsonl"), "w") as f:
        for start in range(0, args.docs, chunk):
            stop = min(args.docs, start + chunk)
            lens = lengths[start:stop]
            ranks = np.searchsorted(cdf, rng.random(int(lens.sum())), side="right")
            ranks = np.minimum(ranks, args.vocab - 1)
            toks = vocab[ranks]
            offs = np.concatenate(([0], np.cumsum(lens)))
            lines = []
            for j in range(stop - start):
                d = start + j
                a, b = offs[j], offs[j + 1]
                lines.append(json.dumps({"_id": f"d{d}", "title": "", "text": " ".join(toks[a:b])}))
                if d in query_set:
                    r = np.unique(ranks[a:b])
                    r = r[r >= args.stop_ranks]
                    if len(r) < 2:
                        r = np.unique(ranks[a:b])
                    n = int(rng.integers(2, 6))
                    pick = rng.permutation(r)[: min(n, len(r))]
                    queries[query_set[d]] = (f"q{query_set[d]}", " ".join(vocab[pick]), f"d{d}")
            f.write("\n".join(lines))
            f.write("\n")
    with open(os.path.join(args.out, "queries.jsonl"), "w") as f:
        for qid, text, _ in queries:
            f.write(json.dumps({"_id": qid, "text": text}) + "\n")
    with open(os.path.join(args.out, "qrels", "test.tsv"), "w") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for qid, _, doc in queries:
            f.write(f"{qid}\t{doc}\t1\n")
    print(
        json.dumps(
            {
                "out": args.out,
                "docs": args.docs,
                "queries": len(queries),
                "tokens": int(lengths.sum()),
                "mean_len": float(lengths.mean()),
                "seed": args.seed,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
