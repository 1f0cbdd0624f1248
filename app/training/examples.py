"""Training examples from accepted rollouts.

Because the harness shapes every model call, each model call of an accepted rollout is trained:
exactly what the model was given -> what it produced. The loss covers the tokens the model
produced only; the system prompt, user turns, tool results and anything the harness wrote are
context.

Where the server returned the token ids of its calls (vLLM, the local server: the gateway
records them), the example is made of those ids, as verl trains on its rollout's ids:
- a rollout whose every call's prompt extends the previous call's prompt plus completion is one
  example, one sequence: the last call's prompt and completion, with every call's completion
  trained and everything between masked (the release's trajectory);
- any other rollout (its harness rewrote the history, dropped the thinking, called in parallel)
  is one example per call: that call's prompt ids, then its completion ids trained.

A call without ids (a hosted API, a failed or older server) is rendered instead: its messages
go back through the model's chat template and are tokenized again. What the model produced is
then its text as the server returned it, with the end-of-turn token when it chose to stop; when
the server split that text into parts (vLLM's reasoning and tool-call parsers return
`reasoning_content` and `tool_calls` beside the content), the assistant turn is rendered back
through the template, which writes those parts the way the model was taught to produce them.
Rendering can differ from what was sampled (a parsed tool call written back in the template's
own JSON spacing, the same text split into other tokens, earlier thinking left out): each call
with ids is rendered too and compared, and the job counts the calls that differ (drift).
"""

from typing import TYPE_CHECKING, Any

from app.llm.reasoning import reasoning_field
from app.llm.tool_calls import template_messages

if TYPE_CHECKING:  # the training process imports this module, and nothing of the store
    from sqlmodel import Session

    from app.db.schema import Step

SENTINEL = "\x00whale-end-of-turn\x00"  # finds what a chat template writes after a turn


def examples_from_rollouts(s: "Session", rollout_ids: list[int]) -> list[dict]:
    """The examples of these rollouts' successful model calls, in rollout and step order."""
    from app.db.steps import load_steps, unpack_ids

    examples = []
    for steps in load_steps(s, rollout_ids, kind="model").values():
        ids = unpack_ids(step.token_ids for step, _ in steps)
        calls = [
            (example, sampled)
            for (step, request), sampled in zip(steps, ids)
            if (example := _example(step, request, sampled)) is not None
        ]
        one = _one_sequence(calls) if all(sampled for _, sampled in calls) else None
        if one is not None:
            examples.append(one)
        else:
            examples += [_of_ids([(e, sampled)]) if sampled else e for e, sampled in calls]
    return examples


def _one_sequence(calls: list[tuple[dict, tuple]]) -> dict | None:
    """The rollout as one example when each call's prompt extends the previous call's prompt
    plus completion, else None."""
    ids: list[int] = []
    for _, (prompt, completion) in calls:
        if prompt[: len(ids)] != ids:
            return None
        ids = prompt + completion
    return _of_ids(calls) if calls else None


def _of_ids(calls: list[tuple[dict, tuple]]) -> dict:
    """An example of sampled ids: the last call's prompt and completion, each call's completion
    trained (`trained`: [start, end) spans); `calls` keeps each call's messages to render them
    and count drift."""
    prompt, completion = calls[-1][1]
    return {
        "rollout_id": calls[0][0]["rollout_id"],
        "step_ids": [e["step_id"] for e, _ in calls],
        "ids": prompt + completion,
        "trained": [[len(p), len(p) + len(c)] for _, (p, c) in calls],
        "calls": [e for e, _ in calls],
    }


def _example(step: "Step", request: dict, sampled) -> dict | None:
    """The (messages -> completion) example of one successful model call, else None."""
    if step.error or not step.response or not step.response.get("message"):
        return None
    message = step.response["message"]
    completion = message.get("content") or ""
    reasoning, tool_calls = reasoning_field(message), message.get("tool_calls") or None
    if not (completion or reasoning or tool_calls or (sampled and sampled[1])):
        return None
    example = {
        "rollout_id": step.rollout_id,
        "step_id": step.id,
        "messages": request["messages"],
        "completion": completion,
        "finish_reason": step.response.get("finish_reason"),
    }
    extras = {
        "tools": request.get("tools"),
        "chat_template_kwargs": request.get("chat_template_kwargs"),
        "reasoning": reasoning,
        "tool_calls": tool_calls,
    }
    return {**example, **{k: v for k, v in extras.items() if v}}


def _render(tokenizer, messages: list[dict], tools: list | None, **kw) -> str:
    return tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, **kw)


def end_of_turn(tokenizer, tools: list | None = None) -> str:
    """What the chat template writes after an assistant turn's text (ChatML: '<|im_end|>\\n')."""
    turn = [{"role": "user", "content": "x"}, {"role": "assistant", "content": SENTINEL}]
    return _render(tokenizer, turn, tools).rpartition(SENTINEL)[2]


def produced_text(tokenizer, example: dict[str, Any]) -> tuple[str, str]:
    """(the prompt as the server rendered it, the text the model produced after it)."""
    # as the servers hand them to the template: no None content, tool-call arguments as objects
    messages, tools = template_messages(example["messages"]), example.get("tools")
    kwargs = example.get("chat_template_kwargs") or {}  # as the server rendered it
    prompt = _render(tokenizer, messages, tools, add_generation_prompt=True, **kwargs)
    stopped = example.get("finish_reason") in ("stop", "tool_calls")
    if not (example.get("reasoning") or example.get("tool_calls")):
        return prompt, example["completion"] + (tokenizer.eos_token if stopped else "")
    reply = {"role": "assistant", "content": example["completion"]}
    if example.get("reasoning"):
        reply["reasoning_content"] = example["reasoning"]
    if example.get("tool_calls"):
        reply["tool_calls"] = example["tool_calls"]
    whole = _render(tokenizer, [*messages, *template_messages([reply])], tools, **kwargs)
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


def _sampled(example: dict) -> tuple[list[int], list[int]]:
    """Ids and labels (-100 outside the calls' completions) of an example of sampled ids."""
    ids = example["ids"]
    labels = [-100] * len(ids)
    for start, end in example["trained"]:
        labels[start:end] = ids[start:end]
    return ids, labels


def _rendered(tokenizer, example: dict) -> tuple[list[int], list[int]]:
    prompt_ids, completion_ids = _token_ids(tokenizer, example)
    return prompt_ids + completion_ids, [-100] * len(prompt_ids) + completion_ids


def drifted(tokenizer, example: dict) -> int:
    """How many calls of an example of sampled ids would have been trained on other ids had
    they been rendered through the chat template (one that cannot be rendered counts)."""
    ids, count = example["ids"], 0
    for call, (start, end) in zip(example["calls"], example["trained"]):
        try:
            prompt_ids, completion_ids = _token_ids(tokenizer, call)
        except Exception:  # noqa: BLE001 - a template that fails on the call: it drifted
            count += 1
            continue
        count += prompt_ids != ids[:start] or completion_ids != ids[start:end]
    return count


def _encoded(tokenizer, example: dict) -> tuple[list[int], list[int]]:
    return _sampled(example) if "ids" in example else _rendered(tokenizer, example)


def encode(tokenizer, example: dict, max_len: int) -> tuple[list[int], list[int]]:
    """Token ids and labels (-100 where nothing is trained) for one example, cut to max_len."""
    ids, labels = _encoded(tokenizer, example)
    return ids[:max_len], labels[:max_len]


def encode_all(tokenizer, examples: list[dict], max_len: int) -> tuple[list, dict[str, int]]:
    """Every example encoded as (ids, labels, its rollout's id), without those that keep no
    trained token once cut to max_len, and the counts the job reports: examples cut and dropped,
    trained from sampled ids and rendered, and of the calls with ids, those checked and those
    whose rendering drifts from them."""
    counts = dict.fromkeys(("truncated", "dropped", "from_ids", "rendered"), 0)
    counts |= {"drift": 0, "drift_checked": 0}
    encoded = []
    for example in examples:
        if "ids" in example:
            counts["from_ids"] += 1
            counts["drift"] += drifted(tokenizer, example)
            counts["drift_checked"] += len(example["trained"])
        else:
            counts["rendered"] += 1
        ids, labels = _encoded(tokenizer, example)
        counts["truncated"] += len(ids) > max_len
        ids, labels = ids[:max_len], labels[:max_len]
        if any(t != -100 for t in labels[1:]):
            encoded.append((ids, labels, example.get("rollout_id")))
        else:  # its prompt alone fills max_len: nothing of what the model produced is left
            counts["dropped"] += 1
    return encoded, counts
