"""A model's reasoning, wherever the server puts it: a separate field (vLLM with a reasoning
parser answers `reasoning_content`, newer versions `reasoning`) or `<think>...</think>` at the
start of the text (no parser). The trace folds it, the harness gets it on the message, and RFT
trains on it as part of what the model produced (app/training/examples.py)."""

from typing import Any

OPEN, CLOSE = "<think>", "</think>"


def reasoning_field(message: dict[str, Any]) -> str | None:
    """The reasoning a server's parser split off the text, if any."""
    value = message.get("reasoning_content") or message.get("reasoning")
    return value if isinstance(value, str) and value else None


def split_thinking(message: dict[str, Any]) -> tuple[str | None, str]:
    """(reasoning, the rest of the text) of an assistant message, for people to read."""
    content = message.get("content") if isinstance(message.get("content"), str) else ""
    separate = reasoning_field(message)
    if separate is not None:
        return separate, content
    if CLOSE in content and content.lstrip().startswith(OPEN):
        thought, _, rest = content.partition(CLOSE)
        return thought.lstrip().removeprefix(OPEN).strip("\n"), rest.lstrip("\n")
    return None, content
