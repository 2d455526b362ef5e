#!/usr/bin/env python3
"""Real client SDKs, unmodified, against `rerank serve` on loopback (tests/it/serve.rs).

Usage: sdk_clients.py BASE_URL API_KEY REQUEST_JSON

REQUEST_JSON holds {"query": ..., "documents": [...], "texts": [...]}. Prints one JSON object:
what the official `cohere` SDK's ClientV2.rerank and Client.rerank (v1, return_documents) and
the official `openai` SDK's embeddings.create (its default base64 encoding, then float, then
`dimensions`) and LangChain's CohereRerank (langchain-cohere: `rerank` and the retriever
pipeline's `compress_documents`) returned, for the Rust test to compare with the library's own
scores and embeddings. Needs `pip install cohere openai langchain-cohere`.
"""
import json
import sys

import cohere
import openai
from langchain_cohere import CohereRerank
from langchain_core.documents import Document


def main() -> None:
    base, key, request_path = sys.argv[1:4]
    with open(request_path, encoding="utf-8") as f:
        request = json.load(f)
    query, documents, texts = request["query"], request["documents"], request["texts"]

    v2 = cohere.ClientV2(api_key=key, base_url=base).rerank(
        model="rerank", query=query, documents=documents, top_n=len(documents)
    )
    v1 = cohere.Client(api_key=key, base_url=base).rerank(
        model="rerank", query=query, documents=documents, top_n=2, return_documents=True
    )
    client = openai.OpenAI(api_key=key, base_url=base + "/v1")
    default = client.embeddings.create(model="embedder", input=texts)
    floats = client.embeddings.create(model="embedder", input=texts, encoding_format="float")
    langchain = CohereRerank(cohere_api_key=key, base_url=base, model="rerank", top_n=3)
    lc_ranked = langchain.rerank(documents, query)
    lc_docs = langchain.compress_documents([Document(page_content=d) for d in documents], query)
    out = {
        "langchain_rerank": [[r["index"], r["relevance_score"]] for r in lc_ranked],
        "langchain_compress": [[d.page_content, d.metadata["relevance_score"]] for d in lc_docs],
        "cohere_v2": [[r.index, r.relevance_score] for r in v2.results],
        "cohere_v1": [[r.index, r.relevance_score, r.document.text] for r in v1.results],
        "openai_default": [d.embedding for d in default.data],
        "openai_float": [d.embedding for d in floats.data],
        "openai_model": floats.model,
    }
    try:
        client.embeddings.create(model="embedder", input=texts, dimensions=7)
        out["openai_bad_dimensions"] = None
    except openai.UnprocessableEntityError as e:
        out["openai_bad_dimensions"] = [e.status_code, str(e)]
    try:
        openai.OpenAI(api_key="wrong", base_url=base + "/v1").embeddings.create(
            model="embedder", input=texts
        )
        out["openai_wrong_key"] = None
    except openai.AuthenticationError as e:
        out["openai_wrong_key"] = e.status_code
    print(json.dumps(out))


if __name__ == "__main__":
    main()
