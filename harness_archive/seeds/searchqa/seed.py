"""Seed harness for searchqa: the paper's weak start.

One search with the question, the top passage cut to about 200 tokens (counted as words), a
minimal prompt, at most two model turns: the model answers in <answer>...</answer>, or asks for
one more search with <search>query</search> and answers after it. PARAMS lists the choices a
cheap proposer may try for the module-level knobs of the same name.
"""

import re

PARAMS = {
    "TOPK": [1, 3, 5],
    "PASSAGE_WORDS": [200, 100, 400],
    "TURNS": [2, 1, 4],
    "TEMPERATURE": [1.0, 0.6, 0.0],
    "MAX_TOKENS": [64, 256, 1024],
}
TOPK = 1
PASSAGE_WORDS = 200
TURNS = 2
TEMPERATURE = 1.0
MAX_TOKENS = 64  # per model turn: room for a short answer, not for long reasoning

SYSTEM_PROMPT = (
    "Answer the question using the passages. You may write <search>query</search> to search "
    "again. Give the final answer as <answer>answer</answer>."
)
SEARCH = re.compile(r"<search>(.*?)</search>", re.S)
ANSWER = re.compile(r"<answer>.*?</answer>", re.S)


def passages(tools, query):
    found = tools.search([query], TOPK)[0]
    return (
        "\n\n".join(
            f"({i}) {p['title']}: " + " ".join(p["text"].split()[:PASSAGE_WORDS])
            for i, p in enumerate(found, 1)
        )
        or "(no passage found)"
    )


def run(task, llm, tools):
    question = task["question"]
    messages = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {
            "role": "user",
            "content": f"Passages:\n{passages(tools, question)}\n\nQuestion: {question}",
        },
    ]
    reply = None
    for turn in range(TURNS):
        reply = llm.chat(messages, temperature=TEMPERATURE, max_tokens=MAX_TOKENS).content or ""
        if ANSWER.search(reply) or turn == TURNS - 1:
            break
        messages.append({"role": "assistant", "content": reply})
        wanted = SEARCH.search(reply)
        if wanted:
            messages.append(
                {"role": "user", "content": f"Passages:\n{passages(tools, wanted.group(1))}"}
            )
        else:
            messages.append(
                {"role": "user", "content": "Give the final answer as <answer>answer</answer>."}
            )
    return reply
