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
    '{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments }}}\n</tool_call>'
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
    assert counts == {"truncated": 2, "dropped": 1}
    assert len(encoded) == 2 and all(len(ids) <= 64 for ids, *_ in encoded)
