"""Training examples from accepted rollouts.

Because the harness shapes every model call, each model call of an accepted rollout is one
example: exactly the messages (and tools) the model was given -> what it produced. The loss
covers the tokens the model produced only; the system prompt, user turns, earlier turns and
tool results are context (each earlier assistant turn is an example of its own call).

What the model produced is its text as the server returned it, with the end-of-turn token
when it chose to stop. When the server split that text into parts (vLLM's reasoning and
tool-call parsers return `reasoning_content` and `tool_calls` beside the content), the
assistant turn is rendered back through the model's chat template, which writes those parts
the way the model was taught to produce them: thinking and tool-call tokens are trained too.
"""

from typing import TYPE_CHECKING, Any

from app.llm.reasoning import reasoning_field

if TYPE_CHECKING:  # the training process imports this module, and nothing of the store
    from sqlmodel import Session

    from app.db.schema import Step

SENTINEL = "\x00whale-end-of-turn\x00"  # finds what a chat template writes after a turn


def examples_from_rollouts(s: "Session", rollout_ids: list[int]) -> list[dict]:
    """Every successful model call of these rollouts, in rollout and step order."""
    from app.db.steps import load_steps

    return [
        example
        for steps in load_steps(s, rollout_ids, kind="model").values()
        for step, request in steps
        if (example := _example(step, request)) is not None
    ]


def _example(step: "Step", request: dict) -> dict | None:
    """The (messages -> completion) example of one successful model call, else None."""
    if step.error or not step.response or not step.response.get("message"):
        return None
    message = step.response["message"]
    completion = message.get("content") or ""
    reasoning, tool_calls = reasoning_field(message), message.get("tool_calls") or None
    if not (completion or reasoning or tool_calls):
        return None
    example = {
        "rollout_id": step.rollout_id,
        "step_id": step.id,
        "messages": request["messages"],
        "completion": completion,
        "finish_reason": step.response.get("finish_reason"),
    }
    extras = {"tools": request.get("tools"), "reasoning": reasoning, "tool_calls": tool_calls}
    return {**example, **{k: v for k, v in extras.items() if v}}


def _render(tokenizer, messages: list[dict], tools: list | None, **kw) -> str:
    return tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, **kw)


def end_of_turn(tokenizer, tools: list | None = None) -> str:
    """What the chat template writes after an assistant turn's text (ChatML: '<|im_end|>\\n')."""
    turn = [{"role": "user", "content": "x"}, {"role": "assistant", "content": SENTINEL}]
    return _render(tokenizer, turn, tools).rpartition(SENTINEL)[2]


def produced_text(tokenizer, example: dict[str, Any]) -> tuple[str, str]:
    """(the prompt as the server rendered it, the text the model produced after it)."""
    messages, tools = example["messages"], example.get("tools")
    prompt = _render(tokenizer, messages, tools, add_generation_prompt=True)
    stopped = example.get("finish_reason") in ("stop", "tool_calls")
    if not (example.get("reasoning") or example.get("tool_calls")):
        return prompt, example["completion"] + (tokenizer.eos_token if stopped else "")
    reply = {"role": "assistant", "content": example["completion"]}
    if example.get("reasoning"):
        reply["reasoning_content"] = example["reasoning"]
    if example.get("tool_calls"):
        reply["tool_calls"] = example["tool_calls"]
    whole = _render(tokenizer, [*messages, reply], tools)
    if not whole.startswith(prompt):
        raise ValueError("the chat template renders the conversation differently with its reply")
    text, suffix = whole[len(prompt) :], end_of_turn(tokenizer, tools)
    if suffix and text.endswith(suffix):  # the model stops at the end token, not the newline
        text = text[: -len(suffix)] + (suffix.rstrip() if stopped else "")
    return prompt, text


def _token_ids(tokenizer, example: dict) -> tuple[list[int], list[int]]:
    """(prompt ids, completion ids), tokenized apart, as the server tokenized the prompt and
    then generated."""
    prompt, text = produced_text(tokenizer, example)
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    return prompt_ids, tokenizer(text, add_special_tokens=False)["input_ids"]


def _cut(prompt_ids: list[int], completion_ids: list[int], max_len: int):
    ids = (prompt_ids + completion_ids)[:max_len]
    labels = ([-100] * len(prompt_ids) + completion_ids)[:max_len]
    return ids, labels


def encode(tokenizer, example: dict, max_len: int) -> tuple[list[int], list[int]]:
    """Token ids and labels (-100 on the prompt) for one example, cut to max_len tokens."""
    return _cut(*_token_ids(tokenizer, example), max_len)


def encode_all(tokenizer, examples: list[dict], max_len: int) -> tuple[list, dict[str, int]]:
    """Every example encoded as (ids, labels, its rollout's id), without those that keep no
    trained token once cut to max_len, and how many were cut and dropped: the job reports both."""
    encoded, counts = [], {"truncated": 0, "dropped": 0}
    for example in examples:
        prompt_ids, completion_ids = _token_ids(tokenizer, example)
        ids, labels = _cut(prompt_ids, completion_ids, max_len)
        counts["truncated"] += len(prompt_ids) + len(completion_ids) > max_len
        if any(t != -100 for t in labels[1:]):
            encoded.append((ids, labels, example.get("rollout_id")))
        else:  # its prompt alone fills max_len: nothing of what the model produced is left
            counts["dropped"] += 1
    return encoded, counts
