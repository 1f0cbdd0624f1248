"""Seed harness for arith: one model call, a plain prompt, the last number wins.

Deliberately weak, like the paper's starting harnesses. PARAMS lists the choices a cheap
proposer may try for the module-level knobs of the same name; the value assigned below is the
current one. SOLVER "program" is the program-aided mechanism: the model only writes the
calculation as an expression and the harness evaluates it.
"""

import ast
import operator
import re

PARAMS = {
    "PROMPT_STYLE": ["plain", "step_by_step", "answer_only"],
    "SOLVER": ["model", "program"],
    "EXAMPLES": [0, 3],
    "TEMPERATURE": [1.0, 0.6, 0.0],
    "VOTES": [1, 3, 5],
}
PROMPT_STYLE = "plain"
SOLVER = "model"
EXAMPLES = 0  # worked examples shown before the question, as earlier chat turns
TEMPERATURE = 1.0
VOTES = 1

SYSTEM_PROMPT = None  # free text that replaces PROMPTS[PROMPT_STYLE]: what the gepa proposer writes
PROMPTS = {
    "plain": "Solve the arithmetic problem.",
    "step_by_step": "Solve the arithmetic problem. Think step by step, then give the final number.",
    "answer_only": "Reply with only the final number, nothing else.",
}
PROGRAM_PROMPT = (
    "Write the calculation the question asks for as a Python expression. "
    "Reply with the expression only."
)
WORKED = [("What is 23 + 45?", "68", "23 + 45"), ("What is 81 - 27?", "54", "81 - 27"),
          ("What is 7 * 8?", "56", "7 * 8")]  # fmt: skip
EXPRESSION = re.compile(r"\(*-?\d+(?:\.\d+)?\)*(?:\s*[-+*/]\s*\(*-?\d+(?:\.\d+)?\)*)+")
OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
             ast.Div: operator.truediv, ast.USub: operator.neg}  # fmt: skip


def numbers_in(text):
    numbers, current = [], ""
    for ch in (text or "") + " ":
        if ch.isdigit() or (ch == "-" and not current):
            current += ch
        else:
            if current.strip("-"):
                numbers.append(current)
            current = ""
    return numbers


def calculate(text):
    """The value of the first arithmetic expression in the text, or None."""
    match = EXPRESSION.search(text or "")
    if match is None:
        return None
    try:
        return str(_value(ast.parse(match.group(0), mode="eval").body))
    except (SyntaxError, ValueError, KeyError, ZeroDivisionError, TypeError):
        return None


def _value(node):
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.BinOp):
        value = OPERATORS[type(node.op)](_value(node.left), _value(node.right))
        return int(value) if float(value).is_integer() else value
    if isinstance(node, ast.UnaryOp):
        return OPERATORS[type(node.op)](_value(node.operand))
    raise ValueError("not arithmetic")


def run(task, llm, tools):
    program = SOLVER == "program"
    prompt = PROGRAM_PROMPT if program else SYSTEM_PROMPT or PROMPTS[PROMPT_STYLE]
    messages = [{"role": "system", "content": prompt}]
    for question, answer, expression in WORKED[:EXAMPLES]:
        messages += [{"role": "user", "content": question},
                     {"role": "assistant", "content": expression if program else answer}]  # fmt: skip
    messages.append({"role": "user", "content": task["question"]})
    answers = []
    for _ in range(VOTES):
        reply = llm.chat(messages, temperature=TEMPERATURE, max_tokens=48)
        if program:
            answers.append(calculate(reply.content))
        else:
            numbers = numbers_in(reply.content)
            answers.append(numbers[-1] if numbers else None)
    answers = [a for a in answers if a is not None]
    if not answers:
        return None
    return max(set(answers), key=answers.count)
