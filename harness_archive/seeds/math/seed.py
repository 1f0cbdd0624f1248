"""Seed harness for math: a minimal prompt, the answer in \\boxed{}, at most two model turns.

Turn 1 may contain a ```python block; if it does (and USE_PYTHON), the harness runs it with the
domain's sandboxed interpreter, tools.python(code), and shows the output in turn 2, which must
give the final answer. Deliberately weak, like the paper's starting harnesses. PARAMS lists the
choices a cheap proposer may try for the module-level knobs of the same name; SYSTEM_PROMPT is
the text a prompt optimizer (the gepa proposer) rewrites.
"""

import re

PARAMS = {
    "USE_PYTHON": [True, False],
    "TEMPERATURE": [1.0, 0.6, 0.0],
    "MAX_TOKENS": [512, 1024],
}
USE_PYTHON = True
TEMPERATURE = 1.0
MAX_TOKENS = 512

SYSTEM_PROMPT = "Solve the math problem. Put the final answer in \\boxed{}."
TOOL_HINT = (
    " You may write Python code in a ```python block; it will be run and you will see "
    "its output before you answer."
)
CODE = re.compile(r"```python\s*\n(.*?)```", re.S)


def run(task, llm, tools):
    messages = [
        {"role": "system", "content": SYSTEM_PROMPT + (TOOL_HINT if USE_PYTHON else "")},
        {"role": "user", "content": task["question"]},
    ]
    reply = llm.chat(messages, temperature=TEMPERATURE, max_tokens=MAX_TOKENS).content
    code = CODE.search(reply) if USE_PYTHON else None
    if code is None:
        return reply
    result = tools.python(code.group(1))
    output = (result["stdout"] + result["stderr"]).strip() or "(no output)"
    messages += [
        {"role": "assistant", "content": reply},
        {
            "role": "user",
            "content": f"Output of your code:\n{output[:2000]}\n\n"
            "Now give the final answer in \\boxed{}.",
        },
    ]
    return llm.chat(messages, temperature=TEMPERATURE, max_tokens=MAX_TOKENS).content
