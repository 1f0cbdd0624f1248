"""How a model step's request is stored: only the messages its call added.

A multi-turn harness resends the whole conversation on every model call, so storing each
request whole makes a rollout's size grow with the square of its turns (16 calls: 128 KiB of
JSON, 68 KiB compressed). A step instead stores `messages_from: k` and the messages after the
first k, the first k being those of the same rollout's previous model call. Everything that
reads requests back (API, pages, export, proposer traces, training examples) goes through
`expand_requests`, which puts the whole lists back.
"""

from collections.abc import Iterable


def shared_prefix(previous: list, messages: list) -> int:
    n = 0
    for a, b in zip(previous, messages):
        if a != b:
            break
        n += 1
    return n


def compact(previous: list, request: dict) -> dict:
    """The request to store, given the previous call's messages (the whole list)."""
    messages = request.get("messages")
    k = shared_prefix(previous, messages) if isinstance(messages, list) else 0
    if k == 0:
        return request
    return {**request, "messages": messages[k:], "messages_from": k}


def expand_requests(requests: Iterable[dict | None]) -> list[dict | None]:
    """The whole requests of one rollout's model steps, given their stored forms in step order
    (every model step, refused ones included: each was stored against the one before)."""
    whole, previous = [], []
    for request in requests:
        if isinstance(request, dict) and "messages_from" in request:
            request = dict(request)
            k = request.pop("messages_from")
            request["messages"] = previous[:k] + list(request.get("messages") or [])
        if isinstance(request, dict) and isinstance(request.get("messages"), list):
            previous = request["messages"]
        whole.append(request)
    return whole


def expand_steps(steps: list[dict]) -> list[dict]:
    """The same step dicts (one rollout's, in step order), their model requests made whole."""
    model = [step for step in steps if step["kind"] == "model"]
    for step, whole in zip(model, expand_requests(step["request"] for step in model)):
        step["request"] = whole
    return steps
