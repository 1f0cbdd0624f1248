"""The `openai` backend: any OpenAI-compatible endpoint (a hosted API in production; here a
stand-in speaking the same protocol over HTTP), with its key taken from the environment and
never stored or handed to a sandbox."""

import os
import sqlite3
import textwrap
import zlib

import pytest

from tests.conftest import whale_eval_json
from tests.openai_stub import openai_stub

# the module's tests share one stand-in API for the module: under xdist they run on one worker
pytestmark = pytest.mark.xdist_group("hosted-api")

KEY = "sk-test-key-never-stored-0123456789"


@pytest.fixture(scope="module")
def hosted_api():
    """A stand-in for a hosted chat API: answers "The answer is 42", remembers what it saw."""
    with openai_stub("The answer is 42") as (url, seen):
        yield url, seen


def test_key_goes_to_the_endpoint_only(hosted_api, tmp_path, model_cache):
    url, seen = hosted_api
    home = tmp_path / "home"
    env = {
        **os.environ,
        "WHALE_HOME": str(home),
        "WHALE_MODEL_CACHE": str(model_cache),
        "WHALE_LLM_URL": url,
        "WHALE_LLM_MODEL": "hosted-model",
        "OPENAI_API_KEY": KEY,
    }
    harness = tmp_path / "h.py"
    harness.write_text(
        textwrap.dedent("""
        import os
        def run(task, llm, tools):
            reply = llm.chat([{"role": "user", "content": task["question"]}])
            print(dict(os.environ))
            return reply.content
    """)
    )
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


def test_native_tool_calls_and_reasoning_reach_the_harness_and_the_trace(tmp_path, model_cache):
    """A tool-calling server (vLLM with its parsers speaks this protocol): the harness offers
    tools, gets the reasoning and the call on its message, and the run's [sampling] defaults
    ride along on every call."""
    call = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{}"}}
    extra = {"reasoning_content": "add them", "tool_calls": [call]}
    env = {
        **os.environ,
        "WHALE_HOME": str(tmp_path / "home"),
        "WHALE_MODEL_CACHE": str(model_cache),
        "WHALE_LLM_MODEL": "tool-model",
    }
    harness = tmp_path / "h.py"
    harness.write_text(
        textwrap.dedent("""
        TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {}}}]
        def run(task, llm, tools):
            reply = llm.chat([{"role": "user", "content": task["question"]}], tools=TOOLS)
            return reply.reasoning + "|" + reply.tool_calls[0]["function"]["name"]
    """)
    )
    with openai_stub("", message_extra=extra) as (url, seen):
        env["WHALE_LLM_URL"] = url
        out = whale_eval_json(harness, env, "--limit", "1", "-k", "1", "--sampling", "top_k=20")
    assert out["statuses"] == {"fail": 1}  # answered, wrongly: the point is what it got
    (body,) = [s["body"] for s in seen]
    assert body["top_k"] == 20 and body["tools"][0]["function"]["name"] == "add"
    with sqlite3.connect(tmp_path / "home" / "whale.db") as db:
        (answer,) = db.execute("SELECT answer FROM rollout").fetchone()
        (response,) = db.execute("SELECT response FROM step").fetchone()
    assert answer == "add them|add"
    assert b"reasoning_content" in zlib.decompress(response)
