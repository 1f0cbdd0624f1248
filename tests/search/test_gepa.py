"""The gepa proposer (prompt-only, parents from the per-task Pareto front) on the demo model,
with a scripted chat model writing the prompts."""

import ast

from app.experiment_schema import SearchConfig
from app.search.gepa import pareto_parents, reply_prompt
from tests.openai_stub import openai_stub
from tests.search.conftest import SEED


def test_a_harness_that_alone_solves_a_task_stays_a_parent():
    per_task = {
        1: {"a": 1.0, "b": 1.0, "c": 0.0, "d": 0.0},  # the best mean
        2: {"a": 0.0, "b": 0.0, "c": 1.0, "d": 0.0},  # worse on average, alone on task c
        3: {"a": 1.0, "b": 0.0, "c": 0.0, "d": 0.0},  # its one win is also 1's: dominated
        4: {"a": 0.5, "b": 0.5, "c": 0.5, "d": 0.0},  # never the best anywhere
    }
    # task d, solved by nobody, counts for no one
    assert pareto_parents(per_task) == {1: 2, 2: 1}
    # ties share a task: two harnesses with the same wins both stay
    assert pareto_parents({5: {"a": 1.0}, 6: {"a": 1.0}}) == {5: 1, 6: 1}
    assert pareto_parents({7: {"a": 0.0}}) == {}


def test_the_last_block_of_a_reply_is_the_prompt():
    assert reply_prompt("Thoughts.\n```\nfirst\n```\nbetter:\n```text\n Be brief. \n```", 100) == (
        "Be brief."
    )
    assert reply_prompt("  No block at all.  ", 100) == "No block at all."
    assert reply_prompt("```\n" + "x" * 50 + "\n```", 10) == "x" * 10


def module_body_without(code: str, name: str) -> list[str]:
    """The harness's module-level statements, less the assignment of `name`, as text."""
    tree = ast.parse(code)
    return [
        ast.dump(node)
        for node in tree.body
        if not (isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == name)
    ]


ANSWER_ONLY = "Reply with only the final number, nothing else."


def test_candidates_rewrite_only_the_prompt_of_a_parent_from_the_front(search):
    replies = [f"A sharper prompt:\n```\n{ANSWER_ONLY}\n```", "   ", "Give the number.", 500]
    with openai_stub(replies) as (url, seen):
        cfg = SearchConfig(
            proposer="gepa",
            candidates=2,
            tasks=6,
            llm={"url": url, "model": "scripted", "failures": 2, "successes": 1},
        )
        phase, stored, _ = search(cfg, iterations=2)

    by_iteration = {}
    for h in stored["harnesses"]:
        by_iteration.setdefault(h.iteration or 0, []).append(h)
    seed = by_iteration[0][0]
    first = {h.name: h for h in by_iteration[1]}
    assert set(first) == {f"prompt-1.1-from-{seed.id}", f"prompt-1.2-from-{seed.id}"}
    written, empty = first[f"prompt-1.1-from-{seed.id}"], first[f"prompt-1.2-from-{seed.id}"]
    assert written.valid and written.proposer == "gepa" and written.axis == "SYSTEM_PROMPT"
    assert written.parent_ids == [seed.id]
    # nothing but the prompt moved: every other statement of the seed is as it was
    assert module_body_without(written.code, "SYSTEM_PROMPT") == module_body_without(
        SEED.read_text(), "SYSTEM_PROMPT"
    )
    assert f"SYSTEM_PROMPT = {ANSWER_ONLY!r}" in written.code
    assert (empty.valid, empty.error) == (False, "the reply held no prompt")
    # the reflection read the parent's prompt and its traces, with the expected answers
    asked = seen[0]["body"]["messages"][0]["content"]
    assert "## Instructions" in asked and "# rollout" in asked and "gold:" in asked
    # iteration 2 draws its parents from the front: the seed, or the candidate that beat it
    second = stored["iterations"][2]
    assert second.status == "done" and second.n_candidates == 2
    # the scripted 500 costs its own candidate only; the other reflection's tokens are counted
    errors = sorted(h.error or "" for h in by_iteration[2])
    assert errors[0] in ("", None) or "duplicate" in errors[0]
    assert "the proposer endpoint" in errors[1] and "failed" in errors[1]
    assert second.prompt_tokens == 1000
    for h in by_iteration[2]:
        assert h.parent_ids[0] in {h.id for h in stored["harnesses"] if h.valid}
    report = stored["iterations"][1].report
    assert report.startswith("population of ") and f"#{seed.id}" in report
    assert stored["iterations"][1].prompt_tokens == 2000  # two reflections, 1000 each


def test_a_harness_without_the_prompt_variable_gets_a_clear_error(search):
    code = SEED.read_text().replace("SYSTEM_PROMPT = None", "INSTRUCTIONS = None")
    with openai_stub("```\nBe brief.\n```") as (url, seen):
        cfg = SearchConfig(proposer="gepa", candidates=1, tasks=2, llm={"url": url, "model": "m"})
        phase, stored, _ = search(cfg, harness_code=code, iterations=1)
    (candidate,) = [h for h in stored["harnesses"] if h.iteration == 1]
    assert not candidate.valid and seen == []
    assert "assigns no module-level string SYSTEM_PROMPT" in candidate.error
    assert "[search.options] prompt_variable" in candidate.error
