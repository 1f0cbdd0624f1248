"""Seed harness for arith: one model call, a plain prompt, the last number wins.

PARAMS lists the choices a cheap proposer may try for the module-level knobs of the same name;
the value assigned below is the current one.
"""
PARAMS = {
    "PROMPT_STYLE": ["plain", "step_by_step", "answer_only"],
    "EXTRACT": ["last_number", "first_number"],
    "VOTES": [1, 3, 5],
}
PROMPT_STYLE = "plain"
EXTRACT = "last_number"
VOTES = 1

PROMPTS = {
    "plain": "Solve the arithmetic problem.",
    "step_by_step": "Solve the arithmetic problem. Think step by step, then give the final number.",
    "answer_only": "Reply with only the final number, nothing else.",
}


def extract(text):
    numbers = []
    current = ""
    for ch in (text or "") + " ":
        if ch.isdigit() or (ch == "-" and not current):
            current += ch
        else:
            if current.strip("-"):
                numbers.append(current)
            current = ""
    if not numbers:
        return None
    return numbers[-1] if EXTRACT == "last_number" else numbers[0]


def run(task, llm, tools):
    messages = [
        {"role": "system", "content": PROMPTS[PROMPT_STYLE]},
        {"role": "user", "content": task["question"]},
    ]
    answers = []
    for _ in range(VOTES):
        reply = llm.chat(messages, temperature=1.0, max_tokens=48)
        answers.append(extract(reply.content))
    answers = [a for a in answers if a is not None]
    if not answers:
        return None
    return max(set(answers), key=answers.count)
