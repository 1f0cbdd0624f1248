"""A stand-in for a vLLM server's sleep mode, which only vLLM's CUDA build has: it speaks the
endpoints the workbench calls on vLLM over HTTP (health, models, chat completions, /sleep,
/wake_up, /is_sleeping, /collective_rpc, /reset_prefix_cache, the adapter API), records every
call in order, and, as vLLM does, refuses a chat completion or a weight load while asleep (503).
A sleep or a wake can be made to fail, as one does when the GPU's memory is taken meanwhile.
"""

from collections.abc import Callable
from contextlib import contextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from tests.openai_stub import served

ASLEEP = {"error": {"message": "the model is sleeping"}}


FAILED = {"error": {"message": "CUDA error: out of memory", "type": "InternalServerError"}}


@contextmanager
def sleepy_vllm(
    model: str, probe: Callable[[], object] = lambda: None, fail: dict[str, int] | None = None
):
    """Yields (base_url, calls): each call as (endpoint, what `probe()` returned then, whether
    it was refused), in order. `fail` (the caller may change it while it serves): how many of
    the next /sleep or /wake_up calls fail (HTTP 500, the state unchanged), by endpoint."""
    app = FastAPI()
    calls: list[tuple[str, object, bool]] = []
    state = {"asleep": False}
    fail = fail if fail is not None else {}

    def record(name: str, refused: bool = False) -> None:
        calls.append((name, probe(), refused))

    def turn(action: str, name: str, asleep: bool):
        """A /sleep or /wake_up: failed while `fail` says so (the state unchanged), else done."""
        if fail.get(action, 0) > 0:
            fail[action] -= 1
            record(name, True)
            return JSONResponse(FAILED, status_code=500)
        record(name)
        state["asleep"] = asleep
        return {}

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
        return turn("sleep", f"sleep level={level}", True)

    @app.post("/wake_up")
    async def wake_up():
        return turn("wake_up", "wake_up", False)

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
