"""The `openai` backend: any OpenAI-compatible endpoint (a hosted API in production; here a
stand-in speaking the same protocol over HTTP), with its key taken from the environment and
never stored or handed to a sandbox."""
import os
import sqlite3
import textwrap
import threading
import time
import zlib

import pytest
import uvicorn
from fastapi import FastAPI, Request

from tests.conftest import free_port, whale_eval_json

KEY = "sk-test-key-never-stored-0123456789"


@pytest.fixture(scope="module")
def hosted_api():
    """A stand-in for a hosted chat API: answers "42" and remembers the headers it saw."""
    app = FastAPI()
    seen: list[dict] = []

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await request.json()
        seen.append({"authorization": request.headers.get("authorization"), "body": body})
        return {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": "The answer is 42"}}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9}}  # fmt: skip

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}/v1", seen
    server.should_exit = True
    thread.join(5)


def test_key_goes_to_the_endpoint_only(hosted_api, tmp_path, model_cache):
    url, seen = hosted_api
    home = tmp_path / "home"
    env = {**os.environ, "WHALE_HOME": str(home), "WHALE_MODEL_CACHE": str(model_cache),
           "WHALE_LLM_URL": url, "WHALE_LLM_MODEL": "hosted-model", "OPENAI_API_KEY": KEY}  # fmt: skip
    harness = tmp_path / "h.py"
    harness.write_text(textwrap.dedent("""
        import os
        def run(task, llm, tools):
            reply = llm.chat([{"role": "user", "content": task["question"]}])
            print(dict(os.environ))
            return reply.content
    """))
    out = whale_eval_json(harness, env, "--limit", "2", "-k", "1")
    assert out["n_rollouts"] == 2 and out["statuses"].get("error", 0) == 0
    assert seen and all(s["authorization"] == f"Bearer {KEY}" for s in seen)
    assert {s["body"]["model"] for s in seen} == {"hosted-model"}
    # not in the store (any table, compressed or not), not in the sandbox's environment
    for path in home.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path
    with sqlite3.connect(home / "whale.db") as db:
        for (tail,) in db.execute("SELECT stdout_tail FROM rollout"):
            assert KEY not in tail and "OPENAI_API_KEY" not in tail
        for request, response in db.execute("SELECT request, response FROM step"):
            assert KEY.encode() not in zlib.decompress(request) + zlib.decompress(response)
