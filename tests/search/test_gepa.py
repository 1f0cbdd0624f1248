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


def test_a_prompt_over_the_models_context_is_asked_again_with_fewer_traces():
    """The endpoint refuses a prompt longer than its context (an HTTP 400 in vLLM's words): the
    reflection is asked again with half the traces, down to none, and says how many it saw; a
    prompt that does not fit even without traces fails with the endpoint's reason."""
    import asyncio

    from app.experiment_schema import LLMProposerConfig
    from app.search.llm_proposer import ask_fitting

    def messages_with(rollouts):
        return [{"role": "user", "content": "instructions " + "trace " * 200 * len(rollouts)}]

    shown = ["t1", "t2", "t3", "t4", "t5"]  # 5 traces: 6,013 characters; 2: 2,413; 1: 1,213
    with openai_stub("```\nBetter.\n```", max_prompt_chars=2000) as (url, seen):
        cfg = LLMProposerConfig(url=url, model="scripted")
        reply, used = asyncio.run(ask_fitting(cfg, None, messages_with, shown))
        assert (reply.text, used) == ("```\nBetter.\n```", 1)
        asked = [len(r["body"]["messages"][0]["content"]) for r in seen]
        assert asked == [6013, 2413, 1213]  # 5, then 2, then 1 trace
    with openai_stub("unused", max_prompt_chars=10) as (url, seen):
        cfg = LLMProposerConfig(url=url, model="scripted")
        try:
            asyncio.run(ask_fitting(cfg, None, messages_with, shown))
        except RuntimeError as exc:
            assert "maximum context length is 10 tokens" in str(exc)
        else:
            raise AssertionError("a prompt over the context without traces was answered")
        assert len(seen) == 4  # 5, 2, 1, 0 traces
    with openai_stub([500]) as (url, seen):  # another failure is not retried
        cfg = LLMProposerConfig(url=url, model="scripted")
        try:
            asyncio.run(ask_fitting(cfg, None, messages_with, shown))
        except RuntimeError:
            pass
        assert len(seen) == 1
