"""The paper's starting harnesses (harness_archive/paper/<domain>/h0.py) send what the release's
h0 sends on the same episode. Each test runs `whale eval` (sandbox, gateway, the domain's tools)
against a scripted OpenAI-protocol server that answers with reasoning and tool calls, then
reads the requests the server received. Expected values come from the release,
krafton-ai/WHALE at 7d5a422a; each is cited where it is asserted."""

import json
import os
import sqlite3
import subprocess

import pytest

from app.domains import SPLITS, get_domain
from app.domains.chess_puzzles import ChessPuzzles
from tests.conftest import REPO, WHALE
from tests.openai_stub import openai_stub

H0 = REPO / "harness_archive" / "paper"
# Search QA and math: MAX_RESP_LENGTH=8192, the cumulative assistant-token budget
# (search_qa/scripts/nq_hotpotqa/train_grpo_qwen3_5_2b_paper.sh, "MAX_RESP_LENGTH:-8192";
# math_reasoning/scripts/train_grpo_qwen3_5_2b_retool.sh exports it as
# RETOOL_ASSISTANT_TOKEN_BUDGET). Chess: 8129 (chess_puzzles/environments/chess_puzzle/env.py,
# assistant_token_budget=8129; meta_harness/config-chess-puzzle.json).
BUDGET = {"searchqa": 8192, "math": 8192, "chess": 8129}


def evaluate(
    tmp_path, domain, script, *, env=None, scoring="paper", split="test", harness=None, rollout=None
):
    """One rollout of the domain's h0 (or `harness`) on the first task of `split` against the
    script: (whale eval's JSON, the request bodies the server received, the rollout's recorded
    steps). `rollout`: [rollout] settings (default: the paper's per-call budget)."""
    home = tmp_path / "home"
    if rollout is None:
        rollout = {"max_tokens_per_call": BUDGET[domain], "max_tokens": 200000}
    with openai_stub(script) as (url, seen):
        proc = subprocess.run(
            [WHALE, "eval", str(harness or H0 / domain / "h0.py"), "--domain", domain]
            + ["--limit", "1", "-k", "1", "--json", "--sandbox", "process"]
            + ["--scoring", scoring, "--split", split]
            + [word for k, v in rollout.items() for word in ("--rollout", f"{k}={v}")],
            env={
                **os.environ,
                **(env or {}),
                "WHALE_HOME": str(home),
                "WHALE_LLM_URL": url,
                "WHALE_LLM_MODEL": "policy",
            },
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    with sqlite3.connect(home / "whale.db") as db:
        steps = db.execute("SELECT kind, tool, error FROM step ORDER BY idx").fetchall()
    return out, [s["body"] for s in seen], steps


def tool_call(call_id, name, **arguments):
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def calling(*calls, tokens, thinking="I should look this up."):
    """A reply that thinks and calls tools, `tokens` completion tokens long."""
    return {
        "content": None,
        "reasoning_content": thinking,
        "tool_calls": list(calls),
        "completion_tokens": tokens,
        "finish_reason": "tool_calls",
    }


def answering(text, tokens):
    return {"content": text, "reasoning_content": "Done.", "completion_tokens": tokens}


def tool_names(body):
    return [t["function"]["name"] for t in body.get("tools") or []]


# Search QA: domains/search_qa/environments/search_r1/base_harness.py -----------------------------


def test_searchqa_h0_searches_once_then_answers_within_the_shrinking_budget(tmp_path):
    gold = json.loads(get_domain("searchqa").tasks("test")[0].gold)[0]
    search = tool_call("call_1", "search", query_list=["lithium symbol", "Li"], topk=5,
                       max_doc_tokens=12)  # fmt: skip
    out, bodies, steps = evaluate(
        tmp_path,
        "searchqa",
        [calling(search, tokens=3000), answering(f"<answer>{gold}</answer>", 40)],
    )
    first, second = bodies
    # the tool schema goes with every call (TOOLS = [search]); max_tokens is what is left of
    # the budget (tool_agent_loop.py, _cap_sampling_to_remaining_assistant_tokens)
    assert tool_names(first) == tool_names(second) == ["search"]
    assert [first["max_tokens"], second["max_tokens"]] == [8192, 8192 - 3000]
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    assert "<answer>" in first["messages"][1]["content"]
    assert [m["role"] for m in second["messages"]] == ["system", "user", "assistant", "tool"]
    assistant, tool = second["messages"][2:]
    assert assistant["tool_calls"][0]["id"] == "call_1"
    assert assistant["reasoning_content"] == "I should look this up."
    # base_harness.search: the first query only, topk forced to 1, the passage cut to
    # max_doc_tokens, answered as {"result": "Doc 1 (Title: ...)\n..."}
    assert tool["tool_call_id"] == "call_1"
    result = json.loads(tool["content"])["result"]
    title, _, text = result.partition("\n")
    assert title.startswith("Doc 1 (Title: ") and "Doc 2" not in result
    assert 0 < len(text.split()) <= 12
    searched = [s for s in steps if s[0] == "tool"]
    assert len(searched) == 1 and searched[0][1] == "search"
    # the answer is the last assistant message, scored by the release's exact match
    assert out["mean_at_k"] == 1.0


def test_searchqa_h0_stops_at_two_turns_and_on_a_reply_without_a_tool_call(tmp_path):
    search = tool_call("call_1", "search", query_list=["lithium"], topk=1, max_doc_tokens=200)
    again = tool_call("call_2", "search", query_list=["lithium symbol"], topk=1,
                      max_doc_tokens=200)  # fmt: skip
    # MAX_TURNS = 2: the second turn's call is not run and no third call is made
    out, bodies, steps = evaluate(
        tmp_path / "turns",
        "searchqa",
        [calling(search, tokens=10), calling(again, tokens=10), answering("<answer>x</answer>", 5)],
    )
    assert len(bodies) == 2
    assert [s[1] for s in steps if s[0] == "tool"] == ["search"]
    assert out["mean_at_k"] == 0.0  # the last assistant message holds no answer
    # a reply without a tool call ends the episode (verl's loop: no tool calls -> TERMINATED)
    out, bodies, _ = evaluate(
        tmp_path / "direct", "searchqa", [answering("<answer>Lithium</answer>", 5), "unused"]
    )
    assert len(bodies) == 1 and out["mean_at_k"] == 1.0


# Math: domains/math_reasoning/environments/retool/base_harness.py --------------------------------


def test_math_h0_runs_the_code_interpreter_call_and_answers_in_a_second_turn(tmp_path):
    code = "```python\nx = (-220 + 4) / 12\nint(x)\n```"
    out, bodies, steps = evaluate(
        tmp_path,
        "math",
        [
            calling(tool_call("call_7", "code_interpreter", code=code), tokens=2500),
            answering("The value is \\boxed{-18}", 60),
        ],
    )
    first, second = bodies
    assert tool_names(first) == tool_names(second) == ["code_interpreter"]
    # SYSTEM_PROMPT = None: the first message is the user's, the question and the box format
    assert [m["role"] for m in first["messages"]] == ["user"]
    assert "\\boxed{" in first["messages"][0]["content"]
    # get_model_response: max_tokens = budget - assistant tokens used
    assert [first["max_tokens"], second["max_tokens"]] == [8192, 8192 - 2500]
    # _normalize_code: the fence's body, its last line printed; the answer is stdout + stderr
    tool = second["messages"][-1]
    assert tool == {"role": "tool", "tool_call_id": "call_7", "content": "-18\n"}
    assert [s[1] for s in steps if s[0] == "tool"] == ["python"]
    assert out["mean_at_k"] == 1.0  # the release's strict box on the last message


def test_math_h0_stops_without_a_tool_call_or_once_the_budget_is_spent(tmp_path):
    # no_tools_called: the episode ends after a reply without a tool call
    _, bodies, _ = evaluate(tmp_path / "direct", "math", [answering("\\boxed{-18}", 10), "x"])
    assert len(bodies) == 1
    # assistant_token_budget_reached: 8192 tokens used, no second call, the tool never runs
    spent = calling(tool_call("c", "code_interpreter", code="print(1)"), tokens=8192)
    out, bodies, steps = evaluate(tmp_path / "spent", "math", [spent, "\\boxed{-18}"])
    assert len(bodies) == 1 and not [s for s in steps if s[0] == "tool"]
    assert out["mean_at_k"] == 0.0


# Chess: environments/chess_puzzle/base_harness.py, autoharness_chess_puzzle/runner.py ---------


@pytest.fixture
def mate_in_two(tmp_path):
    """A puzzle file holding one mate in two of the shipped sample: after the trigger e4e5,
    Black plays b8e8 (Qe8+), White g7e7 (Qe7+), Black e8e7 (Qxe7#). Returns the environment
    that selects it and the split it falls in."""
    rows = (REPO / "data" / "chess" / "puzzles.csv").read_text().splitlines()
    path = tmp_path / "puzzle.csv"
    path.write_text("\n".join([rows[0], next(r for r in rows if r.startswith("w0367,"))]) + "\n")
    domain = ChessPuzzles(path)
    (split,) = [s for s in SPLITS if domain.tasks(s)]
    return {"env": {"WHALE_CHESS_PUZZLES": str(path)}, "split": split}


def test_chess_h0_lists_legal_moves_retries_once_per_kind_and_plays_the_line(tmp_path, mate_in_two):
    replies = [
        answering("The rook looks strong.", 100),  # no move: the format retry
        answering("<move>a1a2</move>", 200),  # not legal here: the illegal-move retry
        answering("<move>b8e8</move>", 300),
        answering("Checkmate: <move>e8e7</move>", 400),
    ]
    out, bodies, steps = evaluate(tmp_path, "chess", replies, **mate_in_two)
    # runner.run_puzzle_rollout: max_tokens = 8129 - completion tokens used so far
    assert [b["max_tokens"] for b in bodies] == [8129, 8029, 7829, 7529]
    assert all("tools" not in b for b in bodies)  # the move is text, not a native tool call
    first = bodies[0]["messages"]
    assert [m["role"] for m in first] == ["system", "user"]
    # runner.build_observation: the legal moves as "- [uci] SAN=...", sorted by UCI
    assert "- [b8e8] SAN=Qe8+" in first[1]["content"]
    assert "Side to move: Black" in first[1]["content"]
    assert "Last opponent reply" not in first[1]["content"]  # the trigger is not shown as one
    # policy_messages_with_harness: system, each reply then the verifier's answer as a user
    # message, then the observation with the verifier's feedback after a retry
    second = bodies[1]["messages"]
    assert [m["role"] for m in second] == ["system", "assistant", "user", "user"]
    assert second[1]["content"] == "The rook looks strong."
    assert "__no_move__" in second[2]["content"]
    assert "Feedback from verifier:\n" + second[2]["content"] in second[3]["content"]
    third = bodies[2]["messages"]
    assert "a1a2" in third[4]["content"] and "not legal" in third[4]["content"]
    last = bodies[3]["messages"]
    assert len(last) == 1 + 2 * 3 + 1
    assert "g7e7" in last[-2]["content"] and "Qe7+" in last[-2]["content"]
    board = last[-1]["content"]
    assert "Last opponent reply: g7e7" in board and "Your accepted moves so far: b8e8" in board
    assert "Puzzle move number: 2" in board and "- [e8e7] SAN=Qxe7#" in board
    assert "Feedback from verifier" not in board
    assert [s[1] for s in steps if s[0] == "tool"] == ["observation", "move", "move"]
    assert out["mean_at_k"] == 1.0


def test_chess_h0_ends_the_puzzle_on_a_second_failure_of_one_kind(tmp_path, mate_in_two):
    # verify_and_step: FORMAT_RETRY_BUDGET = ILLEGAL_MOVE_RETRY_BUDGET = 1 per puzzle
    replies = [
        answering("no idea", 10),
        answering("<move>a1a2</move>", 10),
        answering("<move>a1a3</move>", 10),  # the second illegal move: the puzzle is lost
        answering("<move>b8e8</move>", 10),
    ]
    out, bodies, steps = evaluate(tmp_path, "chess", replies, **mate_in_two)
    assert len(bodies) == 3
    assert [s[1] for s in steps if s[0] == "tool"] == ["observation"]  # nothing was played
    assert out["mean_at_k"] == 0.0
