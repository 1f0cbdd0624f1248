"""The `paper` scoring mode gives the release's verdict on each edge case.

Each table row is (input, gold, the release's score), read off the release's verifier code at
krafton-ai/WHALE 7d5a422a and verl:
- search QA: domains/search_qa/environments/search_r1/env.py, `correct_answer` (the last
  `</answer>` of the last assistant message with the nearest `<answer>` before it, then verl's
  search_r1_like_qa_em normalisation and exact match);
- math: domains/math_reasoning/environments/retool/grpo_binary_reward.py, which calls
  verl/utils/reward_score/math_dapo.py `compute_score(..., strict_box_verify=True)` and maps
  its +1/-1 to 1/0;
- chess: domains/chess_puzzles/autoharness_chess_puzzle/runner.py, `parse_model_action`,
  `normalize_uci` and `verify_and_step` with the base harness's budgets (1 format retry, 1
  illegal-move retry, 9 turns).
The `lenient` column is the workbench's own verifier on the same input, where it differs.
"""

import json
import os
import sqlite3

import pytest

from app.domains import Task, episode, get_domain, scoring_of
from app.domains.chess_puzzles import _MOVE_TAG, PuzzleEpisode
from app.domains.paper_scoring import math_score, search_qa_score
from tests.conftest import REPO, whale, whale_eval_json
from tests.openai_stub import openai_stub

SEARCH = [  # (last assistant message, golds, release, lenient)
    ("<answer>Paris</answer>", ["Paris"], 1.0, 1.0),
    ("<answer>paris.</answer>", ["Paris"], 1.0, 1.0),
    ("<answer>The Paris</answer>", ["Paris"], 1.0, 1.0),
    ("<answer>  Paris  </answer>", ["Paris"], 1.0, 1.0),
    ("<ANSWER>Paris</ANSWER>", ["Paris"], 0.0, 1.0),  # tags are case-sensitive
    ("<Answer>Paris</Answer>", ["Paris"], 0.0, 1.0),
    ("Paris", ["Paris"], 0.0, 1.0),  # no tag: 0 (lenient reads the whole text)
    ("<answer>Paris", ["Paris"], 0.0, 0.0),  # unclosed
    ("<answer></answer>", ["Paris"], 0.0, 0.0),
    ("<answer>Paris, France</answer>", ["Paris"], 0.0, 0.0),
    ("<answer>Paris</answer> <answer>London</answer>", ["Paris"], 0.0, 0.0),  # the last wins
    ("<answer>London</answer> <answer>Paris</answer>", ["Paris"], 1.0, 1.0),
    ("<answer>Paris<answer></answer>", ["Paris"], 0.0, 0.0),  # nearest opening tag
    ("<answer>Barack Obama</answer>", ["Obama", "Barack Obama"], 1.0, 1.0),
    ("<answer>Obama</answer>", ["Barack Obama"], 0.0, 0.0),  # exact match, no F1
    ("<answer>U.S.A.</answer>", ["USA"], 1.0, 1.0),
    ("<answer>1,000</answer>", ["1000"], 1.0, 1.0),
    ("<answer>forty-two</answer>", ["fortytwo"], 1.0, 1.0),
    ("<answer>Élan</answer>", ["elan"], 0.0, 0.0),  # no Unicode folding
    ("<answer>an apple</answer>", ["apple"], 1.0, 1.0),
    ("<answer>theater</answer>", ["ater"], 0.0, 0.0),  # whole-word articles only
    ("<answer>\nParis\n</answer>", ["Paris"], 1.0, 1.0),
    ("<answer>Paris</answer>" * 11, ["Paris"], 1.0, 1.0),  # no penalty for repeated tags
    ("<answer> paris </answer> trailing text after", ["Paris"], 1.0, 1.0),
]


@pytest.mark.parametrize("message, golds, release, lenient", SEARCH)
def test_search_qa_paper_scoring_is_the_release_s(message, golds, release, lenient):
    assert search_qa_score(message, golds) == release
    domain = get_domain("searchqa")
    task = Task("q", {"question": "?"}, json.dumps(golds))
    assert domain.score(message, task, scoring="paper") == release
    if domain.judge is None:  # the lenient judge is off unless configured
        assert domain.score(message, task) == lenient


X = "x"
MATH = [  # (reply tail, gold, release, lenient)
    ("\\boxed{42}", "42", 1.0, 1.0),
    ("The answer is \\boxed{42}.", "42", 1.0, 1.0),
    ("x = 42", "42", 0.0, 0.0),
    ("Answer: 42", "42", 0.0, 0.0),
    ("\\boxed{ 42 }", "42", 0.0, 1.0),  # raw string equality: no normalisation
    ("\\boxed{x = 42}", "42", 0.0, 1.0),
    ("\\boxed{\\frac12}", "0.5", 0.0, 1.0),
    ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}", 1.0, 1.0),
    ("\\boxed{\\frac12}", "\\frac{1}{2}", 0.0, 1.0),
    ("\\boxed{0.5}", "\\frac{1}{2}", 0.0, 1.0),
    ("\\boxed{\\text{42}}", "42", 0.0, None),
    ("\\boxed{$42$}", "42", 0.0, 1.0),
    ("$\\boxed{42}$", "42", 1.0, 1.0),
    ("\\boxed{42 \\text{ cm}}", "42", 0.0, 1.0),
    ("\\boxed{42^\\circ}", "42", 0.0, 1.0),
    ("\\boxed{1,000}", "1000", 0.0, 1.0),
    ("\\boxed{042}", "42", 0.0, None),
    ("\\boxed{42.0}", "42", 0.0, 1.0),
    ("\\boxed{42}" + X * 400, "42", 0.0, 1.0),  # outside the last 100 characters
    ("\\boxed{42}" + X * 90, "42", 1.0, 1.0),
    ("\\boxed{42}" + X * 91, "42", 0.0, 1.0),
    ("\\boxed{41} then \\boxed{42}", "42", 1.0, 1.0),
    ("\\boxed{42} then \\boxed{41}", "42", 0.0, 0.0),  # the last box counts
    ("\\boxed{42", "42", 0.0, 0.0),
    ("\\boxed 42", "42", 0.0, 0.0),
    ("\\fbox{42}", "42", 0.0, 1.0),
    ("\\boxed{{42}}", "42", 0.0, None),
    ("<think>\\boxed{7}</think> final \\boxed{42}", "42", 1.0, 1.0),
    ("\\boxed{42}\n", "42", 1.0, 1.0),
    ("\\boxed{\\dfrac{1}{2}}", "\\frac{1}{2}", 0.0, 1.0),
    ("\\boxed{42}", "42 ", 0.0, None),
]


@pytest.mark.parametrize("reply, gold, release, lenient", MATH)
def test_math_paper_scoring_is_the_release_strict_box(reply, gold, release, lenient):
    assert math_score(reply, gold) == release
    domain = get_domain("math")
    task = Task("p", {"question": "?"}, gold)
    assert domain.score(reply, task, scoring="paper") == release
    if lenient is not None:
        assert domain.score(reply, task) == lenient


MATES_TWICE = "6k1/5ppp/8/8/8/8/5PPP/R3R1K1 w - - 0 1"  # e1e8 and a1a8 both mate
PROMOTION = "8/4P1k1/8/8/8/8/8/4K3 w - - 0 1"
CASTLING = "r3k2r/8/8/8/8/8/8/R3K2R w KQkq - 0 1"
LONG = "r3k3/8/8/8/8/8/8/R3K3 w - - 0 1"
LONG_LINE = "a1a2 a8a7 a2a1 a7a8 a1a2 a8a7 a2a1 a7a8 a1a2"
LONG_MOVES = ["<move>a1a2</move>", "<move>a2a1</move>"] * 2 + ["<move>a1a2</move>"]
CHESS = [  # (position, line, the replies handed to move(), release, lenient)
    (MATES_TWICE, "e1e8", ["<move>e1e8</move>"], 1.0, 1.0),
    (MATES_TWICE, "e1e8", ["<move>a1a8</move>"], 0.0, 1.0),  # another mate: only the line's
    (MATES_TWICE, "e1e8", ["<move>E1E8</move>"], 1.0, 0.0),  # lenient: not UCI, try again
    (MATES_TWICE, "e1e8", ["I play e1e8"], 1.0, None),
    (MATES_TWICE, "e1e8", ["<move>e1e8</move> (not a1a8)"], 1.0, None),
    (MATES_TWICE, "e1e8", ["e1e8 or a1a8", "e1e8 or a1a8"], 0.0, None),  # no single move, twice
    (MATES_TWICE, "e1e8", ["<move>e1e8</move><move>e1e8</move>"], 1.0, None),
    (MATES_TWICE, "e1e8", ["<move> e1e8 </move>"], 1.0, None),
    (MATES_TWICE, "e1e8", ["[e1e8]"], 1.0, None),
    (MATES_TWICE, "e1e8", ["Re8#", "<move>e1e8</move>"], 1.0, None),  # one format retry
    (MATES_TWICE, "e1e8", ["Re8#", "Re8#"], 0.0, None),
    (MATES_TWICE, "e1e8", ["<move>e1e7</move>", "<move>e1e8</move>"], 0.0, 0.0),  # no retry
    (MATES_TWICE, "e1e8", ["<move>g1h3</move>", "<move>e1e8</move>"], 1.0, 1.0),  # illegal
    (MATES_TWICE, "e1e8", ["<move>g1h3</move>", "<move>g1h3</move>", "e1e8"], 0.0, None),
    (MATES_TWICE, "e1e8", ["Re8#", "<move>g1h3</move>", "<move>e1e8</move>"], 1.0, None),
    (PROMOTION, "e7e8q", ["<move>e7e8q</move>"], 1.0, 1.0),
    (PROMOTION, "e7e8q", ["<move>e7e8</move>", "<move>e7e8q</move>"], 1.0, 1.0),
    (PROMOTION, "e7e8q", ["<move>e7e8Q</move>"], 1.0, None),
    (PROMOTION, "e7e8q", ["<move>e7e8r</move>"], 0.0, 0.0),
    (CASTLING, "e1g1", ["<move>e1g1</move>"], 1.0, 1.0),
    (CASTLING, "e1g1", ["<move>e1h1</move>", "<move>e1h1</move>"], 0.0, None),  # illegal twice
    (CASTLING, "e1g1", ["<move>O-O</move>", "<move>O-O</move>"], 0.0, None),
    (LONG, LONG_LINE, LONG_MOVES, 1.0, 1.0),  # the whole line, opponent replies scripted
    (LONG, LONG_LINE, ["Nope", *LONG_MOVES], 1.0, None),
    (LONG, LONG_LINE, LONG_MOVES[:4], 0.0, 0.0),  # a line not finished is not solved
]


def play(fen: str, line: str, replies: list[str], rules: str) -> float:
    """The puzzle's score after move() is handed each reply: whole, as the release's verifier
    parses it (paper), or the UCI inside its tag, as the lenient tool takes it."""
    board = PuzzleEpisode.of(Task("p", {"fen": fen, "trigger": "0000"}, line), rules)
    for reply in replies:
        tagged = _MOVE_TAG.search(reply)
        if rules == "lenient" and tagged:
            reply = tagged.group(1)
        if board.move(reply)["result"] in ("solved", "wrong", "over"):
            break
    return board.score(None)


@pytest.mark.parametrize("fen, line, replies, release, lenient", CHESS)
def test_chess_paper_rules_are_the_release_s(fen, line, replies, release, lenient):
    assert play(fen, line, replies, "paper") == release
    if lenient is not None:
        assert play(fen, line, replies, "lenient") == lenient


def test_chess_paper_rules_stop_after_nine_moves():
    board = PuzzleEpisode.of(Task("p", {"fen": LONG, "trigger": "0000"}, LONG_LINE), "paper")
    results = [board.move(r)["result"] for r in ["<move>a1a2</move>", "<move>a2a1</move>"] * 5]
    assert results[:5] == ["continue", "continue", "continue", "continue", "solved"]
    # a tenth try on an over puzzle is refused either way; nine tries are the budget
    board = PuzzleEpisode.of(Task("p", {"fen": CASTLING, "trigger": "0000"}, "e1g1"), "paper")
    board.malformed = board.illegal = -100  # retries not the limit here: the turns are
    outcomes = [board.move("<move>e1h1</move>")["result"] for _ in range(10)]
    assert outcomes[:9] == ["illegal"] * 9 and outcomes[9] == "wrong"


def test_each_domain_names_its_modes_and_refuses_others():
    assert scoring_of(get_domain("searchqa"), None) == "lenient"
    assert scoring_of(get_domain("math"), "paper") == "paper"
    assert scoring_of(get_domain("arith"), None) == "default"
    with pytest.raises(ValueError, match="the arith domain scores by default"):
        scoring_of(get_domain("arith"), "paper")
    chess = get_domain("chess")
    task = chess.tasks("test")[0]
    assert episode(chess, task, "paper").rules == "paper"
    assert episode(chess, task).rules == "lenient"


def test_whale_eval_records_the_mode_and_scores_by_it(whale_env, tmp_path):
    """The same replies from a hosted-API stand-in, boxed with spaces: the lenient verifier
    accepts them, the release's strict box does not; each evaluation records its mode."""
    gold = get_domain("math").tasks("test")[0].gold
    reply = f"So the answer is \\boxed{{ {gold} }}"
    seed = REPO / "harness_archive/seeds/math/seed.py"
    scores = {}
    for mode in ("lenient", "paper"):
        with openai_stub(reply) as (url, _):
            env = {
                **whale_env,
                "WHALE_HOME": str(tmp_path / mode),
                "WHALE_LLM_URL": url,
                "WHALE_LLM_MODEL": "hosted-model",
            }
            out = whale_eval_json(
                seed, env, "--domain", "math", "--limit", "1", "-k", "1", "--scoring", mode
            )
        assert out["scoring"] == mode
        with sqlite3.connect(tmp_path / mode / "whale.db") as db:
            assert db.execute("SELECT scoring FROM evaluation").fetchall() == [(mode,)]
        scores[mode] = out["mean_at_k"]
    assert scores == {"lenient": 1.0, "paper": 0.0}
    refused = whale("eval", str(seed), "--domain", "arith", "--scoring", "paper", env=whale_env)
    assert refused.returncode == 2 and "the arith domain scores by default" in refused.stderr


def test_an_experiment_s_scoring_is_checked_against_its_domain(tmp_path):
    from app.loop.experiment_file import ExperimentError, parse

    assert parse('name = "x"\ndomain = "math"\nscoring = "paper"').scoring == "paper"
    with pytest.raises(ExperimentError, match="scoring 'strict': the math domain scores by"):
        parse('name = "x"\ndomain = "math"\nscoring = "strict"')
    assert os.environ.get("WHALE_HOME") != str(tmp_path)  # parsing touches no store
