"""Accepted rollouts become (messages -> completion) examples with the loss on the completion."""

from transformers import AutoTokenizer

from app.db import read_session
from app.db.schema import Step
from app.training.examples import encode, examples_from_rollouts
from tests.conftest import make_rollout

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]


def test_every_successful_model_call_is_an_example(store):
    engine, writer = store
    a, b = make_rollout(writer), make_rollout(writer)
    writer.add(
        Step(
            rollout_id=a,
            idx=0,
            kind="model",
            request={"messages": MESSAGES},
            response={"message": {"content": "4"}, "finish_reason": "stop"},
        ),
        Step(rollout_id=a, idx=1, kind="tool", tool="python", request={"args": []}),
        Step(
            rollout_id=a, idx=2, kind="model", request={"messages": MESSAGES}, error="backend down"
        ),
        Step(
            rollout_id=a,
            idx=3,
            kind="model",
            request={"messages": MESSAGES[1:]},
            response={"message": {"content": "four"}, "finish_reason": "length"},
        ),
        Step(
            rollout_id=b,
            idx=0,
            kind="model",
            request={"messages": MESSAGES},
            response={"message": {"content": "5"}, "finish_reason": "stop"},
        ),
    ).result()
    with read_session(engine) as s:
        examples = examples_from_rollouts(s, [a])
    assert [(e["completion"], e["finish_reason"]) for e in examples] == [
        ("4", "stop"),
        ("four", "length"),
    ]
    assert examples[0]["messages"] == MESSAGES and examples[0]["rollout_id"] == a
    with read_session(engine) as s:
        assert examples_from_rollouts(s, []) == []


def test_loss_covers_the_completion_and_the_chosen_end_of_turn(model_cache):
    from app.llm.local import prepare_model

    tokenizer = AutoTokenizer.from_pretrained(prepare_model(model_cache))
    ids, labels = encode(
        tokenizer, {"messages": MESSAGES, "completion": "4", "finish_reason": "stop"}, max_len=512
    )
    trained = [t for t in labels if t != -100]
    assert tokenizer.decode(trained) == "4" + tokenizer.eos_token
    assert len(ids) == len(labels)
    prompt = tokenizer.decode(ids[: len(ids) - len(trained)])
    assert prompt.endswith("<|im_start|>assistant\n") and "2+2?" in prompt
    # a completion cut by max_tokens did not choose to stop: no end-of-turn token to learn
    _, labels = encode(
        tokenizer, {"messages": MESSAGES, "completion": "4", "finish_reason": "length"}, max_len=512
    )
    assert tokenizer.decode([t for t in labels if t != -100]) == "4"
    ids, labels = encode(tokenizer, {"messages": MESSAGES, "completion": "4 " * 100}, max_len=20)
    assert len(ids) == len(labels) == 20


# A ChatML template with tools, tool calls and thinking in the style of Qwen3 (written for this
# test; SmolLM2's own template knows none of them): the part a server's parsers split off.
TOOL_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\nTools:\n{% for t in tools %}{{ t | tojson }}\n"
    "{% endfor %}<|im_end|>\n{% endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'assistant' %}<|im_start|>assistant\n"
    "{% if m.reasoning_content %}<think>\n{{ m.reasoning_content }}\n</think>\n\n{% endif %}"
    "{{ m.content or '' }}"
    "{%- for c in m.tool_calls or [] %}<tool_call>\n"
    '{"name": "{{ c.function.name }}", "arguments": '
    "{% if c.function.arguments is string %}{{ c.function.arguments }}"
    "{% else %}{{ c.function.arguments | tojson }}{% endif %}}\n</tool_call>"
    "{%- endfor %}<|im_end|>\n"
    "{%- elif m.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m.content }}\n"
    "</tool_response><|im_end|>\n"
    "{%- else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]


def call(name: str, arguments: str) -> dict:
    return {"id": "c1", "type": "function", "function": {"name": name, "arguments": arguments}}


def test_thinking_and_tool_calls_are_trained_and_tool_results_are_not(model_cache):
    from app.llm.local import prepare_model

    tokenizer = AutoTokenizer.from_pretrained(prepare_model(model_cache))
    tokenizer.chat_template = TOOL_TEMPLATE
    conversation = [
        {"role": "system", "content": "Use the tools."},
        {"role": "user", "content": "What is 2+3+4?"},
        {"role": "assistant", "content": "", "tool_calls": [call("add", '{"a": 2, "b": 3}')]},
        {"role": "tool", "tool_call_id": "c1", "content": "5"},
    ]
    example = {
        "messages": conversation,
        "tools": TOOLS,
        "completion": "",
        "reasoning": "5 so far; add 4.",
        "tool_calls": [call("add", '{"a": 5, "b": 4}')],
        "finish_reason": "tool_calls",
    }
    ids, labels = encode(tokenizer, example, max_len=4096)
    trained = tokenizer.decode([t for t in labels if t != -100])
    # exactly the assistant turn the model wrote: its thinking, its call, its end of turn
    assert trained == (
        '<think>\n5 so far; add 4.\n</think>\n\n<tool_call>\n{"name": "add", "arguments": '
        '{"a": 5, "b": 4}}\n</tool_call><|im_end|>'
    )
    context = tokenizer.decode([t for t, label in zip(ids, labels) if label == -100])
    assert context.endswith("<|im_start|>assistant\n")
    for given in ('"name": "add"', "<tool_response>\n5\n</tool_response>", "2+3+4", "Tools:"):
        assert given in context  # the earlier call, the tool result, the user and the tools
    assert "<tool_response>" not in trained and '"a": 2' not in trained

    # cut by max_tokens: what it wrote is trained, the end of turn it never reached is not
    cut = encode(tokenizer, {**example, "finish_reason": "length"}, max_len=4096)[1]
    assert tokenizer.decode([t for t in cut if t != -100]) == trained.removesuffix("<|im_end|>")


def test_a_reasoning_only_completion_is_an_example(store):
    engine, writer = store
    rollout = make_rollout(writer)
    message = {"content": None, "reasoning_content": "hmm", "tool_calls": [call("add", "{}")]}
    writer.add(
        Step(
            rollout_id=rollout,
            idx=0,
            kind="model",
            request={"messages": MESSAGES, "tools": TOOLS},
            response={"message": message, "finish_reason": "tool_calls"},
        )
    ).result()
    with read_session(engine) as s:
        (example,) = examples_from_rollouts(s, [rollout])
    assert example["tools"] == TOOLS and example["reasoning"] == "hmm"
    assert example["tool_calls"] == message["tool_calls"] and example["completion"] == ""


def test_examples_cut_to_max_seq_len_are_counted_and_those_left_empty_dropped(model_cache):
    from app.llm.local import prepare_model
    from app.training.examples import encode_all

    tokenizer = AutoTokenizer.from_pretrained(prepare_model(model_cache))
    short = {"messages": MESSAGES, "completion": "4", "finish_reason": "stop"}
    long = {**short, "completion": "4 " * 200}
    no_room = {**short, "messages": [{"role": "user", "content": "2+2? " * 200}]}
    encoded, counts = encode_all(tokenizer, [short, long, no_room], max_len=64)
    assert counts == {
        "truncated": 2,
        "dropped": 1,
        "from_ids": 0,
        "rendered": 3,  # no ids: each rendered through the chat template
        "drift": 0,
        "drift_checked": 0,
    }
    assert len(encoded) == 2 and all(len(ids) <= 64 for ids, *_ in encoded)


# --- the token ids the model sampled --------------------------------------------------------


def _tokenizer(model_cache, template: str | None = None):
    from app.llm.local import prepare_model

    tokenizer = AutoTokenizer.from_pretrained(prepare_model(model_cache))
    if template:
        tokenizer.chat_template = template
    return tokenizer


def _served_prompt(tokenizer, messages, tools=None) -> list[int]:
    """The prompt ids as the local server makes them (app/llm/local_server.py)."""
    from app.llm.tool_calls import template_messages

    text = tokenizer.apply_chat_template(
        template_messages(messages), tools=tools, add_generation_prompt=True, tokenize=False
    )
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _store_calls(writer, rollout: int, calls: list[tuple]) -> None:
    """Model steps as the gateway records them: (request, message, finish, ids or None)."""
    from app.db.steps import compact, pack_ids

    sent, sent_ids = [], []
    for idx, (request, message, finish, ids) in enumerate(calls):
        packed = None
        if ids is not None:
            packed, sent_ids = pack_ids(sent_ids, *ids), ids[0] + ids[1]
        writer.add(
            Step(
                rollout_id=rollout,
                idx=idx,
                kind="model",
                request=compact(sent, request),
                response={"message": message, "finish_reason": finish},
                token_ids=packed,
            )
        ).result()
        sent = request["messages"]


def test_a_rollout_whose_calls_extend_each_other_is_one_sequence_of_the_sampled_ids(
    store, model_cache
):
    """Three calls, each prompt the previous prompt and completion plus a tool result: trained
    as one sequence, exactly the ids stored, the loss on the three completions only; a call
    without ids in another rollout is rendered, and the counts say which is which."""
    from app.training.examples import encode_all

    engine, writer = store
    tokenizer = _tokenizer(model_cache)
    eos = tokenizer.eos_token_id
    messages = list(MESSAGES)
    calls, completions = [], []
    for turn, text in enumerate(["Let me add.", "Still adding.", "4"]):
        prompt = _served_prompt(tokenizer, messages)
        completion = tokenizer(text, add_special_tokens=False)["input_ids"] + [eos]
        calls.append(
            ({"messages": list(messages)}, {"content": text}, "stop", (prompt, completion))
        )
        completions.append(completion)
        messages += [
            {"role": "assistant", "content": text},
            {"role": "tool", "content": f"result {turn}"},
        ]
    one, other = make_rollout(writer), make_rollout(writer)
    _store_calls(writer, one, calls)
    _store_calls(writer, other, [({"messages": MESSAGES}, {"content": "4"}, "stop", None)])
    with read_session(engine) as s:
        examples = examples_from_rollouts(s, [one, other])
    assert [("ids" in e, e["rollout_id"]) for e in examples] == [(True, one), (False, other)]
    last_prompt, last_completion = calls[-1][3]
    ids, labels = encode(tokenizer, examples[0], max_len=4096)
    assert ids == last_prompt + last_completion  # token for token what was sampled
    assert [t for t in labels if t != -100] == [t for c in completions for t in c]
    context = tokenizer.decode([t for t, label in zip(ids, labels) if label == -100])
    assert "result 0" in context and "result 1" in context  # tool results: context only
    encoded, counts = encode_all(tokenizer, examples, max_len=4096)
    assert len(encoded) == 2
    assert (counts["from_ids"], counts["rendered"]) == (1, 1)
    assert (counts["drift"], counts["drift_checked"]) == (0, 3)  # rendering agrees here


def test_a_tool_call_the_template_writes_otherwise_is_drift_and_the_sampled_ids_are_trained(
    store, model_cache
):
    """The model wrote its call in compact JSON with its own key order; the server parsed it
    (as the local server's parser does) and the template writes it back spaced. The ids
    trained are those sampled, and that call counts as drift; the next call's prompt, holding
    the template's version, no longer extends the first: each call is an example of its own."""
    from app.llm.tool_calls import parse_tool_calls
    from app.training.examples import encode_all

    engine, writer = store
    tokenizer = _tokenizer(model_cache, TOOL_TEMPLATE)
    eos = tokenizer.eos_token_id
    raw = '<tool_call>\n{"name":"add","arguments":{"b":3,"a":2}}\n</tool_call>'
    content, tool_calls = parse_tool_calls(raw, TOOLS)
    first = tokenizer(raw, add_special_tokens=False)["input_ids"] + [eos]
    request = {"messages": MESSAGES, "tools": TOOLS}
    history = [
        *MESSAGES,
        {"role": "assistant", "content": content, "tool_calls": tool_calls},
        {"role": "tool", "tool_call_id": tool_calls[0]["id"], "content": "5"},
    ]
    second = tokenizer("5", add_special_tokens=False)["input_ids"] + [eos]
    calls = [
        (
            request,
            {"content": content, "tool_calls": tool_calls},
            "tool_calls",
            (_served_prompt(tokenizer, MESSAGES, TOOLS), first),
        ),
        (
            {"messages": history, "tools": TOOLS},
            {"content": "5"},
            "stop",
            (_served_prompt(tokenizer, history, TOOLS), second),
        ),
    ]
    rollout = make_rollout(writer)
    _store_calls(writer, rollout, calls)
    with read_session(engine) as s:
        examples = examples_from_rollouts(s, [rollout])
    assert len(examples) == 2  # the chain broke at the rewritten call
    for example, (_, _, _, (prompt, completion)) in zip(examples, calls):
        ids, labels = encode(tokenizer, example, max_len=4096)
        assert ids == prompt + completion
        assert [t for t in labels if t != -100] == completion
    assert tokenizer.decode(first).startswith('<tool_call>\n{"name":"add"')
    _, counts = encode_all(tokenizer, examples, max_len=4096)
    assert (counts["from_ids"], counts["rendered"]) == (2, 0)
    assert (counts["drift"], counts["drift_checked"]) == (1, 2)
