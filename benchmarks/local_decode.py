"""The local model server's decoding speed in bfloat16 and float32 (`WHALE_LOCAL_DTYPE`).

Starts the real server (app/llm/local_server.py) on the embedded model once per dtype and sends
batches of concurrent chat requests (64 completion tokens each, temperature 1, a seed per
request) over HTTP, as rollouts do. Completion tokens per second of wall time, and milliseconds
per decoding step (a batch decodes until its longest completion ends, so the wall time over the
steps of the longest: unlike tokens per second, it does not move when the sampled completions
stop earlier or later), and how many of the greedy answers to a few arithmetic questions agree
between the two dtypes.

    python -m benchmarks.local_decode [--rounds N]
"""

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

import httpx

from app.config import Settings
from app.llm.local import LocalModelServer, prepare_model
from benchmarks.common import report, table

QUESTIONS = [
    f"What is {a} + {b}? Reply with the number only."
    for a, b in [(12, 35), (7, 8), (23, 19), (41, 44), (305, 17), (66, 99)]
]


async def ask(
    client: httpx.AsyncClient, server: LocalModelServer, content: str, **sampling
) -> dict:
    response = await client.post(
        f"{server.base_url}/chat/completions",
        json={
            "model": server.model,
            "messages": [{"role": "user", "content": content}],
            **sampling,
        },
    )
    response.raise_for_status()
    return response.json()


async def measure(server: LocalModelServer, rounds: int) -> tuple[dict, list[str]]:
    """{batch size: (tokens per second, ms per decoding step)}, and the greedy answers."""
    speeds = {}
    async with httpx.AsyncClient(timeout=600) as client:
        for batch in (1, 4, 16):
            tokens, steps, start = 0, 0, time.perf_counter()
            for r in range(rounds):
                replies = await asyncio.gather(
                    *(
                        ask(
                            client,
                            server,
                            QUESTIONS[i % len(QUESTIONS)],
                            max_tokens=64,
                            temperature=1.0,
                            seed=r * 100 + i,
                        )
                        for i in range(batch)
                    )
                )
                lengths = [reply["usage"]["completion_tokens"] for reply in replies]
                tokens, steps = tokens + sum(lengths), steps + max(lengths)
            wall = time.perf_counter() - start
            speeds[batch] = tokens / wall, 1000 * wall / steps
        greedy = [
            (await ask(client, server, q, max_tokens=20, temperature=0))["choices"][0]["message"][
                "content"
            ]
            for q in QUESTIONS
        ]
    return speeds, greedy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="batches sent per batch size")
    args = parser.parse_args()
    model = prepare_model(Settings().models_dir)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for dtype in ("bfloat16", "float32"):
            server = LocalModelServer(model, Path(tmp) / f"{dtype}.log", dtype=dtype)
            server.start()
            try:
                results[dtype] = asyncio.run(measure(server, args.rounds))
            finally:
                server.stop()
    rows = [
        [dtype, *(f"{speeds[b][0]:.1f} / {speeds[b][1]:.0f}" for b in (1, 4, 16))]
        for dtype, (speeds, _) in results.items()
    ]
    same = sum(a == b for a, b in zip(results["bfloat16"][1], results["float32"][1]))
    report(
        "Local model server: decoding in bfloat16 and float32 (CPU)",
        table(
            [
                "dtype",
                *(f"tok/s / ms per step, {b}" for b in ("1 request", "4 at once", "16 at once")),
            ],
            rows,
        ),
        f"SmolLM2-135M-Instruct behind app/llm/local_server.py, {args.rounds} batches per size of "
        f"64-token completions at temperature 1 over HTTP; OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}. "
        f"Greedy answers to {len(QUESTIONS)} arithmetic questions identical in both dtypes: {same} of {len(QUESTIONS)}. "
        "Produced by `python -m benchmarks.local_decode`.",
        replace=True,
    )


if __name__ == "__main__":
    main()
