"""Generation settings reach the model: the run's [sampling] defaults fill what a harness's
call leaves unset, [rft] temperature overrides it on RFT sampling, the per-call cap and the
rollout's completion budget bound max_tokens, a field the backend lacks is refused by name, and
the step records exactly the body the server received (an HTTP stand-in that keeps it)."""

import asyncio
from pathlib import Path

import httpx
import pytest
from sqlmodel import select

from app.db import read_session
from app.db.schema import Step
from app.db.steps import expand_requests
from app.experiment_schema import RolloutLimits, Sampling
from app.gateway import Gateway, Grant
from app.llm.client import ChatEndpoint
from app.llm.generation import Declared, Generation, generation_for
from tests.conftest import make_rollout
from tests.openai_stub import openai_stub

HELLO = [{"role": "user", "content": "Say hello."}]
THINKING = {"enable_thinking": True}


def call(store, generation: Generation, *bodies: dict, reply: str = "hello there"):
    """Post each body through a live gateway to the stand-in; (answers, bodies the server got,
    recorded steps)."""
    engine, writer = store

    async def main(url, tmp):
        endpoint = ChatEndpoint(url, "served-model")
        gateway = Gateway(writer, endpoint)
        await gateway.start(tmp)
        token = gateway.grant(Grant(make_rollout(writer), "ckpt-7", generation=generation))
        transport = httpx.AsyncHTTPTransport(uds=str(tmp))
        try:
            async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
                headers = {"Authorization": f"Bearer {token}"}
                return [
                    await client.post("/v1/chat/completions", headers=headers, json=body)
                    for body in bodies
                ]
        finally:
            await gateway.stop()
            await endpoint.close()

    with openai_stub(reply) as (url, seen):
        answers = asyncio.run(main(url, Path(store[0].url.database).parent / "gw.sock"))
    writer.flush()
    with read_session(engine) as s:
        stored = list(s.exec(select(Step.request).order_by(Step.idx)))
    return answers, [entry["body"] for entry in seen], list(expand_requests(stored))


@pytest.fixture
def thinking():
    sampling = Sampling(temperature=0.6, top_k=20, chat_template_kwargs=THINKING)
    return Generation("vllm", defaults=sampling.defaults(), max_tokens_per_call=8192)


def test_the_defaults_fill_what_the_harness_leaves_unset(store, thinking):
    answers, received, recorded = call(
        store, thinking, {"messages": HELLO}, {"messages": HELLO, "temperature": 0.0, "seed": 3}
    )
    assert [a.status_code for a in answers] == [200, 200]
    first, second = received
    assert first["top_k"] == 20 and first["chat_template_kwargs"] == THINKING
    assert first["temperature"] == 0.6 and first["max_tokens"] == 8192
    assert second["temperature"] == 0.0 and second["seed"] == 3  # the harness's own choice wins
    assert second["top_k"] == 20
    assert first["model"] == "ckpt-7"  # the rollout's checkpoint, never the harness's choice
    assert recorded == received  # the trace holds exactly what the server received


def test_rft_temperature_overrides_a_harness_that_samples_greedily(store):
    forced = generation_for(Declared.of_config({"rft": {"temperature": 1.0}}), "train", "local", {})
    untouched = generation_for(
        Declared.of_config({"rft": {"temperature": 1.0}}), "test", "local", {}
    )
    assert forced.forced == {"temperature": 1.0} and untouched.forced == {}

    _, received, _ = call(store, forced, {"messages": HELLO, "temperature": 0.0})
    assert received[0]["temperature"] == 1.0
    assert (
        generation_for(
            Declared.of_config({"rft": {"temperature": None}}), "train", "local", {}
        ).forced
        == {}
    )


def test_fixed_decoding_holds_every_split_whatever_the_harness_sets(store):
    """[sampling] override_harness = true, the paper's decoding: a harness asking for greedy decoding on
    the test split still samples at temperature 1.0, top_p 1.0, top_k 20, and the step records
    what the harness asked for."""
    declared = {
        "sampling": {"override_harness": True, "temperature": 1.0, "top_p": 1.0, "top_k": 20}
    }
    for split in ("train", "harness", "test"):
        got = generation_for(Declared.of_config(declared), split, "vllm", {})
        # and the chat template's own thinking default: no harness switches it
        fixed = {"temperature": 1.0, "top_p": 1.0, "top_k": 20, "chat_template_kwargs": None}
        assert got.forced == fixed, split
        assert got.record()["forced"] == got.forced  # stored with each evaluation
    test = generation_for(Declared.of_config(declared), "test", "vllm", {})
    _, received, steps = call(store, test, {"messages": HELLO, "temperature": 0.0, "top_k": 1})
    assert (received[0]["temperature"], received[0]["top_p"], received[0]["top_k"]) == (
        1.0,
        1.0,
        20,
    )
    assert steps[0]["harness_asked"] == {"temperature": 0.0, "top_k": 1}
    # without `override_harness` the same section only fills what the harness leaves unset
    loose = generation_for(
        Declared.of_config({"sampling": {"temperature": 1.0}}), "test", "vllm", {}
    )
    _, received, steps = call(store, loose, {"messages": HELLO, "temperature": 0.0})
    assert received[0]["temperature"] == 0.0 and "harness_asked" not in steps[-1]


def test_fixed_decoding_holds_thinking_on_whatever_the_harness_sets(store):
    """The paper samples with thinking on: under fixed decoding a harness that switches it off
    (or leaves it unset) still gets the experiment's chat_template_kwargs, and the step records
    what it asked for; with none declared, the harness's own are dropped."""
    declared = {
        "sampling": {"override_harness": True, "temperature": 1.0, "chat_template_kwargs": THINKING}
    }
    test = generation_for(Declared.of_config(declared), "test", "vllm", {})
    off = {"enable_thinking": False}
    bodies = [{"messages": HELLO, "chat_template_kwargs": off}, {"messages": HELLO}]
    _, received, steps = call(store, test, *bodies)
    assert [r["chat_template_kwargs"] for r in received] == [THINKING, THINKING]
    assert steps[0]["harness_asked"] == {"chat_template_kwargs": off}
    assert "harness_asked" not in steps[1]
    none_declared = {"sampling": {"override_harness": True, "temperature": 1.0}}
    test = generation_for(Declared.of_config(none_declared), "test", "vllm", {})
    _, received, steps = call(store, test, bodies[0])
    assert "chat_template_kwargs" not in received[0]  # the template's default
    # the store holds both tests' steps: the first harness's and this one's were overridden
    overridden = [st for st in steps if st.get("harness_asked") == {"chat_template_kwargs": off}]
    assert len(overridden) == 2 and "chat_template_kwargs" not in overridden[1]


def test_fixed_decoding_needs_a_value_and_agrees_with_rft_temperature():
    from app.loop.experiment_file import ExperimentError, parse

    with pytest.raises(ValueError, match="overrides nothing"):
        Sampling(override_harness=True, max_tokens=100)
    with pytest.raises(ExperimentError, match=r"rft.temperature \(0.7\) differs"):
        parse(
            'name = "x"\n[rft]\ntemperature = 0.7\n[sampling]\noverride_harness = true\ntemperature = 1.0\n'
        )


def test_max_tokens_stays_within_the_call_cap_and_the_completion_budget(store):
    budget = Generation("local", max_tokens_per_call=100, max_completion_tokens=120)
    # the stand-in answers 4 characters per token: 400 characters are 100 completion tokens
    answers, received, _ = call(
        store,
        budget,
        {"messages": HELLO, "max_tokens": 5000},
        {"messages": HELLO},
        {"messages": HELLO},
        reply="x" * 400,
    )
    assert [r["max_tokens"] for r in received] == [100, 20]  # then only what is left
    assert [a.status_code for a in answers] == [200, 200, 429]
    assert answers[2].json() == {
        "detail": "completion budget of 120 tokens used up",
        "reason": "budget",
    }


def test_a_field_the_backend_lacks_is_refused_by_name_and_never_sent(store):
    answers, received, recorded = call(
        store,
        Generation("local"),
        {"messages": HELLO, "top_k": 20},
        {"messages": HELLO, "temprature": 0.5},
    )
    assert [a.status_code for a in answers] == [400, 400]
    assert answers[0].json()["detail"].startswith("top_k: the local backend does not support it")
    assert "temprature: not a parameter a model call may set" in answers[1].json()["detail"]
    assert received == [] and recorded == []  # nothing reached the model, nothing was counted


def test_a_run_declares_its_settings_and_the_process_limits_fill_the_rest():
    experiment = {
        "experiment": {
            "sampling": {"top_k": 20, "temperature": None},
            "rollout": {"max_completion_tokens": 8000, "wall_s": 900},
        }
    }
    got = generation_for(
        Declared.of_config(experiment), "test", "vllm", {"max_calls": 8, "max_tokens": 40000}
    )
    assert got.defaults == {"top_k": 20}
    assert (got.max_calls, got.max_tokens, got.max_completion_tokens) == (8, 40000, 8000)
    assert got.wall_s == 900 and got.max_tokens_per_call == 1024
    assert got.record()["backend"] == "vllm" and "forced" not in got.record()


def test_the_rollout_settings_are_the_budgets_a_run_that_sets_none_gets(monkeypatch):
    from app.config import Settings

    monkeypatch.setenv("WHALE_ROLLOUT_MAX_TOKENS_PER_CALL", "300")
    monkeypatch.setenv("WHALE_ROLLOUT_MAX_CALLS", "5")
    got = generation_for(Declared.of_config({}), "test", "vllm", Settings().rollout_limits())
    assert (got.max_calls, got.max_tokens_per_call, got.infra_retries) == (5, 300, 2)
    # where no setting is read (a grant of its own), the settings' defaults hold
    default = Generation("vllm")
    limits = Settings.model_construct().rollout_limits()
    assert {k: getattr(default, k) for k in limits} == limits


def test_a_per_call_cap_above_the_rollout_budget_is_refused():
    with pytest.raises(ValueError, match=r"max_tokens_per_call \(9000\) is above max_tokens"):
        RolloutLimits(max_tokens_per_call=9000, max_tokens=4000)
    with pytest.raises(ValueError, match="top_p"):
        Sampling(top_p=0)


def test_the_local_backend_is_listed_with_exactly_the_fields_its_server_implements():
    from app.llm.generation import BACKEND_FIELDS
    from app.llm.local_server import ChatRequest

    # return_token_ids is the gateway's own field (it records the ids), never a harness's
    fields = set(ChatRequest.model_fields) - {"model", "messages", "return_token_ids"}
    assert fields == BACKEND_FIELDS["local"]


def test_fixed_decoding_under_its_old_name_is_refused_in_a_file_and_read_in_a_stored_run():
    """`[sampling] fixed` was renamed override_harness (`fixed` is also a switching rule): a
    file saying it is told the new name, a run stored before keeps its meaning."""
    from app.loop.experiment_file import ExperimentError, parse

    with pytest.raises(ExperimentError, match="sampling.fixed is now override_harness"):
        parse('name = "x"\n[sampling]\nfixed = true\ntemperature = 1.0\n', "x.toml")
    stored = Sampling.model_validate({"fixed": True, "temperature": 1.0})
    assert stored.override_harness and stored.forced()["temperature"] == 1.0
