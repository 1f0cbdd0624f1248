"""Shapes a rollout's steps for the trace page.

A multi-turn harness resends the whole conversation on every model call, so each request
repeats the previous one. The page folds the messages a reader has already seen (the previous
model call's request and its completion) and shows only what is new.
"""
from typing import Any


def _same(a: dict, b: dict) -> bool:
    return a.get("role") == b.get("role") and a.get("content") == b.get("content")


def _shared_prefix(messages: list[dict], seen: list[dict]) -> int:
    n = 0
    while n < min(len(messages), len(seen)) and _same(messages[n], seen[n]):
        n += 1
    return n


def _model_view(step: dict[str, Any], seen: list[dict]) -> dict[str, Any]:
    request = step["request"] or {}
    response = step["response"] or {}
    messages = [m for m in request.get("messages") or [] if isinstance(m, dict)]
    completion = response.get("message") or {}
    return {
        **step,
        "messages": messages,
        "n_folded": _shared_prefix(messages, seen),
        "sampling": {k: v for k, v in request.items() if k != "messages"},
        "completion": completion,
        "finish_reason": response.get("finish_reason"),
    }


def _tool_view(step: dict[str, Any]) -> dict[str, Any]:
    request = step["request"] or {}
    response = step["response"] or {}
    return {
        **step,
        "args": request.get("args") or [],
        "kwargs": request.get("kwargs") or {},
        "has_result": "result" in response,
        "result": response.get("result"),
    }


def step_views(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    views = []
    seen: list[dict] = []  # the conversation as of the previous model call
    for step in steps:
        if step["kind"] == "model":
            view = _model_view(step, seen)
            seen = view["messages"] + ([view["completion"]] if view["completion"] else [])
        else:
            view = _tool_view(step)
        views.append(view)
    return views
