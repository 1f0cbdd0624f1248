"""Shared bits of the benchmark scripts: percentiles, the report table, docs/benchmarks.md."""

import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx

from app.db import Writer
from app.db.schema import Checkpoint, Evaluation, Harness, Rollout, Run

REPO = Path(__file__).resolve().parent.parent


def percentile(values: list[float], q: float) -> float:
    return (
        statistics.quantiles(values, n=100, method="inclusive")[q - 1]
        if len(values) > 1
        else values[0]
    )


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def table(headers: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def commit() -> str:
    """The code the figures come from: HEAD's short hash, said to have changes on top where
    tracked files outside docs/ differ from it (WHALE_COMMIT where the checkout is a copy
    without its history)."""
    if os.environ.get("WHALE_COMMIT"):
        return os.environ["WHALE_COMMIT"]

    def git(*args: str) -> str:
        found = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)
        return found.stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    changed = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!docs", ":!*.md")
    return f"{head} with uncommitted changes" if changed else head


def report(
    title: str,
    body: str,
    notes: str = "",
    replace: bool = True,
    where: str | None = None,
) -> None:
    """Print the section and write it to docs/benchmarks.md, in place of an earlier section of
    the same title (a benchmark keeps one current figure per title; `replace=False` appends).
    The section says the date, the machine and the commit it ran on. `where`: the date, machine
    and commit the figures were measured on, when not here and now."""
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    load = os.getloadavg()[0]  # the other work of a shared machine shows in the figures
    where = where or (
        f"{stamp}; {machine()}, 1-minute load average {load:.1f} at the end; commit {commit()}"
    )
    section = f"\n## {title}\n{where}\n\n{body}\n" + (f"\n{notes}\n" if notes else "")
    print(section)
    path = REPO / "docs" / "benchmarks.md"
    text = path.read_text()
    start = text.find(f"\n## {title}\n")
    if replace and start >= 0:
        end = text.find("\n## ", start + 1)
        path.write_text(text[:start] + section + (text[end:] if end >= 0 else ""))
    else:
        with open(path, "a") as f:
            f.write(section)


def start_zero_llm(port: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, str(REPO / "benchmarks" / "zero_llm.py"), str(port)])
    for _ in range(100):
        try:
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)
            return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the zero-latency endpoint did not start")


def make_rollouts(writer: Writer, n: int) -> list[Rollout]:
    """n pending rollouts of one new evaluation: rows for recorded steps to point to."""

    def create(s):
        run = Run(name="bench", kind="eval", domain="arith")
        s.add(run)
        s.flush()
        harness, ckpt = Harness(run_id=run.id, name="h", code="", sha="h"), Checkpoint(name="zero")
        s.add_all([harness, ckpt])
        s.flush()
        ev = Evaluation(
            run_id=run.id,
            harness_id=harness.id,
            checkpoint_id=ckpt.id,
            split="test",
            k=1,
            n_tasks=n,
        )
        s.add(ev)
        s.flush()
        rows = [
            Rollout(
                run_id=run.id,
                evaluation_id=ev.id,
                harness_id=harness.id,
                checkpoint_id=ckpt.id,
                task_id=str(i),
                sample=0,
            )
            for i in range(n)
        ]
        s.add_all(rows)
        s.flush()
        return rows

    return writer.submit(create).result()
