"""The embedded default model: its cache and its server."""
import asyncio
import shutil

from app.llm.client import ChatEndpoint
from app.llm.local import MODEL_NAME, prepare_model


def test_a_ready_cache_is_reused_silently(model_cache):
    prepare_model(model_cache)
    said = []
    assert prepare_model(model_cache, say=said.append) == model_cache / MODEL_NAME
    assert said == []


def test_a_corrupt_cache_is_rebuilt_with_a_message(model_cache, tmp_path):
    shutil.copytree(model_cache / MODEL_NAME, tmp_path / MODEL_NAME)
    weights = tmp_path / MODEL_NAME / "model.safetensors"
    with open(weights, "r+b") as f:
        f.truncate(1000)
    said = []
    folder = prepare_model(tmp_path, say=said.append)
    assert any("corrupt" in m for m in said)
    assert weights.stat().st_size > 100_000_000
    assert prepare_model(tmp_path, say=said.append) == folder  # and now it is whole
    assert len(said) == 2


def _chat(server, n: int, **sampling):
    async def main():
        endpoint = ChatEndpoint(server.base_url, server.model)
        messages = [{"role": "user", "content": "Name a colour."}]
        try:
            return await asyncio.gather(*(endpoint.chat(server.model, messages, **sampling)
                                          for _ in range(n)))  # fmt: skip
        finally:
            await endpoint.close()

    return asyncio.run(main())


def test_sampling_parameters_are_honoured(model_server):
    a, b = _chat(model_server, 2, temperature=1.0, seed=1234, max_tokens=16)
    assert a["choices"][0]["message"]["content"] == b["choices"][0]["message"]["content"]
    (short,) = _chat(model_server, 1, temperature=1.0, max_tokens=3)
    assert short["usage"]["completion_tokens"] <= 3
    assert short["choices"][0]["finish_reason"] == "length"


def test_concurrent_requests_are_all_served(model_server):
    replies = _chat(model_server, 12, temperature=1.0, max_tokens=8)
    assert len(replies) == 12
    assert all(r["choices"][0]["message"]["content"] for r in replies)
