"""The local model server's decoding speed, in bfloat16 and float32 (`WHALE_LOCAL_DTYPE`).

Starts the real server (app/llm/local_server.py) on the embedded model once per dtype and sends
it chat requests over HTTP, as rollouts do:
- batches of concurrent requests (1, 4, 16 and 32 at once; 64 completion tokens each,
  temperature 1, a seed per request): completion tokens per second of wall time, and
  milliseconds per decoding step (the wall time over the steps of the longest completion: unlike
  tokens per second, it does not move when sampled completions stop earlier or later);
- a mixed-length load: requests of 8 to 256 tokens (log-uniform) arriving over time (a Poisson
  stream), where a short request must not wait for a long one: the p50 and p95 latency of the
  short ones (at most 32 tokens), and the load's tokens per second;
- how many greedy answers to a few arithmetic questions agree between the two dtypes.

`--baseline DIR` also runs the server of another checkout (its `app` package, this Python) on
the same load, for figures before and after a change side by side.

    python -m benchmarks.local_decode [--rounds N] [--mixed N] [--baseline DIR] [--print-only]
"""

import argparse
import asyncio
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from app.config import Settings
from app.llm.local import LocalModelServer, prepare_model
from benchmarks.common import parse, percentile, report, table

QUESTIONS = [
    f"What is {a} + {b}? Reply with the number only."
    for a, b in [(12, 35), (7, 8), (23, 19), (41, 44), (305, 17), (66, 99)]
]
SIZES = (1, 4, 16, 32)
SHORT = 32  # a mixed load's request of at most this many tokens is a short one
TOPICS = ["a dragon", "the sea", "a lost key", "a city at night", "an old clock", "a storm"]


class ServerAt(LocalModelServer):
    """The local model server of the checkout at `repo` (None: this one)."""

    def __init__(self, repo: Path | None, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.repo = repo

    def command(self) -> list[str]:
        if self.repo is None:
            return super().command()
        run = (
            f"import sys, runpy; sys.path.insert(0, {str(self.repo)!r}); "
            "runpy.run_module('app.llm.local_server', run_name='__main__')"
        )
        return [sys.executable, "-c", run, "--port", str(self.port), "--dtype", self.dtype]


async def ask(client: httpx.AsyncClient, server, content: str, **sampling) -> dict:
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


async def batches(client, server, rounds: int) -> dict:
    """{requests at once: (tokens per second, ms per decoding step)}."""
    speeds = {}
    for batch in SIZES:
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
    return speeds


async def mixed(client, server, n: int, interval_s: float) -> tuple[float, float, float]:
    """n requests of 8 to 256 tokens arriving over time: tokens per second of the load, and
    the p50 and p95 latency in seconds of its short requests."""
    rng = random.Random(0)
    plan = [(round(8 * 32 ** rng.random()), rng.expovariate(1 / interval_s)) for _ in range(n)]
    latencies: list[tuple[int, float]] = []
    tokens = 0

    async def one(i: int, max_tokens: int) -> None:
        nonlocal tokens
        sent = time.perf_counter()
        reply = await ask(
            client,
            server,
            f"Write a long story about {TOPICS[i % len(TOPICS)]}.",
            max_tokens=max_tokens,
            temperature=1.0,
            seed=i,
        )
        latencies.append((max_tokens, time.perf_counter() - sent))
        tokens += reply["usage"]["completion_tokens"]

    start, tasks = time.perf_counter(), []
    for i, (max_tokens, gap) in enumerate(plan):
        tasks.append(asyncio.create_task(one(i, max_tokens)))
        await asyncio.sleep(gap)
    await asyncio.gather(*tasks)
    wall = time.perf_counter() - start
    short = [s for m, s in latencies if m <= SHORT]
    return tokens / wall, percentile(short, 50), percentile(short, 95)


async def measure(server, args) -> tuple[dict, tuple, list[str]]:
    async with httpx.AsyncClient(timeout=900) as client:
        speeds = await batches(client, server, args.rounds)
        load = await mixed(client, server, args.mixed, args.interval)
        greedy = [
            (await ask(client, server, q, max_tokens=20, temperature=0))["choices"][0]["message"][
                "content"
            ]
            for q in QUESTIONS
        ]
    return speeds, load, greedy


def baseline_name(checkout: Path) -> str:
    """The baseline checkout as its commit, read from git (its folder name says nothing)."""
    found = subprocess.run(
        ["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return f"commit {found.stdout.strip()}" if found.returncode == 0 else str(checkout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="batches sent per batch size")
    parser.add_argument("--mixed", type=int, default=32, help="requests of the mixed load")
    parser.add_argument("--interval", type=float, default=0.25, help="their mean gap, seconds")
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--baseline", type=Path, help="a checkout whose server runs too")
    parser.add_argument("--print-only", action="store_true", help="leave docs/benchmarks.md")
    args = parse(parser, stamps=lambda a: not a.print_only)
    model = prepare_model(Settings().models_dir)
    servers = [("this commit", None)] + (
        [(baseline_name(args.baseline), args.baseline)] * bool(args.baseline)
    )
    dtypes = args.dtypes.split(",")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, repo in servers:
            for dtype in dtypes:
                log = Path(tmp) / f"{len(results)}.log"
                server = ServerAt(repo, model, log, dtype=dtype)
                server.start()
                try:
                    results[label, dtype] = asyncio.run(measure(server, args))
                    print(label, dtype, results[label, dtype][:2], flush=True)  # as it goes
                finally:
                    server.stop()
    rows = [
        [
            label,
            dtype,
            *(f"{speeds[b][0]:.1f} / {speeds[b][1]:.0f}" for b in SIZES),
            f"{load[0]:.1f}",
            f"{load[1]:.1f} / {load[2]:.1f}",
        ]
        for (label, dtype), (speeds, load, _) in results.items()
    ]
    agree = ""
    if {"bfloat16", "float32"} <= set(dtypes):
        answers = [results["this commit", d][2] for d in ("bfloat16", "float32")]
        same = sum(a == b for a, b in zip(*answers))
        agree = f"Greedy answers to {len(QUESTIONS)} arithmetic questions identical in both dtypes: {same} of {len(QUESTIONS)}. "
    body = table(
        [
            "server",
            "dtype",
            *(f"tok/s / ms per step, {b} at once" for b in SIZES),
            "mixed load, tok/s",
            f"mixed load, p50 / p95 s of a short request (<= {SHORT} tokens)",
        ],
        rows,
    )
    notes = (
        f"SmolLM2-135M-Instruct behind app/llm/local_server.py over HTTP: {args.rounds} batches "
        f"per size of 64-token completions at temperature 1; a mixed load of {args.mixed} requests "
        f"of 8 to 256 tokens arriving {args.interval} s apart on average. "
        f"WHALE_LOCAL_THREADS={os.environ.get('WHALE_LOCAL_THREADS', 'auto')}, "
        f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}. {agree}"
        "Produced by `python -m benchmarks.local_decode`."
    )
    title = "Local model server: decoding in bfloat16 and float32 (CPU)"
    if args.print_only:
        print(f"## {title}\n\n{body}\n\n{notes}")
    else:
        report(title, body, notes, replace=True)


if __name__ == "__main__":
    main()
