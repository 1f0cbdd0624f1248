"""Trace store write side: steps/s through the single writer, and database size per rollout.

Steps are recorded the way the gateway records them (`Gateway._record`: fire-and-forget into
the writer's queue) for multi-turn rollouts whose requests carry the whole conversation so far,
as a chat harness's do; each rollout row is then finished the way the Evaluator finishes it.
The reading side (the traces list at 10k-1M rollouts) is benchmarks/traces_list.py.

    python -m benchmarks.trace_insert [--rollouts N] [--turns T]
"""

import argparse
import asyncio
import json
import random
import sqlite3
import tempfile
import time
from pathlib import Path

from app.db import Writer, open_engine
from app.db.schema import now
from app.gateway import Gateway, Grant
from app.rollout.evaluate import _record_result
from benchmarks.common import make_rollouts, parse, report, table

WORDS = "the of a to in is that for it as was with be by on not he this are or his from at".split()


def text(rng: random.Random, chars: int) -> str:
    words = []
    while sum(len(w) + 1 for w in words) < chars:
        words.append(rng.choice(WORDS) if rng.random() < 0.7 else str(rng.randint(0, 99999)))
    return " ".join(words)


def conversation(rng: random.Random, turns: int) -> list[tuple[dict, dict]]:
    """(request, response) of each model call: the request repeats the conversation so far."""
    messages = [
        {"role": "system", "content": text(rng, 600)},
        {"role": "user", "content": text(rng, 1200)},
    ]
    calls = []
    for _ in range(turns):
        reply = {"role": "assistant", "content": text(rng, 400)}
        calls.append(
            (
                {
                    "messages": list(messages),
                    "temperature": 1.0,
                    "max_tokens": 512,
                    "seed": rng.randrange(2**31),
                },
                {"message": reply, "finish_reason": "stop"},
            )
        )
        messages += [reply, {"role": "user", "content": text(rng, 300)}]
    return calls


async def measure(work: Path, n: int, turns: int) -> list:
    db = work / "whale.db"
    engine = open_engine(db)
    writer = Writer(engine)
    gateway = Gateway(writer, backend=None)

    rollouts = await asyncio.to_thread(make_rollouts, writer, n)
    writer.flush()
    size_before = db.stat().st_size + (
        db.with_suffix(".db-wal").stat().st_size if db.with_suffix(".db-wal").exists() else 0
    )
    rng = random.Random(0)
    traces = [
        conversation(rng, turns) for _ in range(16)
    ]  # reused: generating text is not measured
    raw_bytes = sum(len(json.dumps(q)) + len(json.dumps(a)) for q, a in traces[0])
    start = time.perf_counter()
    for i, rollout in enumerate(rollouts):
        grant = Grant(rollout.id, "c")
        for request, response in traces[i % len(traces)]:
            gateway._record(
                grant,
                kind="model",
                request=request,
                response=response,
                prompt_tokens=900,
                completion_tokens=100,
                latency_ms=1.0,
            )
        values = dict(
            status="pass", reward=1.0, answer="42", turns=turns, wall_s=0.1, finished_at=now()
        )
        writer.submit(lambda s, r=rollout, v=values: _record_result(s, r, v))
    writer.flush()
    elapsed = time.perf_counter() - start
    writer.close()
    engine.dispose()
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        steps = conn.execute("SELECT count(*) FROM step").fetchone()[0]
    size = db.stat().st_size - size_before
    assert steps == n * turns, steps
    return [
        turns,
        n,
        steps,
        f"{steps / elapsed:,.0f}",
        f"{n / elapsed:,.0f}",
        f"{raw_bytes / 1024:.1f}",
        f"{size / n / 1024:.1f}",
    ]


def main(n: int, turn_counts: list[int]) -> None:
    rows = []
    for turns in turn_counts:
        with tempfile.TemporaryDirectory(prefix="whale-insert-") as work:
            rows.append(asyncio.run(measure(Path(work), n, turns)))
            print(rows[-1], flush=True)
    report(
        "Trace store: insert rate and size",
        table(
            [
                "model calls per rollout",
                "rollouts",
                "steps",
                "steps/s",
                "rollouts/s",
                "raw JSON KiB per rollout",
                "stored KiB per rollout",
            ],
            rows,
        ),
        "Each rollout: its steps recorded as the gateway records them (one step per model call, "
        "the request holding the whole conversation so far: ~2 KB of prompt growing ~700 B per "
        "turn), then its row finished as the Evaluator finishes it; everything through the "
        "single writer thread, timed until the last write is committed. Stored size: growth of "
        "the SQLite file (after a WAL checkpoint) per rollout; request and response are zstd "
        "JSON. Produced by `python -m benchmarks.trace_insert`.",
        replace=True,
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=2000)
    parser.add_argument(
        "--turns", default="1,4,16", help="model calls per rollout, comma-separated"
    )
    args = parse(parser)
    main(args.rollouts, [int(t) for t in args.turns.split(",")])
