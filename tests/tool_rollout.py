"""A tool-calling, multi-call rollout driven through a live gateway, and the check that what RFT
trains of it is token for token what the model server sampled (tests/gateway, tests/llm)."""

import asyncio

import httpx
from sqlmodel import select

from app.db import read_session
from app.db.schema import Step
from app.db.steps import unpack_ids
from app.gateway import Gateway, Grant
from app.llm.generation import Generation
from app.training.examples import encode, encode_all, examples_from_rollouts
from tests.conftest import make_rollout

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    }
]
QUESTION = [
    {"role": "system", "content": "Use the add tool, then answer with the sum."},
    {"role": "user", "content": "What is 2 + 3 + 4?"},
]


def run_on_gateway(writer, backend, socket, body, run=asyncio.run, close=False, **options):
    """`await body(gateway, client, rollout_id)` against a live gateway (`options`) in front of
    `backend`, by `run` (the loop the backend's HTTP clients live in), closing the backend after
    when `close`; returns what it returns once the writer has stored every step."""

    async def main():
        gateway = Gateway(writer, backend, **options)
        await gateway.start(socket)
        transport = httpx.AsyncHTTPTransport(uds=str(socket))
        try:
            async with httpx.AsyncClient(
                transport=transport, base_url="http://gw", timeout=300
            ) as client:
                return await body(gateway, client, make_rollout(writer))
        finally:
            await gateway.stop()
            if close:
                await backend.close()

    result = run(main())
    writer.flush()
    return result


async def tool_rollout(gateway, client, rollout_id, model: str, backend: str, calls=3, **extra):
    """A harness's conversation: each call offers the `add` tool, the reply goes back into the
    history as the server returned it, then the tool's result as a `role: tool` message.
    Returns each call's answer as the harness got it."""
    grant = Grant(
        rollout_id, model, tools={"add": lambda a, b: a + b}, generation=Generation(backend)
    )
    token = gateway.grant(grant)
    headers = {"Authorization": f"Bearer {token}"}
    messages, answers = list(QUESTION), []
    for turn in range(calls):
        request = {"messages": messages, "tools": TOOLS, "max_tokens": 16, "seed": turn, **extra}
        answer = (await client.post("/v1/chat/completions", headers=headers, json=request)).json()
        answers.append(answer)
        message = answer["choices"][0]["message"]
        result = await client.post("/tools/add", headers=headers, json={"args": [2 + turn, 3]})
        reply = {"role": "assistant", "content": message.get("content")}
        if message.get("tool_calls"):
            reply["tool_calls"] = message["tool_calls"]
        messages = [*messages, reply, {"role": "tool", "content": str(result.json()["result"])}]
    gateway.revoke(token)
    return answers


def sampled_and_trained(
    engine, tokenizer, rollout_id: int, answers: list[dict], eos_counted: bool = False
):
    """Check what was recorded against what the server answered, and what is trained against
    what was recorded; returns (each call's (prompt ids, completion ids), the one example).
    `eos_counted`: the server's usage counts the end-of-turn token it stopped at (vLLM)."""
    for answer in answers:  # the harness never sees the ids
        assert "prompt_token_ids" not in answer and "token_ids" not in answer["choices"][0]
    with read_session(engine) as s:
        steps = s.exec(
            select(Step)
            .where(Step.rollout_id == rollout_id, Step.kind == "model")
            .order_by(Step.idx)
        ).all()
        sampled = unpack_ids(step.token_ids for step in steps)
        examples = examples_from_rollouts(s, [rollout_id])
    assert len(sampled) == len(answers) and all(sampled)
    eos = tokenizer.eos_token_id
    for (prompt, completion), answer in zip(sampled, answers):
        usage, choice = answer["usage"], answer["choices"][0]
        assert len(prompt) == usage["prompt_tokens"]
        # the completion's ids are the text the harness got, the end of turn it stopped at too
        stopped = completion[-1:] == [eos]
        assert len(completion) - (stopped and not eos_counted) == usage["completion_tokens"]
        assert stopped == (choice["finish_reason"] != "length")
        if not choice["message"].get("tool_calls"):
            text = tokenizer.decode(completion, skip_special_tokens=True)
            assert text == choice["message"]["content"]
    # each call's prompt extends the last one's prompt + completion: one sequence is trained
    (example,) = examples
    ids, labels = encode(tokenizer, example, max_len=1 << 20)
    assert ids == sampled[-1][0] + sampled[-1][1]
    assert [t for t in labels if t != -100] == [t for _, completion in sampled for t in completion]
    for prompt, completion in sampled:  # every call's prompt and completion, in place
        assert ids[: len(prompt) + len(completion)] == prompt + completion
    _, counts = encode_all(tokenizer, examples, max_len=1 << 20)
    assert (counts["from_ids"], counts["rendered"], counts["drift_checked"]) == (1, 0, len(answers))
    return sampled, example
