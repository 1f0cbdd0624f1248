"""Chess h0: the paper's starting harness (release krafton-ai/WHALE,
domains/chess_puzzles/environments/chess_puzzle/base_harness.py) with the release's puzzle loop
(autoharness_chess_puzzle/runner.py, run_puzzle_rollout and verify_and_step) in this
workbench's contract. The board lives in the domain: `tools.observation()` describes it and
`tools.move(uci)` plays a move and answers with the opponent's reply or the end.

What it keeps from the release:
- a system prompt and a user prompt asking for exactly one move as <move>uci</move>, no
  explanation; the observation as the release writes it (side to move, FEN, a board with rank
  and file labels, the opponent's last reply, the moves accepted so far, the move number, and
  every legal move as `- [uci] SAN=...`);
- each call sends the system prompt, the episode so far (each reply, then the verifier's answer
  to it as a user message) and the current observation, with the verifier's feedback appended
  after a retry;
- the reply is read as the release reads it: <move> tags, else [uci], else a bare UCI move; two
  different moves are none;
- 1 format retry and 1 illegal-move retry per puzzle (the move is checked against the legal
  moves listed, before it is played); a second failure of either kind, or a legal move off the
  solution line, ends the puzzle;
- at most 9 model calls (MAX_TURNS), retries included;
- a cumulative budget of 8129 assistant tokens (the release's number): each call gets
  `max_tokens` = what is left of it, and the episode ends once it is spent.

It returns the moves played, as <move>uci</move> tags (the domain scores the rollout's board).

Its parts are the release's candidate module's: the prompts, `format_observation`,
`parse_action`, `is_legal_action`, the feedback texts, the retry budgets and `MAX_TURNS`, around
a fixed runner, `run`, one model call per move attempt. The paper chess files keep `run` fixed
(`[search] fixed_functions = ["run"]`), so a candidate changes only those parts, as the
release's do.
"""

import re

MAX_TURNS = 9
FORMAT_RETRY_BUDGET = 1
ILLEGAL_MOVE_RETRY_BUDGET = 1
ASSISTANT_TOKEN_BUDGET = 8129

SYSTEM_PROMPT = (
    "You solve chess tactics, one legal move at a time.\n"
    "Rely only on the position and the legal moves given to you; do not pretend to have engine "
    "analysis or outside knowledge. Answer with exactly one move."
)
USER_PROMPT = (
    "Find the best move in this chess puzzle position.\n\n{observation}\n\n"
    "Answer with exactly one move as <move>uci</move>, for example <move>e2e4</move>.\n"
    "Give no explanation."
)
UCI = r"([a-h][1-8][a-h][1-8][qrbn]?)"
READ_PATTERNS = [
    re.compile(r"<move>\s*" + UCI + r"\s*</move>", re.I),
    re.compile(r"\[\s*" + UCI + r"\s*\]", re.I),
    re.compile(r"\b" + UCI + r"\b", re.I),
]
NO_MOVE, TWO_MOVES = "__no_move__", "__ambiguous_multiple_moves__"


def parse_action(reply):
    """The move the reply names: the first pattern that finds any decides; two different moves
    there are none."""
    for pattern in READ_PATTERNS:
        moves = list(dict.fromkeys(m.group(1).lower() for m in pattern.finditer(str(reply))))
        if moves:
            return moves[0] if len(moves) == 1 else TWO_MOVES
    return NO_MOVE


def board_with_labels(board):
    """The domain's ASCII board (rank 8 on top) with rank numbers and file letters."""
    rows = [f"{8 - i} {row}" for i, row in enumerate(board.splitlines())]
    return "\n".join(rows + ["  a b c d e f g h"])


def format_observation(observation, opponent_move, accepted):
    """What the model is shown of the position (the release's format_observation)."""
    side = observation["side_to_move"].capitalize()
    lines = [
        "Task: solve this chess puzzle, one move per turn.",
        f"Side to move: {side}",
        f"FEN: {observation['fen']}",
        "Board:",
        board_with_labels(observation["board"]),
    ]
    if opponent_move:
        lines.append(f"Last opponent reply: {opponent_move}")
    if accepted:
        lines.append("Your accepted moves so far: " + ", ".join(accepted))
    lines += [f"Puzzle move number: {len(accepted) + 1}", "Legal moves:"]
    for uci, san in zip(observation["legal_moves"], observation["legal_moves_san"]):
        lines.append(f"- [{uci}] SAN={san}")
    return "\n".join(lines)


def is_legal_action(move, observation):
    """Whether a parsed move is one of the legal moves listed (the release's is_legal_action)."""
    return move in observation["legal_moves"]


def format_feedback(parsed):
    return (
        f'The verifier found no single UCI move in your reply (it read "{parsed}"). '
        "Reply with exactly one move, such as <move>e2e4</move>, and nothing else."
    )


def illegal_feedback(parsed):
    return (
        f'The move "{parsed}" is not legal in this position. '
        "Pick one of the legal moves listed and reply only as <move>uci</move>."
    )


def run(task, llm, tools):
    observation = tools.observation()
    history = []  # the replies so far, each followed by the verifier's answer to it
    feedback = None  # shown with the observation on the next call, after a retry
    opponent_move, accepted = None, []
    format_retries = illegal_retries = used = 0
    for _ in range(MAX_TURNS):
        left = ASSISTANT_TOKEN_BUDGET - used
        if left <= 0:
            break
        shown = format_observation(observation, opponent_move, accepted)
        if feedback:
            shown += "\n\nFeedback from verifier:\n" + feedback
        messages = [
            {"role": "system", "content": SYSTEM_PROMPT},
            *history,
            {"role": "user", "content": USER_PROMPT.format(observation=shown)},
        ]
        try:
            reply = llm.chat(messages, max_tokens=left)
        except Exception as exc:
            if getattr(exc, "reason", None) == "budget":  # the rollout's own budget: stop here
                break
            raise
        used += int(reply.usage.get("completion_tokens") or 0)
        parsed, feedback = parse_action(reply.content), None
        if not re.fullmatch(UCI, parsed):
            if format_retries >= FORMAT_RETRY_BUDGET:
                break  # the puzzle is failed
            format_retries += 1
            feedback = format_feedback(parsed)
            verdict = feedback
        elif not is_legal_action(parsed, observation):
            if illegal_retries >= ILLEGAL_MOVE_RETRY_BUDGET:
                break
            illegal_retries += 1
            feedback = illegal_feedback(parsed)
            verdict = feedback
        else:
            accepted.append(parsed)
            result = tools.move(parsed)
            if result["result"] != "continue":  # solved, or off the line: the puzzle is over
                break
            observation, opponent_move = result, result["opponent_move"]
            verdict = (
                f"Correct. The opponent replied {opponent_move} "
                f"({result['opponent_move_san']}). Play your next move."
            )
        if reply.content:  # the release leaves an empty reply out of the history
            history.append({"role": "assistant", "content": reply.content})
        history.append({"role": "user", "content": verdict})
    return " ".join(f"<move>{move}</move>" for move in accepted)
