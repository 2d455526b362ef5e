#!/usr/bin/env python3
"""The official `openai` SDK, unmodified, chatting with `rerank serve` on loopback
(tests/it/serve.rs).

Usage: chat_clients.py BASE_URL API_KEY REQUEST_JSON

REQUEST_JSON holds {"messages": [...], "max_tokens": N, "stop": [...]} . Prints one JSON object:
what `client.chat.completions.create` returned greedily (temperature 0) whole (`whole`: the
content, finish_reason and usage) and streamed (`streamed`: every content delta in order, the
finish_reason, and the usage of the last chunk with stream_options include_usage), with
`stop` (`stopped`), and the ids of `client.models.list()` (`models`), for the Rust test to compare with the library's own generation. Needs
`pip install openai`.
"""
import json
import sys

import openai


def main() -> None:
    base, key, request_path = sys.argv[1:4]
    with open(request_path, encoding="utf-8") as f:
        request = json.load(f)
    client = openai.OpenAI(api_key=key, base_url=base + "/v1")
    common = dict(model="local", messages=request["messages"], max_tokens=request["max_tokens"],
                  temperature=0)
    whole = client.chat.completions.create(**common)
    choice = whole.choices[0]
    pieces, finish, usage = [], None, None
    for chunk in client.chat.completions.create(**common, stream=True,
                                                stream_options={"include_usage": True}):
        if chunk.usage is not None:
            usage = chunk.usage.model_dump()
        for c in chunk.choices:
            if c.delta.content:
                pieces.append(c.delta.content)
            if c.finish_reason:
                finish = c.finish_reason
    stopped = client.chat.completions.create(**common, stop=request["stop"])
    models = [m.id for m in client.models.list()]
    out = {
        "whole": {"content": choice.message.content, "role": choice.message.role,
                  "finish_reason": choice.finish_reason, "usage": whole.usage.model_dump()},
        "streamed": {"pieces": pieces, "finish_reason": finish, "usage": usage},
        "stopped": {"content": stopped.choices[0].message.content,
                    "finish_reason": stopped.choices[0].finish_reason},
        "models": models,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
