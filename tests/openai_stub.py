"""A stand-in for a hosted LLM API: speaks the OpenAI chat-completions protocol over HTTP.

Replies come from a script: a string is the answer to every request; a list is consumed in
order (an int there makes that request fail with that status; past its end, 503s). A dict in
the list is a whole reply: the message's fields (content, reasoning_content, tool_calls) and
optionally its `completion_tokens` and `finish_reason`. `max_prompt_chars` plays a model's
context window: a request whose messages hold more characters is refused with vLLM's HTTP 400.
"""

import threading
import time
from contextlib import contextmanager

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from app.llm.local import free_port


@contextmanager
def openai_stub(
    script: str | list[str | int | dict],
    message_extra: dict | None = None,
    max_prompt_chars: int | None = None,
):
    """Yields (base_url, seen): each request's authorization header and body, in order.
    `message_extra` joins every answer's message (reasoning_content, tool_calls, ...)."""
    app = FastAPI()
    seen: list[dict] = []
    queue = [] if isinstance(script, str) else list(script)

    @app.post("/v1/chat/completions")
    async def complete(request: Request):
        body = await request.json()
        seen.append({"authorization": request.headers.get("authorization"), "body": body})
        prompt = sum(len(m.get("content") or "") for m in body["messages"])
        if max_prompt_chars is not None and prompt > max_prompt_chars:
            message = (
                f"This model's maximum context length is {max_prompt_chars} tokens. However, "
                f"your prompt contains at least {prompt} input tokens, which exceeds this limit."
            )
            error = {"message": message, "type": "BadRequestError", "code": 400}
            return JSONResponse({"error": error}, status_code=400)
        reply = script if isinstance(script, str) else (queue.pop(0) if queue else 503)
        if isinstance(reply, int):
            return JSONResponse({"error": {"message": "scripted failure"}}, status_code=reply)
        message = dict(reply) if isinstance(reply, dict) else {"content": reply}
        finish_reason = message.pop("finish_reason", "stop")
        completion_tokens = message.pop("completion_tokens", None)
        if completion_tokens is None:
            completion_tokens = max(1, len(message.get("content") or "") // 4)
        return {
            "id": f"chatcmpl-{len(seen)}",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "finish_reason": finish_reason,
                    "message": {"role": "assistant", **message, **(message_extra or {})},
                }
            ],
            "usage": {
                "prompt_tokens": 1000,
                "completion_tokens": completion_tokens,
                "total_tokens": 1000 + completion_tokens,
            },
        }

    with served(app) as url:
        yield url, seen


@contextmanager
def served(app: FastAPI):
    """Serve `app` on a free local port in a thread; yields its OpenAI base URL (.../v1)."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True
        thread.join(5)
