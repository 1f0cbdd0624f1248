"""Native tool calls for the local model server, read the way vLLM's parsers read them.

A model trained for tools writes each call as a `<tool_call>...</tool_call>` block: Hermes-style
JSON (`{"name": ..., "arguments": {...}}`, Qwen3 and vLLM's `hermes` parser) or Qwen3.5's XML
(`<function=NAME><parameter=P>value</parameter></function>`, vLLM's `qwen3_coder` parser,
values typed by the tool's schema). The reply then becomes OpenAI `tool_calls`, with the text
before the first block as its content. A block that cannot be read leaves the whole reply as
plain content, as vLLM does, so the harness sees what the model wrote.
"""

import json
import re
import secrets
from typing import Any

from app.syntax_tree import literal

BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)
FUNCTION = re.compile(r"<function=([^>\s]+)>(.*?)</function>", re.S)
PARAMETER = re.compile(r"<parameter=([^>\s]+)>(.*?)</parameter>", re.S)


def parse_tool_calls(text: str, tools: list[dict]) -> tuple[str | None, list[dict]]:
    """(content, tool_calls) of a reply to a request that offered `tools`; ([text], []) when
    the reply holds no readable call."""
    blocks = BLOCK.findall(text or "")
    if not blocks:
        return text, []
    calls = []
    for block in blocks:
        call = _hermes(block) or _xml(block, _schemas(tools))
        if call is None:
            return text, []
        name, arguments = call
        calls.append(
            {
                "id": f"call_{secrets.token_hex(8)}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)},
            }
        )
    content = text[: text.index("<tool_call>")].strip()
    return content or None, calls


def _hermes(block: str) -> tuple[str, dict] | None:
    try:
        data = json.loads(block)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        return None
    arguments = data.get("arguments", data.get("parameters", {}))
    if isinstance(arguments, str):  # some models quote the object
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    return (data["name"], arguments) if isinstance(arguments, dict) else None


def _xml(block: str, schemas: dict[str, dict]) -> tuple[str, dict] | None:
    found = FUNCTION.search(block)
    if found is None:
        return None
    name, body = found.groups()
    properties = (schemas.get(name) or {}).get("properties") or {}
    arguments = {}
    for key, raw in PARAMETER.findall(body):
        value = raw.removeprefix("\n").removesuffix("\n")
        arguments[key] = _typed(value, (properties.get(key) or {}).get("type"))
    return name, arguments


def _typed(value: str, kind: Any) -> Any:
    """A parameter's text as its schema's type; text the type does not fit stays text."""
    if kind == "string":
        return value
    if kind == "integer":
        try:
            return int(value.strip())
        except ValueError:
            return value
    if kind == "number":
        try:
            return float(value.strip())
        except ValueError:
            return value
    if kind == "boolean" and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    for read in (json.loads, literal):  # arrays, objects, untyped parameters
        try:
            return read(value.strip())
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            pass
    return value


def _schemas(tools: list[dict]) -> dict[str, dict]:
    """Each offered function's parameter schema, by name."""
    out = {}
    for tool in tools or []:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            out[function["name"]] = function.get("parameters") or {}
    return out


def template_messages(messages: list[dict]) -> list[dict]:
    """Messages as chat templates expect them: text content never None (an assistant turn that
    only called tools has none) and each call's arguments an object, not the JSON text the
    OpenAI protocol carries (vLLM converts them the same way before rendering)."""
    out = []
    for message in messages:
        message = dict(message)
        if message.get("content") is None:
            message["content"] = ""
        if message.get("tool_calls"):
            message["tool_calls"] = [_with_object_arguments(c) for c in message["tool_calls"]]
        out.append(message)
    return out


def _with_object_arguments(call: Any) -> Any:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("arguments"), str):
        return call
    try:
        arguments = json.loads(function["arguments"])
    except ValueError:
        return call
    return {**call, "function": {**function, "arguments": arguments}}
