"""The embedded default model: its cache and its server."""

import asyncio
import json
import shutil

import pytest

from app.llm.client import BackendError, ChatEndpoint
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
    # seeded: an unseeded draw can end on its own within 3 tokens (one did, in a full run)
    (short,) = _chat(model_server, 1, temperature=1.0, seed=7, max_tokens=3)
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


# Native tool calls: tools and chat_template_kwargs reach the template, replies become tool_calls

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Find passages.",
            "parameters": {
                "type": "object",
                "properties": {
                    "query_list": {"type": "array", "items": {"type": "string"}},
                    "topk": {"type": "integer"},
                },
            },
        },
    }
]
# A template that shows what it was given: the tools' names, the thinking switch, each earlier
# call's arguments read as an object, and tool results.
TOOL_TEMPLATE = (
    "{% if tools %}<|im_start|>system\nTools:{% for t in tools %} {{ t.function.name }}"
    "{% endfor %}{% if enable_thinking %} (think first){% endif %}<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
    "{% for c in m.tool_calls or [] %}<tool_call>{{ c.function.name }}: "
    "{{ c.function.arguments.query_list[0] }}</tool_call>{% endfor %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_tool_calls_are_read_in_the_hermes_and_the_qwen35_forms():
    from app.llm.tool_calls import parse_tool_calls

    hermes = 'Let me look.\n<tool_call>\n{"name": "search", "arguments": {"query_list": ["Li"]}}\n</tool_call>'
    content, calls = parse_tool_calls(hermes, TOOLS)
    assert content == "Let me look."
    assert [(c["type"], c["function"]["name"]) for c in calls] == [("function", "search")]
    assert json.loads(calls[0]["function"]["arguments"]) == {"query_list": ["Li"]}
    assert calls[0]["id"].startswith("call_")
    # Qwen3.5 writes XML; values take the schema's types (vLLM's qwen3_coder parser)
    xml = (
        "<tool_call>\n<function=search>\n<parameter=query_list>\n"
        '["lithium", "symbol"]\n</parameter>\n<parameter=topk>\n3\n</parameter>\n'
        "</function>\n</tool_call>"
    )
    content, calls = parse_tool_calls(xml, TOOLS)
    assert content is None
    assert json.loads(calls[0]["function"]["arguments"]) == {
        "query_list": ["lithium", "symbol"],
        "topk": 3,
    }
    two = hermes + '<tool_call>{"name": "search", "arguments": {"query_list": ["Na"]}}</tool_call>'
    assert len(parse_tool_calls(two, TOOLS)[1]) == 2
    # an unreadable block leaves the reply as the model wrote it, as vLLM does
    broken = "<tool_call>{not json</tool_call>"
    assert parse_tool_calls(broken, TOOLS) == (broken, [])
    assert parse_tool_calls("Lithium.", TOOLS) == ("Lithium.", [])


def test_tools_tool_results_and_template_switches_reach_the_chat_template(model_server, tmp_path):
    """A copy of the model whose template prints what it receives: the prompt the server
    decodes from is exactly that rendering."""
    from transformers import AutoTokenizer

    folder = tmp_path / "model"
    folder.mkdir()
    for item in model_server.model_path.iterdir():
        if item.name != "chat_template.jinja":
            (folder / item.name).symlink_to(item)
    (folder / "chat_template.jinja").write_text(TOOL_TEMPLATE)
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "search", "arguments": json.dumps({"query_list": ["lithium"]})},
    }
    messages = [
        {"role": "user", "content": "Symbol of lithium?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Lithium (Li)."},
    ]

    async def ask(**fields):
        endpoint = ChatEndpoint(model_server.base_url, str(folder))
        try:
            return await endpoint.chat(str(folder), messages, max_tokens=2, **fields)
        finally:
            await endpoint.close()

    reply = asyncio.run(ask(tools=TOOLS, chat_template_kwargs={"enable_thinking": True}))
    expected = (
        "<|im_start|>system\nTools: search (think first)<|im_end|>\n"
        "<|im_start|>user\nSymbol of lithium?<|im_end|>\n"
        "<|im_start|>assistant\n<tool_call>search: lithium</tool_call><|im_end|>\n"
        "<|im_start|>tool\nLithium (Li).<|im_end|>\n<|im_start|>assistant\n"
    )
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert reply["usage"]["prompt_tokens"] == len(
        tokenizer(expected, add_special_tokens=False).input_ids
    )
    plain = asyncio.run(ask())  # without tools: no system turn, no thinking switch
    assert plain["usage"]["prompt_tokens"] == len(
        tokenizer(expected.split("\n", 2)[2], add_special_tokens=False).input_ids
    )
    assert "tool_calls" not in plain["choices"][0]["message"]


def test_a_field_outside_the_protocol_is_still_refused(model_server):
    with pytest.raises(BackendError) as refused:
        _chat(model_server, 1, max_tokens=2, top_k=20)
    assert refused.value.status == 422 and "top_k" in str(refused.value)
