"""A zero-latency OpenAI-compatible chat endpoint, for measuring everything but the model.

A bare ASGI app (no framework) on uvicorn with uvloop and httptools: the endpoint shares the
machine with what is measured, so it should cost as little CPU per request as it can.

    python benchmarks/zero_llm.py PORT
"""

import json
import sys

import uvicorn

REPLY = json.dumps(
    {
        "id": "zero",
        "object": "chat.completion",
        "created": 0,
        "model": "zero",
        "choices": [
            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "42"}}
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
    }
).encode()
HEALTH = b'{"status": "ok"}'


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    more = True
    while more:  # read (and drop) the request body
        more = (await receive()).get("more_body", False)
    body = REPLY if scope["path"].endswith("/chat/completions") else HEALTH
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": body})


if __name__ == "__main__":
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=int(sys.argv[1]),
        log_level="warning",
        loop="uvloop",
        http="httptools",
        access_log=False,
        lifespan="off",
    )
