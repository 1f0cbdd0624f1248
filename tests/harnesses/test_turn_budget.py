"""A harness's own turn limit: `MAX_TURNS = n` gives its rollouts min(n, [rollout] max_calls)
model calls, the clamp being the run's (the release resolves each candidate's MAX_TURNS and
clamps it at 16). Runs `whale eval` (sandbox, gateway) against a scripted OpenAI-protocol
server and counts the calls that reached it."""

from tests.harnesses.test_paper_h0 import evaluate

# asks the model up to 6 times, whatever it declares, and answers how many calls got through
GREEDY = """
MAX_TURNS = {declared}


def run(task, llm, tools):
    answered = 0
    for _ in range(6):
        try:
            llm.chat([{{"role": "user", "content": task["question"]}}], max_tokens=8)
        except Exception:
            break
        answered += 1
    return str(answered)
"""


def calls_through(tmp_path, declared: str, clamp: int) -> int:
    """The model calls of one rollout that reached the server."""
    folder = tmp_path / f"{declared}-{clamp}"
    folder.mkdir()
    harness = folder / "greedy.py"
    harness.write_text(GREEDY.format(declared=declared))
    _, bodies, steps = evaluate(
        folder, "arith", "ok", scoring="default", harness=harness, rollout={"max_calls": clamp}
    )
    assert sum(kind == "model" for kind, _, _ in steps) >= len(bodies)
    return len(bodies)


def test_a_harness_gets_its_own_turn_limit_within_the_clamp(tmp_path):
    assert calls_through(tmp_path, "2", clamp=16) == 2  # its own limit, below the clamp
    assert calls_through(tmp_path, "5", clamp=3) == 3  # clamped
    assert calls_through(tmp_path, "None", clamp=4) == 4  # declares none: the clamp
