"""The RFT response window follows the phase harness's turns, as the release's search-QA
script sizes it: MAX_RESP_LENGTH + 1024 x the harness's MAX_TURNS (clamped)."""

from app.db.schema import Harness, Run
from app.training.rft import harness_turns

CODE = "def run(task, llm, tools):\n    return None\n"


def run_with(max_calls: int | None) -> Run:
    rollout = {"max_calls": max_calls} if max_calls else {}
    return Run(name="r", kind="experiment", domain="searchqa", config={"rollout": rollout})


def test_the_window_counts_the_harness_s_turns_within_the_clamp():
    declares = Harness(name="h.py", code="MAX_TURNS = 4\n" + CODE, sha="a")
    greedy = Harness(name="g.py", code="MAX_TURNS = 40\n" + CODE, sha="b")
    silent = Harness(name="s.py", code=CODE, sha="c")
    assert harness_turns(run_with(16), declares) == 4
    assert harness_turns(run_with(16), greedy) == 16  # clamped, as the release clamps at 16
    assert harness_turns(run_with(16), silent) == 16  # declares none: the clamp
    assert harness_turns(run_with(None), declares) == 4  # no clamp set: its own
    assert harness_turns(run_with(None), silent) == 0  # nothing to count: no per-turn window
