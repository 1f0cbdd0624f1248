"""The llm proposer against a scripted OpenAI-compatible server: every kind of broken candidate
lands in the archive with the right status, and a dead endpoint fails only its iteration."""

from app.experiment_schema import SearchConfig
from tests.openai_stub import openai_stub
from tests.search.conftest import seed_with


def block(name: str, code: str, hypothesis: str = "h") -> str:
    return f"### Candidate: {name}\nHypothesis: {hypothesis}\nAxis: test\n```python\n{code}\n```\n"


LOOPS = "def run(task, llm, tools):\n    while True:\n        pass\n"
FIRST_REPLY = "".join(
    [
        block("program", seed_with(SOLVER="program"), "the model writes the expression"),
        "### Candidate: chatty\nHypothesis: I would add voting but forgot the code.\n",
        block("syntax", "def run(task, llm, tools)\n    return 1"),
        block("no-run", "def solve(task, llm, tools):\n    return '1'"),
        block("forbidden", "import subprocess\n\ndef run(task, llm, tools):\n    return '1'"),
        block("loops", LOOPS),
        block("huge", "def run(task, llm, tools):\n    return '1'\n" + "#" * 30_000),
    ]
)


def test_scripted_candidates_land_with_their_status(search):
    with openai_stub([FIRST_REPLY, 500]) as (url, seen):
        cfg = SearchConfig(
            proposer="llm",
            candidates=7,
            tasks=6,
            smoke_timeout_s=15,
            max_code_bytes=20_000,
            llm={
                "url": url,
                "model": "scripted",
                "price_in_per_mtok": 3.0,
                "price_out_per_mtok": 15.0,
            },
        )
        phase, stored, _ = search(cfg, iterations=2)

    by_name = {h.name: h for h in stored["harnesses"] if h.iteration == 1}
    assert set(by_name) == {"program", "chatty", "syntax", "no-run", "forbidden", "loops", "huge"}
    errors = {name: h.error for name, h in by_name.items()}
    assert by_name["program"].valid and errors["program"] is None
    assert by_name["program"].hypothesis == "the model writes the expression"
    assert errors["chatty"] == "no code block in the reply"
    assert errors["syntax"].startswith("syntax error: line 1")
    assert errors["no-run"].startswith("no module-level `def run")
    assert errors["forbidden"].startswith("forbidden import: subprocess")
    assert "timeout" in errors["loops"] and errors["loops"].startswith("smoke rollout")
    assert errors["huge"].startswith("too large")
    assert not any(h.valid for n, h in by_name.items() if n != "program")

    first, second = stored["iterations"][1:]
    assert (first.status, first.n_candidates, first.n_valid) == ("done", 7, 1)
    assert first.prompt_tokens == 1000 and first.completion_tokens == max(1, len(FIRST_REPLY) // 4)
    assert first.cost_usd == (1000 * 3.0 + first.completion_tokens * 15.0) / 1e6
    # the 500 fails iteration 2 only; the phase ends normally with what it had
    assert second.status == "failed" and "failed" in second.error and second.n_candidates == 0
    assert phase.ended_reason == "fixed" and phase.harness_out_id == by_name["program"].id

    # the proposer read the accepted harness and real traces of it
    prompt = seen[0]["body"]["messages"][1]["content"]
    assert "PROMPT_STYLE = 'plain'" in prompt or 'PROMPT_STYLE = "plain"' in prompt
    assert "# rollout" in prompt and "gold:" in prompt and "[assistant -> step" in prompt
    assert "Reply with exactly 7 candidates" in prompt
    # ...given the domain's guide and the rules, with what is off limits
    system = seen[0]["body"]["messages"][0]["content"]
    assert 'SOLVER = "program"' in system  # app/domains/skills/arith.md
    assert "Do not game the verifier" in system and "test split" in system


def test_a_dead_endpoint_ends_the_phase_cleanly_when_configured(search):
    cfg = SearchConfig(
        proposer="llm",
        tasks=4,
        on_proposer_error="end",
        llm={"url": "http://127.0.0.1:9/v1", "model": "nobody"},
    )
    phase, stored, _ = search(cfg, iterations=3)
    (zero, first) = stored["iterations"]
    assert first.status == "failed" and "127.0.0.1:9" in first.error
    assert phase.status == "done" and phase.ended_reason == "proposer_error"
    assert phase.harness_out_id == phase.harness_in_id
    # iteration 0's rollouts are all there
    assert len(stored["rollouts"]) == 4 and zero.best_success is not None
