"""Seed harness for chess: show the board, ask for one move as <move>uci</move>, play it.

Deliberately weak, like the paper's starting harnesses: a minimal prompt, the observation as the
tool gives it, a few model calls. The board lives server-side: `tools.observation()` describes
it and `tools.move(uci)` plays a move and answers with the opponent's reply or the end. PARAMS
lists the choices a cheap proposer may try for the module-level knobs of the same name.
"""

import re

PARAMS = {
    "SHOW_LEGAL_MOVES": [False, True],
    "MAX_TURNS": [3, 6],
    "TEMPERATURE": [1.0, 0.6, 0.0],
    "MAX_TOKENS": [64, 1024],
}
SHOW_LEGAL_MOVES = False
MAX_TURNS = 3  # model calls in all, retries after a missing or illegal move included
TEMPERATURE = 1.0
MAX_TOKENS = 64  # per reply: room for a move, not for thinking aloud

SYSTEM_PROMPT = ("Solve the chess puzzle. Reply with your move in UCI notation inside move "
                 "tags, for example <move>e2e4</move>.")  # fmt: skip
MOVE = re.compile(r"<move>\s*(\S+?)\s*</move>", re.IGNORECASE)


def describe(observation):
    text = (f"FEN: {observation['fen']}\n{observation['board']}\n"
            f"You play {observation['side_to_move']}.")  # fmt: skip
    if SHOW_LEGAL_MOVES:
        text += "\nLegal moves: " + " ".join(observation["legal_moves"])
    return text


def run(task, llm, tools):
    messages = [{"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": describe(tools.observation())}]  # fmt: skip
    sent = []  # every move sent to the board, in order: the answer replays them
    for _ in range(MAX_TURNS):
        reply = llm.chat(messages, temperature=TEMPERATURE, max_tokens=MAX_TOKENS)
        messages.append({"role": "assistant", "content": reply.content})
        match = MOVE.search(reply.content)
        if match is None:
            messages.append({"role": "user", "content": "Give one move as <move>uci</move>."})
            continue
        sent.append(match.group(1))
        result = tools.move(sent[-1])
        if result["result"] == "continue":
            messages.append({"role": "user", "content": f"Your opponent played "
                             f"{result['opponent_move']}.\n{describe(result)}"})  # fmt: skip
        elif result["result"] == "illegal":
            messages.append({"role": "user", "content": result["message"]})
        else:  # solved, wrong or over: nothing left to play
            break
    return " ".join(f"<move>{move}</move>" for move in sent)
