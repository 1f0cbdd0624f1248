"""Math h0: the paper's starting harness (release krafton-ai/WHALE,
domains/math_reasoning/environments/retool/base_harness.py, the ReTool recipe) in this
workbench's contract.

What it keeps from the release:
- no system prompt; the problem, then one line asking for the final answer in \\boxed{};
- one native tool, `code_interpreter(code, timeout, language, memory_limit_mb)`, sent as a tool
  schema with every call; each call the model makes is run with the domain's sandboxed
  interpreter, `tools.python(code)`, the code prepared as the release prepares it (the first
  ```python fence if there is one; the last line printed unless it already prints), and answered
  with a `role: tool` message holding stdout then stderr;
- at most 2 model turns (MAX_TURNS = 2); a reply without a tool call ends the episode, and the
  tool calls of the last turn are not run;
- a cumulative budget of 8192 assistant tokens (RETOOL_ASSISTANT_TOKEN_BUDGET, set from the
  launcher's MAX_RESP_LENGTH): each call gets `max_tokens` = what is left of it, and the
  episode ends once it is spent;
- the answer is the last assistant message's text, which the release's verifier reads.

Where it differs: the code runs in the workbench's sandbox under the domain's limits
(WHALE_MATH_PYTHON_TIMEOUT_S, WHALE_MATH_PYTHON_MEMORY_MB: set them to the paper's 30 s and
1024 MB), not SandboxFusion with the limits the model names; a run killed for its time limit
answers "(no output)" when it printed nothing.
"""

import json
import re

MAX_TURNS = 2
ASSISTANT_TOKEN_BUDGET = 8192

SYSTEM_PROMPT = None  # the release sends none; a prompt optimizer may write one
USER_PROMPT = "{question}\nWrite the final answer in the form \\boxed{{final answer}}."
CODE_TOOL = {
    "type": "function",
    "function": {
        "name": "code_interpreter",
        "description": "Run Python code in a sandbox and return what it prints.",
        "parameters": {
            "properties": {
                "code": {"title": "Code", "type": "string"},
                "timeout": {"default": 30, "title": "Timeout", "type": "integer"},
                "language": {"default": "python", "title": "Language", "type": "string"},
                "memory_limit_mb": {"default": 1024, "title": "Memory Limit Mb", "type": "integer"},
            },
            "required": ["code", "timeout", "language", "memory_limit_mb"],
            "title": "code_interpreter_args",
            "type": "object",
            "additionalProperties": False,
        },
    },
}
PYTHON_FENCE = re.compile(r"```python(.*?)```", re.S)


def prepared(code):
    """The code as it is run: the first ```python fence's body when there is one, and the last
    non-empty line wrapped in print() unless it starts with print."""
    code = code if isinstance(code, str) else str(code)
    fenced = PYTHON_FENCE.findall(code)
    if fenced:
        code = fenced[0].strip()
    lines = code.split("\n")
    for i in range(len(lines) - 1, -1, -1):
        if lines[i] == "":
            continue
        if not lines[i].startswith("print"):
            lines[i] = f"print({lines[i]})"
        break
    return "\n".join(lines)


def code_interpreter(tools, code, **_limits):
    """The tool's answer: what the code printed. The domain's own limits apply (_limits: the
    time and memory the model asked for, not honoured here)."""
    result = tools.python(prepared(code))
    output = result["stdout"] + result["stderr"]
    if result["timed_out"]:
        return output or "(no output)"
    return output


def run_tool(tools, call):
    """One tool call of the model -> the text of its `role: tool` answer."""
    function = call.get("function") or {}
    name = function.get("name")
    try:
        arguments = json.loads(function.get("arguments") or "{}")
        if not isinstance(arguments, dict):
            raise ValueError("the arguments are not an object")
    except ValueError as exc:
        return f"[parse error] {exc}: {function.get('arguments')!r}"
    if name != "code_interpreter":
        return f"[unknown tool] {name}"
    try:
        return code_interpreter(tools, **arguments)
    except Exception as exc:  # a missing argument or a refused run is the model's to read
        return f"[tool error] {exc}"


def assistant_message(reply):
    """The reply as the next call's history: its text, its thinking and its tool calls."""
    message = {"role": "assistant", "content": reply.content}
    if reply.reasoning:
        message["reasoning_content"] = reply.reasoning
    if reply.tool_calls:
        message["tool_calls"] = reply.tool_calls
    return message


def run(task, llm, tools):
    messages = [{"role": "system", "content": SYSTEM_PROMPT}] if SYSTEM_PROMPT else []
    messages.append({"role": "user", "content": USER_PROMPT.format(question=task["question"])})
    used, answer = 0, None
    for turn in range(MAX_TURNS):
        left = ASSISTANT_TOKEN_BUDGET - used
        if left <= 0:
            break
        try:
            reply = llm.chat(messages, tools=[CODE_TOOL], max_tokens=left)
        except Exception as exc:
            if getattr(exc, "reason", None) == "budget":  # the rollout's own budget: stop here
                break
            raise
        used += int(reply.usage.get("completion_tokens") or 0)
        answer = reply.content
        messages.append(assistant_message(reply))
        if not reply.tool_calls or used >= ASSISTANT_TOKEN_BUDGET or turn == MAX_TURNS - 1:
            break
        for call in reply.tool_calls:
            messages.append(
                {"role": "tool", "tool_call_id": call.get("id"), "content": run_tool(tools, call)}
            )
    return answer
