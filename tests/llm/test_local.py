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


def _chat(server, n: int, model: str | None = None, **sampling):
    async def main():
        endpoint = ChatEndpoint(server.base_url, server.model)
        messages = [{"role": "user", "content": "Name a colour."}]
        try:
            return await asyncio.gather(
                *(endpoint.chat(model or server.model, messages, **sampling) for _ in range(n))
            )
        finally:
            await endpoint.close()

    return asyncio.run(main())


def _texts(replies) -> list[str]:
    return [r["choices"][0]["message"]["content"] for r in replies]


def test_each_request_keeps_its_own_sampling_parameters(model_server):
    # sent together, so they are decoded in one batch
    seeded = _texts(_chat(model_server, 3, temperature=1.0, seed=1234, max_tokens=16))
    assert len(set(seeded)) == 1  # a request's seed is its own, whatever its batch-mates
    unseeded = _texts(_chat(model_server, 4, temperature=1.0, max_tokens=16))
    assert len(set(unseeded)) > 1  # independent draws, not one sample four times
    greedy = _texts(_chat(model_server, 3, temperature=0.0, max_tokens=16))
    assert len(set(greedy)) == 1
    (short,) = _chat(model_server, 1, temperature=1.0, max_tokens=3)
    assert short["usage"]["completion_tokens"] <= 3
    assert short["choices"][0]["finish_reason"] == "length"


def test_greedy_decoding_in_a_batch_matches_transformers_generate(model_server):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    (reply,) = _chat(model_server, 1, temperature=0.0, max_tokens=12)
    tokenizer = AutoTokenizer.from_pretrained(model_server.model_path)
    model = AutoModelForCausalLM.from_pretrained(model_server.model_path)
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Name a colour."}], add_generation_prompt=True, tokenize=False
    )
    ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False).input_ids
    expected = model.generate(ids, max_new_tokens=12, do_sample=False)[0, ids.shape[1] :]
    assert reply["choices"][0]["message"]["content"] == tokenizer.decode(
        expected, skip_special_tokens=True
    )
    assert reply["usage"]["prompt_tokens"] == ids.shape[1]


def test_concurrent_requests_are_all_served(model_server):
    replies = _chat(model_server, 12, temperature=1.0, max_tokens=8)
    assert len(replies) == 12
    assert all(r["choices"][0]["message"]["content"] for r in replies)


def test_an_unknown_model_folder_is_a_clear_error(model_server, tmp_path):
    import pytest

    from app.llm.client import BackendError

    with pytest.raises(BackendError) as refused:
        _chat(model_server, 1, model=str(tmp_path / "missing"), max_tokens=4)
    assert refused.value.status == 404
    assert "cannot load model" in str(refused.value)
