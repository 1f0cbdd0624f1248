"""The local model server's continuous batching: requests join a running batch and leave it on
their own, with the same completion as alone, ending where they should."""

import asyncio
import secrets

import httpx

EOS = 2  # SmolLM2's <|im_end|>


async def _ask(client: httpx.AsyncClient, server, content: str, **fields) -> dict:
    response = await client.post(
        f"{server.base_url}/chat/completions",
        json={
            "model": server.model,
            "messages": [{"role": "user", "content": content}],
            "return_token_ids": True,
            **fields,
        },
    )
    response.raise_for_status()
    return response.json()


async def _running(client: httpx.AsyncClient, server) -> int:
    metrics = (await client.get(server.base_url.removesuffix("/v1") + "/metrics")).text
    return int(metrics.split("\nwhale:num_requests_running ")[1].split()[0])


def _run(main):
    async def wrapped():
        async with httpx.AsyncClient(timeout=600) as client:
            return await main(client)

    return asyncio.run(wrapped())


def test_a_request_joining_a_running_batch_is_answered_before_the_batch_ends(model_server):
    async def main(client):
        long = asyncio.create_task(
            _ask(
                client,
                model_server,
                "Write a long story about a dragon.",
                max_tokens=160,
                temperature=0,
            )
        )
        while await _running(client, model_server) == 0:  # the long one is decoding
            await asyncio.sleep(0.05)
        short = await _ask(client, model_server, "Name a colour.", max_tokens=4, temperature=0)
        long_done_first = long.done()
        return short, await long, long_done_first

    short, long, long_done_first = _run(main)
    assert not long_done_first  # the short one did not wait for the long one's 160 tokens
    assert short["usage"]["completion_tokens"] == 4
    assert long["choices"][0]["finish_reason"] == "length"  # it really ran 160 steps
    assert long["usage"]["completion_tokens"] == 160


def test_a_seed_gives_the_same_completion_alone_and_inside_batches(model_server):
    seeded = {"max_tokens": 32, "temperature": 1.0, "top_p": 0.95, "seed": 1234}
    poem = "Write a short poem about the sea."

    async def main(client):
        alone = await _ask(client, model_server, poem, **seeded)
        others = [
            asyncio.create_task(
                _ask(client, model_server, f"Tell me about {topic}.", max_tokens=n, temperature=1.0)
            )
            for topic, n in [("cats", 60), ("rain", 12), ("the moon, in detail", 90)]
        ]
        while await _running(client, model_server) == 0:
            await asyncio.sleep(0.05)
        joined = await _ask(client, model_server, poem, **seeded)  # joins them mid-way
        together = await asyncio.gather(  # arrives with others, in one admission
            _ask(client, model_server, poem, **seeded),
            _ask(client, model_server, "Count to ten.", max_tokens=20, temperature=0),
            _ask(client, model_server, poem, **{**seeded, "seed": 99}),
        )
        await asyncio.gather(*others)
        return alone, joined, together

    alone, joined, (together, _, other_seed) = _run(main)
    ids = alone["choices"][0]["token_ids"]
    assert len(ids) > 8
    assert joined["choices"][0]["token_ids"] == ids
    assert together["choices"][0]["token_ids"] == ids
    assert together["choices"][0]["message"] == alone["choices"][0]["message"]
    assert other_seed["choices"][0]["token_ids"] != ids  # the seed, not the prompt, decides


def test_stop_strings_eos_and_max_tokens_end_each_request_where_they_should(model_server):
    count = "Count from 1 to 30, one number per line."

    async def main(client):
        free = await _ask(client, model_server, count, max_tokens=40, temperature=0)
        # together, beside a long request that keeps the batch running
        long = asyncio.create_task(
            _ask(
                client,
                model_server,
                "Write a long story about a dragon.",
                max_tokens=120,
                temperature=0,
            )
        )
        replies = await asyncio.gather(
            _ask(client, model_server, count, max_tokens=40, temperature=0, stop=["5"]),
            _ask(
                client, model_server, "Reply with the word yes only.", max_tokens=40, temperature=0
            ),
            _ask(client, model_server, count, max_tokens=7, temperature=0),
        )
        await long
        return free, *replies

    free, stopped, eos, capped = _run(main)
    free_text = free["choices"][0]["message"]["content"]
    assert "5" in free_text
    # the stop string: the text ends before it, and decoding stopped at the token holding it
    assert stopped["choices"][0]["finish_reason"] == "stop"
    assert stopped["choices"][0]["message"]["content"] == free_text.split("5")[0]
    n = stopped["usage"]["completion_tokens"]
    assert stopped["choices"][0]["token_ids"] == free["choices"][0]["token_ids"][:n]
    assert n < free["usage"]["completion_tokens"]
    # EOS: finished at once, the end token the last sampled, not counted as completion
    assert eos["choices"][0]["finish_reason"] == "stop"
    assert eos["choices"][0]["token_ids"][-1] == EOS
    assert eos["usage"]["completion_tokens"] == len(eos["choices"][0]["token_ids"]) - 1 < 40
    # max_tokens
    assert capped["choices"][0]["finish_reason"] == "length"
    assert capped["choices"][0]["token_ids"] == free["choices"][0]["token_ids"][:7]
    # the ids are the prompt's and the reply's
    assert len(free["prompt_token_ids"]) == free["usage"]["prompt_tokens"]


def test_token_ids_only_when_asked(model_server):
    async def main(client):
        return await client.post(
            f"{model_server.base_url}/chat/completions",
            json={
                "model": model_server.model,
                "messages": [{"role": "user", "content": "Hi"}],
                "max_tokens": 2,
            },
        )

    reply = _run(main).json()
    assert "prompt_token_ids" not in reply and "token_ids" not in reply["choices"][0]


def _work(metrics: str) -> dict[str, float]:
    return {
        line.split()[0]: float(line.split()[1])
        for line in metrics.splitlines()
        if line.startswith("whale:") and "_total " in line
    }


def test_metrics_count_the_tokens_prefilled_and_generated(model_server):
    """/metrics counts the server's work (the suite's timeline splits it between tests). The
    server may be shared with other workers' tests: their work can only add to the counts."""
    metrics_url = model_server.base_url.removesuffix("/v1") + "/metrics"

    async def main(client):
        before = _work((await client.get(metrics_url)).text)
        reply = await _ask(
            client, model_server, f"Count to ten. ({secrets.token_hex(4)})", max_tokens=12
        )
        return before, reply, _work((await client.get(metrics_url)).text)

    before, reply, after = _run(main)
    grew = {name: after[name] - before[name] for name in after}
    # a fresh prompt is prefilled, not taken from the prompt store
    assert grew["whale:prompt_tokens_total"] >= len(reply["prompt_token_ids"])
    # the first token comes from the prefill, each later one from a decoding step
    assert grew["whale:generation_tokens_total"] >= len(reply["choices"][0]["token_ids"]) - 1
    assert grew["whale:prefill_seconds_total"] > 0 and grew["whale:decode_seconds_total"] > 0
    assert after["whale:model_loads_total"] >= 1  # the base model, at the latest for this request
