"""A second seed harness for arith, meant to make the weights matter: its one mechanism that
can beat the model's own arithmetic needs a format the model must first learn.

The same plain prompt as seed.py, with no Python-expression solver. SOLVER "postfix" asks the
model for the calculation in postfix notation ("23 45 +": operands first, then the operator),
which the harness evaluates exactly; a reply in any other form (the usual "23 + 45", or a
number) counts as no answer. A base chat model rarely writes postfix, so the solver pays only
once RFT under it has taught the format (or the worked examples show it well enough).
PARAMS lists the choices a cheap proposer may try for the module-level knobs.
"""

import re

PARAMS = {
    "PROMPT_STYLE": ["plain", "step_by_step", "answer_only"],
    "SOLVER": ["model", "postfix"],
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
POSTFIX_PROMPT = (
    "Write the calculation the question asks for in postfix notation: the two numbers, then "
    "the operator, separated by spaces. Reply with that only."
)
WORKED = [("What is 23 + 45?", "68", "23 45 +"), ("What is 81 - 27?", "54", "81 27 -"),
          ("What is 7 * 8?", "56", "7 8 *")]  # fmt: skip
POSTFIX = re.compile(r"(-?\d+)\s+(-?\d+)\s*([-+*])")


def numbers_in(text):
    return re.findall(r"-?\d+", text or "")


def postfix_value(text):
    """The value of the first `a b op` in the text, or None: infix ("23 + 45") is not read."""
    match = POSTFIX.search(text or "")
    if match is None:
        return None
    a, b, op = int(match.group(1)), int(match.group(2)), match.group(3)
    return str(a + b if op == "+" else a - b if op == "-" else a * b)


def run(task, llm, tools):
    postfix = SOLVER == "postfix"
    prompt = POSTFIX_PROMPT if postfix else SYSTEM_PROMPT or PROMPTS[PROMPT_STYLE]
    messages = [{"role": "system", "content": prompt}]
    for question, answer, notation in WORKED[:EXAMPLES]:
        messages += [{"role": "user", "content": question},
                     {"role": "assistant", "content": notation if postfix else answer}]  # fmt: skip
    messages.append({"role": "user", "content": task["question"]})
    answers = []
    for _ in range(VOTES):
        reply = llm.chat(messages, temperature=TEMPERATURE, max_tokens=48)
        if postfix:
            answers.append(postfix_value(reply.content))
        else:
            numbers = numbers_in(reply.content)
            answers.append(numbers[-1] if numbers else None)
    answers = [a for a in answers if a is not None]
    if not answers:
        return None
    return max(set(answers), key=answers.count)
