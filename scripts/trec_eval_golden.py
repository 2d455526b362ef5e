"""Writes tests/data/trec_eval_golden.json: a synthetic run and qrels with the per-query values
that pytrec_eval (through ir_measures' pytrec_eval provider) gives, to check rerank::eval against trec_eval.

The run has many tied scores and ids like "d7" / "d12" (trec_eval breaks ties by doc id,
descending, byte-wise); the qrels are graded (0..3, plus -1) and some queries have no
relevant document.

    python3 -m venv irref && irref/bin/pip install ir_measures pytrec_eval-terrier
    irref/bin/python scripts/trec_eval_golden.py > tests/data/trec_eval_golden.json
"""

import json
import random

import ir_measures
from ir_measures import AP, P, RR, R, nDCG

MEASURES = {
    "ndcg@5": nDCG @ 5,
    "ndcg@10": nDCG @ 10,
    "ndcg@100": nDCG @ 100,
    "map@5": AP @ 5,
    "map@100": AP @ 100,
    "recall@10": R @ 10,
    "recall@100": R @ 100,
    # pytrec_eval has no cut-off for RR; with runs of at most 40 hits, RR = RR@1000.
    "mrr@1000": RR,
    "p@5": P @ 5,
    "p@10": P @ 10,
}


def main():
    rng = random.Random(20240611)
    docs = [f"d{i}" for i in range(1, 61)]
    qrels, run = {}, {}
    for q in range(1, 21):
        qid = f"q{q}"
        judged = rng.sample(docs, rng.randint(1, 15))
        no_relevant = q % 7 == 0
        qrels[qid] = {
            d: (rng.choice([0, -1]) if no_relevant else rng.choice([-1, 0, 0, 1, 1, 2, 3]))
            for d in judged
        }
        retrieved = rng.sample(docs, rng.randint(0, 40) if q != 3 else 0)
        # few distinct scores -> many ties
        run[qid] = {d: rng.randint(0, 8) / 4.0 for d in retrieved}
    run = {q: r for q, r in run.items() if r}  # pytrec_eval skips queries without results
    values = {}
    # Force the pytrec_eval provider: by default ir_measures computes RR@k with its msmarco
    # provider, which breaks score ties by ascending doc id instead of trec_eval's descending.
    for m in ir_measures.pytrec_eval.iter_calc(list(MEASURES.values()), qrels, run):
        name = next(k for k, v in MEASURES.items() if v == m.measure)
        values.setdefault(m.query_id, {})[name] = m.value
    print(json.dumps({"qrels": qrels, "run": run, "values": values}, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
