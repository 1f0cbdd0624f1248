"""Shapes a rollout's steps for the trace page.

A multi-turn harness resends the whole conversation on every model call, so each request
repeats the previous one. The page folds the messages a reader has already seen (the previous
model call's request and its completion) and shows only what is new.

A long trace shows a window of its steps (see get_rollout); the hidden ones become gaps that
link to the next windows.
"""

from typing import Any

GAP_WINDOW = 50  # steps one "show steps a-b" link of a long trace opens


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
        "sampling": {k: v for k, v in request.items() if k not in ("messages", "harness_asked")},
        # what the harness set that the experiment's fixed decoding overrode (gateway.py)
        "harness_asked": request.get("harness_asked") or {},
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


def _conversation_after(view: dict[str, Any]) -> list[dict]:
    return view["messages"] + ([view["completion"]] if view["completion"] else [])


def step_views(
    steps: list[dict[str, Any]], previous_model_step: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Views of consecutive steps; a window that starts mid-trace passes the model call before
    it, so its first call folds what that one said."""
    views = []
    # the conversation as of the previous model call
    seen = _conversation_after(_model_view(previous_model_step, [])) if previous_model_step else []
    for step in steps:
        if step["kind"] == "model":
            view = _model_view(step, seen)
            seen = _conversation_after(view)
        else:
            view = _tool_view(step)
        views.append(view)
    return views


def _gap(first: int, last: int) -> dict[str, Any]:
    """Steps not shown, with the windows that open them from either end."""
    n = last - first + 1
    windows = [(first, min(first + GAP_WINDOW - 1, last))]
    if n > GAP_WINDOW:
        windows.append((last - GAP_WINDOW + 1, last))
    return {"gap": {"first": first, "last": last, "n": n, "windows": windows}}


def trace_segments(data: dict[str, Any]) -> list[dict[str, Any]]:
    """A trace as the page lays it out: runs of shown steps ({"steps": views}) and the gaps
    between them ({"gap": ...}), from what get_rollout returned (`shown`: the index ranges
    loaded, None for all; `model_step_before`: the model call before each range)."""
    steps, first, last = data["steps"], data["first_step"], data["last_step"]
    if first is None:
        return []
    if data["shown"] is None:
        return [{"steps": step_views(steps)}]
    segments: list[dict[str, Any]] = []
    next_idx = first  # the first index not laid out yet
    for (a, b), previous in zip(data["shown"], data["model_step_before"]):
        a, b = max(a, next_idx), min(b, last)
        if a > b:
            continue
        if a > next_idx:
            segments.append(_gap(next_idx, a - 1))
        window = [st for st in steps if a <= st["idx"] <= b]
        segments.append({"steps": step_views(window, previous)})
        next_idx = b + 1
    if next_idx <= last:
        segments.append(_gap(next_idx, last))
    return segments
