"""A stand-in for a vLLM server's sleep mode, which only vLLM's CUDA build has: it speaks the
endpoints the workbench calls on vLLM over HTTP (health, models, chat completions, /sleep,
/wake_up, /is_sleeping, /collective_rpc, /reset_prefix_cache, the adapter API), records every
call in order, and, as vLLM does, refuses a chat completion or a weight load while asleep (503).
"""

from collections.abc import Callable
from contextlib import contextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from tests.openai_stub import served

ASLEEP = {"error": {"message": "the model is sleeping"}}


@contextmanager
def sleepy_vllm(model: str, probe: Callable[[], object] = lambda: None):
    """Yields (base_url, calls): each call as (endpoint, what `probe()` returned then, whether
    it was refused), in order."""
    app = FastAPI()
    calls: list[tuple[str, object, bool]] = []
    state = {"asleep": False}

    def record(name: str, refused: bool = False) -> None:
        calls.append((name, probe(), refused))

    @app.get("/health")
    async def health():
        return {}

    @app.get("/v1/models")
    async def models():
        return {"data": [{"id": model, "object": "model"}]}

    @app.get("/is_sleeping")
    async def is_sleeping():
        return {"is_sleeping": state["asleep"]}

    @app.post("/sleep")
    async def sleep(level: int = 1):
        record(f"sleep level={level}")
        state["asleep"] = True
        return {}

    @app.post("/wake_up")
    async def wake_up():
        record("wake_up")
        state["asleep"] = False
        return {}

    @app.post("/collective_rpc")
    async def collective_rpc(request: Request):
        body = await request.json()
        record(f"collective_rpc {body['method']}", state["asleep"])
        if state["asleep"]:
            return JSONResponse(ASLEEP, status_code=503)
        return {"results": [None]}

    @app.post("/reset_prefix_cache")
    async def reset_prefix_cache():
        record("reset_prefix_cache", state["asleep"])
        return JSONResponse(ASLEEP, status_code=503) if state["asleep"] else {}

    @app.post("/v1/chat/completions")
    async def complete(request: Request):
        body = await request.json()
        record("chat", state["asleep"])
        if state["asleep"]:
            return JSONResponse(ASLEEP, status_code=503)
        return {
            "id": f"chatcmpl-{len(calls)}",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": "4"},
                }
            ],
            "usage": {"prompt_tokens": 20, "completion_tokens": 1, "total_tokens": 21},
        }

    with served(app) as url:
        yield url, calls
