"""A zero-latency OpenAI-compatible chat endpoint, for measuring everything but the model.

    python benchmarks/zero_llm.py PORT
"""
import sys
import time

import uvicorn
from fastapi import FastAPI

app = FastAPI()


@app.post("/v1/chat/completions")
async def chat(body: dict):
    return {
        "id": "zero", "object": "chat.completion", "created": int(time.time()),
        "model": body.get("model", "zero"),
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "42"}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
    }  # fmt: skip


@app.get("/health")
async def health():
    return {"status": "ok"}


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
