"""Static validation: each broken candidate gets an error a proposer can act on."""

import pytest

from app.harness_code import static_error

FORBIDDEN = frozenset({"subprocess", "ctypes"})
OK = "import json\n\ndef run(task, llm, tools):\n    return json.dumps(task)\n"


@pytest.mark.parametrize(
    "code, expected",
    [
        (None, "empty"),
        ("   \n", "empty"),
        ("def run(task, llm, tools)\n    return 1\n", "syntax error: line 1"),
        ("def solve(task, llm, tools):\n    return 1\n", "no module-level `def run"),
        ("class H:\n    def run(self, task, llm, tools):\n        return 1\n", "no module-level"),
        ("import subprocess\n" + OK, "forbidden import: subprocess (line 1)"),
        (
            OK + "\ndef helper():\n    from ctypes import util\n",
            "forbidden import: ctypes (line 7)",
        ),
        ("import os.path, subprocess.run\n" + OK, "forbidden import: subprocess.run"),
        (OK + "#" * 300, "too large"),
    ],
)
def test_broken_candidates_are_named(code, expected):
    assert expected in static_error(code, FORBIDDEN, max_bytes=200)


def test_a_well_formed_harness_passes():
    assert static_error(OK, FORBIDDEN, max_bytes=10_000) is None
    # relative imports are not module names the domain can forbid
    assert static_error("from . import x\n" + OK, FORBIDDEN, 10_000) is None


def test_declared_turns_are_read_without_running_the_code():
    from app.harness_code import declared_turns

    assert declared_turns("MAX_TURNS = 4\n" + OK) == 4
    assert declared_turns("MAX_TURNS: int = 6\n" + OK) == 6
    assert declared_turns("MAX_TURNS = 2\nMAX_TURNS = 3\n" + OK) == 3  # the last one holds
    for code in (OK, "MAX_TURNS = True\n", "MAX_TURNS = 0\n", "MAX_TURNS = 2 * 8\n", "def ("):
        assert declared_turns(code) is None  # none, not a plain positive integer, or no code


def test_a_fixed_runner_keeps_the_release_s_chess_candidate_shape():
    """The paper chess files fix `run` (the release's runner): a candidate may rewrite the
    prompts, the observation, the parsing and the budgets, not the loop around them."""
    from app.harness_code import fixed_parts_error
    from tests.conftest import REPO

    h0 = (REPO / "harness_archive" / "paper" / "chess" / "h0.py").read_text()
    for part in ("format_observation", "parse_action", "is_legal_action", "MAX_TURNS"):
        assert part in h0  # the release's candidate parts, by name
    prompt = h0.replace("Give no explanation.", "Think first, then answer.")
    budget = h0.replace("MAX_TURNS = 9", "MAX_TURNS = 12")
    documented = h0.replace(
        "def run(task, llm, tools):\n", 'def run(task, llm, tools):\n    """x"""\n'
    )
    for candidate in (prompt, budget, documented):
        assert fixed_parts_error(candidate, h0, ["run"]) is None
    two_calls = h0.replace(
        "reply = llm.chat(messages, max_tokens=left)",
        "reply = llm.chat(messages, max_tokens=left)\n            reply = llm.chat(messages)",
    )
    assert two_calls != h0
    assert "fixed function `run` differs" in fixed_parts_error(two_calls, h0, ["run"])
    without = h0.replace("def run(task, llm, tools):", "def play(task, llm, tools):")
    assert "fixed function `run` is missing" in fixed_parts_error(without, h0, ["run"])
    assert fixed_parts_error(two_calls, h0, []) is None  # no contract: a free run()
