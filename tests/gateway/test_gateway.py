"""The gateway on its Unix socket, in front of the real model server."""

import asyncio

import httpx
import pytest
from sqlmodel import select

from app.db import read_session
from app.db.schema import Rollout, Step
from app.gateway import Gateway, Grant
from app.llm.client import ChatEndpoint
from app.llm.generation import Generation
from tests.conftest import make_rollout
from tests.tool_rollout import run_on_gateway, sampled_and_trained, tool_rollout

HELLO = [{"role": "user", "content": "Say hello."}]


@pytest.fixture
def with_gateway(store, model_server, tmp_path):
    """with_gateway(body, **gateway_options) runs `await body(gateway, client, rollout_id)`
    against a live gateway."""
    engine, writer = store

    def run(body, **options):
        endpoint = ChatEndpoint(model_server.base_url, model_server.model)
        return run_on_gateway(writer, endpoint, tmp_path / "gw.sock", body, close=True, **options)

    return run


def steps(engine) -> list[Step]:
    with read_session(engine) as s:
        return s.exec(select(Step).order_by(Step.idx)).all()


def auth(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def test_model_call_is_forwarded_and_recorded(with_gateway, store, model_server):
    async def body(gateway, client, rollout_id):
        token = gateway.grant(Grant(rollout_id, model_server.model))
        r = await client.post(
            "/v1/chat/completions",
            headers=auth(token),
            json={"messages": HELLO, "max_tokens": 12, "temperature": 0.7},
        )
        return r, gateway.revoke(token)

    response, grant = with_gateway(body)
    assert response.status_code == 200
    data = response.json()
    assert data["choices"][0]["message"]["content"]
    assert (grant.calls, grant.completion_tokens) == (1, data["usage"]["completion_tokens"])
    (step,) = steps(store[0])
    assert step.kind == "model"
    assert step.request["messages"] == HELLO
    assert step.request["temperature"] == 0.7
    assert step.response["message"]["content"] == data["choices"][0]["message"]["content"]
    assert step.completion_tokens == data["usage"]["completion_tokens"] > 0
    assert step.latency_ms > 0


def test_unseeded_calls_are_independent_draws_with_recorded_seeds(
    with_gateway, store, model_server
):
    async def body(gateway, client, rollout_id):
        token = gateway.grant(Grant(rollout_id, model_server.model))
        request = {
            "messages": [{"role": "user", "content": "Write a random word."}],
            "max_tokens": 12,
            "temperature": 1.0,
        }
        replies = [
            await client.post("/v1/chat/completions", headers=auth(token), json=request)
            for _ in range(4)
        ]
        return [r.json()["choices"][0]["message"]["content"] for r in replies]

    contents = with_gateway(body)
    assert len(set(contents)) > 1  # not one sample four times
    seeds = [step.request["seed"] for step in steps(store[0])]
    assert len(set(seeds)) == 4


def test_forged_and_revoked_tokens_are_refused(with_gateway, store, model_server):
    async def body(gateway, client, rollout_id):
        forged = await client.post(
            "/v1/chat/completions", headers=auth("forged"), json={"messages": HELLO}
        )
        token = gateway.grant(Grant(rollout_id, model_server.model))
        gateway.revoke(token)
        revoked = await client.post(
            "/v1/chat/completions", headers=auth(token), json={"messages": HELLO}
        )
        missing = await client.post("/tools/anything", json={})
        return forged, revoked, missing

    for response in with_gateway(body):
        assert response.status_code == 401
        assert response.json()["reason"] == "bad_token"
    assert steps(store[0]) == []


def test_call_and_token_budgets(with_gateway, model_server):
    async def body(gateway, client, rollout_id):
        limits = Generation("local", max_calls=1, max_tokens_per_call=4)
        token = gateway.grant(Grant(rollout_id, model_server.model, generation=limits))
        first = await client.post(
            "/v1/chat/completions", headers=auth(token), json={"messages": HELLO, "max_tokens": 500}
        )
        second = await client.post(
            "/v1/chat/completions", headers=auth(token), json={"messages": HELLO}
        )
        return first, second

    first, second = with_gateway(body)
    assert first.status_code == 200
    assert first.json()["usage"]["completion_tokens"] <= 4  # capped per call
    assert second.status_code == 429
    assert second.json()["reason"] == "budget"


def test_tools_known_unknown_and_failing(with_gateway, store, model_server):
    def divide(a, b):
        return a / b

    async def body(gateway, client, rollout_id):
        token = gateway.grant(Grant(rollout_id, model_server.model, tools={"divide": divide}))
        ok = await client.post("/tools/divide", headers=auth(token), json={"args": [6, 3]})
        failing = await client.post(
            "/tools/divide", headers=auth(token), json={"kwargs": {"a": 1, "b": 0}}
        )
        unknown = await client.post("/tools/search", headers=auth(token), json={"args": ["q"]})
        malformed = await client.post("/tools/divide", headers=auth(token), content=b"{nope")
        return ok, failing, unknown, malformed

    ok, failing, unknown, malformed = with_gateway(body)
    assert ok.json() == {"result": 2.0}
    assert (failing.status_code, failing.json()["reason"]) == (400, "tool_error")
    assert "ZeroDivisionError" in failing.json()["detail"]
    assert (unknown.status_code, unknown.json()["reason"]) == (404, "unknown_tool")
    assert "unknown tool 'search'" in unknown.json()["detail"]
    assert malformed.status_code == 400
    recorded = steps(store[0])
    assert [(s.tool, s.error is None) for s in recorded] == [
        ("divide", True),
        ("divide", False),
        ("search", False),
    ]
    assert recorded[0].response == {"result": 2.0}


def test_sandbox_side_tool_calls_are_recorded_and_budgeted(with_gateway, store, model_server):
    """A tool that runs inside the sandbox (math's python) is only reported: the gateway counts
    it against the grant and records it as a tool step, refusing forged tokens and other names."""
    result = {"stdout": "4\n", "stderr": "", "exit_code": 0, "timed_out": False}
    report = {"args": ["print(2 + 2)"], "kwargs": {}, "result": result, "latency_ms": 31.5}

    async def body(gateway, client, rollout_id):
        token = gateway.grant(
            Grant(
                rollout_id,
                model_server.model,
                sandbox_tools=frozenset({"python"}),
                max_sandbox_tool_calls=1,
            )
        )
        ok = await client.post("/tools/python/record", headers=auth(token), json=report)
        over = await client.post("/tools/python/record", headers=auth(token), json=report)
        other = await client.post("/tools/shell/record", headers=auth(token), json=report)
        forged = await client.post("/tools/python/record", headers=auth("forged"), json=report)
        return ok, over, other, forged

    ok, over, other, forged = with_gateway(body)
    assert ok.status_code == 200
    assert (over.status_code, over.json()["reason"]) == (429, "budget")
    assert (other.status_code, other.json()["reason"]) == (404, "unknown_tool")
    assert (forged.status_code, forged.json()["reason"]) == (401, "bad_token")
    recorded = steps(store[0])
    assert [(s.kind, s.tool, s.error is None) for s in recorded] == [
        ("tool", "python", True),
        ("tool", "python", False),
        ("tool", "shell", False),
    ]
    assert recorded[0].request == {"args": ["print(2 + 2)"], "kwargs": {}}
    assert recorded[0].response == {"result": result} and recorded[0].latency_ms == 31.5


def test_a_conversation_is_stored_as_what_each_call_added_and_read_back_whole(
    with_gateway, store, model_server
):
    """A multi-turn harness resends the conversation: each step keeps only its new messages,
    and every reader (trace API, a window of it, proposer traces, training examples) gets the
    whole request back."""
    from app.db.steps import load_steps
    from app.read.rollouts import get_rollout
    from app.search.traces import record
    from app.training.examples import examples_from_rollouts

    async def body(gateway, client, rollout_id):
        token = gateway.grant(Grant(rollout_id, model_server.model))
        messages, sent = [{"role": "system", "content": "Be brief."}, *HELLO], []
        for turn in range(3):
            r = await client.post(
                "/v1/chat/completions",
                headers=auth(token),
                json={"messages": messages, "max_tokens": 4},
            )
            sent.append(list(messages))
            messages = messages + [
                r.json()["choices"][0]["message"],
                {"role": "user", "content": f"And again ({turn})?"},
            ]
        gateway.revoke(token)
        return rollout_id, sent

    rollout_id, sent = with_gateway(body)
    stored = steps(store[0])
    assert stored[0].request["messages"] == sent[0] and "messages_from" not in stored[0].request
    for step, before, now in zip(stored[1:], sent, sent[1:]):
        assert step.request["messages_from"] == len(before)
        assert step.request["messages"] == now[len(before) :]  # the reply and the next question
    with read_session(store[0]) as s:
        assert [st["request"]["messages"] for st in get_rollout(s, rollout_id)["steps"]] == sent
        (window,) = get_rollout(s, rollout_id, steps="2-2")["steps"]
        assert window["request"]["messages"] == sent[2] and "messages_from" not in window["request"]
        rollout = s.get(Rollout, rollout_id)
        traced = record(rollout, load_steps(s, [rollout_id])[rollout_id])
        assert [st["request"]["messages"] for st in traced["steps"]] == sent
        assert [e["messages"] for e in examples_from_rollouts(s, [rollout_id])] == sent


def test_a_call_in_flight_when_its_rollout_ends_is_recorded_unanswered(
    with_gateway, store, model_server
):
    """A harness that gives up on a model call (its own timeout) or dies mid-call ends its
    rollout with the call in flight: the trace keeps the call, unanswered, with how long it ran,
    and the answer that comes later is not recorded."""

    async def body(gateway, client, rollout_id):
        grant = Grant(rollout_id, model_server.model)
        token = gateway.grant(grant)
        call = asyncio.create_task(
            client.post(
                "/v1/chat/completions",
                headers=auth(token),
                json={"messages": HELLO, "max_tokens": 64, "temperature": 1.0},
            )
        )
        while not grant.open_calls:  # sent to the model server
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)
        gateway.revoke(token)  # the rollout is over
        answered = await call  # the harness's side: the answer still comes back
        return answered

    answered = with_gateway(body)
    assert answered.status_code == 200
    (step,) = steps(store[0])
    assert step.kind == "model" and step.response is None
    assert step.request["messages"] == HELLO and step.request["max_tokens"] == 64
    assert step.error.startswith("no response: the rollout ended while it was in flight (")
    assert step.latency_ms >= 200


async def _hung_backend():
    """A model server that reads a request and never answers."""

    async def never_answers(reader, writer_):
        await reader.read(1 << 16)
        await asyncio.sleep(3600)

    hung = await asyncio.start_server(never_answers, "127.0.0.1", 0)
    port = hung.sockets[0].getsockname()[1]
    return hung, ChatEndpoint(f"http://127.0.0.1:{port}/v1", "hung")


def test_stopping_cancels_the_calls_in_flight_instead_of_waiting_on_them(store, tmp_path):
    """A model server that does not answer (hung, or busy for minutes) does not hold up the
    workbench's stop: its calls in flight are recorded unanswered and answered 503 at once."""
    engine, writer = store

    async def main():
        hung, endpoint = await _hung_backend()
        gateway = Gateway(writer, endpoint)
        sock = tmp_path / "gw.sock"
        await gateway.start(sock)
        grant = Grant(make_rollout(writer), "hung")
        token = gateway.grant(grant)
        transport = httpx.AsyncHTTPTransport(uds=str(sock))
        async with httpx.AsyncClient(transport=transport, base_url="http://gw", timeout=60) as c:
            call = asyncio.create_task(
                c.post("/v1/chat/completions", headers=auth(token), json={"messages": HELLO})
            )
            while not grant.open_calls:
                await asyncio.sleep(0.01)
            await asyncio.wait_for(gateway.stop(), 5)
            answered = await call
        assert grant.reserved_tokens == 0  # the cancelled call gave back its reservation
        await endpoint.close()
        hung.close()
        return answered

    answered = asyncio.run(main())
    writer.flush()
    assert answered.status_code == 503 and "the workbench is stopping" in answered.text
    (step,) = steps(engine)
    assert step.response is None
    assert step.error.startswith("no response: the call was cancelled in flight (")


@pytest.mark.parametrize("budget", ["max_tokens", "max_completion_tokens"])
def test_calls_in_flight_together_stay_within_the_token_budget(with_gateway, model_server, budget):
    """16 calls at once, each asking for 190 tokens under a 200-token budget: each call reserves
    its max_tokens when sent, so together they get at most 200 completion tokens; the rest are
    refused as over budget, and every reservation is settled once the calls are over."""
    long = [{"role": "user", "content": "Count from 1 to 500, separated by commas."}]

    async def body(gateway, client, rollout_id):
        limits = Generation("local", max_calls=32, **{"max_tokens": 100_000, budget: 200})
        grant = Grant(rollout_id, model_server.model, generation=limits)
        token = gateway.grant(grant)
        request = {"messages": long, "max_tokens": 190, "temperature": 1.0}
        answers = await asyncio.gather(
            *(
                client.post("/v1/chat/completions", headers=auth(token), json=request)
                for _ in range(16)
            )
        )
        return answers, grant

    answers, grant = with_gateway(body, max_open_calls=16)
    answered = [a.json() for a in answers if a.status_code == 200]
    refused = [a.json() for a in answers if a.status_code != 200]
    assert answered and refused
    assert sum(a["usage"]["completion_tokens"] for a in answered) <= 200
    assert {r["reason"] for r in refused} == {"budget"}
    assert grant.reserved_tokens == 0 and grant.completion_tokens <= 200


def test_a_rollout_has_a_bounded_number_of_calls_open(store, tmp_path):
    """Model and tool calls open at once are bounded per rollout: one more is refused at once
    with a reason the harness sees, while another rollout's calls are not held back."""
    engine, writer = store

    async def main():
        hung, endpoint = await _hung_backend()
        gateway = Gateway(writer, endpoint, max_open_calls=3)
        sock = tmp_path / "gw.sock"
        await gateway.start(sock)
        never = asyncio.Event()
        grant = Grant(make_rollout(writer), "hung", tools={"wait": never.wait})
        token, other = gateway.grant(grant), gateway.grant(Grant(make_rollout(writer), "hung"))
        transport = httpx.AsyncHTTPTransport(uds=str(sock))
        async with httpx.AsyncClient(transport=transport, base_url="http://gw", timeout=60) as c:
            chat = {"messages": HELLO}
            held = [
                asyncio.create_task(c.post("/v1/chat/completions", headers=auth(t), json=chat))
                for t in (token, token, other)
            ]
            held.append(asyncio.create_task(c.post("/tools/wait", headers=auth(token), json={})))
            while grant.in_flight < 3:
                await asyncio.sleep(0.01)
            extra = await asyncio.wait_for(
                c.post("/v1/chat/completions", headers=auth(token), json=chat), 10
            )
            await asyncio.wait_for(gateway.stop(), 5)
            never.set()
            await asyncio.gather(*held)
        await endpoint.close()
        hung.close()
        return extra

    extra = asyncio.run(main())
    assert extra.status_code == 429
    assert extra.json()["reason"] == "open_calls"
    assert "at most 3 at once" in extra.json()["detail"]


async def _post_body(sock, token: str, size: int, chunked: bool, chunk: int = 1 << 20):
    """POST a body of `size` bytes, `[1]` padded with spaces (chunked, or declared by its
    Content-Length), stopping once the answer comes: (status, bytes sent, whether the gateway
    then closed the connection without waiting for the rest of the body)."""
    reader, writer = await asyncio.open_unix_connection(str(sock))
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {size}"
    writer.write(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n"
        + f"Authorization: Bearer {token}\r\n{framing}\r\n".encode()
        + b"Content-Type: application/json\r\n\r\n"
    )
    status_line = asyncio.ensure_future(reader.readline())
    sent = 0
    try:
        while sent < size and not status_line.done():
            n = min(chunk, size - sent)
            data = b"[1]".ljust(n) if sent == 0 else b" " * n
            writer.write(b"%x\r\n%s\r\n" % (n, data) if chunked else data)
            await writer.drain()
            sent += n
        if chunked and sent == size:
            writer.write(b"0\r\n\r\n")
        line = await asyncio.wait_for(status_line, 30)
    except ConnectionError:  # the gateway closed while we sent: its answer is still there
        line = await asyncio.wait_for(status_line, 30)
    try:  # the rest of the answer, then the end of the stream if the gateway closed
        await asyncio.wait_for(reader.read(), 3)
        closed = True
    except ConnectionResetError:
        closed = True
    except TimeoutError:  # still open: reading (and dropping) what we would send
        closed = False
    writer.close()
    return int(line.split()[1]), sent, closed


def test_a_body_over_16_mib_is_refused_and_its_connection_closed(store, tmp_path):
    """The bound is 16 MiB unless set otherwise: a body of exactly 16 MiB is read (and refused
    as not an object); one byte more gets 413, by its Content-Length without a byte read or,
    streamed, as soon as what arrived passes the bound. After a 413 the gateway closes the
    connection rather than read the rest: a 256 MiB body is not drained."""
    engine, writer = store
    bound = 16 << 20

    async def main():
        gateway = Gateway(writer, backend=None)
        sock = tmp_path / "gw.sock"
        await gateway.start(sock)
        token = gateway.grant(Grant(make_rollout(writer), "m"))
        try:
            return {
                (size, chunked): await _post_body(sock, token, size, chunked)
                for size in (bound, bound + 1, 256 << 20)
                for chunked in (False, True)
            }
        finally:
            await gateway.stop()

    answers = asyncio.run(main())
    for chunked in (False, True):
        status, sent, closed = answers[bound, chunked]
        assert (status, sent, closed) == (400, bound, False)  # read whole; the call stays open
        for size in (bound + 1, 256 << 20):
            status, sent, closed = answers[size, chunked]
            assert status == 413, (size, chunked)
            assert closed, f"the connection stayed open after a 413 ({size=}, {chunked=})"
        assert answers[256 << 20, chunked][1] < 64 << 20, "the 256 MiB body was read whole"


def test_a_tool_calling_rollout_trains_exactly_the_ids_the_local_server_sampled(
    with_gateway, store, model_server, model_cache
):
    """The local server returns its ids when asked; the gateway records them and keeps them
    from the harness; RFT trains the three calls as one sequence of exactly those ids."""
    from transformers import AutoTokenizer

    from app.llm.local import prepare_model

    async def body(gateway, client, rollout_id):
        model = model_server.model
        return rollout_id, await tool_rollout(gateway, client, rollout_id, model, "local")

    rollout_id, answers = with_gateway(body)
    tokenizer = AutoTokenizer.from_pretrained(prepare_model(model_cache))
    sampled_and_trained(store[0], tokenizer, rollout_id, answers)


def test_a_server_that_returns_no_ids_is_rendered_and_counted_so(store, tmp_path, model_cache):
    """A server asked for ids that gives none (an OpenAI-protocol server without the field):
    nothing is stored for them, and training renders its calls through the chat template."""
    from transformers import AutoTokenizer

    from app.llm.local import prepare_model
    from app.training.examples import encode_all, examples_from_rollouts
    from tests.openai_stub import openai_stub

    engine, writer = store

    async def body(gateway, client, rollout_id):
        return rollout_id, await tool_rollout(gateway, client, rollout_id, "stub", "local")

    with openai_stub(["Adding.", "Still adding.", "9"]) as (url, seen):
        endpoint = ChatEndpoint(url, "stub")
        rollout_id, _ = run_on_gateway(writer, endpoint, tmp_path / "gw.sock", body, close=True)
    assert [r["body"]["return_token_ids"] for r in seen] == [True] * 3  # asked each time
    assert all(step.token_ids is None for step in steps(engine))
    tokenizer = AutoTokenizer.from_pretrained(prepare_model(model_cache))
    with read_session(engine) as s:
        examples = examples_from_rollouts(s, [rollout_id])
    assert [e["completion"] for e in examples] == ["Adding.", "Still adding.", "9"]
    _, counts = encode_all(tokenizer, examples, max_len=4096)
    assert (counts["from_ids"], counts["rendered"], counts["drift_checked"]) == (0, 3, 0)
